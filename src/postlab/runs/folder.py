"""The run folder before training: created with its plan, or, on resume, checked whole and
tidied of what an interrupted invocation left half done.

Everything here runs before the first step and refuses bad input before anything is written:
a resumed folder is checked (its plan, record, seeds, checkpoints, registration, tokenizer)
before any file in it is removed.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from postlab.errors import UserError
from postlab.jsonio import parse_json, publish_bytes, read_bytes
from postlab.plan.arms import arm_names
from postlab.plan.frozen import LoadedPlan, parse_plan
from postlab.plan.registration import REGISTRATION_FILE, utc_now
from postlab.policies.checkpoint import load_checkpoint
from postlab.policies.tokenizers import TOKENIZER_FILE, trained_bytes, uses_bpe
from postlab.records.chunks import CHUNK_DIR, unlisted_chunks
from postlab.records.fingerprint import read_fingerprint_file
from postlab.records.integrity import compare_digests
from postlab.records.layout import PLAN_FILE, RECORD_FILE, check_layout, check_links
from postlab.records.models import Record
from postlab.records.record import load_record


def check_out_dir(out_dir: Path, resume: bool) -> None:
    """A new run needs a folder that does not exist; a resumed one, the folder it left."""
    if not resume and out_dir.exists():
        raise UserError(f"{out_dir}: already exists; choose a new --out-dir, or pass "
                        "--resume to complete an interrupted run there")
    if resume and not out_dir.is_dir():
        raise UserError(f"{out_dir}: no run folder to resume")


def prepare_out_dir(plan: LoadedPlan | None, raw_plan: bytes | None, out_dir: Path,
                    resume: bool, registration: bytes | None = None,
                    checked: tuple[LoadedPlan, Record | None] | None = None
                    ) -> tuple[LoadedPlan, Record | None]:
    """Create the run folder with its plan, or, on resume, check and reopen it.

    On resume the plan stored in the folder is the one trained; a plan given as well must be
    byte-identical to it. ``checked``: the folder's :func:`check_resumable` already taken.
    """
    check_out_dir(out_dir, resume)
    if not resume:
        assert plan is not None and raw_plan is not None
        try:
            out_dir.mkdir(parents=True)
        except OSError as exc:
            raise UserError(f"{out_dir}: cannot create the run folder: {exc.strerror}") from None
        publish_bytes(out_dir / PLAN_FILE, raw_plan)
        if registration is not None:
            publish_bytes(out_dir / REGISTRATION_FILE, registration)
        if uses_bpe(plan.model):
            publish_bytes(out_dir / TOKENIZER_FILE, trained_bytes(plan.model))
        return plan, None
    stored, record = checked or check_resumable(out_dir, plan, registration)
    kept_tokenizer = out_dir / TOKENIZER_FILE
    if uses_bpe(stored.model) and not kept_tokenizer.exists():
        # interrupted between the plan and the tokenizer
        publish_bytes(kept_tokenizer, trained_bytes(stored.model))
    for leftover in [*out_dir.glob(".*.partial"), *(out_dir / CHUNK_DIR).glob(".*.partial")]:
        # an interrupted atomic write (a file) or folder publication (a folder, e.g. a
        # killed 'postlab plot RUN'); what it was writing was never published
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink()
    # chunks published but never named by the record: a crash between the two writes
    listed = record.chunks if record is not None and record.chunks is not None else []
    for name in unlisted_chunks(out_dir, listed):
        path = out_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return stored, record


def check_resumable(out_dir: Path, plan: LoadedPlan | None = None,
                    registration: bytes | None = None
                    ) -> tuple[LoadedPlan, Record | None]:
    """An interrupted run folder checked whole before anything in it is removed or written:
    no link in it, its plan (the one given, if any), its record's layout, seeds, digests,
    checkpoints and registration; returns the plan and the record (None: no seed recorded
    yet)."""
    check_links(out_dir)
    read_fingerprint_file(out_dir)  # one left by an earlier finish is kept: refused if malformed
    plan_path = out_dir / PLAN_FILE
    stored = parse_plan(read_bytes(plan_path, "plan"), str(plan_path), plan_path)
    if plan is not None and stored.sha256 != plan.sha256:
        raise UserError(f"{plan_path}: the run folder's plan (sha256 {stored.sha256}) is not "
                        f"the plan given (sha256 {plan.sha256})")
    record_path = out_dir / RECORD_FILE
    record = load_record(record_path) if record_path.exists() else None
    if record is not None:
        # chunks published but never named by the record (a crash between the two writes)
        # are removed below, once the rest has been checked
        check_layout(out_dir, record, unlisted_ok=True)
        _check_resumed_seeds(out_dir, record, stored)
        registration_entry(stored, out_dir, record)  # the registration it names, checked
    _check_resumed_registration(out_dir, registration)
    kept_tokenizer = out_dir / TOKENIZER_FILE
    if uses_bpe(stored.model) and kept_tokenizer.exists() and \
            read_bytes(kept_tokenizer, "tokenizer") != trained_bytes(stored.model):
        raise UserError(f"{kept_tokenizer}: not the tokenizer the plan trains; cannot resume")
    return stored, record


def _check_resumed_seeds(out_dir: Path, record: Record, stored: LoadedPlan) -> None:
    """A record resumed from: of the folder's plan, each seed one of its pending seeds,
    complete, unchanged since it was recorded, its checkpoints the files it names."""
    record_path = out_dir / RECORD_FILE
    if record.plan_sha256 != stored.sha256:
        raise UserError(f"{record_path}: not a record of the plan in {out_dir / PLAN_FILE}")
    stages = ["initial", *arm_names(stored.model)]
    seen = set()
    for run in record.runs:
        seed = run.seed
        if seed not in stored.model.seeds or seed in seen:
            raise UserError(f"{record_path}: seed {seed} is not a pending seed of the plan; "
                            "cannot resume from this record")
        seen.add(seed)
        if list(run.checkpoints or {}) != stages or list(run.evaluations) != stages:
            raise UserError(f"{record_path}: seed {seed} is incomplete; cannot resume from it")
        # digests are taken, and compared, from the entry's JSON
        if run.digests is not None and compare_digests(run.data(), run.data()["digests"]):
            raise UserError(f"{record_path}: seed {seed} changed since it was recorded; "
                            "cannot resume from it")
        for info in (run.checkpoints or {}).values():
            load_checkpoint(out_dir / info.file, info.sha256)  # refuses a changed file


def _check_resumed_registration(out_dir: Path, registration: bytes | None) -> None:
    """A registration given to a resumed run must be the one the run began with: one that
    arrives after training started would not precede it."""
    if registration is None:
        return
    kept = out_dir / REGISTRATION_FILE
    if not kept.exists():
        raise UserError(f"{out_dir}: the run began without a registration; one given now "
                        "would not precede its training (resume without --registration)")
    if read_bytes(kept, "registration") != registration:
        raise UserError(f"{kept}: not the registration given; resume with the run's own "
                        "(or without --registration)")


def registration_entry(plan: LoadedPlan, out_dir: Path, previous: Record | None
                       ) -> dict[str, Any] | None:
    """What the record says of the run folder's registration: the file's sha256, the time
    it was registered and the time training began. A resumed run keeps what its record says,
    once the file is checked against it as every reader checks it (it may have been changed
    since); a new run's file was checked before it was copied in, and training begins now,
    before this invocation's first step."""
    from postlab.records.opened import registration_of

    path = out_dir / REGISTRATION_FILE
    if previous is not None:
        if previous.registration is None:
            if path.exists():
                raise UserError(f"{path}: the record names no registration; one added after "
                                "training began would not precede it")
            return None
        _, problems = registration_of(previous, plan, out_dir)
        if problems:
            raise UserError(problems[0])
        # the new record's header is JSON: the entry as the previous record holds it
        return previous.data()["registration"]
    if not path.exists():
        return None
    raw = read_bytes(path, "registration")
    registration = parse_json(raw, str(path))
    return {"sha256": hashlib.sha256(raw).hexdigest(),
            "registered_at": registration["registered_at"],
            "hypotheses_sha256": registration["hypotheses_sha256"],
            "training_started_at": utc_now()}
