#!/usr/bin/env bash
# Regenerate the teaching plan's record that ships inside the package.
# Usage: scripts/make-bundled-record.sh   (from the repository root, with postlab installed)
set -euo pipefail
out=$(mktemp -d)/teaching
postlab run --out-dir "$out" --quiet
python3 - "$out" <<'PY'
import gzip, json, platform, sys
from pathlib import Path
out = Path(sys.argv[1])
data = Path("src/postlab/data")
raw = (out / "record.json").read_bytes()
(data / "teaching-record.json.gz").write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
record = json.loads(raw)
provenance = {
    "made_by": "postlab run --out-dir DIR (teaching plan, default workers), then gzip",
    "script": "scripts/make-bundled-record.sh",
    "postlab_version": record["postlab_version"], "torch": record["torch"],
    "python": record["python"], "platform": record["platform"],
    "workers": record["workers"], "plan_sha256": record["plan_sha256"],
    "checkpoints": {f"{run['seed']}/{stage}": info["sha256"]
                    for run in record["runs"] for stage, info in run["checkpoints"].items()},
}
(data / "teaching-record.provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
PY
echo "bundled record written to src/postlab/data/"
