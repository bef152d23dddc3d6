"""The compute estimate against the run it estimates, plan by plan, on this machine.

    python bench/bench_estimate.py [PLAN ...] [--no-eval-heavy] [--repeats N]
                                   [--repeat-under SECONDS] [--json FILE]

For each plan (default: every example plan, ``examples/*.json`` and ``examples/gym/*.json``
without drafts, then an evaluation-heavy plan): the estimate ``postlab run`` prints before it
trains (calibrated here, in a process of its own pinned to the run's CPU code path, as a run
calibrates), then the run itself on one worker (``--workers 1``, the estimate's unit), its
wall time and peak resident memory (``ru_maxrss`` of that process, ``os.wait4``). One line
per plan with both figures and their ratio (estimate / measured); a ratio outside 0.75-1.25
is marked with a star.

Each plan is measured as ``--repeats`` independent pairs (a fresh calibration, then a fresh
run; default 3), in rounds: every plan once, then every plan again, so a plan's pairs lie
minutes apart. Each line compares the median estimate with the median run, beside the
lowest and highest ratio of a single pair. Why pairs, rounds and medians: on a shared 2-core
machine the same run took 51-63 s four times in a row, a calibration of a second or two
inside a slow spell prices the whole plan up to twice as high or more, and slow spells last
minutes (one plan's three pairs in a row once measured 1.12-1.95, median 1.65), so one pair
measures the machine's mood as much as the estimate. A plan whose first run takes
``--repeat-under`` seconds or longer (default 150) is measured once, so the whole table stays
near an hour. With ``--json`` the pairs are written as they are measured, then the summary.

The evaluation-heavy plan is the teaching plan on one seed with 100 samples per held-out
question, so each stage's evaluation decodes more than 10,000 answers: the kind of plan the
estimate once put at half its time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from postlab.machine import numerics
from postlab.machine.cache import CACHE_VARIABLE

ROOT = Path(__file__).resolve().parents[1]
POSTLAB = [sys.executable, "-m", "postlab"]
TOLERANCE = 0.25

# The run pins its CPU code path before torch loads (the portable one unless --cpu-path says
# otherwise), so the estimate is calibrated under that same pin. Unpinned, this process ran
# torch's native kernels: AVX-512 on an Intel Xeon, where gym/chain-sum's RL step took 0.28-
# 0.34 s against 0.52 s pinned (2026-12-06), and the table read 0.64-0.69 for that plan.
ESTIMATE = """
import json, sys
from postlab.machine import numerics
numerics.pin(numerics.resolve_choice(numerics.PORTABLE))  # as postlab run does, before torch
from postlab.plan.frozen import load_plan
from postlab.runs.estimate import estimate
est = estimate(load_plan(sys.argv[1]).model)
print(json.dumps({"seconds": est.seconds, "memory_bytes": est.memory_bytes,
                  "calibration_seconds": est.calibration_seconds,
                  "code_path": numerics.current_pin()}))
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


def pair(plan: Path, folder: Path) -> dict[str, float]:
    """One calibration in a process of its own, then one run of the plan on one worker."""
    _, _, out = child([sys.executable, "-c", ESTIMATE, str(plan)])
    est = json.loads(out)
    if est.pop("code_path") != numerics.resolve_choice(numerics.PORTABLE):
        raise SystemExit(f"the estimate of {plan} was not calibrated on the run's code path")
    # the run calibrates as the estimate's own process did (--recalibrate), into a cache
    # folder of this invocation's own
    seconds, mib, _ = child([*POSTLAB, "run", "--plan", str(plan), "--out-dir", str(folder),
                             "--workers", "1", "--quiet", "--allow-large", "--recalibrate"])
    return {"estimate_s": est["seconds"], "measured_s": seconds,
            "estimate_mib": est["memory_bytes"] / 2**20, "measured_mib": mib}


def summary(pairs: list[dict[str, float]]) -> dict[str, float]:
    """Medians of the pairs, their ratios, and the spread of one pair's time ratio."""
    medians = {k: statistics.median(p[k] for p in pairs) for k in pairs[0]}
    ratios = [p["estimate_s"] / p["measured_s"] for p in pairs]
    return {**medians, "time_ratio": medians["estimate_s"] / medians["measured_s"],
            "memory_ratio": medians["estimate_mib"] / medians["measured_mib"],
            "pair_low": min(ratios), "pair_high": max(ratios), "pairs": len(pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plans", nargs="*", type=Path)
    parser.add_argument("--no-eval-heavy", action="store_true")
    parser.add_argument("--repeats", type=int, default=3,
                        help="independent calibration-and-run pairs per plan (default 3)")
    parser.add_argument("--repeat-under", type=float, default=150.0,
                        help="repeat only plans whose first run took fewer seconds")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    print(f"machine: {numerics.cpu_model()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; code path "
          f"{numerics.resolve_choice(numerics.PORTABLE)} (the run's default, estimate and run); "
          f"one worker per run; up to {args.repeats} pairs per plan (medians)")
    work = Path(tempfile.mkdtemp(prefix="bench-estimate-"))
    os.environ[CACHE_VARIABLE] = str(work / "cache")
    plans = args.plans or example_plans()
    if not args.no_eval_heavy:
        plans.append(eval_heavy(work))
    measured: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(plans))}
    for round_ in range(args.repeats):
        for index, plan in enumerate(plans):
            if round_ and measured[index][0]["measured_s"] >= args.repeat_under:
                continue
            measured[index].append(pair(plan, work / f"run-{index}-{round_}"))
            last = measured[index][-1]
            print(f"  round {round_ + 1}: {plan.name}: {last['estimate_s']:.1f} s estimated, "
                  f"{last['measured_s']:.1f} s measured", flush=True)
            if args.json:  # kept as it goes: a late failure loses no pair measured before it
                args.json.write_text(json.dumps(
                    {plans[i].name: {"each": m} for i, m in measured.items() if m}, indent=1))
    print()
    print(f"{'plan':<38} {'estimate':>9} {'measured':>9} {'ratio':>6} {'one pair':>10}   "
          f"{'estimate':>9} {'measured':>9} {'ratio':>6}")
    results = {}
    for index, plan in enumerate(plans):
        pairs = measured[index]
        r = summary(pairs)
        results[plan.name] = {**r, "each": pairs}
        spread = f"{r['pair_low']:.2f}-{r['pair_high']:.2f}" if len(pairs) > 1 else "-"
        print(f"{plan.name:<38} {r['estimate_s']:8.0f}s {r['measured_s']:8.0f}s "
              f"{r['time_ratio']:6.2f}{mark(r['time_ratio'])}{spread:>10}  "
              f"{r['estimate_mib']:6.0f}MiB {r['measured_mib']:6.0f}MiB "
              f"{r['memory_ratio']:6.2f}{mark(r['memory_ratio'])}", flush=True)
    inside = sum(abs(r["time_ratio"] - 1) <= TOLERANCE and abs(r["memory_ratio"] - 1) <= TOLERANCE
                 for r in results.values())
    single = sum(abs(p["estimate_s"] / p["measured_s"] - 1) <= TOLERANCE
                 for r in results.values() for p in r["each"])
    total = sum(len(r["each"]) for r in results.values())
    print(f"\n{inside} of {len(results)} plans within ±25% on both time and memory (medians); "
          f"{single} of {total} single pairs within ±25% on time")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
