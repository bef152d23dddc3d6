"""MkDocs hook: a benchmark's history is data under ``bench/results/``, and its page's table is
made from it when the site is built, never edited by hand.

A page asks for a table with a comment of its own line::

    <!-- results: bench/results/ci.json columns=date,machine,change,in_all,pytest,tests -->

``columns`` names the fields shown, in order (a dotted name reads into nested objects);
without it the table shows date, machine, the command, and every other number the entry
holds. A missing file or field fails the build (the site builds with ``--strict``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

MARKER = re.compile(r"^<!-- results: (?P<path>\S+)(?: columns=(?P<columns>\S+))? -->$",
                    re.MULTILINE)
ROOT = Path(__file__).resolve().parents[1]


def _field(entry: dict[str, Any], name: str) -> Any:
    value: Any = entry
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"no field {name!r} in an entry")
        value = value[part]
    return value


def _numbers(value: Any, prefix: str = "") -> list[str]:
    """Every number inside ``value``, as 'dotted.name value'."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [f"{prefix} {value:,}" if isinstance(value, int) else f"{prefix} {value:g}"]
    if isinstance(value, dict):
        return [item for key, inner in value.items()
                for item in _numbers(inner, f"{prefix}.{key}" if prefix else str(key))]
    return []


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")


def table(path: str, columns: str | None) -> str:
    entries = json.loads((ROOT / path).read_text())
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: a benchmark history is a non-empty list of entries")
    if columns:
        names = columns.split(",")
        rows = [[_cell(_field(entry, name)) for name in names] for entry in entries]
    else:
        names = ["date", "machine", "command", "figures"]
        rows = []
        for entry in entries:
            rest = {k: v for k, v in entry.items()
                    if k not in ("date", "machine", "command", "cores")}
            rows.append([_cell(entry.get("date", "")), _cell(entry.get("machine", "")),
                         f"`{_cell(entry.get('command', ''))}`",
                         _cell("; ".join(_numbers(rest)))])
    head = "| " + " | ".join(name.replace("_", " ") for name in names) + " |"
    rule = "| " + " | ".join("---" for _ in names) + " |"
    return "\n".join([head, rule, *("| " + " | ".join(row) + " |" for row in rows)])


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda m: table(m.group("path"), m.group("columns")), markdown)
