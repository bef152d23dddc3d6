"""verify's re-evaluation: checkpoints evaluated one at a time against many at once.

    python bench/bench_verify.py [--seeds 16] [--repeats 2] [--run DIR] [--json FILE]

Trains the teaching plan on ``--seeds`` seeds with the ensemble engine (or reads ``--run``,
an ensemble record), then, in this one process and alternating, runs every check of
``verify`` twice per repeat: with the engine's ``evaluate_many`` handed one checkpoint per
call (how verify re-evaluated before), and with up to ``EVALUATION_BATCH`` per call (now).
Prints the re-evaluation's seconds per seed (the figure verify itself prints), the whole
verification's seconds, and the ratios; both must give the same checks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--run", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from postlab.machine import numerics

    numerics.pin(numerics.portable_path())  # as verify runs: the record's portable path
    import postlab.runs.verify as verify
    from postlab.engines.ensemble.task import ENSEMBLE
    from postlab.plan.frozen import freeze, teaching_plan
    from postlab.records.record import load_record, locate_run

    scratch = tempfile.TemporaryDirectory()
    run = args.run
    if run is None:
        plan = Path(scratch.name) / "plan.json"
        freeze(plan, teaching_plan() | {"seeds": list(range(1, args.seeds + 1))})
        run = Path(scratch.name) / "run"
        subprocess.run([sys.executable, "-m", "postlab", "run", "--plan", str(plan),
                        "--out-dir", str(run), "--engine", "ensemble", "--workers", "1",
                        "--quiet"], check=True)
    together = type(ENSEMBLE).evaluate_many

    def alone(self, models, plan, seeds, device):
        return [together(self, [model], plan, [seed], device)[0]
                for model, seed in zip(models, seeds, strict=True)]

    files = locate_run(run)
    measured: dict[str, list[tuple[float, float]]] = {"alone": [], "together": []}
    seen: dict[str, list] = {}
    for _ in range(args.repeats):
        for mode, method in (("alone", alone), ("together", together)):
            type(ENSEMBLE).evaluate_many = method
            start = time.perf_counter()
            checks = verify.verify_run(files, load_record(files.record))
            total = time.perf_counter() - start
            line = next(c.detail for c in checks if c.name == "checkpoint re-evaluation")
            per_seed = float(re.search(r"took (\d+\.\d+) s a seed", line).group(1))
            measured[mode].append((per_seed, total))
            seen[mode] = [(c.name, c.status, re.sub(r"took \d+\.\d+ s", "", c.detail))
                          for c in checks]
    type(ENSEMBLE).evaluate_many = together
    assert seen["alone"] == seen["together"], "the two ways gave other checks"
    best = {mode: (min(p for p, _ in values), min(t for _, t in values))
            for mode, values in measured.items()}
    from postlab.machine.numerics import cpu_model

    seeds = len(load_record(files.record).seed_order())
    print(f"{cpu_model()}, {os.cpu_count()} cores; {seeds} seeds (ensemble record {run.name}); "
          f"best of {args.repeats}")
    for mode, (per_seed, total) in best.items():
        print(f"{mode:9s} re-evaluation {per_seed:.2f} s a seed; verify {total:.2f} s")
    ratio = best["alone"][0] / best["together"][0]
    print(f"together is x{ratio:.2f} on re-evaluation, "
          f"x{best['alone'][1] / best['together'][1]:.2f} on the whole verification")
    if args.json is not None:
        history = json.loads(args.json.read_text()) if args.json.is_file() else []
        history.insert(0, {"date": datetime.date.today().isoformat(), "machine": cpu_model(),
                           "cores": os.cpu_count(),
                           "command": " ".join(["bench/bench_verify.py", *sys.argv[1:]]),
                           "seeds": seeds, "repeats": args.repeats,
                           "alone_s_per_seed": best["alone"][0],
                           "together_s_per_seed": best["together"][0],
                           "alone_verify_s": best["alone"][1],
                           "together_verify_s": best["together"][1]})  # newest first
        args.json.write_text(json.dumps(history, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
