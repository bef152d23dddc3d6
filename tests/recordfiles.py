"""Reading and editing a run's record whole, whatever its layout, for tests that change it.

A record written by postlab keeps its seeds in Parquet chunks; a test that edits a row reads
the record with every seed inline (``read_record``) and writes it back in the layout it had
(``write_record``), chunks rewritten and named in the manifest with their new digests, as a
careful editor would.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from postlab.jsonio import dump_json
from postlab.records.chunks import CHUNK_DIR, chunk_bytes, chunk_entry, chunk_name
from postlab.records.record import load_record, one_document


def _path(target: Path) -> Path:
    return target / "record.json" if target.is_dir() else target


def read_record(target: Path) -> dict[str, Any]:
    """The JSON of a run folder's (or record file's) record, to edit: its header as written
    and its seeds' entries as a list ``runs`` (read and checked by the typed reader)."""
    record = load_record(_path(target))
    data = copy.deepcopy(record.data())
    data["runs"] = [copy.deepcopy(run.data()) for run in record.runs]
    return data


def write_record(target: Path, record: dict[str, Any]) -> None:
    """Replace a run's record: chunked (one chunk per seed) if ``record`` came from a
    chunked one, else one JSON document."""
    path = _path(target)
    if "chunks" not in record:
        path.write_text(json.dumps(record))
        return
    folder = path.parent
    shutil.rmtree(folder / CHUNK_DIR, ignore_errors=True)
    (folder / CHUNK_DIR).mkdir()
    header = {key: value for key, value in record.items() if key != "runs"}
    header["chunks"], header["seeds"] = [], []
    for index, entry in enumerate(record["runs"]):
        data = chunk_bytes([entry])
        (folder / chunk_name(index)).write_bytes(data)
        header["chunks"].append(chunk_entry(chunk_name(index), data, [entry["seed"]]))
        header["seeds"].append(entry["seed"])
    path.write_bytes(dump_json(header))


def inline_record(record: dict[str, Any]) -> dict[str, Any]:
    """A record's JSON (as :func:`read_record` gives it) in the one-document layout (seeds
    inline), as earlier versions wrote it."""
    document = {key: value for key, value in record.items() if key not in ("chunks", "seeds")}
    document["runs"] = record["runs"]
    return document


def to_one_document(folder: Path) -> None:
    """Rewrite a run folder's record in the one-document layout (its chunks removed), for a
    test that damages a seed's JSON in ways a chunk's typed columns cannot hold."""
    record = one_document(load_record(_path(folder)))
    shutil.rmtree(folder / CHUNK_DIR, ignore_errors=True)
    _path(folder).write_text(json.dumps(record))
