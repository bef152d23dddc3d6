"""``postlab verify``: re-check everything a record claims, one line per check.

Checks are computed into plain results first and rendered after, so tests read the results.
A failed check means the record, plan or checkpoints do not say what they claim, or that a
part a postlab record must carry is missing: verification fails closed, so removing the
evidence (digests, checkpoint entries, the summary) never turns a failure into a pass. A
warning means something differs that can legitimately change bits (another torch, another
code path) or that a check needs input only the user can give (the expected fingerprint).

This module runs the checks: they are registered in :mod:`.verify_checks`, read what one
walk over the seeds gathered (:mod:`.seed_walk`), and are rendered by :mod:`.verdicts`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from postlab.plan.frozen import LoadedPlan, load_plan, teaching_plan_loaded
from postlab.records.chunks import chunk_problems
from postlab.records.layout import layout_problems, link_problems
from postlab.records.models import Record
from postlab.records.record import RunFiles
from postlab.runs.seed_walk import walk_seeds
from postlab.runs.verdicts import Check
from postlab.runs.verify_checks import CHECKS, Verifying


def _plan_for(files: RunFiles, record: Record) -> tuple[LoadedPlan | None, Check]:
    """The plan beside the record (else the teaching plan), if it is the one the record
    names, and the check that says so."""
    if files.plan.is_file():
        plan = load_plan(files.plan)
        where = str(files.plan)
    else:
        plan = teaching_plan_loaded()
        where = "the teaching plan (no plan.json beside the record)"
    if plan.sha256 == record.plan_sha256:
        return plan, Check(name="plan", status="pass", detail=f"{where} has the recorded "
                                                              f"sha256 {plan.sha256[:16]}…")
    return None, Check(name="plan", status="fail",
                       detail=f"{where} has sha256 {plan.sha256}, the record names "
                              f"{record.plan_sha256}")


def device_here(record: Record) -> str:
    """Re-evaluate on the record's device where this machine has it, else on CPU (and the
    environment check then names the difference)."""
    from postlab.machine.device import cuda_available

    return "cuda" if record.device == "cuda" and cuda_available() else "cpu"


@dataclass(frozen=True, kw_only=True)
class Verified:
    """The checks, and the checkpoint files the record names (what its state covers)."""

    checks: list[Check]
    checkpoint_files: frozenset[str]


def _shown(problems: list[str]) -> str:
    """The first five problems, and how many more."""
    return "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more"
                                      if len(problems) > 5 else "")


def _gated(plan_check: Check, failed: Check, why: str) -> Verified:
    """The verdict where the folder cannot be checked: the plan, what failed, and every
    check that reads the run's files skipped, saying why."""
    return Verified(checkpoint_files=frozenset(), checks=[plan_check, failed, *(
        Check(name=name, status="skip", detail=why)
        for name in CHECKS if CHECKS[name].gated)])


def _row_files(folder: Path, chunks: list[dict[str, Any]]) -> Check:
    """A chunked record's row files against its manifest (``chunks``)."""
    problems = chunk_problems(folder, chunks)
    return Check(name="row files", status="fail" if problems else "pass", detail=(
        _shown(problems) if problems else
        f"{len(chunks)} chunk files match the record's manifest (sha256, "
        "size, seeds) and no other file is in rows/"))


def _blame_environment(checks: list[Check]) -> list[Check]:
    """Re-evaluation recomputes bits: where the numeric environment differs, a failed
    re-evaluation says that may be why."""
    environment = next(c for c in checks if c.name == "environment")
    if environment.status != "warn":
        return checks
    return [replace(c, detail=c.detail + " (the numeric environment differs, see "
                                         "'environment')")
            if c.name == "checkpoint re-evaluation" and c.status == "fail" else c
            for c in checks]


def verify_run(files: RunFiles, record: Record, *,
               expect: str | None = None, quick: bool = False) -> list[Check]:
    """Run every check on a run folder or record (already strictly loaded); ``quick``: every
    check but the checkpoints' re-evaluation, which is said to be skipped."""
    return verify_walked(files, record, expect=expect, quick=quick).checks


def verify_walked(files: RunFiles, record: Record, *,
                  expect: str | None = None, quick: bool = False) -> Verified:
    """:func:`verify_run`, with the checkpoint files its walk found."""
    from postlab.runs.executors import configure_torch

    folder = files.record.parent
    plan, plan_check = _plan_for(files, record)
    shape = link_problems(folder, whole=files.folder is not None) or ([] if record.chunked
                                      else layout_problems(folder, record))
    if shape:
        # a link makes the run depend on a file nobody hashed as part of it, and a second
        # layout is evidence no check reads: no other check can speak for this folder
        return _gated(plan_check, Check(name="run folder", status="fail", detail=_shown(shape)),
                      "needs a run folder of its own files in one layout")
    row_files = _row_files(folder, record.chunks) if record.chunks is not None else None
    if row_files is not None and row_files.status == "fail":
        # every other check reads the rows: none can run on files that are not the ones the
        # record names
        return _gated(plan_check, row_files, "needs the row files intact")
    context = Verifying(files=files, record=record, folder=folder, plan=plan,
                        plan_check=plan_check, row_files=row_files, device=device_here(record),
                        expect=expect, quick=quick)
    typed = context.typed
    configure_torch(typed.threads if typed is not None else 1, context.device)
    early = {name: CHECKS[name].run(context) for name in CHECKS if CHECKS[name].before_walk}
    seen = walk_seeds(record, typed, folder, context.device, quick=quick)
    context = replace(context, seen=seen)
    made = [early[name] if name in early else CHECKS[name].run(context) for name in CHECKS]
    return Verified(checks=_blame_environment([c for c in made if c is not None]),
                    checkpoint_files=frozenset(seen.checkpoint_files))
