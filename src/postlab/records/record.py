"""Reading and writing run records: where a run's files are, a record's bytes, the
chunked layout's seeds, summaries, kept task results, and the plan-hash link.

A record is the raw output of a run (every evaluation and rollout row). It is checked and
typed as it is read (:meth:`~postlab.records.models.Record.of`); whether it fits its plan
is ``records.conformance``'s concern.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from postlab.errors import UserError
from postlab.jsonio import dump_json, parse_json, read_bytes, replace_bytes
from postlab.plan.frozen import LoadedPlan
from postlab.records.models import Record

BUNDLED_RUN = "teaching-run"
RECORD_NAMES = ("record.json", "record.json.gz")


def bundled_run_dir() -> Path | None:
    """The teaching plan's run folder shipped with the package (record, plan, checkpoints)."""
    path = Path(str(resources.files("postlab") / "data" / BUNDLED_RUN))
    return path if record_in(path).is_file() else None


def bundled_record_path() -> Path | None:
    """The bundled teaching record, or None if this build has none."""
    folder = bundled_run_dir()
    return None if folder is None else record_in(folder)


def record_in(folder: Path) -> Path:
    """A run folder's record: ``record.json``, or its compressed form. A folder holding both
    is refused unless they are the same record (the compressed file's data are the plain
    file's bytes): otherwise which one a reader took would decide what it read."""
    found = [folder / name for name in RECORD_NAMES if (folder / name).is_file()]
    if len(found) == 2:
        plain, packed = (read_bytes(path, "record") for path in found)
        if _gunzip(packed, str(found[1])) != plain:
            raise UserError(f"{folder}: holds both {RECORD_NAMES[0]} and {RECORD_NAMES[1]}, "
                            "and they are different records; remove the one that is not "
                            "the run's")
    return found[0] if found else folder / RECORD_NAMES[0]


GZIP_MAGIC = b"\x1f\x8b"


def record_data(raw: bytes, source: str) -> bytes:
    """A record file's JSON bytes: its bytes must be what its name says, gzip data for a
    name ending .gz and plain JSON otherwise (a copy that kept gzip data under a plain name
    would be hashed as one thing and read as another)."""
    if source.endswith(".gz"):
        return _gunzip(raw, source)
    if raw[:2] == GZIP_MAGIC:
        raise UserError(f"{source}: gzip data under a name without .gz (name it "
                        f"{Path(source).name}.gz, or decompress it)")
    return raw


def _gunzip(raw: bytes, source: str) -> bytes:
    """A .gz record file's data: its bytes must be gzip's."""
    if raw[:2] != GZIP_MAGIC:
        raise UserError(f"{source}: named .gz but not gzip data")
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError) as exc:
        raise UserError(f"{source}: damaged gzip data ({exc})") from None


@dataclass(frozen=True)
class RunFiles:
    """Where a run's files are: given a run folder, a record file, or nothing (bundled)."""

    record: Path
    folder: Path | None  # None when only a record file was named

    @property
    def plan(self) -> Path:
        return self.record.parent / "plan.json"


def locate_run(target: Path | None) -> RunFiles:
    if target is None:
        folder = bundled_run_dir()
        if folder is None:
            raise UserError("no bundled record exists in this build of postlab; "
                            "name a record or run folder")
        return RunFiles(record=record_in(folder), folder=folder)
    if target.is_dir():
        return RunFiles(record=record_in(target), folder=target)
    return RunFiles(record=target, folder=None)


def summary_bytes(summary: list[dict[str, Any]]) -> bytes:
    """A summary file's exact bytes (the reference's layout: ``json.dumps(summary,
    indent=2)`` and a newline); ``verify`` compares bytes, so a value changed only in type
    (63 to 63.0, 0.0 to -0.0) is a difference too."""
    return b"".join(summary_piece(entry, index) for index, entry in enumerate(summary)
                    ) + summary_closing(len(summary))


def summary_piece(entry: dict[str, Any], index: int) -> bytes:
    """The bytes entry ``index`` of a summary adds to its file (its separator first), so a
    summary can be written, or compared, an entry at a time."""
    text = json.dumps(entry, indent=2).replace("\n", "\n  ")
    return (("[\n  " if index == 0 else ",\n  ") + text).encode()


def summary_closing(count: int) -> bytes:
    """The bytes that end a summary file of ``count`` entries."""
    return b"\n]\n" if count else b"[]\n"


def decode_record_bytes(raw: bytes, source: str, folder: Path | None = None) -> Record:
    """A record from its file's bytes, checked and typed. A chunked record's seeds are read
    from the chunk files in ``folder`` (the record file's folder) as they are reached."""
    return Record.of(parse_json(record_data(raw, source), source), source, folder)


def load_record(path: Path) -> Record:
    """The record file at ``path`` (``record.json`` or its gzip form), checked and typed; a
    chunked record's seeds are read from the file's folder."""
    return decode_record_bytes(read_bytes(path, "record"), str(path), path.parent)


def one_document(record: Record) -> dict[str, Any]:
    """A record's JSON in the one-document layout earlier versions wrote (and the reference
    reads): every seed's entry inline as ``runs``, where a chunked record has its manifest."""
    document: dict[str, Any] = {}
    for key, value in record.data().items():
        if key == "chunks":
            document["runs"] = entries_of(record)
        elif key != "seeds":
            document[key] = value
    if "runs" not in document:
        document["runs"] = entries_of(record)
    return document


def entries_of(record: Record) -> list[dict[str, Any]]:
    """Every seed's entry as its JSON object, in record order."""
    return [run.data() for run in record.runs]


def check_plan_link(record: Record, plan: LoadedPlan, source: str) -> None:
    """Refuse to report a record against a plan other than the one it was trained under."""
    if record.plan_sha256 != plan.sha256:
        raise UserError(f"{source}: record was made under plan sha256 {record.plan_sha256}, "
                        f"but {plan.path} has sha256 {plan.sha256}")



#: A run folder's subfolder holding finished tasks' results until their seed is recorded, and
#: the settings they were computed under (so a resume before the first recorded seed can pin
#: the same ones, and refuses others).
KEPT_DIR = "tasks"
KEPT_SETTINGS = "settings.json"


def kept_result_path(out_dir: Path, seed: int, stage: str) -> Path:
    """Where a finished (seed, stage) result waits for its seed to be recorded."""
    return out_dir / KEPT_DIR / f"seed-{seed}-{stage}.json"


def keep_results(results: dict[tuple[str, int, str], dict[str, Any]]) -> None:
    """Write finished stages' results, (run folder, seed, stage) -> result, into their run
    folders' kept results, so an interrupted run resumes without training them again."""
    for (out_dir, seed, stage), result in results.items():
        replace_bytes(kept_result_path(Path(out_dir), seed, stage), dump_json(result))


def resume_settings(out_dir: Path) -> dict[str, Any] | None:
    """What a resumed run must be computed under: its record (``numerics``, ``device``) if it
    has one, else the settings its kept task results were computed under, else None. Reads
    no torch, so the command line can pin a code path from it."""
    record_path = out_dir / RECORD_NAMES[0]
    if record_path.is_file():
        return load_record(record_path).data()
    kept = out_dir / KEPT_DIR / KEPT_SETTINGS
    if kept.is_file():
        data = parse_json(read_bytes(kept, "kept settings"), str(kept))
        if isinstance(data, dict) and isinstance(data.get("numerics"), dict):
            return data
        raise UserError(f"{kept}: malformed; remove the folder {kept.parent} to train its "
                        "tasks again")
    return None
