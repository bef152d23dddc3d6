"""``postlab report``, ``plot``, ``compare``, ``samples`` and ``export``: reading runs.

The reference-layout text report is drawn here; everything else is computed and written by
:mod:`postlab.api.reading` and printed here.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING

from postlab import api
from postlab.api.environment import did_you_mean
from postlab.api.reading import analyse, check_split, figure_notices, finding_lines
from postlab.cli.parser import default_lang
from postlab.errors import UserError

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


def _notices(lang: str) -> None:
    for line in figure_notices(lang):
        print(line, file=sys.stderr)


def report(args: argparse.Namespace) -> int:
    from postlab.records.opened import check_whole, checked_tables, open_run, require_readable
    from postlab.render.text import build_report, render_text
    from postlab.sweeps.folder import is_sweep
    from postlab.tasks.contracts import CONTRACTS

    if args.run is not None and is_sweep(args.run):
        # A sweep's report is its comparison of versions.
        if args.contracts or args.plan is not None or args.record is not None or \
                args.hypotheses is not None:
            raise UserError(f"{args.run} is a sweep folder; its report is 'postlab compare' "
                            "(--contract, --plan, --record and --hypotheses are for one run)")
        compare_args = argparse.Namespace(
            runs=[args.run], html=args.html, lang=args.lang, split=None,
            format_="text" if args.format_ == "table" else args.format_)
        return compare(compare_args)
    # Every argument is checked before anything is printed or written.
    if args.run is not None and args.record is not None:
        raise UserError("give the run either as RUN or as --record, not both")
    for name in args.contracts:
        if name not in CONTRACTS:
            raise UserError(f"--contract {name}: unknown{did_you_mean(name, CONTRACTS.names())}"
                            f"; known: {', '.join(sorted(CONTRACTS.names()))}")
    api.reading.refuse_existing(args.html)
    if args.split == "all" and (args.format_ != "text" or args.html is not None):
        raise UserError("--split all is for re-scoring only; tables and figures show one split")
    if args.html is not None:
        api.reading.pin_for_page(args.run or args.record)
    opened = open_run(args.run or args.record, args.plan, check_rows=False)
    from postlab.render.labels import starting_words

    with starting_words(opened.plan.model):
        if args.split != "all":
            check_split(opened, args.split)
        require_readable(opened.record, opened.plan.model, opened.source)
        check_whole(opened)
        _check_contract_kinds(args.contracts, opened.plan.model)
        exploratory = api.reading.exploratory_hypotheses(opened, args.hypotheses)
        lang = args.lang or default_lang()
        if args.format_ == "text":
            if lang == "en":
                sys.stdout.write(_findings_first(opened))
            sys.stdout.write(render_text(build_report(
                opened.record, opened.plan.model, tables=checked_tables(opened)), lang))
            if opened.plan.model.hypotheses or opened.registration or exploratory:
                sys.stdout.write(_verdict_lines(opened, lang, exploratory))
        if args.format_ != "text" or args.html is not None:
            _rich_report(args, opened, lang, exploratory)
        if args.contracts:
            from postlab.plan.arms import rl_contracts
            from postlab.records.rescore import render_rescore, rescore
            from postlab.tasks.registry import answer_function

            contracts = list(dict.fromkeys(args.contracts))
            split = None if args.split == "all" else args.split
            result = rescore(opened.record, rl_contracts(opened.plan.model), contracts, split,
                             answer_function(opened.plan.model), checked_tables(opened))
            sys.stdout.write("\n" + render_rescore(result, lang))
        return 0


def _check_contract_kinds(contracts: list[str], plan: Plan) -> None:
    """Each --contract must read the kind of answer the run's task has."""
    from postlab.tasks.contracts import contract_answers
    from postlab.tasks.registry import task_for

    kind = task_for(plan).answer_kind
    for name in contracts:
        if contract_answers(name) != kind:
            raise UserError(f"--contract {name}: judges {contract_answers(name)} answers; "
                            f"this run's task has {kind} answers")


def _findings_first(opened) -> str:
    """The English text report opens with what the run found, in words; then comes the
    reference's layout (the Chinese report is that layout alone, as the reference prints it).
    Without the report extra (scipy: the intervals) a line says so instead."""
    try:
        import scipy  # noqa: F401
    except ImportError:
        return ("No findings in words: they need the report extra (pip install "
                "'postlab[report]')\n\nThe counts, in the reference's layout:\n")
    from postlab.errors import RecordDoesNotFit

    layout = "\nThe counts, in the reference's layout:\n"
    if "test" not in opened.plan.model.split:
        return ("No findings in words here: they are of the held-out test split, which this "
                f"plan does not have ('--format table --split S' reports another)\n{layout}")
    try:
        lines = finding_lines(opened, analyse(opened, "test"), "en", "test")
    except RecordDoesNotFit as exc:  # a hand-made or partial record: its counts still show
        return f"No findings in words for this record: {str(exc).splitlines()[0]}\n{layout}"
    return ("What this run found (held-out test split; every number: --format table):\n"
            + "".join(f"- {line}\n" for line in lines) + layout)


def _verdict_lines(opened, lang: str, exploratory: dict | None = None) -> str:
    """The hypotheses and their verdicts, after the reference layout (which has none): the
    registered ones (or the plan's own), then any given now, each saying how it was fixed."""
    from postlab.render.tables import hypothesis_table

    table = hypothesis_table(analyse(opened, "test", exploratory), lang)
    if table is None:
        return "\n(hypotheses need at least two completed seeds to be decided)\n"
    lines = ["", table.title]
    if opened.registration is not None:
        named = opened.record["registration"]
        lines.append(f"registration: registered {named['registered_at']}, training began "
                     f"{named['training_started_at']} (registration.json sha256 "
                     f"{named['sha256'][:16]}…)")
    for row in table.rows:
        ident, statement, claim, _, numbers, level, verdict, standing = row
        lines.append(f"{ident}: {verdict.upper()} — {statement}")
        lines.append(f"    {claim}; {numbers} at level {level}; {standing}")
    return "\n".join(lines) + "\n"


def _rich_report(args: argparse.Namespace, opened, lang: str,
                 exploratory: dict | None = None) -> None:
    from postlab.jsonio import publish_bytes
    from postlab.render.tables import to_json, to_markdown, to_terminal

    analysis = analyse(opened, args.split, exploratory)
    if args.format_ == "json":
        sys.stdout.write(to_json(analysis))
    elif args.format_ == "markdown":
        sys.stdout.write(to_markdown(analysis, lang, args.split,
                                     finding_lines(opened, analysis, lang, args.split)))
    elif args.format_ == "table":
        to_terminal(analysis, lang, args.split,
                    finding_lines(opened, analysis, lang, args.split))
    if args.html is not None:
        _notices(lang)
        page = api.reading.report_page(opened, analysis, lang, args.split)
        publish_bytes(args.html, page.encode())
        print(f"wrote {args.html}", file=sys.stderr)


def compare(args: argparse.Namespace) -> int:
    from postlab.render import comparison as render

    lang = args.lang or default_lang()
    result = api.compare(args.runs, split=args.split, lang=lang, html=args.html,
                         say=lambda line: print(f"postlab: {line}", file=sys.stderr))
    if args.format_ == "json":
        sys.stdout.write(render.to_json(result.comparison))
    elif args.format_ == "markdown":
        sys.stdout.write(render.to_markdown(result.comparison, lang, args.split))
    else:
        sys.stdout.write(render.to_text(result.comparison, lang, args.split))
    return 0


def plot(args: argparse.Namespace) -> int:
    lang = args.lang or default_lang()
    result = api.plot(args.run, args.out_dir, overwrite=args.overwrite, split=args.split,
                      lang=lang)
    for line in result.notices:
        print(line, file=sys.stderr)
    print(f"wrote {result.files} figures to {result.out_dir}")
    return 0


def export(args: argparse.Namespace) -> int:
    """Tidy tables of a run or of every version of a sweep, published as one new folder."""
    out, tables, _ = api.export(args.run, args.out_dir, format_=args.format_,
                                say=lambda line: print(line, file=sys.stderr))
    print(f"wrote {tables} {args.format_} tables and schema.json to {out}")
    return 0


def samples(args: argparse.Namespace) -> int:
    import json

    from postlab.render.answers import samples_text
    from postlab.render.labels import starting_words

    if args.limit is not None and args.limit < 0:
        raise UserError(f"--limit {args.limit}: must be 0 (all) or more")
    if args.limit is not None and args.format_ == "jsonl":
        raise UserError("--limit is for the text format; jsonl prints every matching answer")
    chosen = api.samples(args.run, stages=args.stage, split=args.split,
                         decoding=args.decoding, kind=args.kind, seeds=args.seed)
    if args.format_ == "jsonl":
        # lines are printed as they are found
        for sample in chosen.answers():
            sys.stdout.write(json.dumps(dataclasses.asdict(sample)) + "\n")
        return 0
    limit = 10 if args.limit is None else (None if args.limit == 0 else args.limit)
    with starting_words(chosen.run.plan.model):
        sys.stdout.write(samples_text(chosen.tallies(), chosen.stages, chosen.where, limit))
    return 0


def evaluate(args: argparse.Namespace) -> int:
    """``postlab eval``: the starting model's held-out figures; nothing trains."""
    import json

    from postlab.api.evaluating import evaluate as run_evaluation
    from postlab.render.baseline import render_baseline

    say = (lambda line: None) if args.quiet or args.format_ == "json" else print
    result = run_evaluation(args.plan, args.out_dir, cpu_path=args.cpu_path,
                            device=args.device, say=say)
    if args.format_ == "json":
        print(json.dumps({"plan_sha256": result.plan_sha256,
                          "figures": [figure.as_json() for figure in result.figures]},
                         indent=1))
        return 0
    plan = result.plan
    questions = {split: len(keys) for split, keys in plan.split.items()}
    sys.stdout.write(render_baseline(result.figures, plan_name=str(args.plan),
                                     plan_sha256=result.plan_sha256,
                                     seeds=len(plan.seeds), questions=questions,
                                     samples=plan.eval_samples))
    if result.out_dir is not None and not args.quiet:
        print(f"kept: {result.out_dir} (plan.json, evaluation.json) in {result.seconds:.1f} s")
    return 0
