"""Exit codes under stress: run verify, reproduce and a refused read many times, each in a
fresh process, on every CPU code path this machine runs, and count abnormal exits.

    python bench/stress_exit.py [--runs N] [--paths default,avx2,avx512] [--baseline]
                                [--json FILE]

For each code path, a small plan (the teaching plan, two seeds, few steps) is trained with
``postlab run --cpu-path PATH``; then each of these runs ``--runs`` times in a new process:
``verify RUN`` (expected exit 0), ``reproduce RUN`` (0, identical) and ``report`` of a copy
whose first chunk holds the second seed's rows, its manifest made to match (2, one line).
An abnormal exit is a death by a signal (SIGABRT's "terminate called without an active
exception" once followed a correct answer), an exit code other than the expected one, or
"terminate called" on stderr. The table prints each command's count per path, and the total
against the goal of 0. ``--baseline`` runs each command a second way beside it, alternating:
through ``sys.exit(main(...))``, the interpreter's ordinary exit with its teardown, as the
command line left before it ended through ``postlab.cli.main.leave``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

POSTLAB = [sys.executable, "-m", "postlab"]
#: The command line as it exited before ``leave``: the interpreter's ordinary teardown.
ORDINARY_EXIT = [sys.executable, "-c",
                 "import sys; from postlab.cli.main import main; sys.exit(main(sys.argv[1:]))"]
SMALL = {"seeds": [3, 4], "embedding": 12, "hidden": 16, "sft_steps": 30, "sft_batch": 8,
         "rl_steps": 6, "prompts_per_step": 3, "group_size": 4, "eval_samples": 3}


def _swapped(run: Path, into: Path) -> Path:
    """A copy of ``run`` whose two chunks are swapped, their manifest entries made to match."""
    shutil.copytree(run, into)
    header = json.loads((into / "record.json").read_text())
    first, second = (into / chunk["file"] for chunk in header["chunks"][:2])
    one, two = first.read_bytes(), second.read_bytes()
    first.write_bytes(two)
    second.write_bytes(one)
    for chunk, data in zip(header["chunks"], (two, one), strict=False):
        chunk.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (into / "record.json").write_text(json.dumps(header))
    return into


def _once(command: list[str], expect: int) -> str | None:
    """None for a normal exit, else what was abnormal about it."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode < 0:
        return f"signal {-done.returncode}"
    if "terminate called" in done.stderr:
        return "terminate called"
    if done.returncode != expect:
        return f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--paths", default="default,avx2,avx512")
    parser.add_argument("--baseline", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from postlab.machine.numerics import cannot_run, cpu_model
    from postlab.plan.frozen import freeze, teaching_plan

    paths = [p for p in args.paths.split(",") if cannot_run(p) is None]
    print(f"{cpu_model()}, {os.cpu_count()} cores; paths {', '.join(paths)}; "
          f"{args.runs} runs of each command per path, each a fresh process")
    rows, total, abnormal = [], 0, 0
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        plan = folder / "plan.json"
        freeze(plan, teaching_plan() | SMALL)
        for path in paths:
            run = folder / f"run-{path}"
            subprocess.run([*POSTLAB, "run", "--plan", str(plan), "--out-dir", str(run),
                            "--cpu-path", path, "--workers", "1", "--quiet"], check=True)
            swapped = _swapped(run, folder / f"swapped-{path}")
            commands = {
                "verify": ([*POSTLAB, "verify", str(run)], 0),
                "reproduce": ([*POSTLAB, "reproduce", str(run), "--out-dir",
                               str(folder / "again"), "--quiet"], 0),
                "refused read": ([*POSTLAB, "report", str(swapped)], 2),
            }
            ways = {"postlab": POSTLAB, **({"ordinary exit": ORDINARY_EXIT}
                                           if args.baseline else {})}
            for name, (command, expect) in commands.items():
                seen: dict[str, list[str]] = {way: [] for way in ways}
                for _ in range(args.runs):
                    for way, start in ways.items():
                        shutil.rmtree(folder / "again", ignore_errors=True)
                        problem = _once([*start, *command[len(POSTLAB):]], expect)
                        if problem is not None:
                            seen[way].append(problem)
                for way, problems in seen.items():
                    if way == "postlab":
                        total += args.runs
                        abnormal += len(problems)
                    rows.append({"path": path, "command": name, "exit": way,
                                 "runs": args.runs, "abnormal": len(problems),
                                 "kinds": sorted(set(problems))})
                    print(f"{path:8s} {name:13s} {way:13s} {len(problems)} abnormal of "
                          f"{args.runs}" + (f" ({'; '.join(sorted(set(problems)))})"
                                            if problems else ""), flush=True)
    print(f"total: {abnormal} abnormal exits of {total} (goal: 0)")
    if args.json is not None:  # the history: one entry per invocation
        history = json.loads(args.json.read_text()) if args.json.is_file() else []
        history.insert(0, {"date": datetime.date.today().isoformat(), "machine": cpu_model(),
                           "command": " ".join(["bench/stress_exit.py", *sys.argv[1:]]),
                           "platform": platform.platform(), "cores": os.cpu_count(),
                           "rows": rows, "total": total, "abnormal": abnormal})  # newest first
        args.json.write_text(json.dumps(history, indent=1) + "\n")
    return 0 if abnormal == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
