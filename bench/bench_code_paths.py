"""What pinning a CPU code path costs: the same plan trained on every path this CPU runs.

    python bench/bench_code_paths.py [--repeats N] [--plan PLAN] [--workers N]

For each path (``native`` = nothing pinned, this machine's best kernels, is the baseline),
trains the plan in a new process ``--repeats`` times and prints the median wall time, its
ratio to native, and whether the rows equal native's. This measurement decides whether
``postlab run`` pins the portable path by default (see the README's "Speed").
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from postlab.machine import numerics  # noqa: E402  (after the path, before torch: nothing is pinned)


def train(path: str, out: Path, plan: Path | None, workers: int) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if k not in numerics.PIN_VARIABLES}
    cmd = [sys.executable, "-m", "postlab", "run", "--quiet", "--out-dir", str(out),
           "--workers", str(workers), "--cpu-path", path] + (["--plan", str(plan)] if plan
                                                              else [])
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    from postlab.records.record import load_record

    record = load_record(out / "record.json")  # either layout: chunks or one document
    rows = [{k: run.data()[k] for k in ("sft_loss", "evaluations", "training")}
            for run in record.runs]
    return elapsed, {"rows": rows, "capability": record.numerics.cpu_capability}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plan", type=Path)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    paths = [numerics.NATIVE, *(numerics.supported_paths() or [])]
    print(f"machine: {numerics.cpu_model()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; plan: {args.plan or 'the teaching plan'}; "
          f"{args.workers} worker(s); median of {args.repeats}")
    times: dict[str, list[float]] = {path: [] for path in paths}
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as work:
        for repeat in range(args.repeats):
            for path in paths:  # interleaved, so drift in machine load hits every path alike
                seconds, result = train(path, Path(work) / f"{path}-{repeat}", args.plan,
                                        args.workers)
                times[path].append(seconds)
                results[path] = result
    base = statistics.median(times[numerics.NATIVE])
    native_rows = results[numerics.NATIVE]["rows"]
    print(f"{'code path':<10} {'capability':<10} {'median s':>9} {'speed vs native':>16}  "
          "rows equal native's")
    for path in paths:
        median = statistics.median(times[path])
        same = results[path]["rows"] == native_rows
        print(f"{path:<10} {results[path]['capability']:<10} {median:9.2f} "
              f"{base / median:15.2f}x  {'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
