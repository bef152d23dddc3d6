"""A baseline's figures (``postlab eval``) as a plain-text table: one block per held-out
split, a row per contract, each figure with its 95% interval."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from postlab.tasks.contracts import describe


def _cell(figure: Any) -> str:
    value = figure.value
    if value.low is None:
        return f"{value.mean:.3f}"
    return f"{value.mean:.3f} [{value.low:.3f}, {value.high:.3f}]"


def render_baseline(figures: Sequence[Any], *, plan_name: str, plan_sha256: str, seeds: int,
                    questions: dict[str, int], samples: int, lang: str = "en") -> str:
    """The table; ``questions``: held-out questions per split."""
    from postlab.analysis.intervals import CROSSED_METHOD

    lines = [f"Baseline of {plan_name} (sha256 {plan_sha256[:16]}…): the starting model, "
             f"before any training; {seeds} seed{'s' if seeds != 1 else ''}, "
             f"{samples} samples a question."]
    metrics = list(dict.fromkeys(figure.metric for figure in figures))
    for split in dict.fromkeys(figure.split for figure in figures):
        lines.append("")
        lines.append(f"{split} split ({questions[split]} questions): mean [95% CI]")
        rows = [["contract", *metrics]]
        for contract in dict.fromkeys(f.contract for f in figures if f.split == split):
            found = {f.metric: f for f in figures if f.split == split and f.contract == contract}
            rows.append([describe(contract, lang).name,
                         *[_cell(found[m]) if m in found else "-" for m in metrics]])
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                  .rstrip() for row in rows]
    lines.append("")
    lines.append("Intervals: " + (f"{CROSSED_METHOD}." if seeds > 1 else
                                  "over questions (one seed): the questions' spread, at least "
                                  "the pooled binomial, Korn-Graubard, questions - 1 degrees "
                                  "of freedom; 95% two-sided."))
    return "\n".join(lines) + "\n"
