"""Orchestration of a training run: seeds and arms as tasks, records, checkpoints, resume.

Per seed: SFT and its evaluation (task ``sft``), then one RL run per arm from the SFT weights
with the SFT model frozen as the KL reference (tasks ``arm``). Each task saves its stage's
checkpoint, reloads it from disk and re-evaluates it. Tasks are self-contained (plan, seed, arm,
and their input checkpoint by sha256) and are handed to an executor (``executors``: in-process
or a pool of single-threaded worker processes), so the record does not depend on where or how
many ran. The record is replaced atomically after each completed seed; ``resume`` keeps those
seeds.
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import hashlib
import platform
import shutil
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import postlab
from postlab.analysis.metrics import summary_for
from postlab.engines.ensemble.task import Part
from postlab.engines.rollout import evaluate_model
from postlab.engines.train import reinforce, rollout_rates, sft_compute, supervised
from postlab.errors import UserError
from postlab.jsonio import (
    MalformedJSON,
    dump_json,
    parse_json,
    publish_bytes,
    read_bytes,
    replace_bytes,
)
from postlab.plan.arms import arm_names, arm_specs
from postlab.plan.frozen import LoadedPlan, parse_plan
from postlab.policies import Policy, build_policy, place_policy, policy_kind, policy_placement
from postlab.records.fingerprint import (
    FINGERPRINT_FILE,
    fingerprint_file_bytes,
    read_fingerprint_file,
    run_fingerprint,
)
from postlab.records.integrity import compare_digests, run_digests
from postlab.records.record import (
    KEPT_DIR,
    KEPT_SETTINGS,
    kept_result_path,
    load_record,
    summary_bytes,
)
from postlab.runs import numerics
from postlab.runs.checkpoint import (
    CheckpointError,
    checkpoint_bytes,
    load_checkpoint,
    publish_checkpoint,
)
from postlab.runs.executors import (
    Emit,
    TaskExecutor,
    configure_torch,
    default_kind,
    make_executor,
)
from postlab.runs.progress import Quiet
from postlab.runs.steplog import SFT_LOSS_TAG, SFT_STAGE, StepLogs, check_loggers, rl_scalars
from postlab.tasks.arithmetic import answer_function, plan_contracts

PLAN_FILE = "plan.json"
RECORD_FILE = "record.json"
SUMMARY_FILE = "summary.json"


class RunFailed(Exception):
    """Training stopped (non-finite values, a dead worker); completed seeds are kept."""


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
    #: which engine trains: "exact" (one model per task, the reference's bits) or "ensemble"
    #: (all pending seeds and arms as one batched computation); recorded, and a resumed run
    #: must use the same
    engine: str = "exact"


def checkpoint_name(seed: int, stage: str) -> str:
    return f"seed-{seed}-{stage}.pt"


def source_hashes() -> dict[str, str]:
    """sha256 of each of postlab's source files, so a record names the code that made it."""
    root = Path(postlab.__file__).parent
    return {str(p.relative_to(root.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.py"))}


def _capability() -> str:
    """The kernels this process runs; every task reports it so no worker can differ unseen."""
    return str(torch.backends.cpu.get_cpu_capability())


# --- tasks: run wherever the executor puts them ----------------------------------------------

def _save_and_check(model: Policy, plan: dict[str, Any], seed: int, stage: str,
                    out_dir: Path, rows: dict[str, Any]) -> dict[str, Any]:
    """Publish the stage's checkpoint, reload it from disk by hash, and re-evaluate it."""
    path = out_dir / checkpoint_name(seed, stage)
    digest = publish_checkpoint(path, checkpoint_bytes(plan, model.state_dict(), model.kind))
    restored = place_policy(build_policy(plan), str(model.device.type))
    restored.load_state_dict(load_checkpoint(path, digest, kind=policy_kind(plan))["state_dict"])
    equal = evaluate_model(restored, plan, seed) == rows
    if not equal:
        raise RunFailed(f"seed {seed}, stage {stage}: the reloaded checkpoint {path.name} "
                        "re-evaluates differently")
    return {"file": path.name, "sha256": digest, "reload_equal": equal}


def sft_task(plan: dict[str, Any], seed: int, out_dir: Path, every: int,
             emit: Emit, device: str = "cpu", log: tuple[str, ...] = ()) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = build_policy(plan)
    parameters = model.parameter_count()
    # RL-only arms start from the untrained weights, so keep them before SFT changes them.
    untrained = copy.deepcopy(model.state_dict()) if any(
        arm.pipeline == "rl-only" for arm in arm_specs(plan)) else None
    place_policy(model, device)  # after the CPU initialisation, so it is the same everywhere
    total = plan["sft_steps"]

    with StepLogs(log, out_dir, seed, SFT_STAGE) as logs:

        def hook(step: int, loss: float) -> None:
            logs.scalars(step, {SFT_LOSS_TAG: loss})
            if every and (step % max(1, every // 4) == 0 or step == total):
                emit({"kind": "sft", "seed": seed, "step": step, "total": total,
                      "loss": loss})

        losses = supervised(model, plan, seed, hook)
    rows = evaluate_model(model, plan, seed)
    checkpoint = _save_and_check(model, plan, seed, "initial", out_dir, rows)
    return {"seed": seed, "sft_loss": losses, "evaluation": rows, "checkpoint": checkpoint,
            "parameters": parameters, "capability": _capability(), "state_dict": model.state_dict(),
            "untrained_state_dict": untrained, "compute": sft_compute(plan, total)}


def arm_task(plan: dict[str, Any], seed: int, arm_name: str, sft: dict[str, Any],
             out_dir: Path, every: int, emit: Emit, device: str = "cpu",
             log: tuple[str, ...] = ()) -> dict[str, Any]:
    arm = next(a for a in arm_specs(plan) if a.name == arm_name)
    start = place_policy(build_policy(plan), device)
    if arm.pipeline == "rl-only":
        start.load_state_dict(sft["untrained_state_dict"])
    else:
        start.load_state_dict(sft["state_dict"])
    result: dict[str, Any] = {"seed": seed, "arm": arm.name, "capability": _capability()}
    with StepLogs(log, out_dir, seed, arm.name) as logs:
        if arm.pipeline == "sft-only":
            model = start
            done = plan["sft_steps"]  # its curve continues the seed's SFT curve

            def sft_hook(step: int, loss: float) -> None:
                logs.scalars(done + step, {SFT_LOSS_TAG: loss})

            result["sft_loss"] = supervised(model, plan, seed, sft_hook if log else None,
                                            steps=arm.sft_steps, rng_offset=5000)
            result["compute"] = sft_compute(plan, arm.sft_steps)
        else:
            reference = copy.deepcopy(start).requires_grad_(False)
            total = plan["rl_steps"]
            answer = answer_function(plan)
            contracts = plan_contracts(plan)

            def hook(step: int, rows: list) -> None:
                if every and (step % every == 0 or step == total):
                    emit({"kind": "rl", "seed": seed, "arm": arm.name, "step": step,
                          "total": total, "rates": rollout_rates(rows, answer, contracts)})

            def observe(entry: dict[str, Any]) -> None:
                logs.scalars(entry["step"], rl_scalars(entry, answer, contracts))

            model, result["history"], result["compute"] = reinforce(
                start, reference, plan, seed, arm.contract, hook, label=arm.name,
                observe=observe if log else None)
    rows = evaluate_model(model, plan, seed)
    result["evaluation"] = rows
    result["checkpoint"] = _save_and_check(model, plan, seed, arm.name, out_dir, rows)
    return result


@dataclass(frozen=True)
class CheckpointRef:
    """A published checkpoint named by its file in the run folder and its sha256."""

    file: str
    sha256: str


@dataclass(frozen=True)
class SftTask:
    """One seed's SFT stage. Its result holds no weights: arms read them from its checkpoint."""

    plan: dict[str, Any]
    seed: int
    out_dir: Path
    every: int
    device: str = "cpu"
    log: tuple[str, ...] = ()  # step loggers, by name: the task opens them where it runs

    def __call__(self, emit: Emit) -> dict[str, Any]:
        result = sft_task(self.plan, self.seed, self.out_dir, self.every, emit, self.device,
                          self.log)
        result.pop("state_dict", None)
        result.pop("untrained_state_dict", None)
        return result


@dataclass(frozen=True)
class ArmTask:
    """One (seed, arm) run, self-contained: the SFT weights are read from the seed's
    ``initial`` checkpoint, refused unless its sha256 matches; untrained weights (RL-only arms)
    are rebuilt from the seed exactly as the SFT task built them."""

    plan: dict[str, Any]
    seed: int
    arm: str
    initial: CheckpointRef
    out_dir: Path
    every: int
    device: str = "cpu"
    log: tuple[str, ...] = ()

    def __call__(self, emit: Emit) -> dict[str, Any]:
        spec = next(a for a in arm_specs(self.plan) if a.name == self.arm)
        start: dict[str, Any] = {}
        if spec.pipeline == "rl-only":
            start["untrained_state_dict"] = _untrained_weights(self.plan, self.seed)
        else:
            path = self.out_dir / self.initial.file
            payload = load_checkpoint(path, self.initial.sha256, kind=policy_kind(self.plan))
            if payload.get("plan") != self.plan:
                raise CheckpointError(f"{path}: a checkpoint of another plan; refusing it")
            start["state_dict"] = payload["state_dict"]
        return arm_task(self.plan, self.seed, self.arm, start, self.out_dir, self.every, emit,
                        self.device, self.log)


@dataclass(frozen=True)
class EnsembleTask:
    """Every stage of the pending seeds of one or more runs (plan versions that differ only
    in numeric settings), trained by the ensemble engine as one batched computation. Its
    result maps each (run folder, seed, stage) to what that stage's exact task returns.
    ``seed`` is the first seed, for messages about the task."""

    parts: tuple[Part, ...]  # one per run
    device: str = "cpu"
    shares: int = 1  # ensemble tasks running at once: they share the memory

    @property
    def seed(self) -> int:
        return self.parts[0].seeds[0]

    @property
    def stages(self) -> int:
        """How many (seed, stage) results it returns: what exact tasks would number."""
        return sum(len(part.seeds) * (1 + len(arm_names(part.plan))) for part in self.parts)

    def __call__(self, emit: Emit) -> dict[str, Any]:
        from postlab.engines.ensemble.task import train_parts

        return {"results": train_parts(list(self.parts), self.device, emit,
                                       shares=self.shares, keep=True)}


def _untrained_weights(plan: dict[str, Any], seed: int) -> dict[str, Any]:
    """The weights ``sft_task`` starts from: the model built right after seeding torch."""
    torch.manual_seed(seed)
    return build_policy(plan).state_dict()


# --- the run -------------------------------------------------------------------------------

def prepare_out_dir(plan: LoadedPlan | None, raw_plan: bytes | None, out_dir: Path,
                    resume: bool) -> tuple[LoadedPlan, dict[str, Any] | None]:
    """Create the run folder with its plan, or, on resume, check and reopen it.

    On resume the plan stored in the folder is the one trained; a plan given as well must be
    byte-identical to it.
    """
    if not resume:
        assert plan is not None and raw_plan is not None
        if out_dir.exists():
            raise UserError(f"{out_dir}: already exists; choose a new --out-dir, or pass "
                            "--resume to complete an interrupted run there")
        try:
            out_dir.mkdir(parents=True)
        except OSError as exc:
            raise UserError(f"{out_dir}: cannot create the run folder: {exc.strerror}") from None
        publish_bytes(out_dir / PLAN_FILE, raw_plan)
        return plan, None
    if not out_dir.is_dir():
        raise UserError(f"{out_dir}: no run folder to resume")
    plan_path = out_dir / PLAN_FILE
    stored = parse_plan(read_bytes(plan_path, "plan"), str(plan_path), plan_path)
    if plan is not None and stored.sha256 != plan.sha256:
        raise UserError(f"{plan_path}: the run folder's plan (sha256 {stored.sha256}) is not "
                        f"the plan given (sha256 {plan.sha256})")
    for leftover in out_dir.glob(".*.partial"):
        # an interrupted atomic write (a file) or folder publication (a folder, e.g. a
        # killed 'postlab plot RUN'); what it was writing was never published
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink()
    record_path = out_dir / RECORD_FILE
    if not record_path.exists():
        return stored, None
    record = load_record(record_path)
    if record.get("plan_sha256") != stored.sha256:
        raise UserError(f"{record_path}: not a record of the plan in {plan_path}")
    stages = ["initial", *arm_names(stored.data)]
    seen = set()
    for run in record["runs"]:
        seed = run["seed"]
        if seed not in stored.data["seeds"] or seed in seen:
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
    return stored, record


def new_record(plan: LoadedPlan, workers: int, device: str = "cpu",
               engine: str = "exact") -> dict[str, Any]:
    """The record's provenance: the device is the run's, the dtype the weights' (float32);
    ``numerics.dtype`` is what forward passes compute in (bfloat16 under a bf16 plan). The
    engine is named only when it is not the exact one, so exact records keep their form."""
    dtype, compute_dtype = policy_placement(plan.data)
    named = {} if engine == "exact" else {"engine": engine}
    return {"plan_sha256": plan.sha256, **named, "source_sha256": source_hashes(),
            "python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(), "device": device, "dtype": dtype,
            "postlab_version": postlab.__version__, "threads": plan.data["threads"],
            "workers": workers,
            "numerics": numerics.describe(plan.data["threads"], numerics.current_pin(),
                                          device=device, dtype=compute_dtype),
            "runs": []}


class _SeedAssembly:
    """Collects one seed's task results and builds its record entry in the plan's order."""

    def __init__(self, arms: list[str]) -> None:
        self.arms = arms  # names, in the plan's order
        self.sft: dict[str, Any] | None = None
        self.arm_results: dict[str, dict[str, Any]] = {}

    def complete(self) -> bool:
        return self.sft is not None and len(self.arm_results) == len(self.arms)

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


def _write_record(out_dir: Path, record: dict[str, Any], seeds: list[int]) -> None:
    order = {seed: i for i, seed in enumerate(seeds)}
    record["runs"].sort(key=lambda run: order[run["seed"]])
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

    @property
    def data(self) -> dict[str, Any]:
        return self.plan.data


def open_run(plan: LoadedPlan | None, raw_plan: bytes | None, options: RunOptions) -> OpenRun:
    """Create (or, on resume, reopen and check) the run folder and start its record."""
    check_loggers(options.log)  # in tasks it would be too late: refused before any write
    plan, previous = prepare_out_dir(plan, raw_plan, options.out_dir, options.resume)
    data = plan.data
    start = time.monotonic()
    # Before the record describes the numeric settings.
    configure_torch(data["threads"], options.device)
    record = new_record(plan, options.workers, options.device, options.engine)
    if previous is not None:
        then_engine = previous.get("engine", "exact")
        if then_engine != options.engine:
            raise UserError(f"{options.out_dir}: the run was started with the {then_engine} "
                            f"engine; resume it with --engine {then_engine}")
        then = previous.get("numerics")
        deciding = numerics.differences(then, record["numerics"])[0] if then else []
        if deciding:
            raise UserError(f"{options.out_dir}: the run was started with other numeric "
                            f"settings ({'; '.join(deciding)}); resume it where they can be "
                            f"the same (postlab run --resume pins the run's own code path)")
        record["runs"] = list(previous.get("runs", []))
        for key in ("parameters", "wall_seconds"):
            if key in previous:
                record[key] = previous[key]
    done = {run["seed"] for run in record["runs"]}
    pending = [seed for seed in data["seeds"] if seed not in done]
    if done:
        options.display.message(f"resuming: seeds {sorted(done)} already complete")
    run = OpenRun(plan, options, record, pending, start)
    if options.resume:
        _check_kept_settings(run)
    if options.engine != "exact" and pending:
        # The record names its engine only once a seed is recorded; until then the run
        # folder says it, so a resume with another engine is refused, not half mixed.
        folder = options.out_dir / KEPT_DIR
        folder.mkdir(exist_ok=True)
        if not (folder / KEPT_SETTINGS).exists():
            publish_bytes(folder / KEPT_SETTINGS, dump_json(_settings(run)))
    if options.resume:
        run.kept = _kept_results(run)
        if options.engine == "ensemble":
            run.kept = _whole_seeds_kept(run)
        if run.kept:
            options.display.message(f"resuming: {len(run.kept)} finished tasks of incomplete "
                                    "seeds kept")
    return run


# --- finished tasks of seeds not yet complete, kept for resume -------------------------------

def _settings(run: OpenRun) -> dict[str, Any]:
    record = run.record
    return {"plan_sha256": record["plan_sha256"], "device": record["device"],
            "numerics": record["numerics"], "engine": record.get("engine", "exact")}


def _keep_result(run: OpenRun, task: Task, result: dict[str, Any]) -> None:
    """Write a finished task's result (no weights: its checkpoint is on disk), so a resumed
    run does not train it again; the first one also writes the settings it was computed
    under."""
    stage = "initial" if isinstance(task, SftTask) else task.arm
    folder = run.options.out_dir / KEPT_DIR
    folder.mkdir(exist_ok=True)
    if not (folder / KEPT_SETTINGS).exists():
        publish_bytes(folder / KEPT_SETTINGS, dump_json(_settings(run)))
    replace_bytes(kept_result_path(run.options.out_dir, task.seed, stage), dump_json(result))


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
        same_engine = then.get("engine", "exact") == run.record.get("engine", "exact")
    except (MalformedJSON, KeyError, TypeError):
        raise UserError(f"{path}: malformed; remove the folder {path.parent} to train its "
                        "tasks again") from None
    if not same_plan:
        raise UserError(f"{path}: kept results of another plan; remove {path.parent}")
    if not same_engine:
        then_engine = then.get("engine", "exact")
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
    for seed in run.data["seeds"]:
        if seed not in run.pending:
            _drop_kept(run, seed)
    expected = run.record["numerics"]["cpu_capability"]
    for seed in run.pending:
        for stage in ["initial", *arm_names(run.data)]:
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
    for stage in ["initial", *arm_names(run.data)]:
        kept_result_path(run.options.out_dir, seed, stage).unlink(missing_ok=True)


def finish_run(run: OpenRun) -> dict[str, Any]:
    """Write the wall time, the summary and the fingerprint of a run whose seeds are done."""
    options, data, record = run.options, run.data, run.record
    if run.pending or "wall_seconds" not in record:
        # Wall time of the invocation that finished the run (a resumed run's last part).
        record["wall_seconds"] = time.monotonic() - run.started
        _write_record(options.out_dir, record, data["seeds"])
    summary_path = options.out_dir / SUMMARY_FILE
    if summary_path.exists():
        options.display.message("the run was already complete; nothing to do")
    else:
        summary = summary_for(record, data)
        publish_bytes(summary_path, summary_bytes(summary))
    tasks = options.out_dir / KEPT_DIR
    if tasks.is_dir():  # every seed is recorded: nothing kept is needed any more
        for path in tasks.iterdir():
            path.unlink()
        tasks.rmdir()
    if read_fingerprint_file(options.out_dir) is None:
        # Last, over the finished files: the one hash a reader notes to check the run later.
        value = run_fingerprint(options.out_dir, options.out_dir / RECORD_FILE, record).value
        publish_bytes(options.out_dir / FINGERPRINT_FILE, fingerprint_file_bytes(value))
    return record


def run_plan(plan: LoadedPlan | None, raw_plan: bytes | None,
             options: RunOptions) -> dict[str, Any]:
    """Train every seed and arm of ``plan`` into ``options.out_dir``; return the record."""
    run = open_run(plan, raw_plan, options)
    if run.pending:
        kind = options.executor or default_kind(options.workers)
        with make_executor(kind, workers=options.workers, threads=run.data["threads"],
                           sink=options.display.handle) as executor:
            run_tasks(executor, [run])
    return finish_run(run)


def _finish_seed(assembly: _SeedAssembly, run: OpenRun, write: bool = True) -> None:
    """Add a complete seed to the record, write it and drop the seed's kept results
    (``write=False``: the caller writes once after adding several, so many seeds cost one
    write, not one each, and drops their kept results after that write)."""
    record, options = run.record, run.options
    record["runs"].append(assembly.entry())
    record.setdefault("parameters", assembly.sft["parameters"] if assembly.sft else None)
    if write:
        _write_record(options.out_dir, record, run.data["seeds"])
        _drop_kept(run, assembly.sft["seed"])  # the record holds them now
    options.display.handle({"kind": "seed_done", "seed": assembly.sft["seed"]})


Task = SftTask | ArmTask | EnsembleTask
#: Told of every task as it is submitted, finishes, fails or is skipped (its seed failed):
#: (event, run, task, error).
TaskWatcher = Callable[[str, "OpenRun", Task, BaseException | None], None] | None


def run_tasks(executor: TaskExecutor, runs: list[OpenRun], watch: TaskWatcher = None, *,
              keep_going: bool = False) -> None:
    """Submit each pending seed's SFT task, then its arm tasks once the SFT result is in;
    record each seed when complete. The same for every executor and for one run or many:
    only where tasks run differs.

    Ready arm tasks go before further SFT tasks, so seeds complete (and are kept for resume)
    as early as the executor's capacity allows. A task that raises stops everything, unless
    ``keep_going``: then that seed is marked failed in its run and the others go on.
    """
    sft_queue: deque[tuple[OpenRun, Task]] = deque()
    arm_queue: deque[tuple[OpenRun, Task]] = deque()
    #: runs trained together by each ensemble task (by the task's id)
    together: dict[int, list[OpenRun]] = {}
    #: the seeds each ensemble run still trains (by the run's id)
    ensemble_seeds: dict[int, list[int]] = {}
    groups: dict[str, list[OpenRun]] = {}
    for run in runs:
        data, options = run.data, run.options
        run.assemblies = {seed: _SeedAssembly(arm_names(data)) for seed in run.pending}
        if options.engine == "ensemble":
            from postlab.engines.ensemble.task import batch_key

            # A seed the ensemble finished whole before an interruption (each chunk keeps
            # its seeds' results) is recorded from them, and the others train without it
            # (on a CPU a member's bits do not depend on its company). Seeds kept in part
            # were dropped when the run was opened: they train again whole.
            training = _finish_kept_ensemble_seeds(run)
            if training:
                groups.setdefault(batch_key(data) + options.device, []).append(run)
                ensemble_seeds[id(run)] = training
            continue
        for seed in run.pending:
            assembly = run.assemblies[seed]
            sft = run.kept.get((seed, "initial"))
            if sft is None:
                sft_queue.append((run, SftTask(data, seed, options.out_dir,
                                               options.progress_every, options.device,
                                               options.log)))
                continue
            assembly.sft = sft
            initial = CheckpointRef(sft["checkpoint"]["file"], sft["checkpoint"]["sha256"])
            for arm in assembly.arms:
                result = run.kept.get((seed, arm))
                if result is None:
                    arm_queue.append((run, ArmTask(data, seed, arm, initial, options.out_dir,
                                                   options.progress_every, options.device,
                                                   options.log)))
                else:
                    assembly.arm_results[arm] = result
            if assembly.complete():
                _finish_seed(assembly, run)
    for group in groups.values():
        # As many tasks as the executor runs at once, each a share of the seeds: members do
        # not depend on their company, so the split changes the work, not the bits.
        members = [(r, seed) for r in group for seed in ensemble_seeds[id(r)]]
        shares = min(executor.capacity, len(members))
        for share in range(shares):
            mine = members[share::shares]
            parts = []
            for r in group:
                seeds = tuple(seed for owner, seed in mine if owner is r)
                if seeds:
                    parts.append(Part(r.data, seeds, r.options.out_dir))
            task = EnsembleTask(tuple(parts), group[0].options.device, shares)
            together[id(task)] = [r for r in group if any(owner is r for owner, _ in mine)]
            sft_queue.append((together[id(task)][0], task))
    running: dict[cf.Future, tuple[OpenRun, Task]] = {}
    order = {id(run): index for index, run in enumerate(runs)}

    def sort_key(future: cf.Future) -> tuple[bool, int, tuple[int, int]]:
        run, task = running[future]
        return (future.exception() is not None, order[id(run)], _task_order(task, run.data))

    try:
        while sft_queue or arm_queue or running:
            while (sft_queue or arm_queue) and len(running) < executor.capacity:
                run, task = arm_queue.popleft() if arm_queue else sft_queue.popleft()
                running[executor.submit(task, executor.sink)] = (run, task)
                if watch is not None:
                    watch("submitted", run, task, None)
            finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            # Successful results first: a seed completed in the same batch as a failure is
            # still recorded (and kept for resume) before the failure stops the run.
            for future in sorted(finished, key=sort_key):
                run, task = running.pop(future)
                error = future.exception()
                if error is not None:
                    if isinstance(error, cf.BrokenExecutor) or not keep_going:
                        raise error
                    if isinstance(task, EnsembleTask):
                        for member, part in zip(together[id(task)], task.parts, strict=True):
                            for seed in part.seeds:
                                member.failed[seed] = _first_line(error)
                    else:
                        run.failed[task.seed] = _first_line(error)
                    if watch is not None:
                        watch("failed", run, task, error)
                    for item in [i for i in arm_queue if i[0] is run and i[1].seed == task.seed]:
                        arm_queue.remove(item)  # the seed's other arms need not run now
                        if watch is not None:
                            watch("skipped", *item, None)
                    continue
                result = future.result()
                if isinstance(task, EnsembleTask):
                    for member, part in zip(together[id(task)], task.parts, strict=True):
                        _finish_ensemble(member, part.seeds, result["results"])
                    if watch is not None:
                        watch("finished", run, task, None)
                    continue
                _check_capability(run, result)
                _keep_result(run, task, result)
                assembly = run.assemblies[task.seed]
                if isinstance(task, SftTask):
                    assembly.sft = result
                    initial = CheckpointRef(result["checkpoint"]["file"],
                                            result["checkpoint"]["sha256"])
                    options = run.options
                    arm_queue.extend((run, ArmTask(run.data, task.seed, arm, initial,
                                                   options.out_dir, options.progress_every,
                                                   options.device, options.log))
                                     for arm in assembly.arms)
                else:
                    assembly.arm_results[task.arm] = result
                if watch is not None:
                    watch("finished", run, task, None)
                if assembly.complete():
                    _finish_seed(assembly, run)
    except cf.BrokenExecutor:
        raise RunFailed("a worker process died; completed seeds are kept") from None


def _whole_seeds_kept(run: OpenRun) -> dict[tuple[int, str], dict[str, Any]]:
    """An ensemble run's kept results, of the seeds kept whole only. The ensemble trains a
    seed whole, so what is kept of the others is dropped, and so are their checkpoint files:
    no record or kept result names them, and they are trained again in another company,
    which on a GPU may give other bits than the file holds."""
    stages = ["initial", *arm_names(run.data)]
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


def _finish_kept_ensemble_seeds(run: OpenRun) -> list[int]:
    """Record the pending seeds an interrupted ensemble invocation kept whole (one write for
    all) and return the others, to train."""
    stages = ["initial", *arm_names(run.data)]
    whole = [seed for seed in run.pending if all((seed, s) in run.kept for s in stages)]
    if whole:
        _finish_ensemble(run, tuple(whole), {(str(run.options.out_dir), seed, stage):
                                             run.kept[(seed, stage)]
                                             for seed in whole for stage in stages})
    return [seed for seed in run.pending if seed not in whole]


def _finish_ensemble(run: OpenRun, seeds: tuple[int, ...],
                     results: dict[tuple[str, int, str], dict[str, Any]]) -> None:
    """Record the seeds of ``run`` an ensemble task trained, as exact tasks would."""
    folder = str(run.options.out_dir)
    for seed in seeds:
        assembly = run.assemblies[seed]
        assembly.sft = results[(folder, seed, "initial")]
        _check_capability(run, assembly.sft)
        for arm in assembly.arms:
            assembly.arm_results[arm] = results[(folder, seed, arm)]
        _finish_seed(assembly, run, write=False)
    _write_record(run.options.out_dir, run.record, run.data["seeds"])
    for seed in seeds:  # only now: until the record holds them, the kept results do
        _drop_kept(run, seed)


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


def _task_order(task: Task, data: dict[str, Any]) -> tuple[int, int]:
    """Plan order, so tasks finishing together are handled the same way on every run."""
    if isinstance(task, EnsembleTask):
        return data["seeds"].index(task.seed), 0
    stage = arm_names(data).index(task.arm) + 1 if isinstance(task, ArmTask) else 0
    return data["seeds"].index(task.seed), stage
