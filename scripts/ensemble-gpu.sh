#!/usr/bin/env bash
# The ensemble engine on a GPU, in under ten minutes: the teaching plan with 64 seeds through
# 'postlab run --engine ensemble' (verified, reproduced on the same device byte for byte,
# reported with intervals), then bench/bench_ensemble_scale.py for 1,000 and 10,000 members,
# then (at most two minutes) 1,000 members of a small GPT-2.
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

echo "== scale: $members members on $device (computation only)"
"$python" bench/bench_ensemble_scale.py --device "$device" --members "$members"
echo "== transformers: ${members%%,*} GPT-2 members on $device (computation only, at most 120 s)"
timeout 120 "$python" bench/bench_ensemble_scale.py --device "$device" --members "${members%%,*}" \
  --policy gpt2 || echo "(stopped after 120 s)"
echo "== done; log in $log"
