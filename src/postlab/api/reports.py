"""A run's report from a script, and the one ``postlab report`` prints: the aggregates over
seeds, the findings in words, the reference's text layout with the verdicts of the run's
hypotheses, re-scoring under other contracts, and the self-contained HTML page.

Every argument is checked before anything is written; the page is published whole, never
over an existing file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.api.environment import did_you_mean
from postlab.api.reading import (
    analyse,
    check_split,
    figure_notices,
    finding_lines,
    pin_for_page,
    refuse_existing,
)
from postlab.errors import RecordDoesNotFit, UserError
from postlab.records.opened import OpenedRun, check_whole, open_run, require_readable

if TYPE_CHECKING:
    from postlab.analysis.results import Analysis
    from postlab.plan.schema import Plan


@dataclass(frozen=True, kw_only=True)
class Report:
    """A run's report on one held-out split: the aggregates (None when not asked for, or for
    ``split="all"``), the findings in words, the reference's text layout (when asked for),
    the re-scoring under other contracts (when some were named), and the HTML page written,
    if one was asked for."""

    run: OpenedRun
    analysis: Analysis | None
    findings: list[str]
    html: Path | None
    text: str | None = None
    rescored: str | None = None


def exploratory_hypotheses(opened: OpenedRun, path: Path | None) -> dict[str, Any] | None:
    """The hypotheses file ``path`` given to a report after training, checked against the
    run's plan and against the hypotheses the run fixed before it (None: none given)."""
    if path is None:
        return None
    from postlab.api.registering import read_exploratory
    from postlab.plan.schema import Hypotheses

    registered = (opened.registration or {}).get("hypotheses")
    fixed = Hypotheses.model_validate(registered) if registered else \
        opened.plan.model.hypotheses
    return read_exploratory(Path(path), opened.plan, fixed)


def report_page(opened: OpenedRun, analysis: Analysis, lang: str, split: str) -> str:
    """The run's self-contained HTML page: figures and a first screen with its verification."""
    from datetime import UTC, datetime

    from postlab.analysis.samples import page_samples
    from postlab.records.opened import checked_tables
    from postlab.render.figures import draw_figures
    from postlab.render.html import FirstScreen, render_html
    from postlab.render.overview import overview_rows, verification_line
    from postlab.runs.remembered import verify_remembered

    record, plan, source = opened.record, opened.plan.model, opened.source
    grids, answers = page_samples(record, plan, split, per_kind=3,  # one pass for both
                                  tables=checked_tables(opened))
    figures = draw_figures(analysis, lang, split, grids, svg=False)
    # A record in a run folder is verified as 'postlab verify' would (or its checks reused
    # when nothing they depend on changed since, and the page says when they ran); a record
    # alone (no plan.json beside it) has no checkpoints or summary to check, so it is not
    # marked failed.
    checks, reused_from = None, None
    if opened.files.plan.is_file():
        checked = verify_remembered(opened.files, record)
        checks, reused_from = checked.checks, checked.reused_from
    verification, verified = verification_line(checks, lang, reused_from=reused_from)
    written = datetime.fromtimestamp(source.stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC")
    screen = FirstScreen(
        facts=overview_rows(plan, record, written, lang), verification=verification,
        verified=verified, findings=finding_lines(opened, analysis, lang, split),
        answers=answers,
        notices=figure_notices(lang))
    return render_html(analysis, figures, lang, split, screen)


def _check_contracts(contracts: Sequence[str]) -> None:
    from postlab.tasks.contracts import CONTRACTS, DRAWN

    judging = [name for name in CONTRACTS.names() if name not in DRAWN]
    for name in contracts:
        if name not in CONTRACTS:
            raise UserError(f"--contract {name}: unknown{did_you_mean(name, judging)}"
                            f"; known: {', '.join(sorted(judging))}")
        if name in DRAWN:
            raise UserError(f"--contract {name}: pays at random from the run's stream, "
                            "whatever the answer, so it re-scores no rows")


def _check_contract_kinds(contracts: Sequence[str], plan: Plan) -> None:
    """Each contract must read the kind of answer the run's task has."""
    from postlab.tasks.contracts import contract_answers
    from postlab.tasks.registry import task_for

    kind = task_for(plan).answer_kind
    for name in contracts:
        if contract_answers(name) != kind:
            raise UserError(f"--contract {name}: judges {contract_answers(name)} answers; "
                            f"this run's task has {kind} answers")


def _findings_first(opened: OpenedRun) -> str:
    """The English text report opens with what the run found, in words; then comes the
    reference's layout (the Chinese report is that layout alone, as the reference prints it).
    Without the report extra (scipy: the intervals) a line says so instead."""
    try:
        import scipy  # noqa: F401
    except ImportError:
        return ("No findings in words: they need the report extra (pip install "
                "'postlab[report]')\n\nThe counts, in the reference's layout:\n")
    layout = "\nThe counts, in the reference's layout:\n"
    if "test" not in opened.plan.model.split:
        return ("No findings in words here: they are of the held-out test split, which this "
                f"plan does not have ('--format table --split S' reports another)\n{layout}")
    try:
        analysis = analyse(opened, "test")
        lines = finding_lines(opened, analysis, "en", "test")
    except RecordDoesNotFit as exc:  # a hand-made or partial record: its counts still show
        return f"No findings in words for this record: {str(exc).splitlines()[0]}\n{layout}"
    trained = (f"The RL arms trained with the policy loss {analysis.policy_loss}.\n"
               if analysis.policy_loss else "")
    return ("What this run found (held-out test split; every number: --format table):\n"
            + "".join(f"- {line}\n" for line in lines) + trained + layout)


def _verdict_lines(opened: OpenedRun, lang: str, exploratory: dict | None) -> str:
    """The hypotheses and their verdicts, after the reference layout (which has none): the
    registered ones (or the plan's own), then any given now, each saying how it was fixed."""
    from postlab.render.tables import hypothesis_table

    table = hypothesis_table(analyse(opened, "test", exploratory), lang)
    if table is None:
        return "\n(hypotheses need at least two completed seeds to be decided)\n"
    lines = ["", table.title]
    named = opened.record.registration  # read from the folder only where the record names it
    if opened.registration is not None and named is not None:
        lines.append(f"registration: registered {named.registered_at}, training began "
                     f"{named.training_started_at} (registration.json sha256 "
                     f"{named.sha256[:16]}…)")
    for row in table.rows:
        ident, statement, claim, _, numbers, level, verdict, standing = row
        lines.append(f"{ident}: {verdict.upper()} — {statement}")
        lines.append(f"    {claim}; {numbers} at level {level}; {standing}")
    return "\n".join(lines) + "\n"


def _layout_text(opened: OpenedRun, lang: str, exploratory: dict | None) -> str:
    """The reference's text layout, with the findings first (English) and the verdicts
    after it where the run has hypotheses."""
    from postlab.records.opened import checked_tables
    from postlab.render.text import build_report, render_text

    plan = opened.plan.model
    text = _findings_first(opened) if lang == "en" else ""
    text += render_text(build_report(opened.record, plan, tables=checked_tables(opened)), lang)
    if plan.hypotheses or opened.registration or exploratory:
        text += _verdict_lines(opened, lang, exploratory)
    return text


def _rescored(opened: OpenedRun, contracts: Sequence[str], split: str, lang: str) -> str:
    from postlab.plan.arms import rl_contracts
    from postlab.records.opened import checked_tables
    from postlab.records.rescore import render_rescore, rescore
    from postlab.tasks.registry import answer_function

    plan = opened.plan.model
    result = rescore(opened.record, rl_contracts(plan), list(dict.fromkeys(contracts)),
                     None if split == "all" else split, answer_function(plan),
                     checked_tables(opened))
    return render_rescore(result, lang)


def report(run: str | Path | None = None, *, plan: str | Path | None = None,
           split: str = "test", lang: str = "en", html: str | Path | None = None,
           hypotheses: str | Path | None = None, contracts: Sequence[str] = (),
           layout: bool = False, aggregate: bool = True) -> Report:
    """Aggregate a run (default: the bundled run) over seeds for every stage, split and
    decoding, with the findings in ``lang`` ("en" or "zh"); with ``html``, also write the
    self-contained page there (a new file).

    ``hypotheses``: a file of hypotheses given after training, decided apart from the
    registered ones as exploratory. ``contracts``: also re-score the stored answers under
    these contracts (``split="all"``: on every split, and nothing else is aggregated).
    ``layout``: also the reference's text layout. ``aggregate`` False: no aggregates (the
    text layout alone costs less), unless the page needs them."""
    page_path = None if html is None else Path(html)
    _check_contracts(contracts)
    refuse_existing(page_path)
    if split == "all" and (page_path is not None or (aggregate and not layout)):
        raise UserError("--split all is for re-scoring only; tables and figures show one split")
    target = None if run is None else Path(run)
    if page_path is not None:
        pin_for_page(target)
    opened = open_run(target, None if plan is None else Path(plan), check_rows=False)
    from postlab.render.labels import starting_words

    with starting_words(opened.plan.model):
        if split != "all":
            check_split(opened, split)
        require_readable(opened.record, opened.plan.model, opened.source)
        check_whole(opened)
        _check_contract_kinds(contracts, opened.plan.model)
        exploratory = exploratory_hypotheses(opened,
                                             None if hypotheses is None else Path(hypotheses))
        text = _layout_text(opened, lang, exploratory) if layout else None
        analysis, findings = None, []
        if (aggregate or page_path is not None) and split != "all":
            analysis = analyse(opened, split, exploratory)
            findings = finding_lines(opened, analysis, lang, split)
        if page_path is not None:
            from postlab.jsonio import publish_bytes

            assert analysis is not None
            publish_bytes(page_path, report_page(opened, analysis, lang, split).encode())
        rescored = _rescored(opened, contracts, split, lang) if contracts else None
        return Report(run=opened, analysis=analysis, findings=findings, html=page_path,
                      text=text, rescored=rescored)
