"""``postlab verify`` and ``postlab exercises``: checking a run, and the worked answers."""

from __future__ import annotations

import argparse
import sys

from postlab import api
from postlab.errors import UserError


def verify(args: argparse.Namespace) -> int:
    result = api.verify(args.run, expect=args.expect, quick=args.quick,
                        say=lambda line: print(line, flush=True))
    sys.stdout.write(result.text)
    return result.code


def exercises(args: argparse.Namespace) -> int:
    from postlab.analysis.exercises import DISCURSIVE, EXERCISES, RUN_EXERCISES

    if args.run is not None and args.number not in RUN_EXERCISES:
        raise UserError(f"RUN is for answers {' and '.join(map(str, RUN_EXERCISES))} only")
    if args.number == 9 and args.run is None:
        raise UserError("answer 9 is computed on a run: postlab exercises 9 RUN, with RUN a "
                        "run whose arms are pipelines (train one with "
                        "examples/arms-pipelines.json)")
    if args.number in RUN_EXERCISES:
        return _run_exercise(args)
    numbers = sorted(EXERCISES) if args.number is None else [args.number]
    for number in numbers:
        if number in DISCURSIVE:
            print(f"answer {number}: an argument, not arithmetic ({DISCURSIVE[number]})")
            continue
        if number not in EXERCISES:
            raise UserError(f"no answer {number}; answers are numbered 1 to 10")
        exercise = EXERCISES[number]()
        print(f"answer {exercise.number}: {exercise.title}")
        for line in exercise.lines:
            print(f"  {line}")
    if args.number is None:
        print("answers 8 and 9 are computed on a trained run: postlab exercises 8 [RUN] "
              "(default: the bundled run; about half a minute), postlab exercises 9 RUN (a run "
              "whose arms are pipelines)")
    return 0


def _run_exercise(args: argparse.Namespace) -> int:
    """An answer computed on a trained run: 8 (the KL identity), 9 (the ablation table)."""
    from postlab.analysis.exercises import RUN_EXERCISES
    from postlab.api.reading import require_report_extra
    from postlab.records.opened import check_whole, checked_tables, open_run
    from postlab.records.record import bundled_run_dir

    opened = open_run(args.run if args.run is not None else bundled_run_dir(), check_rows=False)
    check_whole(opened)
    require_report_extra()
    exercise = RUN_EXERCISES[args.number](opened.record, opened.plan.data,
                                          opened.source.parent,
                                          tables=lambda: checked_tables(opened))
    print(f"answer {exercise.number}: {exercise.title}")
    for line in exercise.lines:
        print(f"  {line}")
    return 0
