"""``postlab report``, ``plot``, ``compare``, ``samples`` and ``export``: reading runs.

Each command calls one function of :mod:`postlab.api` and prints what it returns.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from postlab import api
from postlab.api.reading import figure_notices
from postlab.cli.parser import default_lang
from postlab.errors import UserError


def _notices(lang: str) -> None:
    for line in figure_notices(lang):
        print(line, file=sys.stderr)


def report(args: argparse.Namespace) -> int:
    from postlab.sweeps.folder import is_sweep

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
    if args.run is not None and args.record is not None:
        raise UserError("give the run either as RUN or as --record, not both")
    lang = args.lang or default_lang()
    result = api.report(args.run or args.record, plan=args.plan, split=args.split, lang=lang,
                        html=args.html, hypotheses=args.hypotheses, contracts=args.contracts,
                        layout=args.format_ == "text", aggregate=args.format_ != "text")
    if result.text is not None:
        sys.stdout.write(result.text)
    if result.analysis is not None:
        _print_tables(args.format_, result, lang, args.split)
    if result.html is not None:
        _notices(lang)
        print(f"wrote {result.html}", file=sys.stderr)
    if result.rescored is not None:
        sys.stdout.write("\n" + result.rescored)
    return 0


def _print_tables(format_: str, result: api.Report, lang: str, split: str) -> None:
    from postlab.render.tables import to_json, to_markdown, to_terminal

    if format_ == "json":
        sys.stdout.write(to_json(result.analysis))
    elif format_ == "markdown":
        sys.stdout.write(to_markdown(result.analysis, lang, split, result.findings))
    elif format_ == "table":
        to_terminal(result.analysis, lang, split, result.findings)


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
