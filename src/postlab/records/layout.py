"""A run folder's shape, checked from the file system before any of its files is read.

A record is its folder: the fingerprint hashes the files in it, ``verify`` re-checks them,
and no reader may read anything else. So the folder holds no symbolic link, whatever it
points to (a link to an identical copy elsewhere still makes the run depend on a file nobody
hashed as part of it), and nothing but plain files and folders (a FIFO named like a chunk
would hang a reader); a chunked record's ``rows/`` holds exactly the chunks its manifest
names, each of the size named there; and a record of the one-document layout has no
``rows/`` beside it (two layouts, one of them never read). These checks only list and stat
entries, so every command runs them, commands that hash nothing included; what the files
hold is checked where they are read (a chunk hashed before it is parsed, its columns
against its format before one is read).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.jsonio import file_kind
from postlab.records.chunks import CHUNK_DIR, chunk_layout_problems

if TYPE_CHECKING:
    from postlab.records.models import Record

PLAN_FILE = "plan.json"
RECORD_FILE = "record.json"
SUMMARY_FILE = "summary.json"
#: The engine of a record that names none: records of the exact engine keep the form they
#: had before there was a second engine.
UNNAMED_ENGINE = "exact"

#: What a run folder holds at its top level that a command may read (besides checkpoints,
#: ``*.pt``, and the chunks under ``rows/``): checked where a record file is named on its own,
#: whose folder may be any folder (a download folder, a project's root) holding other things.
RUN_FILES = (RECORD_FILE, "record.json.gz", PLAN_FILE, SUMMARY_FILE, "fingerprint.txt",
             "registration.json", "tokenizer.json")


def foreign_entries(folder: Path, *, whole: bool = True) -> list[str]:
    """Every symbolic link, and every entry that is neither a plain file nor a folder, in
    ``folder`` and its subfolders (links are not followed), as paths relative to it;
    ``whole`` False: only among the files a run's commands read there (:data:`RUN_FILES`,
    checkpoints, ``rows/``)."""
    found: list[str] = []
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError as exc:
            raise UserError(f"{current}: cannot be listed ({exc.strerror})") from None
        for entry in entries:
            if not whole and current == folder and not (
                    entry.name in RUN_FILES or entry.name.endswith(".pt")
                    or entry.name == CHUNK_DIR):
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:  # removed while the folder was listed
                continue
            name = os.path.relpath(entry.path, folder)
            if stat.S_ISLNK(mode):
                found.append(f"{name}: a symbolic link")
            elif stat.S_ISDIR(mode):
                if whole or current != folder or entry.name == CHUNK_DIR:
                    pending.append(Path(entry.path))
            elif not stat.S_ISREG(mode):
                found.append(f"{name}: a {file_kind(mode)}, not a plain file")
    return found


def link_problems(folder: Path, *, whole: bool = True) -> list[str]:
    """:func:`foreign_entries`, each said as a problem of the run folder."""
    return [f"{entry} (a run folder holds its own files: replace it with the file itself)"
            for entry in foreign_entries(folder, whole=whole)]


def layout_problems(folder: Path, record: Record, *,
                    unlisted_ok: bool = False) -> list[str]:
    """Where the folder's files disagree with the record's layout, from the file system
    alone: a chunked record's ``rows/`` against its manifest (``unlisted_ok``: chunks no
    manifest names are left to a resume, which removes them), or a ``rows/`` beside a
    record of the one-document layout."""
    if record.chunks is not None:
        return chunk_layout_problems(folder, record.chunks, unlisted_ok=unlisted_ok)
    rows = folder / CHUNK_DIR
    if rows.exists() or rows.is_symlink():
        return [f"{CHUNK_DIR}/: beside a record of the one-document layout, whose seeds are "
                "inline; a record has one layout (remove the folder that is not the run's)"]
    return []


def first_of(problems: list[str]) -> str:
    """The first problem, with how many more there are: what a one-line refusal says."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{problems[0]}{more}"


def refuse_folder(folder: Path, problems: list[str]) -> None:
    """The first problem in one line, naming the folder, with how many more there are."""
    if problems:
        raise UserError(f"{folder}: {first_of(problems)}")


def check_links(folder: Path, *, whole: bool = True) -> None:
    """Refuse a folder holding a link or a special file, before anything in it is read
    (``whole`` False: a record file named on its own, whose folder is checked only where a
    command reads it)."""
    refuse_folder(folder, link_problems(folder, whole=whole))


def check_layout(folder: Path, record: dict[str, Any], *, unlisted_ok: bool = False) -> None:
    """Refuse a folder whose files disagree with its record's layout
    (:func:`layout_problems`)."""
    refuse_folder(folder, layout_problems(folder, record, unlisted_ok=unlisted_ok))
