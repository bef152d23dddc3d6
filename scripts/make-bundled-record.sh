#!/usr/bin/env bash
# Regenerate the teaching run that ships inside the package (record, plan, summary,
# checkpoints), so that `postlab report` and `postlab verify` work with no arguments.
# Usage: scripts/make-bundled-record.sh   (from the repository root, with postlab installed)
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
postlab run --out-dir "$work/teaching" --quiet --cpu-path portable
python3 - "$work/teaching" <<'PY'
import gzip, json, shutil, sys
from pathlib import Path
run = Path(sys.argv[1])
target = Path("src/postlab/data/teaching-run")
shutil.rmtree(target, ignore_errors=True)
target.mkdir(parents=True)
raw = (run / "record.json").read_bytes()
(target / "record.json.gz").write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
for name in ["plan.json", "summary.json", "fingerprint.txt"] + sorted(p.name for p in run.glob("*.pt")):
    shutil.copyfile(run / name, target / name)
record = json.loads(raw)
provenance = {
    "made_by": "postlab run --out-dir DIR --quiet --cpu-path portable (teaching plan, "
               "default workers); record.json gzipped, other files copied as written",
    "script": "scripts/make-bundled-record.sh",
    "postlab_version": record["postlab_version"], "torch": record["torch"],
    "python": record["python"], "platform": record["platform"],
    "workers": record["workers"], "plan_sha256": record["plan_sha256"],
    "code_path": record["numerics"]["code_path"],
    "cpu_capability": record["numerics"]["cpu_capability"],
    "blas": record["numerics"]["blas"],
    "blas_code_path": record["numerics"]["blas_code_path"],
    "cpu_model": record["numerics"]["cpu_model"],
    "fingerprint": (run / "fingerprint.txt").read_text().strip(),
}
(target / "PROVENANCE.json").write_text(json.dumps(provenance, indent=2) + "\n")
PY
rm -f src/postlab/data/teaching-record.json.gz src/postlab/data/teaching-record.provenance.json
echo "bundled run written to src/postlab/data/teaching-run/"
