"""The read-only report: group-signal probabilities and the held-out table.

Computing and rendering are separate: :func:`build_report` returns plain data, and the
renderers lay it out. The Chinese layout reproduces the reference report line for line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postlab.plan.arms import plan_contracts
from postlab.records.metrics import count_text, summary_of
from postlab.rl.groups import contrast_probability
from postlab.tasks.contracts import describe

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.records.models import Record

#: Success probabilities at which the report shows the chance of a mixed group.
REPORT_PROBABILITIES = (0.01, 0.5, 0.99)


@dataclass(frozen=True, kw_only=True)
class HeldOutRow:
    seed: int
    stage: str
    greedy_correct: int  # greedy answers accepted by the first contract
    greedy_n: int
    sampled_accepted: tuple[int, ...]  # sampled answers accepted, per contract
    sampled_n: int
    covered: int
    questions: int


@dataclass(frozen=True, kw_only=True)
class Report:
    group_size: int
    eval_samples: int
    contracts: tuple[str, ...]  # the first decides "correct" and coverage
    contrast: tuple[tuple[float, float], ...]
    held_out: tuple[HeldOutRow, ...]


def build_report(record: Record, plan: Plan,
                 split: str = "test", tables: Iterable[Any] | None = None) -> Report:
    """The reference's text report of ``split`` (``tables``: the record's flat tables, as
    :func:`~postlab.records.metrics.summary_of` takes them)."""
    # The chance of a mixed group at the plan's own group size (the teaching plan's 8 gives the
    # reference's lines byte for byte).
    group_size = plan.group_size
    contrast = tuple((p, contrast_probability(p, group_size)) for p in REPORT_PROBABILITIES)
    contracts = plan_contracts(plan)
    rows = []
    for entry in summary_of(record, plan, tables):
        greedy, sampled = entry[split]["greedy"], entry[split]["sampled"]
        rows.append(HeldOutRow(
            seed=entry["seed"], stage=entry["stage"],
            greedy_correct=greedy[contracts[0]], greedy_n=greedy["n"],
            sampled_accepted=tuple(sampled[name] for name in contracts),
            sampled_n=sampled["n"], covered=sampled["covered"], questions=sampled["questions"]))
    return Report(group_size=group_size, eval_samples=plan.eval_samples,
                  contracts=contracts, contrast=contrast, held_out=tuple(rows))


#: Column words come from each contract's registered words: the first contract's column is
#: shown greedy and sampled, the others' sampled (the teaching contracts give the reference's
#: "贪心正确 / 采样正确 / 子串接受").
TEXT = {
    "zh": {
        "contrast": "组内出现不同奖励的概率：",
        "contrast_sized": "组内出现不同奖励的概率（每组 {g} 个回答）：",
        "table": "留出测试：种子 / 阶段 / {columns} / {k}次覆盖",
        "greedy": "贪心{column}", "sampled": "采样{column}",
    },
    "en": {
        "contrast": "Probability that a group of {g} holds different rewards:",
        "table": "Held-out test: seed / stage / {columns} / covered by {k} samples",
        "greedy": "greedy {column}", "sampled": "sampled {column}",
        # The SFT model is called SFT wherever English is read, as in the tables and figures.
        "stages": {"initial": "SFT"},
    },
}


def _columns(contracts: tuple[str, ...], lang: str) -> str:
    words = TEXT[lang]
    first = describe(contracts[0], lang).column
    return " / ".join([words["greedy"].format(column=first),
                       words["sampled"].format(column=first),
                       *(describe(name, lang).column for name in contracts[1:])])


def render_text(report: Report, lang: str) -> str:
    words = TEXT[lang]
    # The reference's Chinese line names no size (it is always 8 there); other sizes say theirs.
    heading = words["contrast"] if report.group_size == 8 else words.get(
        "contrast_sized", words["contrast"])
    lines = [heading.format(g=report.group_size)]
    lines += [f"p={p:.2f}: {q:.6f}" for p, q in report.contrast]
    lines.append(words["table"].format(columns=_columns(report.contracts, lang),
                                       k=report.eval_samples))
    # The Chinese layout keeps the record's key ``initial``, as the reference report prints it.
    stages = words.get("stages", {})
    if "initial" in stages:  # a plan without SFT names its first stage as the labels do
        from postlab.render.labels import stage_label

        stages = {**stages, "initial": stage_label("initial", lang)}
    for row in report.held_out:
        stage = stages.get(row.stage, row.stage)
        sampled = " ".join(f"{count_text(count)}/{row.sampled_n}"
                           for count in row.sampled_accepted)
        lines.append(f"{row.seed:2d} {stage:9s} {count_text(row.greedy_correct)}/{row.greedy_n} "
                     f"{sampled} {row.covered}/{row.questions}")
    return "\n".join(lines) + "\n"
