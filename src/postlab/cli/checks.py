"""``postlab verify``, ``postlab design`` and ``postlab exercises``: checking a run, planning
a study from it, and the worked answers."""

from __future__ import annotations

import argparse
import sys

from postlab import api


def verify(args: argparse.Namespace) -> int:
    result = api.verify(args.run, expect=args.expect, quick=args.quick,
                        say=lambda line: print(line, flush=True))
    sys.stdout.write(result.text)
    return result.code


def design(args: argparse.Namespace) -> int:
    found = api.design(args.run, effect=args.effect, power=args.power, alpha=args.alpha)
    print("\n".join(found.lines()))
    return 0


def exercises(args: argparse.Namespace) -> int:
    for exercise in api.exercises(args.number, args.run):
        print(f"answer {exercise.number}: {exercise.title}")
        for line in exercise.lines:
            print(f"  {line}")
    if args.number is None:
        print("answers 8 and 9 are computed on a trained run: postlab exercises 8 [RUN] "
              "(default: the bundled run; about half a minute), postlab exercises 9 RUN (a run "
              "whose arms are pipelines)")
    return 0
