"""``postlab samples`` as text: a run's answers grouped by stage and kind, the commonest
first, each with its right answer and the contracts that accept it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from postlab.analysis.samples import KINDS, Sample, Tally
from postlab.render.labels import shown, stage_label


def samples_text(samples: Iterable[Sample], stages: Sequence[str], where: str,
                 limit: int | None) -> str:
    """Per stage and kind: how many answers, then up to ``limit`` distinct ones."""
    grouped: dict[tuple[str, str], Tally] = {}
    for sample in samples:  # streamed: a record of many seeds is never held whole
        grouped.setdefault((sample.stage, sample.kind), Tally()).add(sample)
    if not grouped:
        return f"no answers match ({where})\n"
    lines = []
    for stage in stages:
        for kind in KINDS:
            found = grouped.get((stage, kind))
            if not found:
                continue
            lines.append(f"{stage_label(stage, 'en')} · {where} · {kind}: {found.total} answers")
            for example in found.examples(limit):
                end = "" if example.terminated else "  (no end mark)"
                accepted = ", ".join(example.accepted) or "none"
                lines.append(f"  {shown(example.prompt)}{shown(example.text):<8} right: "
                             f"{example.expected!s:<4} accepted by: {accepted:<18} "
                             f"x{example.count}{end}")
    return "\n".join(lines) + "\n"
