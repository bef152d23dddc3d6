"""Orchestration of a training run: the run folder, its record, resume, and the tasks an

engine makes, handed to an executor.

The engine (:data:`postlab.engines.registry.ENGINES`, by the run's ``engine`` name) turns the
pending seeds into self-contained tasks; each task returns one result per (run folder, seed,
stage) and may make more tasks ready. Orchestration is the same for every engine and every
executor (``executors``: in-process, worker processes, Ray): it assembles each seed's stages
into its record entry, replaces the record atomically after each completed seed, and keeps
finished stages of seeds not yet complete for ``resume``.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import platform
import shutil
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

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
from postlab.jsonio import (
    MalformedJSON,
    dump_json,
    parse_json,
    publish_bytes,
    read_bytes,
    replace_bytes,
)
from postlab.machine import numerics
from postlab.plan.arms import arm_names
from postlab.plan.frozen import LoadedPlan, parse_plan
from postlab.plan.registration import REGISTRATION_FILE, utc_now
from postlab.policies import policy_placement
from postlab.policies.checkpoint import checkpoint_name, load_checkpoint
from postlab.policies.tokenizers import (
    TOKENIZER_FILE,
    tokenizer_sha256,
    trained_bytes,
    uses_bpe,
)
from postlab.records.chunks import (
    CHUNK_DIR,
    MAX_CHUNK_SEEDS,
    chunk_bytes,
    chunk_entry,
    chunk_name,
    unlisted_chunks,
)
from postlab.records.fingerprint import (
    FINGERPRINT_FILE,
    fingerprint_file_bytes,
    named_checkpoints,
    read_fingerprint_file,
    results_fingerprint,
    run_fingerprint,
    seed_results_sha256,
)
from postlab.records.integrity import compare_digests, run_digests
from postlab.records.layout import check_layout, check_links
from postlab.records.metrics import run_summary_for
from postlab.records.record import (
    KEPT_DIR,
    KEPT_SETTINGS,
    attach_runs,
    header_of,
    is_chunked,
    keep_results,
    kept_result_path,
    load_record,
    summary_bytes,
)
from postlab.runs.executors import TaskExecutor, configure_torch, default_kind, make_executor
from postlab.runs.progress import Quiet
from postlab.version import __version__, source_hashes

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

PLAN_FILE = "plan.json"
RECORD_FILE = "record.json"
SUMMARY_FILE = "summary.json"


__all__ = ["PLAN_FILE", "RECORD_FILE", "SUMMARY_FILE", "OpenRun", "RunFailed", "RunOptions",
           "check_out_dir", "check_resumable", "checkpoint_name", "finish_run", "open_run",
           "run_plan", "run_tasks"]


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
    checked: tuple[LoadedPlan, dict[str, Any] | None] | None = None


# --- the run -------------------------------------------------------------------------------

def check_out_dir(out_dir: Path, resume: bool) -> None:
    """A new run needs a folder that does not exist; a resumed one, the folder it left."""
    if not resume and out_dir.exists():
        raise UserError(f"{out_dir}: already exists; choose a new --out-dir, or pass "
                        "--resume to complete an interrupted run there")
    if resume and not out_dir.is_dir():
        raise UserError(f"{out_dir}: no run folder to resume")


def prepare_out_dir(plan: LoadedPlan | None, raw_plan: bytes | None, out_dir: Path,
                    resume: bool, registration: bytes | None = None,
                    checked: tuple[LoadedPlan, dict[str, Any] | None] | None = None
                    ) -> tuple[LoadedPlan, dict[str, Any] | None]:
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
    for name in unlisted_chunks(out_dir, record.get("chunks", []) if record else []):
        path = out_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return stored, record


def check_resumable(out_dir: Path, plan: LoadedPlan | None = None,
                    registration: bytes | None = None
                    ) -> tuple[LoadedPlan, dict[str, Any] | None]:
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


def _check_resumed_seeds(out_dir: Path, record: dict[str, Any], stored: LoadedPlan) -> None:
    """A record resumed from: of the folder's plan, each seed one of its pending seeds,
    complete, unchanged since it was recorded, its checkpoints the files it names."""
    record_path = out_dir / RECORD_FILE
    if record.get("plan_sha256") != stored.sha256:
        raise UserError(f"{record_path}: not a record of the plan in {out_dir / PLAN_FILE}")
    stages = ["initial", *arm_names(stored.model)]
    seen = set()
    for run in record["runs"]:
        seed = run["seed"]
        if seed not in stored.model.seeds or seed in seen:
            raise UserError(f"{record_path}: seed {seed} is not a pending seed of the plan; "
                            "cannot resume from this record")
        seen.add(seed)
        if list(run.get("checkpoints", {})) != stages or list(run["evaluations"]) != stages:
            raise UserError(f"{record_path}: seed {seed} is incomplete; cannot resume from it")
        if "digests" in run and compare_digests(run, run["digests"]):
            raise UserError(f"{record_path}: seed {seed} changed since it was recorded; "
                            "cannot resume from it")
        for info in run["checkpoints"].values():
            load_checkpoint(out_dir / info["file"], info["sha256"])  # refuses a changed file


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


def registration_entry(plan: LoadedPlan, out_dir: Path, previous: dict[str, Any] | None
                       ) -> dict[str, Any] | None:
    """What the record says of the run folder's registration: the file's sha256, the time
    it was registered and the time training began. A resumed run keeps what its record says,
    once the file is checked against it as every reader checks it (it may have been changed
    since); a new run's file was checked before it was copied in, and training begins now,
    before this invocation's first step."""
    from postlab.records.opened import registration_of

    path = out_dir / REGISTRATION_FILE
    if previous is not None:
        if "registration" not in previous:
            if path.exists():
                raise UserError(f"{path}: the record names no registration; one added after "
                                "training began would not precede it")
            return None
        _, problems = registration_of(previous, plan, out_dir)
        if problems:
            raise UserError(problems[0])
        return previous["registration"]
    if not path.exists():
        return None
    raw = read_bytes(path, "registration")
    registration = parse_json(raw, str(path))
    return {"sha256": hashlib.sha256(raw).hexdigest(),
            "registered_at": registration["registered_at"],
            "hypotheses_sha256": registration["hypotheses_sha256"],
            "training_started_at": utc_now()}


def new_record(plan: LoadedPlan, workers: int, device: str = "cpu",
               engine: str = DEFAULT_ENGINE) -> dict[str, Any]:
    """The record's provenance: the device is the run's, the dtype the weights' (float32);
    ``numerics.dtype`` is what forward passes compute in (bfloat16 under a bf16 plan). The
    engine is named only when it is not the exact one, so exact records keep their form."""
    dtype, compute_dtype = policy_placement(plan.model)
    named = {} if engine == DEFAULT_ENGINE else {"engine": engine}
    if uses_bpe(plan.model):
        named["tokenizer_sha256"] = tokenizer_sha256(plan.model)
    return {"plan_sha256": plan.sha256, **named, "source_sha256": source_hashes(),
            "python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(), "device": device, "dtype": dtype,
            "postlab_version": __version__, "threads": plan.model.threads,
            "workers": workers,
            "numerics": numerics.describe(plan.model.threads, numerics.current_pin(),
                                          device=device, dtype=compute_dtype),
            "chunks": [], "seeds": []}


class _SeedAssembly:
    """Collects one seed's task results and builds its record entry in the plan's order."""

    def __init__(self, arms: list[str]) -> None:
        self.arms = arms  # names, in the plan's order
        self.sft: dict[str, Any] | None = None
        self.arm_results: dict[str, dict[str, Any]] = {}
        self.recorded = False

    def add(self, stage: str, result: dict[str, Any]) -> None:
        if stage == "initial":
            self.sft = result
        else:
            self.arm_results[stage] = result

    def complete(self) -> bool:
        return self.recorded or (self.sft is not None
                                 and len(self.arm_results) == len(self.arms))

    def release(self) -> None:
        """Forget the results once the record holds the seed: a run's main process then
        holds the seeds in flight, not every seed it has trained (about 5 MB each for a
        teaching seed; 150 ensemble seeds held 1.2 GB)."""
        self.recorded = True
        self.sft, self.arm_results = None, {}

    def entry(self) -> dict[str, Any]:
        assert self.sft is not None
        evaluations = {"initial": self.sft["evaluation"]}
        checkpoints = {"initial": self.sft["checkpoint"]}
        compute = {"initial": self.sft["compute"]}
        training, extra_sft = {}, {}
        for arm in self.arms:
            result = self.arm_results[arm]
            if "history" in result:
                training[arm] = result["history"]
            else:
                extra_sft[arm] = result["sft_loss"]
            evaluations[arm] = result["evaluation"]
            checkpoints[arm] = result["checkpoint"]
            compute[arm] = result["compute"]
        entry = {"seed": self.sft["seed"], "sft_loss": self.sft["sft_loss"],
                 "evaluations": evaluations, "training": training, "checkpoints": checkpoints}
        if extra_sft:
            entry["arm_sft_loss"] = extra_sft
        entry["compute"] = compute
        entry["digests"] = run_digests(entry)
        return entry


def _write_record(run: OpenRun) -> None:
    """Publish the seeds recorded since the last write as new chunks (at most
    ``MAX_CHUNK_SEEDS`` each), then replace ``record.json`` with the manifest naming them: a
    crash between the two leaves chunks no record names, removed on resume."""
    out_dir, record = run.options.out_dir, run.record
    order = {seed: i for i, seed in enumerate(run.typed.seeds)}
    entries = sorted(run.unwritten, key=lambda entry: order[entry["seed"]])
    for first in range(0, len(entries), MAX_CHUNK_SEEDS):
        part = entries[first:first + MAX_CHUNK_SEEDS]
        name = chunk_name(len(record["chunks"]))
        data = chunk_bytes(part)
        (out_dir / CHUNK_DIR).mkdir(exist_ok=True)
        publish_bytes(out_dir / name, data)
        record["chunks"].append(chunk_entry(name, data, [entry["seed"] for entry in part]))
    record["seeds"] = sorted([*record["seeds"], *(e["seed"] for e in entries)],
                             key=order.__getitem__)
    run.unwritten = []
    replace_bytes(out_dir / RECORD_FILE, dump_json(record))


@dataclass
class OpenRun:
    """A run folder being trained: its plan, its record so far, and the seeds still to train.

    Several open runs can share one executor (a sweep); each keeps its own record, written
    after each of its completed seeds, exactly as when it runs alone.
    """

    plan: LoadedPlan
    options: RunOptions
    record: dict[str, Any]
    pending: list[int]
    started: float
    assemblies: dict[int, _SeedAssembly] = field(default_factory=dict)
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
        then_engine = previous.get("engine", DEFAULT_ENGINE)
        if then_engine != options.engine:
            raise UserError(f"{options.out_dir}: the run was started with the {then_engine} "
                            f"engine; resume it with --engine {then_engine}")
        then = previous.get("numerics")
        deciding = numerics.differences(then, record["numerics"])[0] if then else []
        if deciding:
            raise UserError(f"{options.out_dir}: the run was started with other numeric "
                            f"settings ({'; '.join(deciding)}); resume it where they can be "
                            f"the same (postlab run --resume pins the run's own code path)")
        for key in ("parameters", "wall_seconds"):
            if key in previous:
                record[key] = previous[key]
    unwritten: list[dict[str, Any]] = []
    if previous is not None and is_chunked(previous):
        record["chunks"], record["seeds"] = previous["chunks"], previous["seeds"]
    elif previous is not None:
        # a record of the earlier layout: its seeds go into chunks with the next write
        unwritten = list(previous["runs"])
    done = {*record["seeds"], *(entry["seed"] for entry in unwritten)}
    pending = [seed for seed in data.seeds if seed not in done]
    if done:
        options.display.message(f"resuming: seeds {sorted(done)} already complete")
    run = OpenRun(plan, options, record, pending, start, unwritten=unwritten)
    if options.resume:
        _check_kept_settings(run)
    if pending and run.engine.keeps_results:
        # Its tasks keep results themselves, and the record names the engine only once a
        # seed is recorded: until then the run folder says under what they were computed, so
        # a resume with another engine or other settings is refused, not half mixed.
        _write_kept_settings(run)
    if options.resume:
        run.kept = _kept_results(run)
        if run.engine.whole_seeds:
            run.kept = _whole_seeds_kept(run)
        if run.kept:
            options.display.message(f"resuming: {len(run.kept)} finished tasks of incomplete "
                                    "seeds kept")
    return run


# --- finished tasks of seeds not yet complete, kept for resume -------------------------------

def _settings(run: OpenRun) -> dict[str, Any]:
    record = run.record
    return {"plan_sha256": record["plan_sha256"], "device": record["device"],
            "numerics": record["numerics"], "engine": record.get("engine", DEFAULT_ENGINE)}


def _write_kept_settings(run: OpenRun) -> None:
    folder = run.options.out_dir / KEPT_DIR
    folder.mkdir(exist_ok=True)
    if not (folder / KEPT_SETTINGS).exists():
        publish_bytes(folder / KEPT_SETTINGS, dump_json(_settings(run)))


def _keep_result(run: OpenRun, key: StageKey, result: dict[str, Any]) -> None:
    """Write a finished stage's result (no weights: its checkpoint is on disk), so a resumed
    run does not train it again; the first one also writes the settings it was computed
    under."""
    _write_kept_settings(run)
    keep_results({key: result})


def _check_kept_settings(run: OpenRun) -> None:
    """Kept results are reused only under the settings they were computed under, as a
    record's completed seeds are."""
    path = run.options.out_dir / KEPT_DIR / KEPT_SETTINGS
    if not path.is_file():
        return
    try:
        then = parse_json(read_bytes(path, "kept settings"), str(path))
        deciding = numerics.differences(then["numerics"], run.record["numerics"])[0]
        same_plan = then["plan_sha256"] == run.record["plan_sha256"]
        then_engine = then.get("engine", DEFAULT_ENGINE)
        same_engine = then_engine == run.record.get("engine", DEFAULT_ENGINE)
    except (MalformedJSON, KeyError, TypeError):
        raise UserError(f"{path}: malformed; remove the folder {path.parent} to train its "
                        "tasks again") from None
    if not same_plan:
        raise UserError(f"{path}: kept results of another plan; remove {path.parent}")
    if not same_engine:
        raise UserError(f"{run.options.out_dir}: the run was started with the {then_engine} "
                        f"engine; resume it with --engine {then_engine}")
    if deciding:
        raise UserError(f"{run.options.out_dir}: the run was started with other numeric "
                        f"settings ({'; '.join(deciding)}); resume it where they can be the "
                        "same (postlab run --resume pins the run's own code path and device)")


def _kept_results(run: OpenRun) -> dict[tuple[int, str], dict[str, Any]]:
    """Results kept by an interrupted invocation for pending seeds. One that cannot be read,
    names another seed or stage, was computed with other kernels, or whose checkpoint is
    missing or differs, is dropped: its task runs again, giving the same bits. Leftovers of
    seeds already recorded (a crash between the two writes) are removed."""
    kept = {}
    out = run.options.out_dir
    folder = out / KEPT_DIR
    if not folder.is_dir():
        return kept
    for leftover in folder.glob(".*.partial"):
        leftover.unlink()
    for seed in run.typed.seeds:
        if seed not in run.pending:
            _drop_kept(run, seed)
    expected = run.record["numerics"]["cpu_capability"]
    for seed in run.pending:
        for stage in ["initial", *arm_names(run.typed)]:
            path = kept_result_path(out, seed, stage)
            if not path.is_file():
                continue
            try:
                result = parse_json(read_bytes(path, "kept task result"), str(path))
                info = result["checkpoint"]
                ok = (result["seed"] == seed and result.get("arm", "initial") == stage
                      and result["capability"] == expected
                      and hashlib.sha256((out / info["file"]).read_bytes()).hexdigest()
                      == info["sha256"])
            except (UserError, KeyError, TypeError, OSError):
                ok = False
            if ok:
                kept[(seed, stage)] = result
            else:
                path.unlink()
                run.options.display.message(f"resuming: {path.name} is unusable; that task "
                                            "runs again")
    return kept


def _drop_kept(run: OpenRun, seed: int) -> None:
    for stage in ["initial", *arm_names(run.typed)]:
        kept_result_path(run.options.out_dir, seed, stage).unlink(missing_ok=True)


def finish_run(run: OpenRun) -> dict[str, Any]:
    """Write the wall time, the summary and the fingerprint of a run whose seeds are done."""
    options, data, record = run.options, run.typed, run.record
    if run.pending or "wall_seconds" not in record:
        # Wall time of the invocation that finished the run (a resumed run's last part).
        record["wall_seconds"] = time.monotonic() - run.started
        _write_record(run)
    record = attach_runs(header_of(record), options.out_dir)
    summary_path = options.out_dir / SUMMARY_FILE
    summarise = not summary_path.exists()
    fingerprint = read_fingerprint_file(options.out_dir) is None
    # One walk over the recorded seeds for both: the summary's entries and the checkpoint
    # files the fingerprint hashes (a chunked record decodes each seed on every walk; two
    # walks took minutes at 1,000 teaching seeds).
    summary: list[dict[str, Any]] = []
    names: set[str] = set()
    seeds: list[tuple[int, str]] = []
    for entry in record["runs"] if summarise or fingerprint else []:
        if summarise:
            summary += run_summary_for(entry, data)
        names |= named_checkpoints([entry])
        # the digests were taken from the rows as this run made them
        seeds.append((entry["seed"], seed_results_sha256(entry, entry.get("digests"))))
    if not summarise:
        options.display.message("the run was already complete; nothing to do")
    else:
        publish_bytes(summary_path, summary_bytes(summary))
    tasks = options.out_dir / KEPT_DIR
    if tasks.is_dir():  # every seed is recorded: nothing kept is needed any more
        for path in tasks.iterdir():
            path.unlink()
        tasks.rmdir()
    if fingerprint:
        # Last, over the finished files: the one hash a reader notes to check the run later.
        value = run_fingerprint(options.out_dir, options.out_dir / RECORD_FILE, record,
                                checkpoint_files=names).value
        results = results_fingerprint(options.out_dir, record, seeds=seeds,
                                      checkpoint_files=names).value
        publish_bytes(options.out_dir / FINGERPRINT_FILE, fingerprint_file_bytes(value, results))
    return record


def run_plan(plan: LoadedPlan | None, raw_plan: bytes | None,
             options: RunOptions) -> dict[str, Any]:
    """Train every seed and arm of ``plan`` into ``options.out_dir``; return the record."""
    run = open_run(plan, raw_plan, options)
    if run.pending:
        kind = options.executor or default_kind(options.workers)
        with make_executor(kind, workers=options.workers, threads=run.typed.threads,
                           sink=options.display.handle) as executor:
            run_tasks(executor, [run])
    return finish_run(run)


def _finish_seed(assembly: _SeedAssembly, run: OpenRun, write: bool = True) -> None:
    """Add a complete seed to the record, write it and drop the seed's kept results
    (``write=False``: the caller writes once after adding several, so many seeds cost one
    write, not one each, and drops their kept results after that write)."""
    record, options = run.record, run.options
    run.unwritten.append(assembly.entry())
    record.setdefault("parameters", assembly.sft["parameters"] if assembly.sft else None)
    if write:
        _write_record(run)
        _drop_kept(run, assembly.sft["seed"])  # the record holds them now
    options.display.handle({"kind": "seed_done", "seed": assembly.sft["seed"]})


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
        run.assemblies = {seed: _SeedAssembly(arm_names(run.typed)) for seed in run.pending}
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
            _keep_result(run, key, result)
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


def _whole_seeds_kept(run: OpenRun) -> dict[tuple[int, str], dict[str, Any]]:
    """The kept results of the seeds kept whole only, for an engine that trains a seed whole:
    what is kept of the others is dropped, and so are their checkpoint files (no record or
    kept result names them, and they are trained again in another company, which on a GPU
    may give other bits than the file holds)."""
    stages = ["initial", *arm_names(run.typed)]
    whole = {seed for seed in run.pending if all((seed, s) in run.kept for s in stages)}
    replaced = 0
    for seed in run.pending:
        if seed in whole:
            continue
        _drop_kept(run, seed)
        for stage in stages:
            path = run.options.out_dir / checkpoint_name(seed, stage)
            if path.is_file():
                path.unlink()
                replaced += 1
    if replaced:
        run.options.display.message(f"resuming: {replaced} checkpoints of seeds not finished "
                                    "whole are trained again")
    return {key: value for key, value in run.kept.items() if key[0] in whole}


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
        _finish_seed(run.assemblies[seed], run, write=False)
    _write_record(run)
    for seed in seeds:
        _drop_kept(run, seed)
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
