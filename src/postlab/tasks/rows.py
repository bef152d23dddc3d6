"""The typed view of a record's rows, and one walk over every row a record holds.

On disk a row stays the positional list ``[a, b, text, terminated]`` (the reference program
reads and writes that form); in code it is a :class:`Row`, so no reader indexes by position.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple


class Row(NamedTuple):
    """One answer: the question's operands, the visible output, and whether EOS was emitted."""

    a: int
    b: int
    text: str
    terminated: bool

    @classmethod
    def of(cls, raw: Sequence[Any]) -> Row:
        """A row from its stored form ``[a, b, text, terminated]`` (or a Row already)."""
        return raw if isinstance(raw, Row) else cls(*raw)

    @property
    def pair(self) -> tuple[int, int]:
        return (self.a, self.b)

    @property
    def tokens(self) -> int:
        """Tokens the answer used: its characters plus EOS when emitted."""
        return len(self.text) + int(self.terminated)


def rows_of(raw: Iterable[Sequence[Any]]) -> list[Row]:
    return [Row.of(r) for r in raw]


def pairs_of(raw: Iterable[Sequence[Any]]) -> list[tuple[int, int]]:
    """The questions ``(a, b)`` of stored rows (or Rows), without building a Row for each:
    checking a teaching seed's rows against its plan builds about 200,000, and building them
    was two thirds of that check's time (measured with cProfile, 16 seeds)."""
    return [(row[0], row[1]) for row in raw]


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


def iter_rows(record: dict[str, Any], *, evaluations: bool = True,
              training: bool = True) -> Iterator[LocatedRow]:
    """Every row of a record in record order: per seed, its evaluations (stage, split,
    decoding), then its RL rollouts (arm, step; dropped rows after the kept ones)."""
    for run in record["runs"]:
        yield from iter_run_rows(run, evaluations=evaluations, training=training)


def iter_run_rows(run: dict[str, Any], *, evaluations: bool = True,
                  training: bool = True) -> Iterator[LocatedRow]:
    """The rows of one seed's run, as :func:`iter_rows` walks them."""
    seed = run["seed"]
    if evaluations:
        for stage, splits in run["evaluations"].items():
            for split, decoded in splits.items():
                for decoding, rows in decoded.items():
                    place = Place(seed, stage, split, None, decoding)
                    for raw in rows:
                        yield LocatedRow(place, Row.of(raw))
    if training:
        for arm, history in run.get("training", {}).items():
            for step in history:
                place = Place(seed, arm, None, step["step"], ROLLOUT)
                for raw in step["rows"]:
                    yield LocatedRow(place, Row.of(raw))
                place = place._replace(decoding=DROPPED)
                for raw in step.get("sampling", {}).get("dropped_rows", []):
                    yield LocatedRow(place, Row.of(raw))


def rows_by_place(located: Iterable[LocatedRow]) -> dict[Place, list[Row]]:
    """Rows grouped into their blocks, blocks and rows in record order."""
    blocks: dict[Place, list[Row]] = {}
    for place, row in located:
        blocks.setdefault(place, []).append(row)
    return blocks
