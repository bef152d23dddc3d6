"""The ensemble engine against the exact one, side by side in one invocation: speed in
seed-runs per second, and equivalence of what the runs measure.

    python bench/bench_ensemble.py [--exact-seeds 32] [--ensemble-seeds 32] [--rl-steps N]
                                   [--policy gru|gpt2|llama | --plan PLAN] [--first-seed 1]
                                   [--paired] [--margins teaching|gpt2-example|...]
                                   [--device cpu|cuda] [--keep DIR]

A seed-run is one seed of the teaching plan trained completely: SFT, both RL arms, and every
evaluation (3 stages x 3 splits, greedy and sampled), written as an ordinary run folder.
``--policy gpt2`` or ``llama`` swaps the GRU for a small ``transformers`` model of that family
(:data:`TRANSFORMERS`), everything else the teaching plan's; ``--plan`` trains a plan file
instead (an example's, say), with its seeds replaced by the benchmark's.
Both engines train the same plan (``--rl-steps`` shortens RL for a quick look) into new run
folders through ``postlab run``, both on every core of this machine (the exact engine one
seed and arm per worker, the ensemble a share of the seeds per worker, chunked to fit
memory; on CUDA, one process). Prints each engine's wall time and
seed-runs per second, their ratio, then the equivalence tests of
``postlab.analysis.equivalence`` (held-out strict success, coverage, hacking gap and final
KL per arm; 90% interval of the difference against the stated margin). By default the engines
train independent seeds and the interval is Welch's; ``--paired`` has both train the same
seeds (so the same initial weights) and takes the interval over per-seed differences. Exits 1
if a metric is not shown equivalent. ``--margins`` names a set of
``postlab.plan.margins`` (default: the teaching plan's). Needs the ``report`` extra (scipy).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POSTLAB = [sys.executable, "-m", "postlab"]

#: The transformer policies ``--policy`` offers: two layers, width 32, of each family.
TRANSFORMERS = {
    "gpt2": {"kind": "transformer", "architecture": "gpt2", "layers": 2, "heads": 2,
             "width": 32, "max_positions": 16},
    "llama": {"kind": "transformer", "architecture": "llama", "layers": 2, "heads": 2,
              "width": 32, "intermediate": 64, "max_positions": 16},
}


def train(plan: Path, out: Path, engine: str, workers: int, device: str) -> float:
    command = [*POSTLAB, "run", "--plan", str(plan), "--out-dir", str(out), "--engine",
               engine, "--workers", str(workers), "--quiet", "--allow-large",
               "--device", device]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def _mean(values: tuple[float, ...]) -> float:
    return sum(values) / len(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exact-seeds", type=int, default=32)
    parser.add_argument("--ensemble-seeds", type=int, default=32)
    parser.add_argument("--rl-steps", type=int, help="RL steps (default: the teaching plan's)")
    parser.add_argument("--policy", choices=["gru", *TRANSFORMERS], default="gru",
                        help="the teaching plan's GRU (default) or a small transformer")
    parser.add_argument("--plan", type=Path, help="a plan file to train instead of the "
                        "teaching plan (its seeds are replaced)")
    parser.add_argument("--first-seed", type=int, default=1,
                        help="the exact engine's first seed; the ensemble's follow its last")
    parser.add_argument("--paired", action="store_true", help="both engines train the same "
                        "seeds, compared seed by seed")
    parser.add_argument("--margins", default="teaching", help="the set of margins of "
                        "postlab.plan.margins to test against (teaching, gpt2-example, ...)")
    parser.add_argument("--device", default="cpu", help="the ensemble's device")
    parser.add_argument("--keep", type=Path, help="keep the run folders here (new folder)")
    args = parser.parse_args()
    from postlab.analysis.equivalence import LEVEL, compare_engines
    from postlab.plan import margins
    from postlab.plan.frozen import freeze, load_plan, teaching_plan
    from postlab.records.record import load_record

    if args.margins not in margins.SETS:
        raise SystemExit(f"--margins: one of {', '.join(margins.SETS)}")
    chosen = margins.values(margins.SETS[args.margins])
    if args.paired and args.exact_seeds != args.ensemble_seeds:
        raise SystemExit("--paired needs as many seeds for each engine")

    cpus = os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="plensemble"))
    try:
        changes = {} if args.rl_steps is None else {"rl_steps": args.rl_steps}
        if args.policy != "gru":
            if args.plan is not None:
                raise SystemExit("--policy and --plan are alternatives")
            changes["policy"] = TRANSFORMERS[args.policy]
        base = teaching_plan() if args.plan is None else load_plan(args.plan).data
        plans = {}
        for engine, count in (("exact", args.exact_seeds), ("ensemble", args.ensemble_seeds)):
            # Seeds F..F+N-1 for the exact engine, the next ones for the ensemble: independent
            # samples; paired, the same seeds for both.
            later = engine == "ensemble" and not args.paired
            start = args.first_seed + (args.exact_seeds if later else 0)
            plans[engine] = work / f"{engine}.json"
            freeze(plans[engine], base | changes | {"seeds": list(range(start, start + count))})
        named = "teaching plan" if args.plan is None else str(args.plan)
        print(f"machine: {platform.machine()}, {cpus} cores, {platform.processor() or '?'}; "
              f"{named}{'' if not changes else f' with {changes}'}")
        times = {"exact": train(plans["exact"], work / "exact", "exact", cpus, "cpu"),
                 "ensemble": train(plans["ensemble"], work / "ensemble", "ensemble",
                                   cpus if args.device == "cpu" else 1, args.device)}
        counts = {"exact": args.exact_seeds, "ensemble": args.ensemble_seeds}
        rates = {k: counts[k] / times[k] for k in times}
        for engine in ("exact", "ensemble"):
            where = (f"{cpus} workers" if engine == "exact" or args.device == "cpu"
                     else f"one process, {args.device}")
            print(f"{engine:9} {counts[engine]:6d} seed-runs in {times[engine]:8.1f} s "
                  f"({where}): {rates[engine]:8.3f} seed-runs/s")
        print(f"ensemble / exact: x{rates['ensemble'] / rates['exact']:.2f} seed-runs per "
              "second")
        plan = load_plan(plans["exact"]).model
        results = compare_engines(load_record(work / "exact" / "record.json"),
                                  load_record(work / "ensemble" / "record.json"), plan,
                                  chosen, paired=args.paired)
        design = ("t interval of the per-seed differences" if args.paired
                  else "Welch interval of the difference of means")
        print(f"\nequivalence (TOST, two one-sided tests at {LEVEL}: the 90% {design}, "
              "ensemble minus exact, must lie inside the margin)")
        print(f"{'metric':15} {'arm':10} {'exact':>8} {'ensemble':>8} {'difference [90%]':>26} "
              f"{'margin':>7}  result")
        for item in results:
            print(f"{item.metric:15} {item.arm:10} {_mean(item.first):8.4f} "
                  f"{_mean(item.second):8.4f} {item.difference:+8.4f} [{item.low:+.4f}, "
                  f"{item.high:+.4f}] {item.margin:7.4f}  "
                  f"{'equivalent' if item.equivalent else 'NOT shown equivalent'}")
        print(f"(final_kl is compared as log KL: its margin is a ratio of "
              f"{math.exp(chosen['final_kl']):.2f})")
        if args.keep is not None:
            shutil.copytree(work, args.keep)
        if not all(item.equivalent for item in results):
            raise SystemExit(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
