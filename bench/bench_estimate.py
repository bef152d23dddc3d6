"""The compute estimate against the run it estimates, plan by plan, on this machine.

    python bench/bench_estimate.py [PLAN ...] [--no-eval-heavy] [--json FILE]

For each plan (default: every example plan, ``examples/*.json`` and ``examples/gym/*.json``
without drafts, then an evaluation-heavy plan): the estimate ``postlab run`` prints before it
trains (calibrated here, in a process of its own, as a run calibrates), then the run itself
on one worker (``--workers 1``, the estimate's unit), its wall time and peak resident memory
(``ru_maxrss`` of that process, ``os.wait4``). One line per plan with both figures and their
ratio (estimate / measured); a ratio outside 0.75-1.25 is marked with a star.

The evaluation-heavy plan is the teaching plan on one seed with 100 samples per held-out
question, so each stage's evaluation decodes more than 10,000 answers: the kind of plan the
estimate once put at half its time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from postlab.machine.cache import CACHE_VARIABLE

ROOT = Path(__file__).resolve().parents[1]
POSTLAB = [sys.executable, "-m", "postlab"]
TOLERANCE = 0.25

ESTIMATE = """
import json, sys
from postlab.plan.frozen import load_plan
from postlab.runs.estimate import estimate
est = estimate(load_plan(sys.argv[1]).data)
print(json.dumps({"seconds": est.seconds, "memory_bytes": est.memory_bytes,
                  "calibration_seconds": est.calibration_seconds}))
"""


def child(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak resident MiB of the child and its stdout."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    return seconds, usage.ru_maxrss / 1024, stdout


def example_plans() -> list[Path]:
    found = sorted((ROOT / "examples").glob("*.json")) + sorted(
        (ROOT / "examples" / "gym").glob("*.json"))
    return [p for p in found if not p.name.endswith(".draft.json")]


def eval_heavy(folder: Path) -> Path:
    from postlab.plan.frozen import freeze, teaching_plan

    path = folder / "eval-heavy.json"
    freeze(path, teaching_plan() | {"seeds": [1], "eval_samples": 100})
    return path


def mark(ratio: float) -> str:
    return " " if abs(ratio - 1) <= TOLERANCE else "*"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plans", nargs="*", type=Path)
    parser.add_argument("--no-eval-heavy", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; one worker per run")
    work = Path(tempfile.mkdtemp(prefix="bench-estimate-"))
    os.environ[CACHE_VARIABLE] = str(work / "cache")
    plans = args.plans or example_plans()
    if not args.no_eval_heavy:
        plans.append(eval_heavy(work))
    print(f"{'plan':<38} {'estimate':>9} {'measured':>9} {'ratio':>6}   "
          f"{'estimate':>9} {'measured':>9} {'ratio':>6}")
    results = {}
    for index, plan in enumerate(plans):
        _, _, out = child([sys.executable, "-c", ESTIMATE, str(plan)])
        est = json.loads(out)
        # the run calibrates as the estimate's own process did (--recalibrate), into a cache
        # folder of this invocation's own
        seconds, mib, _ = child([*POSTLAB, "run", "--plan", str(plan), "--out-dir",
                                 str(work / f"run-{index}"), "--workers", "1", "--quiet",
                                 "--allow-large", "--recalibrate"])
        est_mib = est["memory_bytes"] / 2**20
        time_ratio, memory_ratio = est["seconds"] / seconds, est_mib / mib
        results[plan.name] = {"estimate_s": est["seconds"], "measured_s": seconds,
                              "estimate_mib": est_mib, "measured_mib": mib}
        print(f"{plan.name:<38} {est['seconds']:8.0f}s {seconds:8.0f}s {time_ratio:6.2f}"
              f"{mark(time_ratio)}  {est_mib:6.0f}MiB {mib:6.0f}MiB {memory_ratio:6.2f}"
              f"{mark(memory_ratio)}", flush=True)
    inside = sum(abs(r["estimate_s"] / r["measured_s"] - 1) <= TOLERANCE
                 and abs(r["estimate_mib"] / r["measured_mib"] - 1) <= TOLERANCE
                 for r in results.values())
    print(f"\n{inside} of {len(results)} plans within ±25% on both time and memory")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
