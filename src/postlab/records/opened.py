"""A run folder opened and checked once, the same way for every reader.

Every command that reads a run (report, plot, samples, compare, export, the exercises) and
``postlab.load_run`` open it here: the record read strictly, its plan (``plan.json`` beside
it, else the teaching plan) linked by hash, its rows fitting the plan, and every part still
matching the digests taken in training, so no number is shown from a damaged or edited record.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postlab.errors import UserError
from postlab.jsonio import read_bytes
from postlab.plan.frozen import LoadedPlan, load_plan, teaching_plan_loaded
from postlab.records.chunks import unlisted_chunks
from postlab.records.record import (
    RunFiles,
    check_plan_link,
    decode_record_bytes,
    each_seed,
    is_chunked,
    locate_run,
    run_changed_parts,
    run_reading_problems,
)


@dataclass(frozen=True)
class OpenedRun:
    """A checked run: where its files are, its record (and the record's sha256), its plan."""

    files: RunFiles
    record: dict[str, Any]
    record_sha256: str
    plan: LoadedPlan
    #: the run folder's registration, checked against the record and the plan; None if the
    #: record names none
    registration: dict[str, Any] | None = None

    @property
    def source(self) -> Path:
        """The record file, which messages about the run name."""
        return self.files.record


def plan_beside(record_path: Path, plan_path: Path | None = None) -> LoadedPlan:
    """``plan_path`` if given, else ``plan.json`` beside the record, else the teaching plan."""
    if plan_path is not None:
        return load_plan(plan_path)
    beside = record_path.parent / "plan.json"
    return load_plan(beside) if beside.is_file() else teaching_plan_loaded()


def registration_of(record: dict[str, Any], plan: LoadedPlan, folder: Path
                    ) -> tuple[dict[str, Any] | None, list[str]]:
    """The registration a record names, read from its run folder, and every way it fails:
    missing, not the file the record names, unsound for the plan, or made after training
    began."""
    from postlab.jsonio import MalformedJSON, parse_json
    from postlab.plan.registration import REGISTRATION_FILE, parse_time, registration_problems

    named = record.get("registration")
    if named is None:
        return None, []
    path = folder / REGISTRATION_FILE
    if not path.is_file():
        return None, [f"{path}: missing; the record names a registration"]
    raw = read_bytes(path, "registration")
    if hashlib.sha256(raw).hexdigest() != named["sha256"]:
        return None, [f"{path}: changed since training (the record names sha256 "
                      f"{named['sha256']})"]
    try:
        registration = parse_json(raw, str(path))
    except MalformedJSON as exc:
        return None, [str(exc)]
    problems = [f"{path}: {p}" for p in registration_problems(registration, plan.data,
                                                             plan.sha256)]
    if not problems:
        if registration["hypotheses_sha256"] != named["hypotheses_sha256"] or \
                registration["registered_at"] != named["registered_at"]:
            problems.append(f"{path}: the record names other hypotheses or another time")
        registered = parse_time(named["registered_at"])
        began = parse_time(named["training_started_at"])
        if registered is not None and began is not None and registered > began:
            problems.append(f"{path}: registered at {named['registered_at']}, after training "
                            f"began ({named['training_started_at']})")
    return (None if problems else registration), problems


def refuse(problems: list[str], source: Path, what: str,
           error: type[UserError] = UserError) -> None:
    """The first problem in one line, with how many more there are."""
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise error(f"{source}: {what}: {problems[0]}{more}")


def refuse_each(record: dict[str, Any], problems_of: Callable[[dict[str, Any]], list[str]],
                source: Path, what: str, error: type[UserError] = UserError) -> None:
    """:func:`refuse` on every seed's problems (a chunked record's as each seed is read:
    :func:`~postlab.records.record.each_seed`)."""
    each_seed(record, problems_of, functools.partial(refuse, source=source, what=what,
                                                     error=error))


def require_readable(record: dict[str, Any], plan: dict[str, Any], source: Path) -> None:
    """Every seed readable under the plan (``reading_problems``), or refused."""
    refuse_each(record, functools.partial(run_reading_problems, plan=plan), source,
                "record does not fit the plan")


def check_unchanged(record: dict[str, Any], source: Path) -> None:
    """A reader shows only numbers whose rows still match the digests taken in training."""
    each_seed(record, run_changed_parts, functools.partial(_changed, source))


def _changed(source: Path, changed: list[str]) -> None:
    more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
    raise UserError(f"{source}: changed since it was recorded: {changed[0]}{more}; "
                    "'postlab verify' shows every check")


def open_run(target: Path | None, plan_path: Path | None = None, *,
             check_rows: bool = True) -> OpenedRun:
    """A run folder or record file (None: the bundled teaching run), read and checked.

    ``check_rows`` False leaves the rows-fit and digest checks to the caller (a report
    checks the split it was asked for first, so its message names that split). A chunked
    record's seeds are checked as they are first read (``each_seed``): a seed that fails
    raises :class:`UserError` when reached, before any of its rows are seen.
    """
    files = locate_run(target)
    raw = read_bytes(files.record, "record")
    record = decode_record_bytes(raw, str(files.record), files.record.parent)
    if is_chunked(record):
        # a chunk no manifest names is not evidence a reader may ignore (a crash between a
        # chunk's publication and the record's leaves one; resuming the run removes it)
        stray = unlisted_chunks(files.record.parent, record["chunks"])
        if stray:
            raise UserError(f"{files.record.parent / stray[0]}: in the run folder but not in "
                            "its record's manifest; an interrupted run leaves one ('postlab "
                            "run --resume' removes it), else remove it")
    plan = plan_beside(files.record, plan_path)
    check_plan_link(record, plan, str(files.record))
    registration, problems = registration_of(record, plan, files.record.parent)
    if problems:
        raise UserError(f"{problems[0]}; 'postlab verify' shows every check")
    if check_rows:
        require_readable(record, plan.data, files.record)
        check_unchanged(record, files.record)
    return OpenedRun(files=files, record=record, record_sha256=hashlib.sha256(raw).hexdigest(),
                     plan=plan, registration=registration)
