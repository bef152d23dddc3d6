"""The typed view of a record's rows.

On disk a row stays the positional list ``[a, b, text, terminated]`` (the reference program
reads and writes that form); in code it is a :class:`Row`, so no reader indexes by position.
A record's blocks of rows reach readers as :class:`RowList`, which types each row as it is
read and keeps the stored lists (the record's digests hash them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, overload


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


class RowList(Sequence[Row]):
    """A block of a record's rows, each a :class:`Row` when read.

    The stored lists stay as they are (``stored``): a teaching seed holds about 36,000 rows,
    whose digests are taken from their JSON, and typing them all when a seed is read would
    cost a copy of each on every read, most of them never looked at row by row.
    """

    __slots__ = ("stored",)

    def __init__(self, stored: Sequence[Sequence[Any]]) -> None:
        self.stored = stored

    def __len__(self) -> int:
        return len(self.stored)

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        if isinstance(index, slice):
            return [Row.of(raw) for raw in self.stored[index]]
        return Row.of(self.stored[index])

    def __iter__(self) -> Iterator[Row]:
        return map(Row.of, self.stored)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowList) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RowList({len(self.stored)} rows)"


def rows_of(raw: Iterable[Sequence[Any]]) -> list[Row]:
    return [Row.of(r) for r in raw]


def pairs_of(raw: Iterable[Sequence[Any]]) -> list[tuple[int, int]]:
    """The questions ``(a, b)`` of stored rows (or Rows), without building a Row for each:
    checking a teaching seed's rows against its plan builds about 200,000, and building them
    was two thirds of that check's time (measured with cProfile, 16 seeds)."""
    stored = raw.stored if isinstance(raw, RowList) else raw
    return [(row[0], row[1]) for row in stored]
