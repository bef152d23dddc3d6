"""Proofs remembered by digest, so that a record's second reader does not prove its seeds again.

Every reader proves each seed of a chunked record before computing from it: its rows fit the
plan and its digests, recomputed from the rows, are the ones taken in training
(:func:`~postlab.records.columns.checked_batches`). On a record of 1,000 teaching seeds that
proof is about half of what a report costs (10 of 20 ms a seed-run, Intel Xeon, 2 cores,
2026-12-07), and its outcome depends only on what this module hashes:

- the record's chunks as the manifest names them (file, sha256, size, seeds), and the seeds
  in the reader's order; each chunk is hashed against the manifest whenever it is read, so a
  remembered proof covers exactly the bytes every reader reads;
- the plan, byte for byte as JSON;
- for a run folder, its path and the checkpoint files present in it (the fit checks that each
  checkpoint a seed names is there);
- postlab's source, file by file, and the versions of Python, pyarrow and numpy (the checks
  are code).

A pass that proves every seed of the record itself, with all of these the same at its end as
at its start, remembers that under one sha256 of them,
in the user's cache folder (``POSTLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/postlab``, else
``~/.cache/postlab``); a later reader of the same state takes the seeds as proven. ``postlab
verify`` always proves afresh, and remembers what it proved. Like the digests, this guards
against accidents and careless edits, not against someone who rewrites the cache too: it is a
cache, not evidence; an unreadable or unwritable memo only means the proofs run again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from postlab.errors import UserError
from postlab.jsonio import dump_json, parse_json, read_bytes, replace_bytes
from postlab.machine.cache import cache_dir

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.records.models import Record

#: Versions the memo's key and layout.
MEMO_VERSION = 1


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def proof_key(record: Record, plan: Plan, folder: Path | None) -> str | None:
    """One sha256 over everything proving a chunked record's seeds depends on (see the
    module's docstring), or None for a record that is not chunked or a folder that cannot be
    listed (then the proofs run)."""
    from postlab.machine import provenance
    from postlab.records.chunks import ChunkedRuns

    runs = record.runs
    if not isinstance(runs, ChunkedRuns):
        return None
    checkpoints = None
    if folder is not None:
        try:
            checkpoints = sorted(entry.name for entry in folder.iterdir()
                                 if entry.suffix == ".pt" and entry.is_file())
        except OSError:
            return None
    import platform

    import numpy
    import pyarrow

    try:
        source = provenance.source_digest()
    except OSError:
        return None
    parts = {
        "memo": MEMO_VERSION,
        "chunks": record.chunks,
        "rows": str(runs.folder.absolute()),
        "seeds": list(runs.seeds),
        "plan": _sha256(dump_json(plan.data())),
        "folder": None if folder is None else str(folder.absolute()),
        "checkpoints": checkpoints,
        "source": source,
        # the checks' JSON and Arrow kernels are these libraries' code too
        "libraries": [platform.python_version(), pyarrow.__version__, numpy.__version__],
    }
    try:
        return _sha256(dump_json(parts))
    except (TypeError, ValueError):
        return None  # a manifest JSON cannot hold: the proofs run, and the checks say why


def _memo_path(key: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / "proven" / f"{key}.json"


def remembered(key: str | None) -> bool:
    """Whether a pass proved every seed of the state ``key`` names."""
    path = None if key is None else _memo_path(key)
    try:
        if path is None or not path.is_file():
            return False
        memo = parse_json(read_bytes(path, "proof memo"), str(path))
        return memo["memo"] == MEMO_VERSION and memo["key"] == key
    except (UserError, KeyError, TypeError, OSError):
        return False  # unreadable or not a memo: the proofs simply run


def remember_if_unchanged(key: str | None, record: Record, plan: Plan,
                          folder: Path | None, seeds: int) -> None:
    """:func:`remember` the state ``key`` named before a pass, if it names it still: a
    checkpoint file removed (or added) while the pass ran leaves the proof unremembered."""
    if key is not None and proof_key(record, plan, folder) == key:
        remember(key, seeds)


def remember(key: str | None, seeds: int) -> None:
    """Note that every one of the ``seeds`` seeds of the state ``key`` names was proven."""
    path = None if key is None else _memo_path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_bytes(path, dump_json({"memo": MEMO_VERSION, "key": key, "seeds": seeds},
                                      indent=1))
    except (OSError, UserError):
        pass  # a cache that cannot be written costs the next reader its proofs, nothing more
