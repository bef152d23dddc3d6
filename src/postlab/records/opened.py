"""A run folder opened and checked once, the same way for every command.

Every command that reads a run (report, plot, samples, compare, export, the exercises,
reproduce) and ``postlab.load_run`` open it here: the folder's shape first, from the file
system alone (no link, no file the record does not name, chunks of the sizes its manifest
names: :mod:`postlab.records.layout`), then the record read strictly, its plan (``plan.json``
beside it, else the teaching plan) linked by hash, its registration checked where it names
one, and, as each seed is read, its rows fitting the plan, every part still matching the
digests taken in training and, for a record postlab made, every part a postlab record
carries, so no number is shown from a damaged, edited or partial-by-hand record.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.jsonio import read_bytes
from postlab.plan.frozen import LoadedPlan, load_plan, teaching_plan_loaded
from postlab.records.conformance import (
    each_seed,
    run_changed_parts,
    run_missing_parts,
    run_plan_problems,
    run_reading_problems,
)
from postlab.records.layout import check_layout, check_links, first_of
from postlab.records.models import Record, SeedEntry
from postlab.records.record import (
    RunFiles,
    check_plan_link,
    decode_record_bytes,
    locate_run,
)

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.records.columns import RowTables


@dataclass(frozen=True)
class OpenedRun:
    """A checked run: where its files are, its record (and the record's sha256), its plan."""

    files: RunFiles
    record: Record
    record_sha256: str
    plan: LoadedPlan
    #: the run folder's registration, checked against the record and the plan; None if the
    #: record names none
    registration: dict[str, Any] | None = None
    #: what readers computed from this opening, by what they asked (an analysis per split):
    #: a report's text, findings and page share one analysis instead of one each
    computed: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

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


def registration_of(record: Record, plan: LoadedPlan, folder: Path
                    ) -> tuple[dict[str, Any] | None, list[str]]:
    """The registration a record names, read from its run folder, and every way it fails:
    missing, not the file the record names, unsound for the plan, or made after training
    began."""
    from postlab.jsonio import MalformedJSON, parse_json
    from postlab.plan.registration import REGISTRATION_FILE, parse_time, registration_problems

    named = record.registration
    if named is None:
        return None, []
    path = folder / REGISTRATION_FILE
    if not path.is_file():
        return None, [f"{path}: missing; the record names a registration"]
    raw = read_bytes(path, "registration")
    if hashlib.sha256(raw).hexdigest() != named.sha256:
        return None, [f"{path}: changed since training (the record names sha256 "
                      f"{named.sha256})"]
    try:
        registration = parse_json(raw, str(path))
    except MalformedJSON as exc:
        return None, [str(exc)]
    problems = [f"{path}: {p}" for p in registration_problems(registration, plan.model,
                                                             plan.sha256)]
    if not problems:
        if registration["hypotheses_sha256"] != named.hypotheses_sha256 or \
                registration["registered_at"] != named.registered_at:
            problems.append(f"{path}: the record names other hypotheses or another time")
        registered = parse_time(named.registered_at)
        began = parse_time(named.training_started_at)
        if registered is not None and began is not None and registered > began:
            problems.append(f"{path}: registered at {named.registered_at}, after training "
                            f"began ({named.training_started_at})")
    return (None if problems else registration), problems


def refuse(problems: list[str], source: Path, what: str,
           error: type[UserError] = UserError) -> None:
    """The first problem in one line, with how many more there are."""
    if problems:
        raise error(f"{source}: {what}: {first_of(problems)}")


def refuse_each(record: Record, problems_of: Callable[[SeedEntry], list[str]],
                source: Path, what: str, error: type[UserError] = UserError) -> None:
    """:func:`refuse` on every seed's problems (a chunked record's as each seed is read:
    :func:`~postlab.records.conformance.each_seed`)."""
    each_seed(record, problems_of, functools.partial(refuse, source=source, what=what,
                                                     error=error))


def require_readable(record: Record, plan: Plan, source: Path) -> None:
    """Every seed readable under the plan (``reading_problems``), or refused."""
    refuse_each(record, functools.partial(run_reading_problems, plan=plan), source,
                "record does not fit the plan")


def check_unchanged(record: Record, source: Path) -> None:
    """A reader shows only numbers whose rows still match the digests taken in training."""
    each_seed(record, run_changed_parts, functools.partial(_changed, source))


def check_whole(opened: OpenedRun) -> None:
    """Every seed unchanged since training (:func:`check_unchanged`) and, in a record postlab
    made, whole: a seed of the plan, each part a postlab record carries (a checkpoint entry
    per stage among them, its file in the folder) and its counts fitting the plan. A record
    made by another program (the reference's) is read as far as it goes."""
    check_unchanged(opened.record, opened.source)
    if opened.record.made_by_postlab:
        # the seed list at once (a chunked record names its seeds in record.json): a reader
        # that decides what to print from it has then not printed anything yet
        refuse(seed_order_problems(opened.record.seed_order(), opened.plan.model.seeds),
               opened.source, "not a whole record of its plan")
        # a record read alone (no plan.json beside it) has no checkpoint files to look for
        folder = opened.source.parent if opened.files.plan.is_file() else None
        refuse_each(opened.record, functools.partial(
            whole_problems, plan=opened.plan.model, folder=folder),
            opened.source, "not a whole record of its plan")


def seed_order_problems(recorded: list[int], planned: list[int]) -> list[str]:
    """A postlab record's seeds are some of its plan's, each once, in the plan's order (the
    order postlab records them in, an interrupted run's included)."""
    order = {seed: index for index, seed in enumerate(planned)}
    problems = [f"seed {seed} is not one of the plan's seeds" for seed in recorded
                if seed not in order]
    places = [order[seed] for seed in recorded if seed in order]
    if not problems and any(a >= b for a, b in itertools.pairwise(places)):
        problems.append(f"seeds {recorded} are not each once in the plan's order {planned}")
    return problems


def whole_problems(run: SeedEntry, plan: Plan, folder: Path | None
                   ) -> list[str]:
    """What a seed of a postlab record lacks or holds beyond its plan (see
    :func:`check_whole`, which checks the seed list), and, in its run ``folder`` (None: a
    record read alone), the checkpoint files it names that are not there; an interrupted
    run's record lacks whole seeds, never parts."""
    from postlab.plan.arms import arm_names

    seed = run.seed
    problems = run_missing_parts(run, ["initial", *arm_names(plan)])
    problems += [f"seed {seed}: checkpoint {info.file} is not in the run folder"
                 for info in (run.checkpoints or {}).values()
                 if folder is not None and not (folder / info.file).is_file()]
    return problems + run_plan_problems(run, plan)


def _changed(source: Path, changed: list[str]) -> None:
    raise UserError(f"{source}: changed since it was recorded: {first_of(changed)}; "
                    "'postlab verify' shows every check")


def checked_tables(opened: OpenedRun) -> Iterator[RowTables]:
    """The run's rows as flat tables, a batch of seeds at a time, each seed checked as a
    reader's walk over the seeds checks it (the checks :func:`open_run`, :func:`check_whole`
    and the reader registered), by :func:`~postlab.records.columns.proven_tables`."""
    from postlab.records.columns import proven_tables

    folder = opened.source.parent if opened.files.plan.is_file() else None
    return proven_tables(opened.record, opened.plan.model, folder)


def open_run(target: Path | None, plan_path: Path | None = None, *,
             check_rows: bool = True) -> OpenedRun:
    """A run folder or record file (None: the bundled teaching run), read and checked.

    The folder (a record file's own folder) is checked for links before anything in it is
    read, and against the record's layout before a row is read. ``check_rows`` False leaves
    the rows-fit and digest checks to the caller (a report checks the split it was asked for
    first, so its message names that split), who calls :func:`require_readable` and
    :func:`check_whole`. A chunked record's seeds are checked as they are first read
    (``each_seed``): a seed that fails raises :class:`UserError` when reached, before any of
    its rows are seen.
    """
    files = locate_run(target)
    folder = files.record.parent
    check_links(folder, whole=files.folder is not None)
    raw = read_bytes(files.record, "record")
    record = decode_record_bytes(raw, str(files.record), folder)
    check_layout(folder, record)
    plan = plan_beside(files.record, plan_path)
    check_plan_link(record, plan, str(files.record))
    registration, problems = registration_of(record, plan, folder)
    if problems:
        raise UserError(f"{problems[0]}; 'postlab verify' shows every check")
    opened = OpenedRun(files=files, record=record, record_sha256=hashlib.sha256(raw).hexdigest(),
                       plan=plan, registration=registration)
    if check_rows:
        require_readable(record, plan.model, files.record)
        check_whole(opened)
    return opened
