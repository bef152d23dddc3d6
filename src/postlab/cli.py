"""Command line: ``postlab freeze | plan | run | report | plot | verify | reproduce | exercises``.

``main(argv)`` returns an exit code so tests call it in-process. Every user mistake surfaces as
a :class:`UserError`, printed as one line with exit code 2 (a command line that does not parse
is named by its command and ends with that command's usage); any other exception is a bug in
postlab, shown with its traceback and exit code 1. Commands that train or re-evaluate pin the
CPU code path before torch loads (see :mod:`postlab.runs.numerics`).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from postlab import __version__
from postlab.errors import UserError
from postlab.jsonio import printable

LANGS = ("zh", "en")
DEVICE_CHOICES = ("cpu", "cuda", "auto")
#: The training engines (``postlab.runs.orchestration.RunOptions.engine``).
ENGINES = ("exact", "ensemble")


def default_lang(environ: dict[str, str] | None = None) -> str:
    """Chinese when the message locale is zh_*, English otherwise."""
    env = os.environ if environ is None else environ
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(var)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def did_you_mean(word: str, known: Sequence[str]) -> str:
    """' (did you mean X?)' for the closest known name, or '': a typo is fixed from one line."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class _UsageError(UserError):
    """A command line that does not parse; the message already names the (sub)command."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line: ``PROG: problem (usage: PROG ...)``, exit code 2.

    A parser with commands (``postlab``, ``postlab plan``) names the missing or mistyped one
    itself, so argparse's internal dest names never reach the user.
    """

    commands: argparse.Action | None = None

    def add_commands(self, dest: str, help_: str) -> argparse._SubParsersAction:
        """Subcommands stored in ``dest``; a missing one is reported by :meth:`parse_known_args`."""
        sub = self.add_subparsers(dest=dest, parser_class=_Parser, title="commands",
                                  metavar="COMMAND", help=help_)
        self.commands = sub
        return sub

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, extras = super().parse_known_args(args, namespace)
        if self.commands is not None and getattr(parsed, self.commands.dest, None) is None:
            self.error(f"missing command; choose one of {', '.join(self.commands.choices)}")
        if extras and self.commands is None:
            # Said by the command that got them, with its usage, not by the top-level parser.
            first = extras[0].partition("=")[0]
            hint = did_you_mean(first, list(self._option_string_actions)) \
                if first.startswith("-") else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed, extras

    def _check_value(self, action: argparse.Action, value: object) -> None:
        # argparse's own message names the dest ("argument plan_command") and no near match.
        if action.choices is None or value in action.choices:
            return
        known = [str(c) for c in action.choices]
        hint = did_you_mean(str(value), known)
        shown = f"{printable(value):.80}"
        if action is self.commands:
            message = f"unknown command {shown}{hint}; choose one of {', '.join(known)}"
        else:
            name = "/".join(action.option_strings) or action.metavar or action.dest
            message = f"{name} {shown}: unknown{hint}; choose one of {', '.join(known)}"
        raise argparse.ArgumentError(None, message)

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        usage = " ".join(self.format_usage().split()).removeprefix("usage: ")
        # Escaped, so a typed newline or undecodable byte cannot break the one line.
        raise _UsageError(f"{self.prog}: {printable(message)} (usage: {usage})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="postlab")
    parser.add_argument("--version", action="version", version=f"postlab {__version__}",
                        help="print postlab's version and exit")
    sub = parser.add_commands("command", "what to do; 'postlab COMMAND --help' explains one")

    freeze = sub.add_parser("freeze", help="write the teaching plan, or a new version of a "
                                           "plan, to PATH (never overwrites)")
    freeze.add_argument("path", type=Path, metavar="PATH",
                        help="plan file to write; must not exist")
    freeze.add_argument("--from", dest="parent", type=Path,
                        help="parent plan of a new version (default: the teaching plan)")
    freeze.add_argument("--set", dest="settings", action="append", default=[],
                        metavar="KEY=VALUE", help="change a key (value read as JSON when it "
                                                  "parses); repeatable")

    plan = sub.add_parser("plan", help="inspect plans")
    plan_sub = plan.add_commands("plan_command", "what to do with plans")
    diff = plan_sub.add_parser("diff", help="show what changed from plan A to plan B")
    diff.add_argument("a", type=Path, metavar="A", help="the earlier plan file")
    diff.add_argument("b", type=Path, metavar="B", help="the later plan file")
    check = plan_sub.add_parser("check", help="validate a plan; list every problem with its "
                                              "field path")
    check.add_argument("path", type=Path, metavar="PATH", help="plan file to validate")
    plan_sub.add_parser("schema", help="print the plan's JSON Schema")

    verify = sub.add_parser("verify", help="re-check a run folder or record: hashes, "
                                           "checkpoints, summary, counts, raw rows")
    verify.add_argument("run", type=Path, nargs="?", metavar="RUN",
                        help="run folder or record (default: the bundled teaching run)")
    verify.add_argument("--expect", metavar="FINGERPRINT",
                        help="the run fingerprint noted when it finished; any change to any "
                             "file of the run then fails, even with its inner hashes rewritten")

    reproduce = sub.add_parser("reproduce", help="re-run a record's plan and compare every "
                                                 "row with the record")
    reproduce.add_argument("run", type=Path, nargs="?", metavar="RUN",
                           help="run folder or record (default: the bundled teaching run)")
    reproduce.add_argument("--out-dir", type=Path, required=True,
                           help="new run folder; must not exist")
    reproduce.add_argument("--workers", type=int, default=None,
                           help="worker processes (default: number of cores)")
    reproduce.add_argument("--quiet", action="store_true", help="print no progress")
    reproduce.add_argument("--cpu-path", metavar="PATH",
                           help="CPU code path to train on (default: the one the record was "
                                "made on; another one compares across code paths)")
    reproduce.add_argument("--allow-large", action="store_true",
                           help="train even if the plan's estimated cost is over the limits")
    reproduce.add_argument("--device", choices=DEVICE_CHOICES,
                           help="device to train on (default: the record's; refused before "
                                "training if this machine lacks it)")

    report = sub.add_parser("report", help="read a record and print the held-out report; "
                                           "trains nothing")
    report.add_argument("run", type=Path, nargs="?", metavar="RUN",
                        help="run folder or record file (same as --record)")
    report.add_argument("--plan", type=Path, help="plan file (default: plan.json beside the "
                                                  "record, else the teaching plan)")
    report.add_argument("--record", type=Path, help="record file or run folder (default: "
                                                    "the record bundled with postlab)")
    report.add_argument("--lang", choices=LANGS, help="output language (default: from locale)")
    report.add_argument("--contract", dest="contracts", action="append", default=[],
                        metavar="NAME", help="also re-score the stored outputs under this "
                                             "contract (repeatable); the record is unchanged")
    report.add_argument("--format", dest="format_", default="text",
                        choices=("text", "table", "json", "markdown"),
                        help="text: the reference layout (default); table: aggregates over "
                             "seeds with intervals, pass@k and dynamics as terminal tables; "
                             "json: the same data (docs/report-json.md); markdown")
    report.add_argument("--html", type=Path, metavar="FILE",
                        help="also write one self-contained HTML page with tables and figures "
                             "(never overwrites)")
    report.add_argument("--split", default="test",
                        help="split for the re-scoring table, or 'all' (default: test)")

    compare = sub.add_parser("compare", help="compare plan versions (a sweep, or run "
                                             "folders) by seed: means and paired differences")
    compare.add_argument("runs", type=Path, nargs="+", metavar="RUN_OR_SWEEP",
                         help="a sweep folder (its base version first), or run folders (the "
                              "first is the base)")
    compare.add_argument("--format", dest="format_", default="text",
                         choices=("text", "json", "markdown"), help="output (default: text)")
    compare.add_argument("--html", type=Path, metavar="FILE",
                         help="also write one self-contained HTML page with tables and figures "
                              "(never overwrites)")
    compare.add_argument("--lang", choices=LANGS, help="output language (default: from locale)")
    compare.add_argument("--split", default=None,
                         help="held-out split the tables show (default: every held-out split; "
                              "figures show test)")

    run = sub.add_parser("run", help="train every seed and arm of a plan into a new folder")
    run.add_argument("--plan", type=Path, help="plan file (default: the teaching plan)")
    run.add_argument("--out-dir", type=Path, required=True,
                     help="run folder; must not exist unless --resume")
    run.add_argument("--workers", type=int, default=None,
                     help="worker processes (default: number of cores); results do not "
                          "depend on it")
    run.add_argument("--resume", action="store_true",
                     help="complete an interrupted run in --out-dir, keeping finished seeds")
    run.add_argument("--quiet", action="store_true", help="print nothing while training")
    run.add_argument("--cpu-path", metavar="PATH",
                     help="CPU code path that decides the bits: portable (default: the widest "
                          "path every current server of this architecture runs, avx2 on "
                          "x86-64), native (this machine's best, not pinned), or a path name "
                          "(default, avx2, avx512); with --resume, default: the run's own")
    run.add_argument("--allow-large", action="store_true",
                     help="train even if the plan's estimated cost is over the limits")
    run.add_argument("--device", choices=DEVICE_CHOICES,
                     help="cpu (default; with --resume, the run's own), cuda, or auto (cuda "
                          "where torch finds it, else cpu); recorded. CUDA runs one worker")
    run.add_argument("--engine", choices=ENGINES, default="exact",
                     help="exact (default): one model per task, the reference's bits; "
                          "ensemble: every seed and arm as one batched computation with "
                          "counter-based randomness (same distribution, other bits; gru "
                          "and transformer policies); recorded, and --resume must use the "
                          "same")
    run.add_argument("--log", action="append", choices=_logger_names(), metavar="LOGGER",
                     help="also write per-step training scalars while training, under "
                          "OUT_DIR/logs/LOGGER: tensorboard (needs the tensorboard extra); "
                          "changes no result and is not recorded")

    sweep = sub.add_parser("sweep", help="train plan versions x seeds from a sweep file, "
                                         "locally or on a Ray cluster")
    sweep.add_argument("sweep_file", type=Path, nargs="?", metavar="SWEEP",
                       help="sweep file (JSON: base, seeds, versions, grid); not needed with "
                            "--resume")
    sweep.add_argument("--out-dir", type=Path, required=True,
                       help="sweep folder; must not exist unless --resume")
    sweep.add_argument("--executor", choices=("local", "processes", "ray"),
                       help="where tasks run: local (one at a time, in this process), "
                            "processes (default with --workers above 1) or ray")
    sweep.add_argument("--address", help="with --executor ray: the cluster's address "
                                         "(HOST:PORT, or auto); default: start a local Ray")
    sweep.add_argument("--workers", type=int, default=None,
                       help="tasks at a time (default: number of cores; with ray: the "
                            "cluster's CPUs); results do not depend on it")
    sweep.add_argument("--resume", action="store_true",
                       help="complete an interrupted sweep in --out-dir, keeping finished seeds")
    sweep.add_argument("--quiet", action="store_true", help="print nothing while training")
    sweep.add_argument("--cpu-path", metavar="PATH",
                       help="CPU code path, as for run (default: portable; with --resume, "
                            "the sweep's own)")
    sweep.add_argument("--allow-large", action="store_true",
                       help="train even if a version's estimated cost is over the limits")
    sweep.add_argument("--device", choices=DEVICE_CHOICES,
                       help="cpu (default), cuda or auto, as for run; on CUDA each task "
                            "takes one GPU")
    sweep.add_argument("--engine", choices=ENGINES, default="exact",
                       help="as for run: exact (default) or ensemble (each version's seeds "
                            "and arms as one batched task)")
    sweep.add_argument("--log", action="append", choices=_logger_names(), metavar="LOGGER",
                       help="per-step training scalars, as for run, in each version's "
                            "folder (VERSION/logs/LOGGER)")

    plot = sub.add_parser("plot", help="write PNG and SVG figures of a run")
    plot.add_argument("run", type=Path, nargs="?", metavar="RUN",
                      help="run folder or record (default: the bundled teaching run)")
    plot.add_argument("--out-dir", type=Path, help="new folder for the figures (default: "
                                                   "RUN/figures; required for the bundled run)")
    plot.add_argument("--lang", choices=LANGS, help="label language (default: from locale)")
    plot.add_argument("--split", default="test", help="split the figures show (default: test)")
    plot.add_argument("--overwrite", action="store_true",
                      help="replace figures an earlier 'postlab plot' wrote in that folder "
                           "(a folder holding anything else is refused; records never are)")

    samples = sub.add_parser("samples", help="show the answers a run recorded: right, gamed "
                                             "(paid by a lenient contract, wrong) or wrong")
    samples.add_argument("run", type=Path, nargs="?", metavar="RUN",
                         help="run folder or record (default: the bundled teaching run)")
    samples.add_argument("--stage", action="append", default=[], metavar="STAGE",
                         help="initial (the SFT model) or an arm's name (repeatable; default: "
                              "every stage)")
    samples.add_argument("--filter", dest="kind", choices=("correct", "gamed", "wrong"),
                         help="only answers of this kind (default: all)")
    samples.add_argument("--split", default=None,
                         help="evaluation split (default: test), or 'rollouts' for the RL "
                              "arms' training rollouts")
    samples.add_argument("--decoding", choices=("greedy", "sampled"),
                         help="evaluation decoding (default: sampled)")
    samples.add_argument("--seed", type=int, action="append", default=[],
                         help="only this seed (repeatable)")
    samples.add_argument("--limit", type=int, default=None,
                         help="distinct answers shown per stage and kind, the commonest first "
                              "(default: 10; 0: all)")
    samples.add_argument("--format", dest="format_", default="text",
                         choices=("text", "jsonl"),
                         help="text: distinct answers with counts; jsonl: every matching "
                              "answer, one JSON object a line")

    export = sub.add_parser("export", help="write a run's or a sweep's raw outputs as tidy "
                                           "tables (Parquet or CSV) into a new folder")
    export.add_argument("run", type=Path, nargs="?", metavar="RUN_OR_SWEEP",
                        help="run folder, record or sweep folder (default: the bundled "
                             "teaching run)")
    export.add_argument("--format", dest="format_", default="parquet",
                        choices=("parquet", "csv"),
                        help="file format of the tables (default: parquet); the columns are "
                             "in docs/export.md and the folder's schema.json")
    export.add_argument("--out-dir", type=Path, required=True,
                        help="new folder for the tables; must not exist")

    exercises = sub.add_parser("exercises", help="compute the worked answers arithmetic can show")
    exercises.add_argument("number", type=int, nargs="?", metavar="N",
                           help="one answer's number (default: every answer)")
    exercises.add_argument("run", type=Path, nargs="?", metavar="RUN",
                           help="for answer 8: a run (default: the bundled one); for answer "
                                "9: a run whose arms are pipelines (e.g. of "
                                "examples/arms-pipelines.json)")
    # Listed from the commands themselves, so --help cannot fall behind them.
    parser.description = (f"RL post-training lab. Commands: {', '.join(sub.choices)}; "
                          "'postlab COMMAND --help' explains each.")
    return parser


def _cmd_freeze(args: argparse.Namespace) -> int:
    import datetime

    from postlab.plan.frozen import derive_plan, freeze, load_plan, teaching_plan_loaded

    if args.parent is None and not args.settings:
        digest = freeze(args.path)
        print(f"froze the teaching plan: {args.path} (sha256 {digest})")
        return 0
    parent = load_plan(args.parent) if args.parent else teaching_plan_loaded()
    if args.path.exists():
        raise UserError(f"{args.path}: already exists; postlab never overwrites an output")
    data = derive_plan(parent, args.settings, datetime.date.today().isoformat())
    digest = freeze(args.path, data)
    print(f"froze plan version {data['version']}: {args.path} (sha256 {digest}); parent "
          f"{parent.sha256[:16]}…, changed {', '.join(data['parent']['changes'])}")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    from postlab.jsonio import parse_json, read_bytes
    from postlab.plan.frozen import load_plan, plan_differences, sha256_hex
    from postlab.plan.schema import json_schema, validate_plan

    if args.plan_command == "schema":
        print(json.dumps(json_schema(), indent=2, ensure_ascii=False))
        return 0
    if args.plan_command == "check":
        raw = read_bytes(args.path, "plan")
        problems = validate_plan(parse_json(raw, str(args.path)))
        if not problems:
            print(f"{args.path}: valid plan (sha256 {sha256_hex(raw)})")
            return 0
        for path, message in problems:
            print(f"{args.path}: {path}: {message}", file=sys.stderr)
        print(f"{args.path}: {len(problems)} problems", file=sys.stderr)
        return 2

    a, b = load_plan(args.a), load_plan(args.b)
    if a.sha256 == b.sha256:
        print(f"identical plans (sha256 {a.sha256})")
        return 0
    parent = b.data.get("parent") or {}
    if parent.get("sha256") == a.sha256:
        print(f"{args.b} is a version of {args.a} (its parent sha256 matches)")
    for line in plan_differences(a.data, b.data):
        print(line)
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from postlab.records.fingerprint import check_expected
    from postlab.records.record import load_record, locate_run

    expect = None if args.expect is None else check_expected(args.expect)
    files = locate_run(args.run)
    record = load_record(files.record)
    # Re-evaluation recomputes bits, so it runs on the record's code path where it can.
    note = _pin_for_record(record, None, strict=False)
    if record.get("device") == "cuda":
        from postlab.runs.device import prepare

        prepare("cuda")  # re-evaluates on CUDA where it exists; before CUDA initialises
    from postlab.records.verify import render_checks, verify_run

    sys.stdout.write(f"{note}\n")
    checks = verify_run(files, record, expect=expect)
    text, code = render_checks(checks)
    sys.stdout.write(text)
    return code


def _pin_for_record(record: dict, choice: str | None, *, strict: bool) -> str:
    """Pin the code path a record was made on (or ``choice``); return a line saying which.

    With ``strict``, a path this machine cannot run is an error naming what the record needs
    and what the machine has; without, the machine's portable path is used and said.
    """
    from postlab.runs import numerics

    if choice is not None:
        name = numerics.resolve_choice(choice)
        numerics.pin(name)
        return f"code path: {_describe_path(name)} (chosen with --cpu-path)"
    recorded = record.get("numerics")
    name = numerics.recorded_path(recorded)
    if name is not None:
        why = numerics.cannot_run(name)
        if why is None:
            numerics.pin(name)
            return f"code path: {_describe_path(name)} (the record's, pinned)"
        message = (f"the record was made on CPU code path {name} and {why}; this machine can "
                   f"run {numerics.describe_supported()}")
        if strict:
            raise UserError(f"{message}. Reproduce it on a machine that runs {name}, or pass "
                            "--cpu-path to compare across code paths (bits may then differ)")
        fallback = numerics.resolve_choice(numerics.PORTABLE)
        numerics.pin(fallback)
        return f"code path: {_describe_path(fallback)} ({message})"
    if isinstance(recorded, dict):
        try:
            settings = numerics.pin_native_like(recorded)
        except UserError as exc:
            if strict:
                raise
            fallback = numerics.resolve_choice(numerics.PORTABLE)
            numerics.pin(fallback)
            return f"code path: {_describe_path(fallback)} ({exc})"
        shown = " ".join(f"{k}={v}" for k, v in settings.items())
        return f"code path: the record's native settings, pinned ({shown})"
    fallback = numerics.resolve_choice(numerics.PORTABLE)
    numerics.pin(fallback)
    return (f"code path: {_describe_path(fallback)} (the record names none; records made "
            "before postlab recorded it were made unpinned)")


def _describe_path(name: str | None) -> str:
    from postlab.runs import numerics

    if name is None:
        return "native (nothing pinned: this machine's libraries choose their kernels)"
    settings = " ".join(f"{k}={v}" for k, v in numerics.CODE_PATHS[name].environment.items())
    return f"{name} ({settings})"


def _check_cpu_path(choice: str | None) -> None:
    """Refuse an unknown ``--cpu-path`` before anything runs, naming the closest path."""
    from postlab.runs import numerics

    known = [numerics.PORTABLE, numerics.NATIVE, *numerics.CODE_PATHS.names()]
    if choice is not None and choice not in known:
        raise UserError(f"--cpu-path {choice}: unknown{did_you_mean(choice, known)}; "
                        f"choose one of {', '.join(known)}")


def _cmd_reproduce(args: argparse.Namespace) -> int:
    _check_cpu_path(args.cpu_path)
    from postlab.plan.frozen import load_plan, plan_bytes, teaching_plan, teaching_plan_loaded
    from postlab.records.compare import compare_records, render_comparison
    from postlab.records.record import check_plan_link, load_record, locate_run

    files = locate_run(args.run)
    record = load_record(files.record)
    # Before torch loads: the record's code path, or a clear refusal before training.
    note = _pin_for_record(record, args.cpu_path, strict=True)
    device = _device_for_record(record, args.device)
    how = "chosen with --device" if args.device else "the record's"
    print(f"{note}; device: {device} ({how})", flush=True)
    workers = _workers(args, device)
    if files.plan.is_file():
        plan = load_plan(files.plan)
        raw = plan.raw
    else:
        plan, raw = teaching_plan_loaded(), plan_bytes(teaching_plan())
    check_plan_link(record, plan, str(files.record))
    _check_size(plan, args)
    engine = record.get("engine", "exact")  # the record's engine makes its bits
    _check_engine(engine, plan.data, str(files.record))
    fresh = _train(plan, raw, args, workers, device=device, engine=engine)
    result = compare_records(record, fresh)
    sys.stdout.write(render_comparison(result))
    if not result.identical:
        sys.stdout.write(_environment_hint(record, fresh))
    return 0 if result.identical else 1


def _environment_hint(recorded: dict, fresh: dict) -> str:
    """Why the bits may differ: each difference of what decides them, or none."""
    from postlab.runs import numerics

    then, now = recorded.get("numerics"), fresh.get("numerics")
    if not isinstance(then, dict) or not isinstance(now, dict):
        return ("  the record names no numeric environment, so a different CPU code path "
                "or BLAS may explain the difference\n")
    deciding, _ = numerics.differences(then, now)
    versions = [f"{key} {recorded.get(key)} then, {fresh.get(key)} now"
                for key in ("torch", "python") if recorded.get(key) != fresh.get(key)]
    if deciding or versions:
        return f"  what decides the bits differs: {'; '.join(versions + deciding)}\n"
    return ("  the numeric environment is the same (code path, BLAS, threads, torch), so the "
            "difference is in the record or the code, not the machine\n")


def _check_size(plan, args: argparse.Namespace, quiet: bool = False):
    """Print the plan's estimated cost; refuse one over the limits unless confirmed."""
    from postlab.runs.estimate import check_size, render_estimate

    estimate = check_size(plan.data, args.allow_large)
    if not (args.quiet or quiet):
        print(render_estimate(estimate), flush=True)
    return estimate


def _resolve_plan(plan_path: Path | None, record_path: Path):
    from postlab.plan.frozen import load_plan, teaching_plan_loaded

    if plan_path is not None:
        return load_plan(plan_path)
    beside = record_path.parent / "plan.json"
    if beside.is_file():
        return load_plan(beside)
    return teaching_plan_loaded()


def _cmd_report(args: argparse.Namespace) -> int:
    from postlab.records.record import check_plan_link, load_record, locate_run, reading_problems
    from postlab.render.text import build_report, render_text
    from postlab.sweeps.folder import is_sweep
    from postlab.tasks.contracts import CONTRACTS

    if args.run is not None and is_sweep(args.run):
        # A sweep's report is its comparison of versions.
        if args.contracts or args.plan is not None or args.record is not None:
            raise UserError(f"{args.run} is a sweep folder; its report is 'postlab compare' "
                            "(--contract, --plan and --record are for one run)")
        compare_args = argparse.Namespace(
            runs=[args.run], html=args.html, lang=args.lang, split=None,
            format_="text" if args.format_ == "table" else args.format_)
        return _cmd_compare(compare_args)
    # Every argument is checked before anything is printed or written.
    if args.run is not None and args.record is not None:
        raise UserError("give the run either as RUN or as --record, not both")
    for name in args.contracts:
        if name not in CONTRACTS:
            raise UserError(f"--contract {name}: unknown{did_you_mean(name, CONTRACTS.names())}"
                            f"; known: {', '.join(sorted(CONTRACTS.names()))}")
    if args.html is not None and args.html.exists():
        raise UserError(f"{args.html}: already exists; postlab never overwrites an output")
    if args.split == "all" and (args.format_ != "text" or args.html is not None):
        raise UserError("--split all is for re-scoring only; tables and figures show one split")
    record_path = locate_run(args.run or args.record).record
    record = load_record(record_path)
    if args.html is not None:
        # The page shows the run's verification, which re-evaluates checkpoints: on the
        # record's code path, chosen before anything loads torch.
        _pin_for_record(record, None, strict=False)
    plan = _resolve_plan(args.plan, record_path)
    check_plan_link(record, plan, str(record_path))
    if args.split != "all":
        _check_split(record, plan, args.split, record_path)
    _check_fits(reading_problems(record, plan.data), record_path)
    _check_unchanged(record, record_path)
    report = build_report(record, plan.data)
    lang = args.lang or default_lang()
    if args.format_ == "text":
        sys.stdout.write(render_text(report, lang))
        if plan.data.get("hypotheses"):
            sys.stdout.write(_verdict_lines(record, plan, lang, record_path))
    if args.format_ != "text" or args.html is not None:
        _rich_report(args, record, plan, lang, record_path)
    if args.contracts:
        from postlab.plan.arms import rl_contracts
        from postlab.records.rescore import render_rescore, rescore
        from postlab.tasks.arithmetic import answer_function

        contracts = list(dict.fromkeys(args.contracts))
        split = None if args.split == "all" else args.split
        result = rescore(record, rl_contracts(plan.data), contracts, split,
                         answer_function(plan.data))
        sys.stdout.write("\n" + render_rescore(result, lang))
    return 0


def _verdict_lines(record, plan, lang: str, source: Path) -> str:
    """The plan's hypotheses and their verdicts, after the reference layout (which has none)."""
    from postlab.render.tables import hypothesis_table

    table = hypothesis_table(_analysis(record, plan, "test", source), lang)
    if table is None:
        return "\n(hypotheses need at least two completed seeds to be decided)\n"
    lines = ["", table.title]
    for row in table.rows:
        ident, statement, claim, _, numbers, level, verdict = row
        lines.append(f"{ident}: {verdict.upper()} — {statement}")
        lines.append(f"    {claim}; {numbers} at level {level}")
    return "\n".join(lines) + "\n"


def _check_split(record, plan, split: str, source: Path) -> None:
    """The split must be one of the plan's, and every stage of the record must hold it."""
    if split not in plan.data["split"]:
        raise UserError(f"--split {split}: the plan's splits are "
                        f"{', '.join(plan.data['split'])}")
    for run in record["runs"]:
        for stage, splits in run["evaluations"].items():
            if split not in splits:
                raise UserError(f"{source}: seed {run['seed']}, stage {stage} has no "
                                f"{split!r} split")


def _analysis(record, plan, split: str, source: Path):
    from postlab.analysis.aggregate import analyse
    from postlab.records.record import record_plan_problems

    _check_split(record, plan, split, source)
    _require_report_extra()
    _check_fits(record_plan_problems(record, plan.data), source)
    return analyse(record, plan.data)


def _check_unchanged(record, source: Path) -> None:
    """A report shows only numbers whose rows still match the digests taken in training."""
    from postlab.records.record import changed_parts

    changed = changed_parts(record)
    if changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise UserError(f"{source}: changed since it was recorded: {changed[0]}{more}; "
                        "'postlab verify' shows every check")


def _check_fits(problems: list[str], source: Path) -> None:
    """A record that does not fit its plan is bad input, found before anything is computed."""
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"{source}: record does not fit the plan: {problems[0]}{more}")


def _require_report_extra() -> None:
    import importlib.util

    missing = [m for m in ("matplotlib", "scipy") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"this report needs {', '.join(missing)}: "
                        "pip install 'postlab[report]'")


def _rich_report(args: argparse.Namespace, record, plan, lang: str, source: Path) -> None:
    from postlab.jsonio import publish_bytes
    from postlab.render.tables import to_json, to_markdown, to_terminal

    analysis = _analysis(record, plan, args.split, source)
    if args.format_ == "json":
        sys.stdout.write(to_json(analysis))
    elif args.format_ == "markdown":
        sys.stdout.write(to_markdown(analysis, lang, args.split,
                                     _finding_lines(record, plan, analysis, lang, args.split)))
    elif args.format_ == "table":
        to_terminal(analysis, lang, args.split,
                    _finding_lines(record, plan, analysis, lang, args.split))
    if args.html is not None:
        from postlab.render.html import render_html

        figures, screen = _report_page_parts(record, plan, analysis, lang, args.split, source)
        page = render_html(analysis, figures, lang, args.split, screen)
        publish_bytes(args.html, page.encode())
        print(f"wrote {args.html}", file=sys.stderr)


def _finding_lines(record, plan, analysis, lang: str, split: str) -> list[str]:
    from postlab.analysis.findings import findings
    from postlab.render.sentences import sentence

    return [sentence(f, lang) for f in findings(analysis, record, plan.data, split)]


def _report_page_parts(record, plan, analysis, lang: str, split: str, source: Path):
    """The figures and first screen of a run's HTML page (verification included)."""
    from datetime import UTC, datetime

    from postlab.analysis.samples import pair_grids, stage_examples
    from postlab.records.record import locate_run
    from postlab.records.verify import verify_run
    from postlab.render.figures import draw_figures
    from postlab.render.html import FirstScreen
    from postlab.render.overview import overview_rows, verification_line

    notices = _figure_notices(lang)
    figures = draw_figures(analysis, lang, split, pair_grids(record, plan.data))
    # A record in a run folder is verified as 'postlab verify' would; a record alone (no
    # plan.json beside it) has no checkpoints or summary to check, so it is not marked failed.
    beside = source.parent / "plan.json"
    checks = verify_run(locate_run(source), record) if beside.is_file() else None
    verification, verified = verification_line(checks, lang)
    written = datetime.fromtimestamp(source.stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC")
    screen = FirstScreen(
        facts=overview_rows(plan.data, record, written, lang), verification=verification,
        verified=verified,
        findings=_finding_lines(record, plan, analysis, lang, split),
        answers=stage_examples(record, plan.data, split, per_kind=3), notices=notices)
    return figures, screen


def _figure_notices(lang: str) -> list[str]:
    """One line, printed and shown on the page, when figures cannot use the language."""
    from postlab.render.figures import figure_language
    from postlab.render.labels import FIGURE_WORDS

    if figure_language(lang)[0] == lang:
        return []
    notice = FIGURE_WORDS[lang]["cjk_missing"]
    print(notice, file=sys.stderr)
    return [notice]


def _publish_folder(out: Path, files: dict[str, bytes]) -> None:
    """Write a folder of files aside, then rename it into place: all of it or nothing."""
    import shutil
    import tempfile

    from postlab.jsonio import publish_bytes

    parent = out.parent
    if not parent.is_dir():
        raise UserError(f"{out}: folder {parent} does not exist")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=parent))
    except OSError as exc:
        raise UserError(f"{out}: cannot create: {exc.strerror}") from None
    try:
        for name, data in files.items():
            publish_bytes(staging / name, data)
        staging.chmod(0o755)
        try:
            os.rename(staging, out)  # fails if out appeared meanwhile (and is not empty)
        except OSError as exc:
            raise UserError(f"{out}: cannot create: {exc.strerror}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _cmd_plot(args: argparse.Namespace) -> int:
    from postlab.analysis.samples import pair_grids
    from postlab.records.record import check_plan_link, load_record, locate_run
    from postlab.render.figures import FIGURE_NAMES, draw_figures

    if args.run is None and args.out_dir is None:
        raise UserError("--out-dir is required when plotting the bundled run")
    files = locate_run(args.run)
    record = load_record(files.record)
    plan = _resolve_plan(None, files.record)
    check_plan_link(record, plan, str(files.record))
    _check_unchanged(record, files.record)
    out = args.out_dir or files.record.parent / "figures"
    replace = out.exists() or out.is_symlink()
    if replace:
        if not args.overwrite:
            raise UserError(f"{out}: already exists; postlab never overwrites an output "
                            "(--overwrite replaces figures an earlier plot wrote)")
        _check_only_figures(out, FIGURE_NAMES)
    analysis = _analysis(record, plan, args.split, files.record)
    lang = args.lang or default_lang()
    _figure_notices(lang)
    figures = draw_figures(analysis, lang, args.split, pair_grids(record, plan.data))
    contents = {f"{f.name}.{ext}": getattr(f, ext) for f in figures for ext in ("png", "svg")}
    if replace:
        _replace_folder(out, contents, FIGURE_NAMES)
    else:
        _publish_folder(out, contents)
    print(f"wrote {2 * len(figures)} figures to {out}")
    return 0


def _check_only_figures(folder: Path, names: frozenset[str]) -> None:
    """--overwrite replaces only what plot itself writes: a folder of its figure files."""
    if folder.is_symlink() or not folder.is_dir():
        raise UserError(f"{folder}: not a folder of figures; --overwrite replaces only "
                        "figures an earlier 'postlab plot' wrote")
    others = sorted(entry.name for entry in folder.iterdir()
                    if not (entry.is_file() and not entry.is_symlink()
                            and entry.suffix in (".png", ".svg") and entry.stem in names))
    if others:
        more = f" (and {len(others) - 1} more)" if len(others) > 1 else ""
        raise UserError(f"{folder}: holds {others[0]}{more}, which plot did not write; "
                        "--overwrite replaces only figure folders")


def _replace_folder(out: Path, files: dict[str, bytes], names: frozenset[str]) -> None:
    """Write the new folder aside, then swap it in. The old one is removed after, file by file
    and only its figures: anything that appeared there meanwhile is kept, and said."""
    import tempfile

    try:
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
    except OSError as exc:
        raise UserError(f"{out}: cannot replace: {exc.strerror}") from None
    aside.rmdir()  # only its unique name is wanted; the old folder is renamed to it
    staged = out.parent / f"{aside.name.removesuffix('.old')}.new"
    _publish_folder(staged, files)
    try:
        os.rename(out, aside)
    except OSError as exc:
        _remove_figures(staged, frozenset(f.removesuffix(".png").removesuffix(".svg")
                                          for f in files))
        raise UserError(f"{out}: cannot replace: {exc.strerror}") from None
    try:
        os.rename(staged, out)
    except OSError as exc:
        os.rename(aside, out)  # put the earlier figures back
        raise UserError(f"{out}: cannot replace: {exc.strerror}") from None
    if not _remove_figures(aside, names):
        print(f"{aside}: files other than figures appeared during the replacement; kept "
              "there", file=sys.stderr)


def _remove_figures(folder: Path, names: frozenset[str]) -> bool:
    """Remove a folder's figure files, then the folder if nothing else is left in it."""
    for entry in folder.iterdir():
        if entry.is_file() and not entry.is_symlink() and entry.suffix in (".png", ".svg") \
                and entry.stem in names:
            entry.unlink()
    try:
        folder.rmdir()
    except OSError:
        return False
    return True


def _cmd_export(args: argparse.Namespace) -> int:
    """Tidy tables of a run or of every version of a sweep, published as one new folder."""
    from postlab.export.files import export_files
    from postlab.export.loaded import LoadedRun, load_run, load_sweep, require_arrow
    from postlab.sweeps.folder import is_sweep

    out = args.out_dir
    if out.exists() or out.is_symlink():
        raise UserError(f"{out}: already exists; postlab never overwrites an output")
    if not out.parent.is_dir():
        raise UserError(f"{out}: folder {out.parent} does not exist")
    require_arrow()
    if args.run is not None and is_sweep(args.run):
        runs, left_out = load_sweep(args.run)
        for name in left_out:
            print(f"{name}: no completed seed yet; left out", file=sys.stderr)
        chosen: list[tuple[str | None, LoadedRun]] = list(runs)
    else:
        chosen = [(None, load_run(args.run))]
    files = export_files(chosen, args.format_)
    _publish_folder(out, files)
    tables = len(files) - 1
    print(f"wrote {tables} {args.format_} tables and schema.json to {out}")
    return 0


def _cmd_samples(args: argparse.Namespace) -> int:
    import json

    from postlab.analysis.samples import iter_samples
    from postlab.records.record import check_plan_link, load_record, locate_run
    from postlab.render.answers import samples_text
    from postlab.tasks.arithmetic import plan_contracts

    if args.limit is not None and args.limit < 0:
        raise UserError(f"--limit {args.limit}: must be 0 (all) or more")
    if args.limit is not None and args.format_ == "jsonl":
        raise UserError("--limit is for the text format; jsonl prints every matching answer")
    if args.decoding is not None and args.split == "rollouts":
        raise UserError("--decoding is for evaluation splits; training rollouts are sampled")
    files = locate_run(args.run)
    record = load_record(files.record)
    plan = _resolve_plan(None, files.record)
    check_plan_link(record, plan, str(files.record))
    _check_unchanged(record, files.record)
    rollouts = args.split == "rollouts"
    split = None if rollouts else (args.split or "test")
    if split is not None:
        _check_split(record, plan, split, files.record)
    stages = list(record["runs"][0]["evaluations"]) if record["runs"] else []
    arms = [s for s in stages if any(s in run.get("training", {}) for run in record["runs"])]
    known = arms if rollouts else stages
    for stage in args.stage:
        if stage not in known:
            what = "RL arms with rollouts" if rollouts else "stages"
            raise UserError(f"--stage {stage}: the run's {what} are {', '.join(known) or 'none'}")
    seeds = [run["seed"] for run in record["runs"]]
    for seed in args.seed:
        if seed not in seeds:
            raise UserError(f"--seed {seed}: the run's seeds are {', '.join(map(str, seeds))}")
    contracts = plan_contracts(plan.data)
    if args.kind == "gamed" and len(contracts) < 2:
        raise UserError(f"--filter gamed: this plan's task is judged by one contract "
                        f"({contracts[0]}), so no answer can be paid and wrong")
    chosen = iter_samples(record, plan.data, stages=args.stage or None, split=split,
                          decoding=None if rollouts else args.decoding or "sampled",
                          kinds=None if args.kind is None else [args.kind],
                          seeds=args.seed or None, rollouts=rollouts)
    if args.format_ == "jsonl":
        for sample in chosen:
            sys.stdout.write(json.dumps(dataclasses.asdict(sample)) + "\n")
        return 0
    where = ("training rollouts" if rollouts
             else f"{split} split, {args.decoding or 'sampled'}")
    limit = 10 if args.limit is None else (None if args.limit == 0 else args.limit)
    sys.stdout.write(samples_text(chosen, known, where, limit))
    return 0


def _cmd_exercises(args: argparse.Namespace) -> int:
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
    from postlab.records.record import bundled_run_dir, check_plan_link, load_record, locate_run

    found = locate_run(args.run if args.run is not None else bundled_run_dir())
    record = load_record(found.record)
    plan = _resolve_plan(None, found.record)
    check_plan_link(record, plan, str(found.record))
    _check_unchanged(record, found.record)
    _require_report_extra()
    exercise = RUN_EXERCISES[args.number](record, plan.data, found.record.parent)
    print(f"answer {exercise.number}: {exercise.title}")
    for line in exercise.lines:
        print(f"  {line}")
    return 0


class _Stopped(Exception):
    """Training stopped early; the message was printed and completed seeds were kept."""

    def __init__(self, code: int) -> None:
        self.code = code


def _workers(args: argparse.Namespace, device: str = "cpu") -> int:
    """The worker count; with more than one, the workers' server starts now, importing torch
    while this process does the same.

    On CUDA a run has one worker: processes sharing one GPU would split its memory and gain
    little on models this size, and one process keeps the GPU's state in one place.
    """
    from postlab.runs.workers import default_workers, start_worker_server

    if device == "cuda":
        if args.workers is not None and args.workers > 1:
            raise UserError(f"--workers {args.workers} with device cuda: a CUDA run trains "
                            "in one process; leave --workers out or set it to 1")
        workers = 1 if args.workers is None else args.workers
    else:
        workers = args.workers if args.workers is not None else default_workers()
    if workers < 1:
        raise UserError(f"--workers must be at least 1, got {workers}")
    if workers > 1:
        start_worker_server()
    return workers


def _logger_names() -> list[str]:
    """The step loggers --log accepts; the registry's module loads no torch."""
    from postlab.runs.steplog import LOGGERS

    return LOGGERS.names()


def _loggers(args: argparse.Namespace) -> tuple[str, ...]:
    """The --log names, each once; a missing package is refused before anything is written."""
    from postlab.runs.steplog import check_loggers

    names = tuple(dict.fromkeys(args.log or ()))
    check_loggers(names)
    return names


def _check_engine(engine: str, plan: dict, what: str, log: tuple[str, ...] = ()) -> None:
    """A plan the chosen engine cannot train is refused before anything is written."""
    if engine == "exact":
        return
    if log:
        raise UserError(f"--log {log[0]}: the ensemble engine writes no live logs yet (its "
                        "members train as one computation); use --engine exact to watch "
                        "training, or read the finished run's dynamics in its report")
    from postlab.engines.ensemble.task import problems

    found = problems(plan)
    if found:
        raise UserError(f"{what}: the ensemble engine cannot train {found[0]}")


def _train(plan, raw: bytes | None, args: argparse.Namespace, workers: int,
           resume: bool = False, device: str = "cpu", log: tuple[str, ...] = (),
           engine: str = "exact"):
    """Run a plan with the command's --out-dir, --workers and --quiet; report stops."""
    from postlab.engines.train import NonFiniteError
    from postlab.runs.orchestration import RunFailed, RunOptions, run_plan
    from postlab.runs.progress import PLAIN_EVERY, Live, make_display

    display = make_display(args.quiet)
    every = 0 if args.quiet else (1 if isinstance(display, Live) else PLAIN_EVERY)
    options = RunOptions(out_dir=args.out_dir, workers=workers, resume=resume,
                         progress_every=every, display=display, device=device, log=log,
                         engine=engine)
    try:
        return run_plan(plan, raw, options)
    except (NonFiniteError, RunFailed) as exc:
        display.close()
        print(f"postlab: training stopped: {exc}; completed seeds are kept in "
              f"{args.out_dir} (continue with --resume)", file=sys.stderr)
        raise _Stopped(1) from None
    except KeyboardInterrupt:
        display.close()
        print(f"postlab: interrupted; completed seeds are kept in {args.out_dir} "
              "(continue with --resume)", file=sys.stderr)
        raise _Stopped(130) from None
    finally:
        display.close()


def _cmd_run(args: argparse.Namespace) -> int:
    log = _loggers(args)
    _check_cpu_path(args.cpu_path)
    note = _pin_for_run(args)  # before torch loads, here and in the workers' server
    device, device_note = _device_for_run(args)
    workers = _workers(args, device)
    from postlab.plan.frozen import (
        load_plan,
        parse_plan,
        plan_bytes,
        teaching_plan,
        teaching_plan_loaded,
    )
    from postlab.records.fingerprint import read_fingerprint_file

    if args.plan is not None:
        plan = load_plan(args.plan)
        raw = plan.raw
    elif args.resume:
        plan, raw = None, None
    else:
        plan, raw = teaching_plan_loaded(), plan_bytes(teaching_plan())
    if not args.quiet:
        print(note, flush=True)
        print(device_note, flush=True)
    sized = plan
    if sized is None and (args.out_dir / "plan.json").is_file():
        from postlab.jsonio import read_bytes

        path = args.out_dir / "plan.json"
        sized = parse_plan(read_bytes(path, "plan"), str(path), path)
    if sized is not None:
        _check_engine(args.engine, sized.data, str(args.plan or "the teaching plan"), log)
        _check_size(sized, args)
    start = time.monotonic()
    _train(plan, raw, args, workers, resume=args.resume, device=device, log=log,
           engine=args.engine)
    if not args.quiet:
        print(f"done: {args.out_dir} in {time.monotonic() - start:.1f} s")
        print(f"fingerprint: {read_fingerprint_file(args.out_dir)} (note it; "
              f"'postlab verify {args.out_dir} --expect FINGERPRINT' checks every file "
              "against it)")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from postlab.sweeps.folder import is_sweep, read_index

    if args.html is not None and args.html.exists():
        raise UserError(f"{args.html}: already exists; postlab never overwrites an output")
    folders: list[tuple[str, Path, dict | None]] = []
    for path in args.runs:
        if not is_sweep(path):
            folders.append((path.name, path, None))
            continue
        versions = read_index(path)[1]
        if not (path / versions[0].name / "record.json").is_file():
            raise UserError(f"{path}: the base version has no completed seed yet; finish the "
                            "sweep with 'postlab sweep --resume'")
        for version in versions:
            if (path / version.name / "record.json").is_file():
                folders.append((version.name, path / version.name, version.changes))
            else:
                print(f"postlab: {path / version.name}: no completed seed yet; left out",
                      file=sys.stderr)
    names = [name for name, _, _ in folders]
    if len(folders) < 2:
        raise UserError("compare needs at least two versions: a sweep folder, or two or more "
                        "run folders")
    if len(set(names)) != len(names):
        raise UserError(f"two versions are named alike ({', '.join(names)}); give folders "
                        "with distinct names")
    _require_report_extra()
    from postlab.analysis.versions import VersionInput, compare
    from postlab.records.record import check_plan_link, load_record, locate_run
    from postlab.render import comparison as render

    inputs = []
    base_plan = None
    held_out = None
    for name, folder, changes in folders:
        record_path = locate_run(folder).record
        record = load_record(record_path)
        plan = _resolve_plan(None, record_path)
        check_plan_link(record, plan, str(record_path))
        _check_unchanged(record, record_path)
        splits = [s for s in plan.data["split"] if s != "train"]
        if args.split is not None and args.split not in splits:
            raise UserError(f"--split {args.split}: {record_path.parent} has held-out splits "
                            f"{', '.join(splits)}")
        analysis = _analysis(record, plan, args.split or splits[-1], record_path)
        if base_plan is None:
            base_plan, held_out = plan.data, splits
        if changes is None:
            changes = _plan_changes(base_plan, plan.data)
        inputs.append(VersionInput(name=name, changes=changes, analysis=analysis,
                                   plan=plan.data))
    result = compare(inputs, held_out or ("test",))
    lang = args.lang or default_lang()
    if args.format_ == "json":
        sys.stdout.write(render.to_json(result))
    elif args.format_ == "markdown":
        sys.stdout.write(render.to_markdown(result, lang, args.split))
    else:
        sys.stdout.write(render.to_text(result, lang, args.split))
    if args.html is not None:
        from postlab.jsonio import publish_bytes

        figure_split = args.split or ("test" if "test" in (held_out or ()) else held_out[-1])
        figures = render.draw_figures(result, lang, figure_split)
        publish_bytes(args.html, render.render_html(result, figures, lang, args.split).encode())
    return 0


def _plan_changes(base: dict, plan: dict) -> dict:
    """The keys a plan sets differently from the base (the automatic ones left out)."""
    skip = {"version", "date", "parent"}
    return {key: plan.get(key) for key in sorted(base.keys() | plan.keys())
            if key not in skip and base.get(key) != plan.get(key)}


def _cmd_sweep(args: argparse.Namespace) -> int:
    import datetime

    from postlab.sweeps import folder

    if args.sweep_file is None and not args.resume:
        raise UserError("postlab sweep needs a sweep file (or --resume with --out-dir)")
    if args.address is not None and args.executor != "ray":
        raise UserError("--address is for --executor ray")
    log = _loggers(args)
    _check_cpu_path(args.cpu_path)
    # A resumed sweep is computed under the settings of its versions' records or kept tasks
    # (the first version that has any), as a resumed run is.
    started = None
    if args.resume and folder.is_sweep(args.out_dir):
        from postlab.records.record import resume_settings

        started = next((args.out_dir / v.name for v in folder.read_index(args.out_dir)[1]
                        if resume_settings(args.out_dir / v.name) is not None), None)
    if started is not None:
        settings_args = argparse.Namespace(**{**vars(args), "out_dir": started})
    else:
        settings_args = argparse.Namespace(**{**vars(args), "resume": False})
    note = _pin_for_run(settings_args)
    device, device_note = _device_for_run(settings_args)
    from postlab.sweeps import runner

    today = datetime.date.today().isoformat()
    if not args.resume:
        _, versions = runner.load_versions(args.sweep_file, today)  # all refusals come first
        from postlab.plan.frozen import parse_plan

        for version in versions:
            _check_engine(args.engine, version.plan, f"version {version.name}", log)
            estimate = _check_size(parse_plan(version.raw, version.name), args, quiet=True)
        if not args.quiet:
            print(f"{len(versions)} versions: {', '.join(v.name for v in versions)}")
            from postlab.runs.estimate import render_estimate

            print(f"estimate of one version ({versions[-1].name}):\n"
                  f"{render_estimate(estimate)}", flush=True)
    executor = args.executor
    if executor == "ray":
        if args.workers is not None and args.workers < 1:
            raise UserError(f"--workers must be at least 1, got {args.workers}")
        workers = args.workers if args.workers is not None else 0  # 0: the cluster's CPUs
        settings: tuple = (("address", args.address), ("device", device))
    else:
        workers = _workers(args, device)
        executor = executor or None
        settings = ()
    if not args.quiet:
        print(note, flush=True)
        print(device_note, flush=True)
    options = runner.SweepOptions(out_dir=args.out_dir, workers=workers, executor=executor,
                                  executor_settings=settings, resume=args.resume,
                                  device=device, log=log, engine=args.engine)
    start = time.monotonic()
    progress = runner.SweepProgress(0, quiet=args.quiet)
    from postlab.engines.train import NonFiniteError
    from postlab.runs.orchestration import RunFailed

    try:
        results = runner.run_sweep(args.sweep_file, options, today, progress)
    except (NonFiniteError, RunFailed) as exc:
        print(f"postlab: the sweep stopped: {exc}; finished tasks are kept in {args.out_dir} "
              "(continue with --resume)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"postlab: interrupted; finished tasks are kept in {args.out_dir} (continue "
              "with --resume)", file=sys.stderr)
        return 130
    failed = [name for name, record in results.items() if record is None]
    if failed:
        print(f"postlab: {len(failed)} version(s) had failed tasks ({', '.join(failed)}); "
              f"completed seeds are kept in {args.out_dir} (continue with --resume)",
              file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"done: {args.out_dir} ({len(results)} versions) in "
              f"{time.monotonic() - start:.1f} s; compare them with 'postlab compare "
              f"{args.out_dir}'")
    return 0


def _pin_for_run(args: argparse.Namespace) -> str:
    """Pin the code path of a new run, or of the run being resumed (its own by default)."""
    from postlab.runs import numerics

    if args.resume and args.cpu_path is None:
        from postlab.records.record import resume_settings

        settings = resume_settings(args.out_dir)
        if settings is not None:
            return _pin_for_record(settings, None, strict=True)
    name = numerics.resolve_choice(args.cpu_path or numerics.PORTABLE)
    numerics.pin(name)
    how = "chosen with --cpu-path" if args.cpu_path else "portable, the default"
    return f"code path: {_describe_path(name)} ({how})"


def _device_for_run(args: argparse.Namespace) -> tuple[str, str]:
    """The run's device and a line saying how it was chosen; cuda where there is none is
    refused here, before anything is written."""
    from postlab.runs import device

    choice, how = args.device, "chosen with --device"
    if choice is None and args.resume:
        from postlab.records.record import resume_settings

        settings = resume_settings(args.out_dir)
        if settings is not None:
            choice, how = settings.get("device", "cpu"), "the run's own"
    if choice is None:
        choice, how = "cpu", "the default"
    device.prepare(choice)  # before CUDA initialises
    resolved = device.resolve(choice)
    if choice == "auto":
        how = ("auto: torch finds a CUDA device" if resolved == "cuda"
               else "auto: torch finds no CUDA device here")
    return resolved, f"device: {resolved} ({how})"


def _device_for_record(record: dict, choice: str | None) -> str:
    """The device to reproduce a record on: ``choice``, else the record's, which this machine
    must have; refused in one line before training otherwise."""
    from postlab.runs import device

    if choice is not None:
        device.prepare(choice)
        return device.resolve(choice)
    recorded = record.get("device", "cpu")
    device.prepare(recorded)
    if recorded == "cuda" and not device.cuda_available():
        numerics = record.get("numerics")
        gpu = numerics.get("cuda", {}).get("device_name") if isinstance(numerics, dict) else None
        made_on = f"cuda ({gpu})" if gpu else "cuda"
        raise UserError(f"the record was made on {made_on} and torch finds no CUDA device "
                        "here; reproduce it on a machine with CUDA, or pass --device cpu to "
                        "compare across devices (bits may then differ)")
    return device.resolve(recorded)


COMMANDS = {"freeze": _cmd_freeze, "plan": _cmd_plan, "report": _cmd_report,
            "run": _cmd_run, "verify": _cmd_verify, "reproduce": _cmd_reproduce,
            "plot": _cmd_plot, "samples": _cmd_samples, "sweep": _cmd_sweep,
            "compare": _cmd_compare, "exercises": _cmd_exercises, "export": _cmd_export}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except _Stopped as stop:
        return stop.code
    except _UsageError as exc:
        print(exc, file=sys.stderr)  # already begins with the command's name
        return 2
    except UserError as exc:
        print(f"postlab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("postlab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``postlab samples | head``): stop quietly, as shell tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception:
        # Not the user's input: a bug. Show everything needed to fix it, and say so.
        traceback.print_exc()
        print("postlab: this is a bug in postlab, not a problem with your input; please "
              "report it with the traceback above", file=sys.stderr)
        return 1


def entry() -> None:
    sys.exit(main())
