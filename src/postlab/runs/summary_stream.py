"""The summary recomputed from a record's rows, compared with ``summary.json`` as it is made:
a verified summary is never held whole, and a difference is named where it first occurs."""

from __future__ import annotations

from typing import Any

from postlab.errors import UserError
from postlab.jsonio import parse_json
from postlab.records.record import summary_closing, summary_piece


class SummaryStream:
    """The summary recomputed from the rows, compared with ``summary.json`` entry by entry as
    the walk makes it, in the bytes :func:`~postlab.records.record.summary_bytes` writes:
    nothing is kept of an entry that matches (a 10,000-seed summary held whole took about
    50 MB), and only from the first that does not, to say where and how it differs."""

    def __init__(self, stored: bytes | None) -> None:
        self.stored = stored
        self.offset = 0  # how far the stored bytes matched
        self.count = 0
        self.kept: list[dict[str, Any]] | None = None  # entries from the first mismatch on
        self.first = 0  # the index of that entry

    def add(self, entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            if self.kept is None:
                piece = summary_piece(entry, self.count)
                if self.stored is not None and self.stored[
                        self.offset:self.offset + len(piece)] == piece:
                    self.offset += len(piece)
                else:
                    self.kept, self.first = [], self.count
            if self.kept is not None:
                self.kept.append(entry)
            self.count += 1

    def matches(self) -> bool:
        """summary.json is, byte for byte, the summary of the rows added."""
        return (self.kept is None and self.stored is not None
                and self.stored[self.offset:] == summary_closing(self.count))

    def expected(self) -> bytes:
        """The summary file the rows make (the stored bytes where they matched)."""
        stored = self.stored or b""
        rest = b"".join(summary_piece(entry, self.first + index)
                        for index, entry in enumerate(self.kept or []))
        return stored[:self.offset] + rest + summary_closing(self.count)


def first_summary_difference(stored: bytes, stream: SummaryStream) -> str:
    """Where the stored summary first departs from the recomputed one: the first entry whose
    values differ, else how many entries there are, else the first line (equal values in
    other JSON: a changed type)."""
    try:
        values = parse_json(stored, "summary.json")
    except UserError as exc:
        return f" ({exc})"
    if isinstance(values, list):
        # entries before the first mismatch matched byte for byte
        for old, new in zip(values[stream.first:], stream.kept or [], strict=False):
            if old != new:
                return f" at seed {new['seed']}, stage {new['stage']}"
        if len(values) != stream.count:
            return f" ({len(values)} entries, expected {stream.count})"
    expected = stream.expected().decode().splitlines()
    actual = stored.decode("utf-8", errors="replace").splitlines()
    for number, (a, b) in enumerate(zip(actual, expected, strict=False), start=1):
        if a != b:
            return (f": its values are equal but their JSON is not (line {number}: "
                    f"{a.strip()[:60]!r}, expected {b.strip()[:60]!r}; a type change such as "
                    "63 to 63.0, 1 to true or 0.0 to -0.0)")

    return f" ({len(actual)} lines, expected {len(expected)})"
