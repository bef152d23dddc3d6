"""Command line: ``postlab freeze | report | exercises``.

``main(argv)`` returns an exit code so tests call it in-process. Every user mistake surfaces as
a :class:`UserError`, printed as one line with exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from postlab import __version__
from postlab.errors import UserError

LANGS = ("zh", "en")


def default_lang(environ: dict[str, str] | None = None) -> str:
    """Chinese when the message locale is zh_*, English otherwise."""
    env = os.environ if environ is None else environ
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(var)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="postlab", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"postlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    freeze = sub.add_parser("freeze", help="write the teaching plan to PATH (never overwrites)")
    freeze.add_argument("path", type=Path)

    report = sub.add_parser("report", help="read a record and print the held-out report; "
                                           "trains nothing")
    report.add_argument("--plan", type=Path, help="plan file (default: plan.json beside the "
                                                  "record, else the teaching plan)")
    report.add_argument("--record", type=Path, help="record file or run folder (default: "
                                                    "the record bundled with postlab)")
    report.add_argument("--lang", choices=LANGS, help="output language (default: from locale)")

    exercises = sub.add_parser("exercises", help="compute the worked answers arithmetic can show")
    exercises.add_argument("number", type=int, nargs="?", help="one answer's number")
    return parser


def _cmd_freeze(args: argparse.Namespace) -> int:
    from postlab.plan import freeze

    digest = freeze(args.path)
    print(f"froze the teaching plan: {args.path} (sha256 {digest})")
    return 0


def _resolve_record(path: Path | None) -> Path:
    from postlab.record import bundled_record_path

    if path is None:
        bundled = bundled_record_path()
        if bundled is None:
            raise UserError("no bundled record exists yet in this build of postlab; "
                            "pass --record RECORD")
        return bundled
    if path.is_dir():
        return path / "record.json"
    return path


def _resolve_plan(plan_path: Path | None, record_path: Path):
    from postlab.plan import load_plan, teaching_plan_loaded

    if plan_path is not None:
        return load_plan(plan_path)
    beside = record_path.parent / "plan.json"
    if beside.is_file():
        return load_plan(beside)
    return teaching_plan_loaded()


def _cmd_report(args: argparse.Namespace) -> int:
    from postlab.record import check_plan_link, load_record
    from postlab.report import build_report, render_text

    record_path = _resolve_record(args.record)
    record = load_record(record_path)
    plan = _resolve_plan(args.plan, record_path)
    check_plan_link(record, plan, str(record_path))
    try:
        report = build_report(record, plan.data)
    except (KeyError, ValueError) as exc:
        raise UserError(f"{record_path}: record does not fit the plan: {exc}") from None
    sys.stdout.write(render_text(report, args.lang or default_lang()))
    return 0


def _cmd_exercises(args: argparse.Namespace) -> int:
    from postlab.exercises import DISCURSIVE, EXERCISES

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
    return 0


COMMANDS = {"freeze": _cmd_freeze, "report": _cmd_report, "exercises": _cmd_exercises}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"postlab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("postlab: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    sys.exit(main())
