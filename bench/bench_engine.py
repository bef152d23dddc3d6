"""Speed of postlab's engine against the reference, measured side by side in one invocation.

    python bench/bench_engine.py [--reference DIR] [--repeats N] [--plan PLAN]

Prints, for the same plan on this machine: whole-process wall time of the reference and of
``postlab run`` at 1 and 2 workers (checking that the rows are identical), calibrating its
cost estimate afresh and, at 2 workers, reusing the calibration the run before it kept; the
critical path that bounds the parallel part with unlimited cores; and rollout decoding
alone.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    return time.perf_counter() - start


def rows_of(record_path: Path) -> list:
    from postlab.records.record import load_record

    record = load_record(record_path)  # ours in chunks, the reference's one document
    return [{k: run.data()[k] for k in ("seed", "sft_loss", "evaluations", "training")}
            for run in record.runs]


def whole_process(reference: Path, plan: Path | None, repeats: int) -> None:
    # postlab pins the portable CPU code path by default; the reference gets the same pin, so
    # their rows can be compared bit for bit on any CPU.
    from postlab.machine import numerics
    from postlab.machine.cache import CACHE_VARIABLE

    work = Path(tempfile.mkdtemp())
    # postlab keeps its calibrations in a cache folder of this invocation's own: "calibrates"
    # runs measure afresh (--recalibrate), "reuses" runs price the plan by the figures the
    # run before them kept, as a second run of a plan on one machine does
    env = dict(os.environ, PYTHON=sys.executable, **{CACHE_VARIABLE: str(work / "cache")},
               **numerics.CODE_PATHS[numerics.portable_path()].environment)
    postlab = [sys.executable, "-m", "postlab", "run", "--quiet"]
    kinds = {"postlab --workers 1, calibrates": (1, ["--recalibrate"]),
             "postlab --workers 2, calibrates": (2, ["--recalibrate"]),
             "postlab --workers 2, reuses": (2, [])}
    times: dict[str, list[float]] = {"reference": [], **{name: [] for name in kinds}}
    try:
        for i in range(repeats):
            ref_out = work / f"ref-{i}"
            times["reference"].append(timed(
                ["bash", str(reference / "run-reference.sh"), str(ref_out)]
                + ([str(plan)] if plan else []), env))
            for index, (name, (workers, flags)) in enumerate(kinds.items()):
                out = work / f"postlab-{index}-{i}"
                times[name].append(timed(
                    postlab + ["--out-dir", str(out), "--workers", str(workers), *flags]
                    + (["--plan", str(plan)] if plan else []), env))
                same = rows_of(out / "record.json") == rows_of(ref_out / "record.json")
                if not same:
                    raise SystemExit(f"rows differ from the reference: {name}")
    finally:
        shutil.rmtree(work)
    base = statistics.median(times["reference"])
    print(f"whole process, median of {repeats} (rows identical to the reference):")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:32s} {median:6.2f} s   speed-up x{base / median:.2f}")


def critical_path() -> None:
    from postlab.engines import exact as engine
    from postlab.plan.frozen import teaching_plan
    from postlab.plan.schema import Plan
    from postlab.runs.executors import configure_torch

    plan = Plan.of(teaching_plan())
    configure_torch(plan.threads)
    seed = plan.seeds[0]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        sft = engine.sft_task(plan, seed, Path(tmp), 0, lambda event: None)
        sft_time = time.perf_counter() - start
        arm_times = []
        for arm in plan.arms:
            start = time.perf_counter()
            engine.arm_task(plan, seed, arm, sft, Path(tmp), 0, lambda event: None)
            arm_times.append(time.perf_counter() - start)
    tasks = len(plan.seeds) * (sft_time + sum(arm_times))
    path = sft_time + max(arm_times)
    print(f"tasks of one seed: SFT+evaluation {sft_time:.2f} s, arms "
          + ", ".join(f"{t:.2f} s" for t in arm_times))
    print(f"  all tasks in one process {tasks:.2f} s; critical path with unlimited cores "
          f"{path:.2f} s (one seed's SFT then its slowest arm) -> parallel part bounded at "
          f"x{tasks / path:.2f}")


def decoding(reference: Path, repeats: int) -> None:
    sys.path.insert(0, str(reference))
    import post_training_frontier as lab
    import post_training_gru as ref

    from postlab.engines.rollout import generate
    from postlab.plan.schema import Plan
    from postlab.policies import build_policy

    plan = lab.make_plan()
    torch.set_num_threads(1)
    torch.manual_seed(11)
    theirs = ref.Adder(plan)
    ref.supervised(theirs, plan, 11)
    ours = build_policy(Plan.of(plan))
    ours.load_state_dict(theirs.state_dict())
    print("rollout decoding alone (trained SFT model, same generator seed, same tokens):")
    for label, batch in (("RL step, 8 prompts x 8", 64), ("evaluation, 63 x 16", 1008)):
        pairs = [p for p in plan["split"]["train"] for _ in range(16)][:batch]
        results = {}
        for name, fn in (("reference", lambda g, p=pairs: ref.generate(theirs, p, plan, g)),
                         ("postlab", lambda g, p=pairs: generate(ours, p, 6, 1.0, g))):
            best = []
            for _ in range(repeats):
                g = torch.Generator().manual_seed(3)
                start = time.perf_counter()
                for _ in range(20):
                    out = fn(g)
                best.append((time.perf_counter() - start) / 20)
            results[name] = (min(best), out)
        same = all(torch.equal(a, b) for a, b in zip(results["reference"][1],
                                                      results["postlab"][1], strict=True))
        r, p = results["reference"][0] * 1e3, results["postlab"][0] * 1e3
        print(f"  {label:24s} reference {r:6.2f} ms  postlab {p:6.2f} ms  x{r / p:.2f}  "
              f"identical={same}")



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=ROOT.parent / "shared" / "reference")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plan", type=Path, default=None)
    parser.add_argument("--skip-whole", action="store_true")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, torch {torch.__version__}")
    decoding(args.reference, args.repeats)
    critical_path()
    if not args.skip_whole:
        whole_process(args.reference, args.plan, args.repeats)


if __name__ == "__main__":
    main()
