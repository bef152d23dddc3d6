"""The TRL benchmark runs end to end: both trainers start from the same weights, train the
timed steps, and the ratio and profile are printed. Speed itself is the benchmark's to
measure, not a test's; this only keeps the harness from rotting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_trl.py"


#: The profile (one more postlab process) is taken on the first plan only: its code does not
#: depend on the architecture.
@pytest.mark.parametrize(("plan", "profile"), [("transformer-gpt2", True),
                                               ("transformer-llama", False)])
def test_the_trl_benchmark_runs_both_sides_and_prints_the_ratio(plan, profile, tmp_path):
    path = BENCH.parents[1] / "examples" / f"{plan}.json"
    done = subprocess.run([sys.executable, str(BENCH), "--plan", str(path), "--steps", "1",
                           "--sft-steps", "50", *([] if profile else ["--no-profile"])],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for side in ("trl", "postlab", "postlab-library-forward"):
        assert f"  {side} " in out and "ms per RL step" in out
    assert "TRL's speed per RL step" in out and "same initial weights: yes" in out
    assert ("rollout decoding" in out and "everything else" in out) == profile
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def _row(out: str, label: str) -> list[float]:
    [line] = [x for x in out.splitlines() if x.startswith(f"  {label} ")]
    return [float(cell) for cell in line[len(label) + 2:].split()]


def test_the_benchmark_breaks_postlab_s_memory_down_and_measures_the_limits(tmp_path):
    """--breakdown: the parts measured on live tensors (Adam's two moments are twice the
    weights, gradients are spent before the next update); --limits: both sides' counted
    FLOPs against the measured matmul limit, and decoding against the read bandwidth."""
    path = BENCH.parents[1] / "examples" / "transformer-llama.json"
    done = subprocess.run([sys.executable, str(BENCH), "--plan", str(path), "--steps", "2",
                           "--sft-steps", "20", "--no-profile", "--sides", "trl,postlab",
                           "--breakdown", "--limits"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    weights, _ = _row(out, "weights")
    optimizer, _ = _row(out, "optimizer state")
    assert weights > 0 and abs(optimizer / weights - 2) < 0.2
    assert _row(out, "gradients") == [0.0, 0.0]  # spent before the next update
    line = next(x for x in out.splitlines() if "at the optimizer's step, the gradients" in x)
    assert abs(float(line.split(": ")[1].split()[0]) - weights) < 0.15  # one per weight
    assert _row(out, "activations kept for backward")[0] > 0 and _row(out, "KV cache")[0] > 0
    assert "resident peak of the run:" in out and "TRL's:" in out
    assert "GFLOP/s" in out and "GB/s" in out
    for side in ("trl", "postlab"):
        line = next(x for x in out.splitlines() if x.startswith(f"  {side} ") and "GFLOP a" in x)
        assert float(line.split()[1].replace(",", "")) > 0  # FLOPs were counted
        assert any(x.startswith(f"  {side} ") and "decoding" in x for x in out.splitlines())
    assert list(tmp_path.iterdir()) == []


def test_a_size_preset_prints_speed_tokens_and_memory_for_both_sides(tmp_path):
    """The BPE preset: a tokenizer of 8,192 tokens trained here, 128-token completions."""
    pytest.importorskip("reasoning_gym")
    done = subprocess.run([sys.executable, str(BENCH), "--preset", "bpe-small", "--steps", "1",
                           "--sides", "trl,postlab"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "vocabulary 8192" in out and "128 new tokens" in out
    for side in ("trl", "postlab"):
        [line] = [x for x in out.splitlines() if x.startswith(f"  {side} ") and "MiB" in x]
        assert line.endswith("tokens")
        completion = float(line.split()[-2])
        assert 100 < completion <= 128  # untrained weights seldom write EOS
    assert "postlab-library-forward" not in out
    assert "TRL's speed per RL step" in out and "same initial weights: yes" in out
    assert list(tmp_path.iterdir()) == []
