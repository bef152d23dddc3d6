"""``postlab samples`` as text: a run's answers grouped by stage and kind, the commonest
first, each with its right answer and the contracts that accept it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from postlab.analysis.samples import KINDS, Sample, Tally
from postlab.render.labels import shown, shown_episode, stage_label


def samples_text(samples: Iterable[Sample] | dict[tuple[str, str], Tally],
                 stages: Sequence[str], where: str, limit: int | None) -> str:
    """Per stage and kind: how many answers, then up to ``limit`` distinct ones; ``samples``
    are answers, or answers already tallied per stage and kind
    (:func:`~postlab.analysis.samples.answer_tallies`)."""
    if isinstance(samples, dict):
        grouped = samples
    else:
        grouped = {}
        for sample in samples:  # streamed: a record of many seeds is never held whole
            grouped.setdefault((sample.stage, sample.kind), Tally()).add(sample)
    if not grouped:
        return f"no answers match ({where})\n"
    lines = []
    hidden = 0
    for stage in stages:
        for kind in KINDS:
            found = grouped.get((stage, kind))
            if not found:
                continue
            distinct = len(found.counts)
            if limit is not None and distinct > limit:
                hidden += distinct - limit
            lines.append(f"{stage_label(stage, 'en')} · {where} · {kind}: {found.total} answers"
                         + (f", {distinct} distinct, the commonest {limit} shown"
                            if limit is not None and distinct > limit else ""))
            for example in found.examples(limit):
                end = "" if example.terminated else "  (no end mark)"
                accepted = ", ".join(example.accepted) or "none"
                lines.append(f"  {shown(example.prompt)}{shown_episode(example.text):<8} right: "
                             f"{example.expected!s:<4} accepted by: {accepted:<18} "
                             f"x{example.count}{end}")
    if hidden:
        lines.append(f"{hidden} more distinct answers not shown: --limit N shows N per stage "
                     "and kind, --limit 0 all of them, --format jsonl every answer; narrow "
                     "with --stage, --filter correct|gamed|wrong, --seed")
    return "\n".join(lines) + "\n"
