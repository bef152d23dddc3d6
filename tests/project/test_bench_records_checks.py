"""The verification and exit-code benchmarks run end to end on small runs: both ways of
re-evaluating give the same checks and the ratio is printed; every command of the exit stress
exits as expected. Speed is the benchmarks' to measure; this keeps the harnesses from
rotting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from plans import SMALL, write_plan

from postlab.cli import main

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_verify_benchmark_compares_alone_and_together(tmp_path):
    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"seeds": [3, 4]}))
    run = tmp_path / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(run), "--engine", "ensemble",
                 "--workers", "1", "--quiet"]) == 0
    history = tmp_path / "verify.json"
    done = subprocess.run([sys.executable, str(BENCH / "bench_verify.py"), "--run", str(run),
                           "--repeats", "1", "--json", str(history)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 seeds (ensemble record run)" in done.stdout
    assert "together is x" in done.stdout and "on the whole verification" in done.stdout
    assert history.read_text().count('"together_s_per_seed"') == 1


def test_the_exit_stress_counts_no_abnormal_exit(tmp_path):
    history = tmp_path / "stress.json"
    done = subprocess.run([sys.executable, str(BENCH / "stress_exit.py"), "--runs", "1",
                           "--paths", "avx2", "--baseline", "--json", str(history)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "total: 0 abnormal exits of" in done.stdout
    assert "ordinary exit" in done.stdout  # the baseline beside it
