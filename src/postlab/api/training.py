"""Training from a script: ``run``, ``reproduce`` and ``sweep``.

Each takes typed arguments, refuses bad input with a :class:`~postlab.errors.UserError`
before anything is written, pins the code path and chooses the device (see
:mod:`.environment`), and returns what it made. Lines meant for a person (the code path, the
device) go to ``say`` and the cost estimate to ``say_cost``; progress events go to
``display``. A run that stops
(a non-finite loss, a dead worker) raises :class:`~postlab.errors.RunFailed` or
:class:`~postlab.engines.train.NonFiniteError`, with its completed seeds kept for ``resume``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.api import environment
from postlab.engines.registry import DEFAULT_ENGINE, ENGINES, engine_for
from postlab.errors import UserError

if TYPE_CHECKING:
    from postlab.plan.frozen import LoadedPlan
    from postlab.plan.schema import Plan
    from postlab.records.compare import Comparison
    from postlab.records.models import Record
    from postlab.runs.counts import ComputeEstimate
    from postlab.runs.progress import Quiet
    from postlab.sweeps.progress import SweepProgress

Say = Callable[[str], None]


def _silent(_: str) -> None:
    """The default ``say``: a script that wants the lines passes ``print``."""


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """A finished run: its folder, record, fingerprint, and how it was computed."""

    out_dir: Path
    record: Record
    fingerprint: str  # every file of the run, provenance included
    #: plan, rows, summary and checkpoints: the same for every run of the plan on this path
    results_fingerprint: str
    code_path: str  # the line saying which CPU code path was pinned, and why
    device: str
    seconds: float


def check_engine(engine: str, plan: Plan, what: str,
                 log: tuple[str, ...] = ()) -> None:
    """A plan the chosen engine cannot train is refused before anything is written."""
    if engine not in ENGINES:
        raise UserError(f"engine {engine!r}: unknown"
                        f"{environment.did_you_mean(engine, ENGINES.names())}; choose one of "
                        f"{', '.join(ENGINES.names())}")
    found = ENGINES[engine].problems(plan, log)
    if found:
        raise UserError(f"{what}: the {engine} engine cannot train {found[0]}")


def check_size(plan: LoadedPlan, allow_large: bool, *, recalibrate: bool = False
               ) -> ComputeEstimate:
    """The plan's estimated cost; a plan over the limits is refused unless ``allow_large``.
    Priced by the calibration this machine kept for the plan, where there is a fresh one
    (``recalibrate``: measured again; see :mod:`postlab.runs.calibrations`)."""
    from postlab.runs.calibrations import check_size_here

    return check_size_here(plan.model, allow_large, recalibrate=recalibrate)


def check_loggers(log: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Live loggers by name, each once; a missing package is refused before any write."""
    from postlab.engines.steplog import check_loggers as check

    names = tuple(dict.fromkeys(log))
    check(names)
    return names


def _plan_to_train(plan: str | Path | None, out_dir: Path, resume: bool
                   ) -> tuple[LoadedPlan | None, bytes | None, LoadedPlan | None]:
    """The plan given (None: the teaching plan, or on resume the folder's own), its bytes, and
    the plan whose size and engine fit are checked (the folder's, on resume)."""
    from postlab.jsonio import read_bytes
    from postlab.plan.frozen import (
        load_plan,
        parse_plan,
        plan_bytes,
        teaching_plan,
        teaching_plan_loaded,
    )

    if plan is not None:
        loaded = load_plan(Path(plan))
        return loaded, loaded.raw, loaded
    if not resume:
        loaded = teaching_plan_loaded()
        return loaded, plan_bytes(teaching_plan()), loaded
    path = out_dir / "plan.json"
    stored = parse_plan(read_bytes(path, "plan"), str(path), path) if path.is_file() else None
    return None, None, stored


def train(plan: LoadedPlan | None, raw: bytes | None, out_dir: Path, *, workers: int,
          resume: bool = False, device: str = "cpu", engine: str = DEFAULT_ENGINE,
          log: tuple[str, ...] = (), display: Quiet | None = None,
          progress_every: int = 0, registration: bytes | None = None,
          checked: tuple[LoadedPlan, dict[str, Any] | None] | None = None
          ) -> Record:
    """Train a checked plan into ``out_dir`` with an already chosen setting; the record.
    ``registration``: a checked registration's bytes, copied into the folder first;
    ``checked``: on resume, the folder's check already taken (``check_resumable``)."""
    from postlab.runs.orchestration import RunOptions, run_plan
    from postlab.runs.progress import Quiet

    options = RunOptions(out_dir=out_dir, workers=workers, resume=resume,
                         progress_every=progress_every, display=display or Quiet(),
                         device=device, log=log, engine=engine, registration=registration,
                         checked=checked)
    return run_plan(plan, raw, options)


def run(out_dir: str | Path, plan: str | Path | None = None, *, resume: bool = False,
        workers: int | None = None, cpu_path: str | None = None, device: str | None = None,
        engine: str = DEFAULT_ENGINE, log: tuple[str, ...] = (), allow_large: bool = False,
        recalibrate: bool = False, say: Say = _silent, say_cost: Say = _silent,
        display: Quiet | None = None, progress_every: int = 0,
        registration: str | Path | None = None) -> RunResult:
    """Train every seed and arm of ``plan`` (default: the teaching plan) into the new folder
    ``out_dir``, or complete an interrupted run there with ``resume``.

    ``registration``: a file ``register`` wrote for this plan; it is copied into the folder
    before the first step and named in the record, so reports can say the hypotheses were
    registered before training.

    ``cpu_path``: "portable" (default), "native" or a path name, pinned before torch loads
    (in a process that already loaded torch, only the path in force is accepted);
    ``device``: "cpu" (default), "cuda" or "auto"; ``engine``: a name in ``ENGINES``.
    """
    out = Path(out_dir)
    names = check_loggers(log)
    note = environment.pin_for_run(out, cpu_path, resume)  # before torch loads
    chosen, device_note = environment.device_for_run(out, device, resume)
    count = environment.worker_count(workers, chosen)
    loaded, raw, sized = _plan_to_train(plan, out, resume)
    from postlab.runs.folder import check_out_dir

    check_out_dir(out, resume)  # before any line about the run is printed
    registered = None
    if registration is not None and sized is not None:
        from postlab.api.registering import read_registration

        registered = read_registration(Path(registration), sized)
    checked = None
    if resume:  # the folder checked whole before any line about the run is printed
        from postlab.runs.folder import check_resumable

        checked = check_resumable(out, loaded, registered)
    say(note)
    say(device_note)
    if sized is not None:
        check_engine(engine, sized.model, str(plan or "the teaching plan"), names)
        from postlab.runs.estimate_text import render_estimate

        say_cost(render_estimate(check_size(sized, allow_large, recalibrate=recalibrate)))
    start = time.monotonic()
    record = train(loaded, raw, out, workers=count, resume=resume, device=chosen,
                   engine=engine, log=names, display=display, progress_every=progress_every,
                   registration=registered, checked=checked)
    from postlab.records.fingerprint import read_fingerprints

    run_value, results = read_fingerprints(out) or ("", None)
    return RunResult(out_dir=out, record=record, fingerprint=run_value,
                     results_fingerprint=results or "",
                     code_path=note, device=chosen, seconds=time.monotonic() - start)


@dataclass(frozen=True, kw_only=True)
class ReproduceResult:
    """A recorded run trained again: the row-by-row comparison, and the new record."""

    comparison: Comparison
    record: Record
    #: why bits may differ: each difference of what decides them, or that there is none
    environment_hint: str
    #: the results fingerprints of the recorded run and of the new one, where all its seeds
    #: were trained again in a folder (None: a spot check, or a record without its folder)
    results: tuple[str, str] | None = None

    @property
    def identical(self) -> bool:
        return self.comparison.identical


def reproduce(run: str | Path | None, out_dir: str | Path, *, workers: int | None = None,
              cpu_path: str | None = None, device: str | None = None,
              seeds: Sequence[int] = (), allow_large: bool = False,
              recalibrate: bool = False, say: Say = _silent, say_cost: Say = _silent,
              display: Quiet | None = None, progress_every: int = 0) -> ReproduceResult:
    """Train the recorded plan of ``run`` (default: the bundled run) again into ``out_dir``
    on the record's own code path, device and engine, and compare every raw row.

    ``seeds``: only these of the record's seeds, a spot check of a large run (each seed's
    bits do not depend on the others it was trained with). The new folder then holds the
    plan with just these seeds, derived from the recorded one (its parent)."""
    from postlab.records.compare import compare_records
    from postlab.records.record import load_record, locate_run

    environment.check_cpu_path(cpu_path)
    target = None if run is None else Path(run)
    files = locate_run(target)
    record = load_record(files.record)  # to pin its code path; checked whole below
    _check_seeds(record, seeds, str(files.record))  # a refusal before any line is printed
    # Before torch loads: the record's code path, or a clear refusal before training.
    note = environment.pin_for_record(record, cpu_path, strict=True)
    chosen = environment.device_for_record(record, device)
    how = "chosen with --device" if device else "the record's"
    count = environment.worker_count(workers, chosen)
    record, plan = _checked_before_training(target, seeds)
    say(f"{note}; device: {chosen} ({how})")
    raw = plan.raw
    recorded_plan = plan.model
    if seeds:
        picked = [seed for seed in plan.model.seeds if seed in seeds]  # the plan's order
        if len(picked) != len(seeds):
            stray = next(seed for seed in seeds if seed not in picked)
            raise UserError(f"{files.record}: seed {stray} has a run in the record but is not "
                            "in its plan (a damaged record: verify it)")
        say(f"seeds {', '.join(map(str, picked))} ({len(picked)} of the record's "
            f"{len(record.runs)}; a spot check: the others are not trained)")
        # only the chosen seeds' entries are read (a chunked record's others stay on disk)
        chosen_runs = [record.runs[index] for index, seed in enumerate(record.seed_order())
                       if seed in seeds]
        record = record.with_runs(chosen_runs)
        plan, raw = _plan_of_seeds(plan, picked, str(files.record))
    from postlab.runs.estimate_text import render_estimate

    say_cost(render_estimate(check_size(plan, allow_large, recalibrate=recalibrate)))
    engine = engine_for(record).name  # the record's engine makes its bits
    check_engine(engine, plan.model, str(files.record))
    fresh = train(plan, raw, Path(out_dir), workers=count, device=chosen, engine=engine,
                  display=display, progress_every=progress_every)
    compared = fresh
    if plan.model is not recorded_plan:
        compared = _rehashed(fresh, Path(out_dir), recorded_plan)
    results = None
    if not seeds and files.folder is not None and files.plan.is_file():
        from postlab.records.fingerprint import read_fingerprints, results_fingerprint

        new = (read_fingerprints(Path(out_dir)) or ("", None))[1]
        if new:
            results = (results_fingerprint(files.folder, record).value, new)
    return ReproduceResult(comparison=compare_records(record, compared), record=fresh,
                           environment_hint=environment_hint(record, fresh), results=results)


def _checked_before_training(target: Path | None, seeds: Sequence[int]
                             ) -> tuple[Record, LoadedPlan]:
    """The record to reproduce, opened as every reader opens it (its folder, plan,
    registration) and the seeds to train again read (their chunks hashed against the
    manifest) and checked, before anything is trained or written: a record refused after
    training would leave a new folder behind for nothing. What its rows say is not checked
    against their digests or the plan: where they differ from the retrained rows is what
    reproduce reports."""
    from postlab.records.conformance import settle
    from postlab.records.opened import open_run

    opened = open_run(target, check_rows=False)
    # each chunk read is hashed against the manifest and its columns checked first
    settle(opened.record, list(seeds) or None)
    return opened.record, opened.plan


def _check_seeds(record: Record, seeds: Sequence[int], source: str) -> None:
    recorded = record.seed_order()  # without reading a chunked record's rows
    for seed in seeds:
        if seed not in recorded:
            raise UserError(f"--seed {seed}: {source} has no run of seed {seed} (its seeds: "
                            f"{', '.join(map(str, recorded)) or 'none'})")
    twice = sorted({seed for seed in seeds if list(seeds).count(seed) > 1})
    if twice:
        raise UserError(f"--seed {twice[0]}: given twice")


def _plan_of_seeds(plan: LoadedPlan, seeds: list[int], source: str
                   ) -> tuple[LoadedPlan, bytes]:
    """The recorded plan with only ``seeds`` (in its order), as a version derived from it; the
    plan itself where they are all of its seeds. Preregistered hypotheses are left out of the
    derived version: they are decided over all of a run's seeds, and they change no bit."""
    import datetime
    import json

    from postlab.plan.frozen import derive_plan, parse_plan, plan_bytes

    if seeds == plan.model.seeds:
        return plan, plan.raw or plan_bytes(plan.data)
    today = datetime.date.today().isoformat()
    settings = [f"seeds={json.dumps(seeds)}"]
    if plan.model.hypotheses is not None:
        settings.append("hypotheses=null")
    raw = plan_bytes(derive_plan(plan, settings, today))
    return parse_plan(raw, f"{source}: the plan of seeds {seeds}", plan.path), raw


def _rehashed(fresh: Record, out_dir: Path, plan: Plan) -> Record:
    """``fresh`` with each checkpoint's sha256 as if saved under ``plan``: a checkpoint holds
    its plan, so a spot check's (of a derived plan) is compared by what it would be under the
    recorded one: the same weights and kind, bit for bit."""
    import copy
    import hashlib

    from postlab.policies.checkpoint import checkpoint_bytes, load_checkpoint
    from postlab.records.models import SeedEntry

    # the seeds' entries as copies of their JSON, rehashed and typed again (their rows were
    # checked as they were read); a spot check holds few seeds
    entries = []
    for run in fresh.runs:
        data = copy.deepcopy(run.data())
        for info in data.get("checkpoints", {}).values():
            payload = load_checkpoint(out_dir / info["file"], info["sha256"])
            saved = checkpoint_bytes(plan.data(), payload["state_dict"], payload["kind"],
                                     base=payload.get("base"))
            info["sha256"] = hashlib.sha256(saved).hexdigest()
        entries.append(SeedEntry.of(data, f"{out_dir}: seed {run.seed}", rows_checked=True))
    return fresh.with_runs(entries)


def environment_hint(recorded: Record, fresh: Record) -> str:
    """Why the bits may differ: each difference of what decides them, or none."""
    from postlab.machine import numerics

    if recorded.numerics is None or fresh.numerics is None:
        return ("  the record names no numeric environment, so a different CPU code path "
                "or BLAS may explain the difference\n")
    deciding, _ = numerics.differences(recorded.data()["numerics"], fresh.data()["numerics"])
    versions = [f"{key} {then} then, {now} now"
                for key, then, now in (("torch", recorded.torch, fresh.torch),
                                       ("python", recorded.python, fresh.python))
                if then != now]
    if deciding or versions:
        return f"  what decides the bits differs: {'; '.join(versions + deciding)}\n"
    return ("  the numeric environment is the same (code path, BLAS, threads, torch), so the "
            "difference is in the record or the code, not the machine\n")


def sweep(sweep_file: str | Path | None, out_dir: str | Path, *, resume: bool = False,
          workers: int | None = None, executor: str | None = None,
          address: str | None = None, cpu_path: str | None = None,
          device: str | None = None, engine: str = DEFAULT_ENGINE,
          log: tuple[str, ...] = (), allow_large: bool = False, recalibrate: bool = False,
          say: Say = _silent, progress: SweepProgress | None = None
          ) -> dict[str, Record | None]:
    """Freeze every plan version of ``sweep_file`` into ``out_dir`` and train every (version,
    seed), locally or on Ray (``executor="ray"``, ``address``); or complete it with
    ``resume``. Returns each version's record, or None for a version whose tasks failed."""
    import datetime

    from postlab.sweeps import folder  # not runner: it loads torch, which the pin precedes

    out = Path(out_dir)
    spec = None if sweep_file is None else Path(sweep_file)
    if spec is None and not resume:
        raise UserError("postlab sweep needs a sweep file (or --resume with --out-dir)")
    if address is not None and executor != "ray":
        raise UserError("--address is for --executor ray")
    names = check_loggers(log)
    environment.check_cpu_path(cpu_path)
    # A resumed sweep is computed under the settings of its versions' records or kept tasks
    # (the first version that has any), as a resumed run is.
    started = None
    if resume and folder.is_sweep(out):
        from postlab.records.record import resume_settings

        started = next((out / v.name for v in folder.read_index(out)[1]
                        if resume_settings(out / v.name) is not None), None)
    settings_from = started if started is not None else out
    note = environment.pin_for_run(settings_from, cpu_path, started is not None)
    chosen, device_note = environment.device_for_run(settings_from, device,
                                                     started is not None)
    from postlab.sweeps import runner

    today = datetime.date.today().isoformat()
    if not resume:
        _, versions = runner.load_versions(spec, today)  # all refusals come first
        from postlab.plan.frozen import parse_plan
        from postlab.runs.estimate_text import render_estimate

        for version in versions:
            check_engine(engine, version.plan, f"version {version.name}", names)
            estimate = check_size(parse_plan(version.raw, version.name), allow_large,
                                  recalibrate=recalibrate)
        say(f"{len(versions)} versions: {', '.join(v.name for v in versions)}")
        say(f"estimate of one version ({versions[-1].name}):\n{render_estimate(estimate)}")
    if executor == "ray":
        if workers is not None and workers < 1:
            raise UserError(f"--workers must be at least 1, got {workers}")
        count = workers if workers is not None else 0  # 0: the cluster's CPUs
        settings: tuple = (("address", address), ("device", chosen))
    else:
        count = environment.worker_count(workers, chosen)
        settings = ()
    say(note)
    say(device_note)
    options = runner.SweepOptions(out_dir=out, workers=count, executor=executor,
                                  executor_settings=settings, resume=resume, device=chosen,
                                  log=names, engine=engine)
    return runner.run_sweep(spec, options, today, progress or runner.SweepProgress(0, quiet=True))
