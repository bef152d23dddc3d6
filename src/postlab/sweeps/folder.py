"""A sweep folder's layout and index, readable without loading torch (the CLI reads it to
pin the CPU code path before torch loads)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postlab.errors import UserError
from postlab.jsonio import parse_json, read_bytes

SWEEP_FILE = "sweep.json"
INDEX_FILE = "versions.json"
INDEX_SCHEMA = "postlab.sweep/1"
#: Names in a sweep folder that are not versions.
RESERVED_NAMES = (SWEEP_FILE, INDEX_FILE)


@dataclass(frozen=True)
class SweepVersion:
    """A version as the index records it: its folder, plan hash and the keys it changes."""

    name: str
    sha256: str
    changes: dict[str, Any]


def is_sweep(folder: Path) -> bool:
    return (folder / INDEX_FILE).is_file()


def read_index(folder: Path) -> tuple[str, list[SweepVersion]]:
    """(the base plan's hash, the versions in order) from a sweep folder's index."""
    path = folder / INDEX_FILE
    data = parse_json(read_bytes(path, "sweep index"), str(path))
    if not isinstance(data, dict) or data.get("schema") != INDEX_SCHEMA:
        raise UserError(f"{path}: not a postlab sweep index")
    try:
        versions = [SweepVersion(v["name"], v["sha256"], dict(v["changes"]))
                    for v in data["versions"]]
        return str(data["base_sha256"]), versions
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{path}: malformed sweep index") from None


