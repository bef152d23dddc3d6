"""The command line's parser: every command, option and its help; errors in one line.

A command line that does not parse is named by the command it concerns and ends with that
command's usage, still on one line; a mistyped name gets the closest known one.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from postlab.api.environment import did_you_mean
from postlab.engines.registry import DEFAULT_ENGINE, ENGINES
from postlab.errors import UserError
from postlab.jsonio import printable
from postlab.version import __version__

LANGS = ("zh", "en")
DEVICE_CHOICES = ("cpu", "cuda", "auto")


def default_lang(environ: dict[str, str] | None = None) -> str:
    """Chinese when the message locale is zh_*, English otherwise."""
    env = os.environ if environ is None else environ
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(var)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def _logger_names() -> list[str]:
    """The step loggers --log accepts; the registry's module loads no torch."""
    from postlab.engines.steplog import LOGGERS

    return LOGGERS.names()


class UsageError(UserError):
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
            options = list(self._option_string_actions)
            hint = did_you_mean(first, options) if first.startswith("-") else ""
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
        raise UsageError(f"{self.prog}: {printable(message)} (usage: {usage})")


# --- options several commands share, each declared once (argparse parent parsers) -------------

def _options(*adders: Callable[[_Parser], object]) -> _Parser:
    """A parent parser holding the options ``adders`` declare."""
    parent = _Parser(add_help=False)
    for add in adders:
        add(parent)
    return parent


def _target(parser: _Parser) -> None:
    parser.add_argument("run", type=Path, nargs="?", metavar="RUN",
                        help="run folder or record (default: the bundled teaching run)")


def _out_dir(what: str, *, required: bool = True) -> Callable[[_Parser], None]:
    """``--out-dir``, the folder a command creates: ``what`` says which, and when it may
    exist already."""
    def add(parser: _Parser) -> None:
        parser.add_argument("--out-dir", type=Path, required=required, help=what)
    return add


def _lang(parser: _Parser) -> None:
    parser.add_argument("--lang", choices=LANGS, help="output language (default: from locale)")


def _html(parser: _Parser) -> None:
    parser.add_argument("--html", type=Path, metavar="FILE",
                        help="also write one self-contained HTML page with tables and figures "
                             "(never overwrites)")


def _training(parser: _Parser) -> None:
    """What every command that trains takes: how many workers, on which code path and
    device, how loudly, and what to do about the cost estimate."""
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes, or tasks at a time (default: POSTLAB_WORKERS, "
                             "else the number of cores; on Ray: the cluster's CPUs); results "
                             "do not depend on it")
    parser.add_argument("--quiet", action="store_true", help="print no progress")
    parser.add_argument("--cpu-path", metavar="PATH",
                        help="CPU code path that decides the bits: portable (the widest path "
                             "every current server of this architecture runs, avx2 on "
                             "x86-64), native (this machine's best, not pinned), or a path "
                             "name (default, avx2, avx512). Default: portable; a resumed run's "
                             "own; a reproduced record's own (another one compares across code "
                             "paths)")
    parser.add_argument("--allow-large", action="store_true",
                        help="train even if the plan's estimated cost is over the limits")
    parser.add_argument("--recalibrate", action="store_true",
                        help="calibrate the cost estimate afresh instead of reusing the "
                             "figures this machine kept for the plan (for up to 12 hours)")
    parser.add_argument("--device", choices=DEVICE_CHOICES,
                        help="cpu, cuda, or auto (cuda where torch finds it, else cpu); "
                             "default: cpu, a resumed run's own, a reproduced record's own; "
                             "refused before training if this machine lacks it; recorded. "
                             "CUDA runs one worker (a sweep: one GPU per task)")


def _engine(parser: _Parser) -> None:
    parser.add_argument("--engine", choices=ENGINES.names(), default=DEFAULT_ENGINE,
                        help=f"{DEFAULT_ENGINE} (default): one model per task, the "
                             "reference's bits; ensemble: every seed and arm (a sweep: each "
                             "version's) as one batched computation with counter-based "
                             "randomness (same distribution, other bits; gru and transformer "
                             "policies); recorded, and --resume must use the same")
    parser.add_argument("--log", action="append", choices=_logger_names(), metavar="LOGGER",
                        help="also write per-step training scalars while training, under "
                             "OUT_DIR/logs/LOGGER (a sweep: VERSION/logs/LOGGER): tensorboard "
                             "(needs the tensorboard extra); changes no result and is not "
                             "recorded")


# --- the commands, in the order ``postlab --help`` lists them -----------------------------------

Commands = argparse._SubParsersAction


def _plans(sub: Commands) -> None:
    freeze = sub.add_parser("freeze", help="write the teaching plan, a new version of a plan, "
                                           "or a draft's complete plan, to PATH (never "
                                           "overwrites)")
    freeze.add_argument("path", type=Path, metavar="PATH",
                        help="plan file to write; must not exist")
    freeze.add_argument("--from", dest="parent", type=Path,
                        help="parent plan of a new version (default: the teaching plan)")
    freeze.add_argument("--set", dest="settings", action="append", default=[],
                        metavar="KEY=VALUE", help="change a key (value read as JSON when it "
                                                  "parses); repeatable")
    freeze.add_argument("--draft", type=Path, help=(
        "a plan without the parts freeze generates: for the reasoning_gym task, its items "
        "are generated and pinned (library version, sha256), and the split (and the vocab, "
        "when the draft has none) written"))
    plan = sub.add_parser("plan", help="inspect plans")
    plan_sub = plan.add_commands("plan_command", "what to do with plans")
    diff = plan_sub.add_parser("diff", help="show what changed from plan A to plan B")
    diff.add_argument("a", type=Path, metavar="A", help="the earlier plan file")
    diff.add_argument("b", type=Path, metavar="B", help="the later plan file")
    check = plan_sub.add_parser("check", help="validate a plan; list every problem with its "
                                              "field path")
    check.add_argument("path", type=Path, metavar="PATH", help="plan file to validate")
    plan_sub.add_parser("schema", help="print the plan's JSON Schema")
    register = sub.add_parser("register", help="fix hypotheses and their margins, with the "
                                               "time, before a run of the plan trains")
    register.add_argument("--plan", type=Path, help="plan the hypotheses are for (default: "
                                                    "the teaching plan)")
    register.add_argument("--hypotheses", type=Path, metavar="FILE", help=(
        "the hypotheses, as a plan's 'hypotheses' section on its own (alpha, tests); "
        "default: the plan's own"))
    register.add_argument("--out", type=Path, required=True, metavar="FILE",
                          help="registration file to write; must not exist. Give it to "
                               "'postlab run --registration'")


def _checking(sub: Commands) -> None:
    verify = sub.add_parser("verify", parents=[_options(_target)],
                            help="re-check a run folder or record: hashes, checkpoints, "
                                 "summary, counts, raw rows")
    verify.add_argument("--expect", metavar="FINGERPRINT",
                        help="the run fingerprint noted when it finished; any change to any "
                             "file of the run then fails, even with its inner hashes rewritten")
    verify.add_argument("--quick", action="store_true",
                        help="every check but re-evaluating the checkpoints (their hashes are "
                             "still checked); the verdict says none was re-evaluated")
    design = sub.add_parser("design", parents=[_options(_target)],
                            help="from a pilot run, the seeds (and samples per question) a "
                                 "study needs to detect a held-out difference, priced; trains "
                                 "nothing")
    design.add_argument("--effect", type=float, required=True, metavar="D",
                        help="the held-out difference to detect (a difference of rates, e.g. "
                             "0.05)")
    design.add_argument("--power", type=float, default=0.8,
                        help="the probability of detecting it (default 0.8)")
    design.add_argument("--alpha", type=float, default=0.05,
                        help="two-sided level of the intervals (default 0.05, as reports use)")
    reproduce = sub.add_parser("reproduce", parents=[_options(
        _target, _out_dir("new run folder; must not exist"), _training)],
        help="re-run a record's plan and compare every row with the record")
    reproduce.add_argument("--seed", dest="seeds", type=int, action="append", default=[],
                           metavar="N", help="reproduce only this seed of the record "
                                             "(repeatable): a spot check of a large run")
    evaluate = sub.add_parser("eval", parents=[_options(_out_dir(
        "also keep the plan and every answer with the figures in this new folder "
        "(evaluation.json)", required=False))],
        help="measure the model a plan starts from (a pretrained model's baseline): held-out "
             "success, coverage and pass@k with intervals; trains nothing")
    evaluate.add_argument("--plan", type=Path, required=True, help="plan file")
    evaluate.add_argument("--format", dest="format_", default="table",
                          choices=("table", "json"),
                          help="table (default), or json: the figures")
    evaluate.add_argument("--cpu-path", metavar="PATH",
                          help="CPU code path, as for run (default: portable)")
    evaluate.add_argument("--device", choices=DEVICE_CHOICES, help="cpu (default), cuda or auto")
    evaluate.add_argument("--quiet", action="store_true", help="print only the figures")


def _reports(sub: Commands) -> None:
    report = sub.add_parser("report", parents=[_options(_lang, _html)],
                            help="read a record and print the held-out report; trains nothing")
    report.add_argument("run", type=Path, nargs="?", metavar="RUN",
                        help="run folder or record file (same as --record)")
    report.add_argument("--plan", type=Path, help="plan file (default: plan.json beside the "
                                                  "record, else the teaching plan)")
    report.add_argument("--record", type=Path, help="record file or run folder (default: "
                                                    "the record bundled with postlab)")
    report.add_argument("--contract", dest="contracts", action="append", default=[],
                        metavar="NAME", help="also re-score the stored outputs under this "
                                             "contract (repeatable); the record is unchanged")
    report.add_argument("--format", dest="format_", default="text",
                        choices=("text", "table", "json", "markdown"),
                        help="text: the reference layout (default); table: aggregates over "
                             "seeds with intervals, pass@k and dynamics as terminal tables; "
                             "json: the same data (docs/report-json.md); markdown")
    report.add_argument("--hypotheses", type=Path, metavar="FILE",
                        help="also decide these hypotheses (a plan's 'hypotheses' section "
                             "on its own), shown apart as exploratory: given after training")
    report.add_argument("--split", default="test",
                        help="split for the re-scoring table, or 'all' (default: test)")
    compare = sub.add_parser("compare", parents=[_options(_lang, _html)],
                             help="compare plan versions (a sweep, or run folders) by seed: "
                                  "means and paired differences")
    compare.add_argument("runs", type=Path, nargs="+", metavar="RUN_OR_SWEEP",
                         help="a sweep folder (its base version first), or run folders (the "
                              "first is the base)")
    compare.add_argument("--format", dest="format_", default="text",
                         choices=("text", "json", "markdown"), help="output (default: text)")
    compare.add_argument("--split", default=None,
                         help="held-out split the tables show (default: every held-out split; "
                              "figures show test)")


def _training_commands(sub: Commands) -> None:
    run = sub.add_parser("run", parents=[_options(
        _out_dir("run folder; must not exist unless --resume"), _training, _engine)],
        help="train every seed and arm of a plan into a new folder")
    run.add_argument("--plan", type=Path, help="plan file (default: the teaching plan)")
    run.add_argument("--resume", action="store_true",
                     help="complete an interrupted run in --out-dir, keeping finished seeds")
    run.add_argument("--registration", type=Path, metavar="FILE",
                     help="a registration 'postlab register' wrote for this plan: copied "
                          "into the run folder before the first step and named in the "
                          "record, so reports say its hypotheses were registered before "
                          "training")
    sweep = sub.add_parser("sweep", parents=[_options(
        _out_dir("sweep folder; must not exist unless --resume"), _training, _engine)],
        help="train plan versions x seeds from a sweep file, locally or on a Ray cluster")
    sweep.add_argument("sweep_file", type=Path, nargs="?", metavar="SWEEP",
                       help="sweep file (JSON: base, seeds, versions, grid); not needed with "
                            "--resume")
    sweep.add_argument("--executor", choices=("local", "processes", "ray"),
                       help="where tasks run: local (one at a time, in this process), "
                            "processes (default with --workers above 1) or ray")
    sweep.add_argument("--address", help="with --executor ray: the cluster's address "
                                         "(HOST:PORT, or auto); default: start a local Ray")
    sweep.add_argument("--resume", action="store_true",
                       help="complete an interrupted sweep in --out-dir, keeping finished seeds")


def _outputs(sub: Commands) -> None:
    plot = sub.add_parser("plot", parents=[_options(_target, _out_dir(
        "new folder for the figures (default: RUN/figures; required for the bundled run)",
        required=False), _lang)], help="write PNG and SVG figures of a run")
    plot.add_argument("--split", default="test", help="split the figures show (default: test)")
    plot.add_argument("--overwrite", action="store_true",
                      help="replace figures an earlier 'postlab plot' wrote in that folder "
                           "(a folder holding anything else is refused; records never are)")
    samples = sub.add_parser("samples", parents=[_options(_target)],
                             help="show the answers a run recorded: right, gamed (paid by a "
                                  "lenient contract, wrong) or wrong")
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
    export = sub.add_parser("export", parents=[_options(
        _out_dir("new folder for the tables; must not exist"))],
        help="write a run's or a sweep's raw outputs as tidy tables (Parquet or CSV) into a "
             "new folder")
    export.add_argument("run", type=Path, nargs="?", metavar="RUN_OR_SWEEP",
                        help="run folder, record or sweep folder (default: the bundled "
                             "teaching run)")
    export.add_argument("--format", dest="format_", default="parquet",
                        choices=("parquet", "csv"),
                        help="file format of the tables (default: parquet); the columns are "
                             "in docs/export.md and the folder's schema.json")
    exercises = sub.add_parser("exercises", help="compute the worked answers arithmetic can show")
    exercises.add_argument("number", type=int, nargs="?", metavar="N",
                           help="one answer's number (default: every answer)")
    exercises.add_argument("run", type=Path, nargs="?", metavar="RUN",
                           help="for answer 8: a run (default: the bundled one); for answer "
                                "9: a run whose arms are pipelines (e.g. of "
                                "examples/arms-pipelines.json)")


#: Each adds its commands; together, in this order, they are ``postlab``'s commands.
COMMAND_GROUPS = (_plans, _checking, _reports, _training_commands, _outputs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="postlab")
    parser.add_argument("--version", action="version", version=f"postlab {__version__}",
                        help="print postlab's version and exit")
    sub = parser.add_commands("command", "what to do; 'postlab COMMAND --help' explains one")
    for add_commands in COMMAND_GROUPS:
        add_commands(sub)
    # Listed from the commands themselves, so --help cannot fall behind them.
    parser.description = (f"RL post-training lab. Commands: {', '.join(sub.choices)}; "
                          "'postlab COMMAND --help' explains each.")
    return parser
