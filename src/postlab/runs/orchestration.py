"""Orchestration of a training run: an engine's tasks handed to an executor, their results
to the record writer.

The engine (:data:`postlab.engines.registry.ENGINES`, by the run's ``engine`` name) turns the
pending seeds into self-contained tasks; each task returns one result per (run folder, seed,
stage) and may make more tasks ready. Orchestration is the same for every engine and every
executor (``executors``: in-process, worker processes, Ray): the run folder is prepared
(:mod:`.folder`), each seed's stages are assembled and written by the record writer
(:mod:`postlab.records.writer`) after each completed seed, and finished stages of seeds not
yet complete are kept for ``resume`` (:mod:`postlab.records.kept`).
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.engines.registry import (
    DEFAULT_ENGINE,
    ENGINES,
    Engine,
    EngineTask,
    StageKey,
    Work,
)
from postlab.engines.steplog import check_loggers
from postlab.errors import RunFailed, UserError
from postlab.machine import numerics
from postlab.plan.arms import arm_names
from postlab.plan.frozen import LoadedPlan
from postlab.records import kept as kept_results
from postlab.records.models import Record
from postlab.records.writer import SeedAssembly, finish_record, new_record, write_record
from postlab.runs.executors import TaskExecutor, configure_torch, default_kind, make_executor
from postlab.runs.folder import prepare_out_dir, registration_entry
from postlab.runs.progress import Quiet

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

__all__ = ["OpenRun", "RunFailed", "RunOptions", "finish_run", "open_run", "run_plan",
           "run_tasks"]


@dataclass
class RunOptions:
    out_dir: Path
    workers: int = 1
    resume: bool = False
    progress_every: int = 0  # RL steps between progress events; 0 sends none
    display: Quiet = field(default_factory=Quiet)
    executor: str | None = None  # a kind in executors.EXECUTORS; None: chosen by workers
    device: str = "cpu"  # where policies train: "cpu" or "cuda" (already resolved)
    #: step loggers (names in ``steplog.LOGGERS``) each task writes to; they change no bit of
    #: the run, so they are not a setting a resumed run must repeat
    log: tuple[str, ...] = ()
    #: which engine trains (a name in ``ENGINES``); recorded, and a resumed run must use the
    #: same
    engine: str = DEFAULT_ENGINE
    #: a registration's exact bytes (checked against the plan by the caller), copied into the
    #: run folder before the first step; None: none, or on resume the folder's own
    registration: bytes | None = None
    #: on resume, what :func:`check_resumable` returned for this folder earlier in this
    #: invocation (the caller checked it before printing or starting anything); None: checked
    #: when the run is opened. Checking reads every chunk and loads every checkpoint, so it is
    #: done once
    checked: tuple[LoadedPlan, Record | None] | None = None


@dataclass
class OpenRun:
    """A run folder being trained: its plan, its record so far, and the seeds still to train.

    Several open runs can share one executor (a sweep); each keeps its own record, written
    after each of its completed seeds, exactly as when it runs alone.
    """

    plan: LoadedPlan
    options: RunOptions
    #: the header ``record.json`` is written with (the writer's JSON, not a read record)
    record: dict[str, Any]
    pending: list[int]
    started: float
    assemblies: dict[int, SeedAssembly] = field(default_factory=dict)
    #: seeds whose task failed in this invocation (a sweep goes on with the others)
    failed: dict[int, str] = field(default_factory=dict)
    #: results of tasks finished by an earlier, interrupted invocation: (seed, stage) -> result
    kept: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    #: complete seeds' entries not yet in a chunk (written with the next record write)
    unwritten: list[dict[str, Any]] = field(default_factory=list)

    def recorded(self) -> set[int]:
        """Seeds the record holds, written or about to be."""
        return {*self.record["seeds"], *(entry["seed"] for entry in self.unwritten)}

    @property
    def typed(self) -> Plan:
        return self.plan.model

    @property
    def engine(self) -> Engine:
        return ENGINES[self.options.engine]

    def work(self, seeds: list[int]) -> Work:
        """These pending seeds, as the engine is asked to train them."""
        options = self.options
        return Work(self.typed, tuple(seeds), options.out_dir,
                    {key: value for key, value in self.kept.items() if key[0] in seeds},
                    options.progress_every, options.device, options.log)

    def write(self) -> None:
        """Write the seeds completed since the last write (:func:`write_record`)."""
        write_record(self.options.out_dir, self.record, self.unwritten, self.typed.seeds)
        self.unwritten = []

    def say(self, line: str) -> None:
        self.options.display.message(line)


def open_run(plan: LoadedPlan | None, raw_plan: bytes | None, options: RunOptions) -> OpenRun:
    """Create (or, on resume, reopen and check) the run folder and start its record."""
    check_loggers(options.log)  # in tasks it would be too late: refused before any write
    plan, previous = prepare_out_dir(plan, raw_plan, options.out_dir, options.resume,
                                     options.registration, options.checked)
    data = plan.model
    start = time.monotonic()
    # Before the record describes the numeric settings.
    configure_torch(data.threads, options.device)
    record = new_record(plan, options.workers, options.device, options.engine)
    registered = registration_entry(plan, options.out_dir, previous)
    if registered is not None:
        record["registration"] = registered
    if previous is not None:
        then_engine = DEFAULT_ENGINE if previous.engine is None else previous.engine
        if then_engine != options.engine:
            raise UserError(f"{options.out_dir}: the run was started with the {then_engine} "
                            f"engine; resume it with --engine {then_engine}")
        # the machine layer compares the numerics as the records hold them
        deciding = (numerics.differences(previous.data()["numerics"], record["numerics"])[0]
                    if previous.numerics is not None else [])
        if deciding:
            raise UserError(f"{options.out_dir}: the run was started with other numeric "
                            f"settings ({'; '.join(deciding)}); resume it where they can be "
                            f"the same (postlab run --resume pins the run's own code path)")
        if previous.parameters is not None:
            record["parameters"] = previous.parameters
        if previous.wall_seconds is not None:
            record["wall_seconds"] = previous.wall_seconds
    unwritten: list[dict[str, Any]] = []
    if previous is not None and previous.chunked:
        # the writer extends the manifest: its own lists, the previous record's left as read
        assert previous.chunks is not None and previous.seeds is not None
        record["chunks"], record["seeds"] = list(previous.chunks), list(previous.seeds)
    elif previous is not None:
        # a record of the earlier layout: its seeds go into chunks with the next write
        unwritten = [run.data() for run in previous.runs]
    done = {*record["seeds"], *(entry["seed"] for entry in unwritten)}
    pending = [seed for seed in data.seeds if seed not in done]
    if done:
        options.display.message(f"resuming: seeds {sorted(done)} already complete")
    run = OpenRun(plan, options, record, pending, start, unwritten=unwritten)
    out = options.out_dir
    if options.resume:
        kept_results.check_kept_settings(out, record)
    if pending and run.engine.keeps_results:
        # Its tasks keep results themselves, and the record names the engine only once a
        # seed is recorded: until then the run folder says under what they were computed, so
        # a resume with another engine or other settings is refused, not half mixed.
        kept_results.write_kept_settings(out, record)
    if options.resume:
        run.kept = kept_results.kept_results(out, record, data, pending, run.say)
        if run.engine.whole_seeds:
            run.kept = kept_results.whole_seeds_kept(out, data, pending, run.kept, run.say)
        if run.kept:
            options.display.message(f"resuming: {len(run.kept)} finished tasks of incomplete "
                                    "seeds kept")
    return run


def finish_run(run: OpenRun) -> Record:
    """Write the wall time, the summary and the fingerprint of a run whose seeds are done."""
    record = run.record
    if run.pending or "wall_seconds" not in record:
        # Wall time of the invocation that finished the run (a resumed run's last part).
        record["wall_seconds"] = time.monotonic() - run.started
        run.write()
    return finish_record(run.options.out_dir, record, run.typed, run.say)


def run_plan(plan: LoadedPlan | None, raw_plan: bytes | None,
             options: RunOptions) -> Record:
    """Train every seed and arm of ``plan`` into ``options.out_dir``; return the record."""
    run = open_run(plan, raw_plan, options)
    if run.pending:
        kind = options.executor or default_kind(options.workers)
        with make_executor(kind, workers=options.workers, threads=run.typed.threads,
                           sink=options.display.handle) as executor:
            run_tasks(executor, [run])
    return finish_run(run)


def _add_seed(assembly: SeedAssembly, run: OpenRun) -> None:
    """Add a complete seed to the record's seeds to be written (the caller writes once after
    adding several, so many seeds cost one write, not one each, and then drops their kept
    results)."""
    run.unwritten.append(assembly.entry())
    run.record.setdefault("parameters", assembly.sft["parameters"] if assembly.sft else None)
    run.options.display.handle({"kind": "seed_done", "seed": assembly.sft["seed"]})


#: Told of every task as it is submitted, finishes, fails or is skipped (its seed failed):
#: (event, run, task, error); a skipped task is None when it was never made (a failed seed's
#: later stages), and the count is the (seed, stage) results the event stands for.
TaskWatcher = Callable[[str, "OpenRun", EngineTask | None, BaseException | None, int],
                       None] | None


def run_tasks(executor: TaskExecutor, runs: list[OpenRun], watch: TaskWatcher = None, *,
              keep_going: bool = False) -> None:
    """Ask each run's engine for its pending seeds' tasks (runs whose plans the engine can
    batch together are asked together), submit them, and hand each finished task's results
    to their runs; record each seed when all its stages are in. The same for every engine,
    every executor, and one run or many: only where tasks run differs.

    Tasks an earlier one made ready go before further first tasks, so seeds complete (and are
    kept for resume) as early as the executor's capacity allows. A task that raises stops
    everything, unless ``keep_going``: then its seeds are marked failed in their runs, their
    queued tasks are dropped, and the others go on.
    """
    first: deque[tuple[EngineTask, list[OpenRun]]] = deque()
    ready: deque[tuple[EngineTask, list[OpenRun]]] = deque()
    groups: dict[tuple[str, str, str], list[tuple[OpenRun, list[int]]]] = {}
    for run in runs:
        run.assemblies = {seed: SeedAssembly(arm_names(run.typed)) for seed in run.pending}
        # Stages an interrupted invocation finished, of seeds whose SFT it finished too: an
        # SFT that trains again makes every later stage of its seed train again.
        run.kept = {(seed, stage): result for (seed, stage), result in run.kept.items()
                    if (seed, "initial") in run.kept}
        for (seed, stage), result in run.kept.items():
            run.assemblies[seed].add(stage, result)
        # Seeds whose every stage an interrupted invocation kept are recorded from them (one
        # write for all); the others train, without their kept stages.
        training = _finish_kept_seeds(run)
        if training:
            key = (run.options.engine, run.engine.batch_key(run.typed), run.options.device)
            groups.setdefault(key, []).append((run, training))
    for (name, _, _), group in groups.items():
        works = {id(run): run.work(seeds) for run, seeds in group}
        for task in ENGINES[name].tasks(list(works.values()), executor.capacity):
            first.append((task, _owners(task, [run for run, _ in group])))
    running: dict[cf.Future, tuple[EngineTask, list[OpenRun]]] = {}
    order = {id(run): index for index, run in enumerate(runs)}
    #: stages already counted as failed or skipped, so no stage is counted twice
    abandoned: set[StageKey] = set()

    def sort_key(future: cf.Future) -> tuple[bool, int, tuple[int, int]]:
        task, owners = running[future]
        return (future.exception() is not None, order[id(owners[0])],
                _task_order(task, owners[0].typed))

    try:
        while first or ready or running:
            while (first or ready) and len(running) < executor.capacity:
                task, owners = ready.popleft() if ready else first.popleft()
                running[executor.submit(task, executor.sink)] = (task, owners)
                if watch is not None:
                    watch("submitted", owners[0], task, None, len(task.keys))
            finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            # Successful results first: a seed completed in the same batch as a failure is
            # still recorded (and kept for resume) before the failure stops the run.
            for future in sorted(finished, key=sort_key):
                task, owners = running.pop(future)
                error = future.exception()
                if error is not None:
                    if isinstance(error, cf.BrokenExecutor) or not keep_going:
                        raise error
                    _fail(task, owners, error, [first, ready], running, watch, abandoned)
                    continue
                results = future.result()
                for run in owners:
                    mine = {key: value for key, value in results.items()
                            if key[0] == str(run.options.out_dir)}
                    _accept(run, mine)
                    for more in run.engine.after(task, mine, run.work(run.pending)):
                        ready.append((more, [run]))
                if watch is not None:
                    watch("finished", owners[0], task, None, len(task.keys))
    except cf.BrokenExecutor:
        raise RunFailed("a worker process died; completed seeds are kept") from None


def _owners(task: EngineTask, runs: list[OpenRun]) -> list[OpenRun]:
    """The runs a task trains stages of, in the given order."""
    folders = {key[0] for key in task.keys}
    return [run for run in runs if str(run.options.out_dir) in folders]


def _accept(run: OpenRun, results: dict[StageKey, dict[str, Any]]) -> None:
    """Hand a task's results to their seeds' assemblies; keep them for resume (unless the
    engine kept them itself) and record the seeds now complete, with one record write."""
    complete = []
    for key, result in results.items():
        _check_capability(run, result)
        if not run.engine.keeps_results:
            kept_results.keep_result(run.options.out_dir, run.record, key, result)
        _, seed, stage = key
        assembly = run.assemblies[seed]
        assembly.add(stage, result)
        if assembly.complete() and seed not in complete:
            complete.append(seed)
    _finish_seeds(run, complete)


def _fail(task: EngineTask, owners: list[OpenRun], error: BaseException,
          queues: list[deque], running: dict, watch: TaskWatcher,
          abandoned: set[StageKey]) -> None:
    """Mark the failed task's seeds failed, drop their queued tasks and count what they
    abandon: stages neither done, failed, running nor yet made (each stage counted once)."""
    lost = {(key[0], key[1]) for key in task.keys}
    for run in owners:
        for folder, seed in lost:
            if folder == str(run.options.out_dir):
                run.failed[seed] = _first_line(error)
    if watch is not None:
        watch("failed", owners[0], task, error, len(task.keys))
    abandoned.update(task.keys)
    for queue in queues:
        for item in [i for i in queue if {(k[0], k[1]) for k in i[0].keys} & lost]:
            queue.remove(item)
            abandoned.update(item[0].keys)
            if watch is not None:
                watch("skipped", item[1][0], item[0], None, len(item[0].keys))
    busy = {key for other, _ in running.values() for key in other.keys}
    for run in owners:
        folder = str(run.options.out_dir)
        for seed in sorted(s for f, s in lost if f == folder):
            assembly = run.assemblies[seed]
            done = ({"initial"} if assembly.sft is not None else set()) | set(
                assembly.arm_results)
            never = [(folder, seed, stage) for stage in ["initial", *assembly.arms]
                     if stage not in done and (folder, seed, stage) not in abandoned | busy]
            abandoned.update(never)
            if never and watch is not None:
                watch("skipped", run, None, None, len(never))


def _finish_kept_seeds(run: OpenRun) -> list[int]:
    """Record the pending seeds an interrupted invocation kept whole (one write for all) and
    return the others, to train."""
    whole = [seed for seed in run.pending if run.assemblies[seed].complete()]
    _finish_seeds(run, whole)
    return [seed for seed in run.pending if seed not in whole]


def _finish_seeds(run: OpenRun, seeds: list[int]) -> None:
    """Record complete seeds with one record write, then drop their kept results (until the
    record holds them, the kept results do)."""
    recorded = run.recorded()
    if any(seed in recorded for seed in seeds):
        raise RuntimeError(f"seeds {sorted(recorded & set(seeds))} would be recorded twice")
    if not seeds:
        return
    for seed in seeds:
        _add_seed(run.assemblies[seed], run)
    run.write()
    kept_results.drop_kept(run.options.out_dir, run.typed, seeds)  # the record holds them
    for seed in seeds:
        run.assemblies[seed].release()
        for stage in ["initial", *arm_names(run.typed)]:
            run.kept.pop((seed, stage), None)


def _first_line(error: BaseException) -> str:
    """A task's error in one line: the cause a Ray task error wraps, not its traceback."""
    cause = getattr(error, "cause", None)
    shown = cause if isinstance(cause, BaseException) else error
    text = str(shown).strip().splitlines()
    return f"{type(shown).__name__}: {text[0] if text else ''}"


def _check_capability(run: OpenRun, result: dict[str, Any]) -> None:
    expected = run.record["numerics"]["cpu_capability"]
    if result["capability"] != expected:
        raise RunFailed(f"a worker ran torch CPU capability {result['capability']}, "
                        f"the main process {expected}")


def _task_order(task: EngineTask, data: Plan) -> tuple[int, int]:
    """Plan order, so tasks finishing together are handled the same way on every run."""
    _, seed, stage = task.keys[0]
    stages = ["initial", *arm_names(data)]
    return data.seeds.index(seed), stages.index(stage)
