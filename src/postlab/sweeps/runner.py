"""Running a sweep: every version frozen into the sweep folder, every (version, seed) a task.

The sweep folder holds the sweep file as given, an index of its versions, and one ordinary run
folder per version (``plan.json``, ``record.json``, checkpoints, summary, fingerprint), so every
command that reads a run reads a sweep's versions, and each version's record equals that of
``postlab run`` on its plan. All versions share one executor: the local pool or a Ray cluster.

Everything is validated and every version is frozen before any task starts. A task that fails
(a non-finite loss, say) marks its seed failed and the others go on; ``--resume`` keeps every
completed seed and trains what is missing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postlab.engines.registry import DEFAULT_ENGINE
from postlab.errors import UserError
from postlab.jsonio import dump_json, publish_bytes, read_bytes
from postlab.plan.arms import arm_names
from postlab.plan.frozen import LoadedPlan, load_plan, parse_plan, teaching_plan_loaded
from postlab.records.layout import PLAN_FILE
from postlab.records.models import Record
from postlab.runs.folder import check_resumable
from postlab.runs.orchestration import OpenRun, RunOptions, finish_run, open_run, run_tasks
from postlab.runs.progress import Quiet
from postlab.sweeps.folder import (
    INDEX_FILE,
    INDEX_SCHEMA,
    SWEEP_FILE,
    is_sweep,
    read_index,
)
from postlab.sweeps.progress import SweepProgress
from postlab.sweeps.spec import Version, base_path, expand, parse_sweep


@dataclass(frozen=True)
class SweepOptions:
    out_dir: Path
    workers: int = 1
    executor: str | None = None  # a kind in runs.executors.EXECUTORS; None: by workers
    executor_settings: tuple[tuple[str, Any], ...] = ()  # e.g. (("address", "..."),)
    resume: bool = False
    device: str = "cpu"
    log: tuple[str, ...] = ()  # step loggers of every version's tasks (engines.steplog.LOGGERS)
    engine: str = DEFAULT_ENGINE  # a name in postlab.engines.registry.ENGINES


def load_versions(spec_path: Path, today: str) -> tuple[bytes, list[Version]]:
    """The sweep file's bytes and its versions, every one validated; nothing is written."""
    raw = read_bytes(spec_path, "sweep file")
    spec = parse_sweep(raw, str(spec_path))
    path = base_path(spec, spec_path)
    base: LoadedPlan = load_plan(path) if path is not None else teaching_plan_loaded()
    versions = expand(spec, base, today, str(spec_path))
    threads = {v.plan.threads for v in versions}
    if len(threads) > 1:
        raise UserError(f"{spec_path}: versions differ in threads ({sorted(threads)}); a sweep "
                        "runs every task on the same number of threads")
    return raw, versions


def create_sweep(spec_path: Path, out_dir: Path, today: str) -> None:
    """Freeze every version into a new sweep folder: the sweep file, one run folder with its
    plan per version, and the index. Everything is written into a hidden sibling folder that
    is renamed into place last, so the folder appears complete or not at all."""
    raw, versions = load_versions(spec_path, today)
    if out_dir.exists() or out_dir.is_symlink():
        raise UserError(f"{out_dir}: already exists; choose a new --out-dir, or pass --resume "
                        "to complete an interrupted sweep there")
    parent = out_dir.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".partial",
                                        dir=parent))
    except OSError as exc:
        raise UserError(f"{out_dir}: cannot create the sweep folder: {exc.strerror}") from None
    try:
        publish_bytes(staging / SWEEP_FILE, raw)
        for version in versions:
            (staging / version.name).mkdir()
            publish_bytes(staging / version.name / PLAN_FILE, version.raw)
        index = {"schema": INDEX_SCHEMA, "base_sha256": versions[0].sha256,
                 "versions": [{"name": v.name, "sha256": v.sha256, "changes": v.changes}
                              for v in versions]}
        publish_bytes(staging / INDEX_FILE, dump_json(index))
        os.chmod(staging, 0o755)
        try:
            os.rename(staging, out_dir)  # refuses a folder that appeared meanwhile, unless empty
        except OSError as exc:
            raise UserError(f"{out_dir}: cannot create the sweep folder: {exc.strerror}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def run_sweep(spec_path: Path | None, options: SweepOptions, today: str,
              progress: SweepProgress | None = None) -> dict[str, Record | None]:
    """Train every version's pending seeds; returns {version name: record or None (failed)}.

    The executor starts (and a Ray cluster is reached) before the sweep folder is written, so
    a cluster that cannot be reached leaves nothing behind.
    """
    from postlab.engines.steplog import check_loggers
    from postlab.runs.executors import default_kind, make_executor

    check_loggers(options.log)
    out = options.out_dir.absolute()  # tasks may run where the working folder is another
    if options.resume:
        if not is_sweep(out):
            raise UserError(f"{out}: no complete sweep folder to resume (no {INDEX_FILE}); "
                            "start the sweep again in a new folder")
        if spec_path is not None and read_bytes(spec_path, "sweep file") != read_bytes(
                out / SWEEP_FILE, "sweep file"):
            raise UserError(f"{out}: the sweep folder was made from another sweep file")
        first = out / read_index(out)[1][0].name / PLAN_FILE
        threads = parse_plan(read_bytes(first, "plan"), str(first), first).model.threads
    else:
        if spec_path is None:
            raise UserError("a new sweep needs its sweep file")
        if out.exists():
            raise UserError(f"{out}: already exists; choose a new --out-dir, or pass --resume "
                            "to complete an interrupted sweep there")
        threads = load_versions(spec_path, today)[1][0].plan.threads
    kind = options.executor or default_kind(options.workers)
    with make_executor(kind, workers=options.workers, threads=threads, sink=Quiet().handle,
                       **dict(options.executor_settings)) as executor:
        if not options.resume:
            create_sweep(spec_path, out, today)
        # the record says how many tasks ran at once, whatever asked for it
        runs = _open_versions(out, options, executor.capacity)
        total = sum(len(run.pending) * (1 + len(arm_names(run.typed))) - len(run.kept)
                    for run in runs)
        progress = progress or SweepProgress(total)
        progress.total = total
        pending = [run for run in runs if run.pending]
        if pending:
            run_tasks(executor, pending, progress.watch, keep_going=True)
    for run in pending:  # partial writes of tasks whose worker died and was run again
        for leftover in run.options.out_dir.glob(".*.partial"):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink()
    return {run.options.out_dir.name: None if run.failed else finish_run(run) for run in runs}


def _open_versions(out: Path, options: SweepOptions, workers: int) -> list[OpenRun]:
    """Every version's run folder, reopened as a run to resume (each holds its frozen plan)."""
    versions = read_index(out)[1]
    checked = []
    for entry in versions:  # every version checked before any is reopened (which writes)
        checked.append(check_resumable(out / entry.name))
        if checked[-1][0].sha256 != entry.sha256:
            raise UserError(f"{out / entry.name / PLAN_FILE}: not the plan the sweep index "
                            "names")
    runs = []
    for entry, folder_checked in zip(versions, checked, strict=True):
        folder = out / entry.name
        run_options = RunOptions(out_dir=folder, workers=workers, resume=True,
                                 display=Quiet(), executor=options.executor,
                                 device=options.device, log=options.log,
                                 engine=options.engine, checked=folder_checked)
        runs.append(open_run(None, None, run_options))
    return runs
