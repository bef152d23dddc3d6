#!/usr/bin/env bash
# The ensemble engine on a GPU, in under ten minutes: the teaching plan with 64 seeds through
# 'postlab run --engine ensemble' (verified, reproduced on the same device byte for byte,
# reported with intervals); then 1,000 and 10,000 teaching seed-runs through 'postlab run'
# with their records written (Parquet chunks), each with seed-runs per second, peak GPU
# memory and the record's size, and the 1,000-seed record reported and exported with their
# peak memory; then bench/bench_ensemble_scale.py for the same sizes (computation only), then
# (at most two minutes) 1,000 members of a small GPT-2.
# Everything it prints also lands in OUT, with the GPU's name.
#
# Usage: scripts/ensemble-gpu.sh OUT [DEVICE]   (from the repository root; DEVICE defaults to
#        cuda; "cpu" runs the same steps here with SEEDS=8 MEMBERS=16,32 to try the script)
# Needs postlab installed with the report extra and a torch build for the GPU; PYTHON picks
# the interpreter (default python3); SEEDS and MEMBERS change the sizes.
set -euo pipefail
out=${1:?usage: scripts/ensemble-gpu.sh OUT [DEVICE]}
device=${2:-cuda}
python=${PYTHON:-python3}
seeds=${SEEDS:-64}
members=${MEMBERS:-1000,10000}
if [ -e "$out" ]; then echo "ensemble-gpu: $out already exists; choose a new folder" >&2; exit 2; fi
mkdir -p "$out"
log="$out/ensemble-gpu.txt"
exec > >(tee "$log") 2>&1
export PYTHONUNBUFFERED=1

"$python" - "$device" <<'PY'
import platform, sys, torch
device = sys.argv[1]
print(f"torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}")
if device == "cuda":
    if not torch.cuda.is_available():
        sys.exit("ensemble-gpu: torch finds no CUDA device")
    props = torch.cuda.get_device_properties(0)
    print(f"GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB; CUDA {torch.version.cuda}")
PY

plan="$out/teaching-$seeds.json"
"$python" - "$plan" "$seeds" <<'PY'
import sys
from pathlib import Path
from postlab.plan.frozen import freeze, teaching_plan
freeze(Path(sys.argv[1]), teaching_plan() | {"seeds": list(range(1, int(sys.argv[2]) + 1))})
PY
run="$out/run"
echo "== teaching plan, $seeds seeds, ensemble engine on $device"
start=$(date +%s%N)
"$python" -m postlab run --plan "$plan" --out-dir "$run" --engine ensemble --device "$device" \
  --workers 1 --quiet --allow-large
echo "run: $(( ($(date +%s%N) - start) / 1000000 )) ms for $seeds seed-runs (records written)"
"$python" -m postlab verify "$run" | tail -3
"$python" -m postlab reproduce "$run" --out-dir "$out/again" --workers 1 --quiet | tail -2
cmp "$run/summary.json" "$out/again/summary.json" && echo "reproduced byte for byte"
"$python" -m postlab report "$run" --format markdown --lang en | sed -n '/## Findings/,/^## Results/p'

for size in ${members//,/ }; do
  echo "== records: $size teaching seed-runs through postlab run on $device"
  "$python" - "$out/records-$size" "$size" "$device" <<'PY'
import resource, sys, time
from pathlib import Path
import torch
import postlab
from postlab.plan.frozen import freeze, teaching_plan
out, size, device = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
plan = out.parent / f"{out.name}.json"
freeze(plan, teaching_plan() | {"seeds": list(range(1, size + 1))})
start = time.perf_counter()
postlab.run(out, plan, engine="ensemble", device=device, workers=1, allow_large=True)
seconds = time.perf_counter() - start
gpu = (f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB peak GPU memory allocated"
       if device == "cuda" else "no GPU")
rows = sum(p.stat().st_size for p in (out / "rows").iterdir()) + (out / "record.json").stat().st_size
print(f"{size} seed-runs in {seconds:.1f} s: {size / seconds:.1f} seed-runs/s; {gpu}; "
      f"main process peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB; "
      f"record {rows / 1e6:.0f} MB ({rows / size / 1e3:.0f} KB per seed-run)")
PY
done
first="$out/records-${members%%,*}"
"$python" - "$first" "$out/tables" <<'PY'
import sys
sys.path.insert(0, "bench")
from bench_records import POSTLAB, timed  # one process each, its own peak memory
run, tables = sys.argv[1], sys.argv[2]
for name, args in (("report", ["report", run, "--format", "json"]),
                   ("export", ["export", run, "--out-dir", tables])):
    seconds, mib, _ = timed([*POSTLAB, *args])
    print(f"postlab {name} of {run}: {seconds:.1f} s, peak {mib:.0f} MiB")
PY

echo "== scale: $members members on $device (computation only)"
"$python" bench/bench_ensemble_scale.py --device "$device" --members "$members"
echo "== transformers: ${members%%,*} GPT-2 members on $device (computation only, at most 120 s)"
timeout 120 "$python" bench/bench_ensemble_scale.py --device "$device" --members "${members%%,*}" \
  --policy gpt2 || echo "(stopped after 120 s)"
echo "== done; log in $log"
