#!/usr/bin/env bash
# Regenerate the teaching run that ships inside the package (record, plan, summary,
# checkpoints), so that `postlab report` and `postlab verify` work with no arguments.
# Usage: scripts/make-bundled-record.sh   (from the repository root, with postlab installed)
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
postlab run --out-dir "$work/teaching" --quiet --cpu-path portable
python3 - "$work/teaching" <<'PY'
import gzip, json, os, shutil, sys
from pathlib import Path
from postlab.jsonio import dump_json, publish_bytes
from postlab.records.fingerprint import fingerprint_file_bytes, results_fingerprint, run_fingerprint
from postlab.records.record import load_record, one_document
run = Path(sys.argv[1])
# BUNDLE_TARGET: somewhere else to write it (to try the script without replacing the bundle)
target = Path(os.environ.get("BUNDLE_TARGET", "src/postlab/data/teaching-run"))
shutil.rmtree(target, ignore_errors=True)
target.mkdir(parents=True)
# The bundle keeps the one-document layout (every seed inline, as earlier versions wrote
# it and as the reference reads it): the run's chunks are read back into record.json.
chunked = load_record(run / "record.json")
record = one_document(chunked)
raw = dump_json(record)
(target / "record.json.gz").write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
for name in ["plan.json", "summary.json"] + sorted(p.name for p in run.glob("*.pt")):
    shutil.copyfile(run / name, target / name)
# its fingerprint is the bundle's own (the record's bytes are not the run's manifest)
fingerprint = run_fingerprint(target, target / "record.json.gz", record).value
# the results fingerprint is the run's: its rows, plan, summary and checkpoints are the same
results = results_fingerprint(target, record).value
publish_bytes(target / "fingerprint.txt", fingerprint_file_bytes(fingerprint, results))
provenance = {
    "made_by": "postlab run --out-dir DIR --quiet --cpu-path portable (teaching plan, "
               "default workers); record.json in the one-document layout, gzipped, "
               "other files copied as written, fingerprint of this folder",
    "script": "scripts/make-bundled-record.sh",
    "postlab_version": record["postlab_version"], "torch": record["torch"],
    "python": record["python"], "platform": record["platform"],
    "workers": record["workers"], "plan_sha256": record["plan_sha256"],
    "code_path": record["numerics"]["code_path"],
    "cpu_capability": record["numerics"]["cpu_capability"],
    "blas": record["numerics"]["blas"],
    "blas_code_path": record["numerics"]["blas_code_path"],
    "cpu_model": record["numerics"]["cpu_model"],
    "fingerprint": fingerprint,
}
(target / "PROVENANCE.json").write_text(json.dumps(provenance, indent=2) + "\n")
PY
rm -f src/postlab/data/teaching-record.json.gz src/postlab/data/teaching-record.provenance.json
echo "bundled run written to ${BUNDLE_TARGET:-src/postlab/data/teaching-run}/"
