"""Where each block of a record's rows sits, and one walk over every row a record holds
(readers that need a seed's rows in record order with their places: the summary, the
samples, the row export)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from postlab.records.models import Record, SeedEntry
from postlab.tasks.rows import Row


class Place(NamedTuple):
    """Where a block of rows sits in a record.

    An evaluation block has a ``split`` and a ``decoding`` (``greedy`` or ``sampled``); an RL
    rollout block has a ``step`` and the decoding ``rollout`` (rows a dynamic-sampling step
    dropped are ``dropped``). ``stage`` is ``initial`` or an arm's name.
    """

    seed: int
    stage: str
    split: str | None
    step: int | None
    decoding: str


class LocatedRow(NamedTuple):
    place: Place
    row: Row


ROLLOUT = "rollout"
DROPPED = "dropped"


def iter_rows(record: Record, *, evaluations: bool = True,
              training: bool = True) -> Iterator[LocatedRow]:
    """Every row of a record in record order: per seed, its evaluations (stage, split,
    decoding), then its RL rollouts (arm, step; dropped rows after the kept ones)."""
    for run in record.runs:
        yield from iter_run_rows(run, evaluations=evaluations, training=training)


def iter_run_rows(run: SeedEntry, *, evaluations: bool = True,
                  training: bool = True) -> Iterator[LocatedRow]:
    """The rows of one seed's run, as :func:`iter_rows` walks them."""
    seed = run.seed
    if evaluations:
        for stage, splits in run.evaluations.items():
            for split, decoded in splits.items():
                for decoding, rows in (("greedy", decoded.greedy), ("sampled", decoded.sampled)):
                    place = Place(seed, stage, split, None, decoding)
                    for row in rows:
                        yield LocatedRow(place, row)
    if training:
        for arm, history in run.arms.items():
            for step in history:
                place = Place(seed, arm, None, step.step, ROLLOUT)
                for row in step.rows:
                    yield LocatedRow(place, row)
                if step.sampling is not None:
                    place = place._replace(decoding=DROPPED)
                    for row in step.sampling.dropped_rows:
                        yield LocatedRow(place, row)


def rows_by_place(located: Iterable[LocatedRow]) -> dict[Place, list[Row]]:
    """Rows grouped into their blocks, blocks and rows in record order."""
    blocks: dict[Place, list[Row]] = {}
    for place, row in located:
        blocks.setdefault(place, []).append(row)
    return blocks
