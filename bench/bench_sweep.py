"""Sweep throughput: the same sweep with 1 and 2 local workers and through a local Ray cluster,
side by side in one invocation, checked identical.

    python bench/bench_sweep.py [--seeds 8] [--values 0.0,0.03,0.1] [--keep DIR]

The sweep is the teaching plan over ``kl_beta`` (the teaching value is the base version) x the
seeds 1..N. Prints, for each executor: wall time of ``postlab sweep``, tasks per minute, and
parallel efficiency (speed-up over one worker divided by the workers used). A Ray head is
started on the loopback address with as many CPUs as this machine has, and stopped after.
Finally ``postlab compare`` writes the sweep's HTML comparison (paired differences by seed).
Needs the ``ray`` and ``report`` extras.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POSTLAB = [sys.executable, "-m", "postlab"]


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def records_equal(one: Path, two: Path) -> bool:
    from postlab.records.record import load_record

    names = [v["name"] for v in json.loads((one / "versions.json").read_text())["versions"]]
    for name in names:
        if (one / name / "summary.json").read_bytes() != (two / name / "summary.json").read_bytes():
            return False
        a = load_record(one / name / "record.json").runs  # either layout
        b = load_record(two / name / "record.json").runs
        keys = ("seed", "sft_loss", "evaluations", "training", "checkpoints")
        if [{k: r.data()[k] for k in keys} for r in a] != [
                {k: r.data()[k] for k in keys} for r in b]:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--values", default="0.0,0.03,0.1", help="kl_beta values")
    parser.add_argument("--keep", type=Path, help="keep the sweep folders here (new folder)")
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="plsweep"))
    try:
        spec = work / "sweep.json"
        values = [float(v) for v in args.values.split(",")]
        spec.write_text(json.dumps({"seeds": list(range(1, args.seeds + 1)),
                                    "grid": {"kl_beta": values}}))
        versions = len(set(values) | {0.03})
        tasks = versions * args.seeds * 3  # SFT and two arms per seed
        print(f"machine: {platform.processor() or platform.machine()}, {cpus} cores, Python "
              f"{platform.python_version()}; sweep: teaching plan x kl_beta {values} x "
              f"{args.seeds} seeds = {tasks} tasks")
        runs: dict[str, tuple[float, int, Path]] = {}
        for workers in (1, 2):
            out = work / f"local-{workers}"
            seconds = timed([*POSTLAB, "sweep", str(spec), "--out-dir", str(out),
                             "--workers", str(workers), "--quiet"])
            runs[f"local, {workers} worker{'s' if workers > 1 else ''}"] = (seconds, workers, out)
        # The tests' helper: a head of its own, stopped without touching any other Ray.
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from raycluster import start_head, stop_head

        address, temp = start_head(cpus)
        try:
            out = work / "ray"
            seconds = timed([*POSTLAB, "sweep", str(spec), "--out-dir", str(out),
                             "--executor", "ray", "--address", address, "--quiet"])
            runs[f"Ray, local head, {cpus} CPUs"] = (seconds, cpus, out)
        finally:
            stop_head(temp)
        one = runs["local, 1 worker"][0]
        first = runs["local, 1 worker"][2]
        for name, (seconds, used, out) in runs.items():
            same = records_equal(first, out)
            print(f"  {name:28s} {seconds:7.1f} s  {tasks / seconds * 60:6.1f} tasks/min  "
                  f"efficiency {one / seconds / used:4.2f}  identical to 1 worker: {same}")
            if not same:
                raise SystemExit(f"{name}: records differ from one worker's")
        page = work / "compare.html"
        timed([*POSTLAB, "compare", str(first), "--html", str(page), "--lang", "en"])
        print(f"HTML comparison: {page.stat().st_size} bytes, "
              f"{page.read_text().count('paired difference')} tables of paired differences")
        if args.keep:
            shutil.copytree(work, args.keep)
            print(f"kept in {args.keep}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
