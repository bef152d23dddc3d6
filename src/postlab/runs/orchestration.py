"""Orchestration of a training run: seeds and arms as tasks, records, checkpoints, resume.

Per seed: SFT and its evaluation (task ``sft``), then one RL run per arm from the SFT weights
with the SFT model frozen as the KL reference (tasks ``arm``). Each task saves its stage's
checkpoint, reloads it from disk and re-evaluates it. Tasks are independent given their inputs,
so they run in single-threaded worker processes and the record does not depend on how many.
The record is replaced atomically after each completed seed; ``resume`` keeps those seeds.
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import hashlib
import platform
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import postlab
from postlab.runs import numerics
from postlab.plan.arms import arm_names, arm_specs
from postlab.runs.checkpoint import checkpoint_bytes, load_checkpoint, publish_checkpoint
from postlab.errors import UserError
from postlab.records.fingerprint import (
    FINGERPRINT_FILE,
    fingerprint_file_bytes,
    read_fingerprint_file,
    run_fingerprint,
)
from postlab.records.integrity import compare_digests, run_digests
from postlab.jsonio import dump_json, publish_bytes, read_bytes, replace_bytes
from postlab.analysis.metrics import summary_for
from postlab.policies import Policy, build_policy, policy_kind, policy_placement
from postlab.plan.frozen import LoadedPlan, parse_plan
from postlab.runs.progress import Quiet
from postlab.records.record import load_record, summary_bytes
from postlab.engines.rollout import evaluate_model
from postlab.tasks.arithmetic import answer_function, plan_contracts
from postlab.engines.train import reinforce, rollout_rates, sft_compute, supervised
from postlab.runs.workers import worker_context

PLAN_FILE = "plan.json"
RECORD_FILE = "record.json"
SUMMARY_FILE = "summary.json"

Emit = Callable[[dict[str, Any]], None]


class RunFailed(Exception):
    """Training stopped (non-finite values, a dead worker); completed seeds are kept."""


@dataclass
class RunOptions:
    out_dir: Path
    workers: int = 1
    resume: bool = False
    progress_every: int = 0  # RL steps between progress events; 0 sends none
    display: Quiet = field(default_factory=Quiet)


def checkpoint_name(seed: int, stage: str) -> str:
    return f"seed-{seed}-{stage}.pt"


def source_hashes() -> dict[str, str]:
    """sha256 of each of postlab's source files, so a record names the code that made it."""
    root = Path(postlab.__file__).parent
    return {str(p.relative_to(root.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.py"))}


def configure_torch(threads: int) -> None:
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)


def _capability() -> str:
    """The kernels this process runs; every task reports it so no worker can differ unseen."""
    return str(torch.backends.cpu.get_cpu_capability())


# --- tasks: run in a worker process (or in-process when workers == 1) -----------------------

_EMIT: Emit | None = None


def _worker_init(queue: Any, threads: int) -> None:
    global _EMIT
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C
    configure_torch(threads)
    _EMIT = queue.put


def _die_with_parent() -> None:
    """Ask Linux to kill this worker if the main process dies, so no orphan keeps writing."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _emit(event: dict[str, Any]) -> None:
    if _EMIT is not None:
        _EMIT(event)


def _save_and_check(model: Policy, plan: dict[str, Any], seed: int, stage: str,
                    out_dir: Path, rows: dict[str, Any]) -> dict[str, Any]:
    """Publish the stage's checkpoint, reload it from disk by hash, and re-evaluate it."""
    path = out_dir / checkpoint_name(seed, stage)
    digest = publish_checkpoint(path, checkpoint_bytes(plan, model.state_dict(), model.kind))
    restored = build_policy(plan)
    restored.load_state_dict(load_checkpoint(path, digest, kind=policy_kind(plan))["state_dict"])
    equal = evaluate_model(restored, plan, seed) == rows
    if not equal:
        raise RunFailed(f"seed {seed}, stage {stage}: the reloaded checkpoint {path.name} "
                        "re-evaluates differently")
    return {"file": path.name, "sha256": digest, "reload_equal": equal}


def sft_task(plan: dict[str, Any], seed: int, out_dir: Path, every: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = build_policy(plan)
    parameters = model.parameter_count()
    # RL-only arms start from the untrained weights, so keep them before SFT changes them.
    untrained = copy.deepcopy(model.state_dict()) if any(
        arm.pipeline == "rl-only" for arm in arm_specs(plan)) else None
    total = plan["sft_steps"]

    def hook(step: int, loss: float) -> None:
        if every and (step % max(1, every // 4) == 0 or step == total):
            _emit({"kind": "sft", "seed": seed, "step": step, "total": total, "loss": loss})

    losses = supervised(model, plan, seed, hook)
    rows = evaluate_model(model, plan, seed)
    checkpoint = _save_and_check(model, plan, seed, "initial", out_dir, rows)
    return {"seed": seed, "sft_loss": losses, "evaluation": rows, "checkpoint": checkpoint,
            "parameters": parameters, "capability": _capability(), "state_dict": model.state_dict(),
            "untrained_state_dict": untrained, "compute": sft_compute(plan, total)}


def arm_task(plan: dict[str, Any], seed: int, arm_name: str, sft: dict[str, Any],
             out_dir: Path, every: int) -> dict[str, Any]:
    arm = next(a for a in arm_specs(plan) if a.name == arm_name)
    start = build_policy(plan)
    if arm.pipeline == "rl-only":
        start.load_state_dict(sft["untrained_state_dict"])
    else:
        start.load_state_dict(sft["state_dict"])
    result: dict[str, Any] = {"seed": seed, "arm": arm.name, "capability": _capability()}
    if arm.pipeline == "sft-only":
        model = start
        result["sft_loss"] = supervised(model, plan, seed, steps=arm.sft_steps,
                                        rng_offset=5000)
        result["compute"] = sft_compute(plan, arm.sft_steps)
    else:
        reference = copy.deepcopy(start).requires_grad_(False)
        total = plan["rl_steps"]
        answer = answer_function(plan)
        contracts = plan_contracts(plan)

        def hook(step: int, rows: list) -> None:
            if every and (step % every == 0 or step == total):
                _emit({"kind": "rl", "seed": seed, "arm": arm.name, "step": step,
                       "total": total, "rates": rollout_rates(rows, answer, contracts)})

        model, result["history"], result["compute"] = reinforce(
            start, reference, plan, seed, arm.contract, hook, label=arm.name)
    rows = evaluate_model(model, plan, seed)
    result["evaluation"] = rows
    result["checkpoint"] = _save_and_check(model, plan, seed, arm.name, out_dir, rows)
    return result


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
        leftover.unlink()  # an interrupted atomic write; the published file was never made
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


def new_record(plan: LoadedPlan, workers: int) -> dict[str, Any]:
    device, dtype = policy_placement(plan.data)
    return {"plan_sha256": plan.sha256, "source_sha256": source_hashes(),
            "python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(), "device": device, "dtype": dtype,
            "postlab_version": postlab.__version__, "threads": plan.data["threads"],
            "workers": workers,
            "numerics": numerics.describe(plan.data["threads"], numerics.current_pin()),
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


def run_plan(plan: LoadedPlan | None, raw_plan: bytes | None,
             options: RunOptions) -> dict[str, Any]:
    """Train every seed and arm of ``plan`` into ``options.out_dir``; return the record."""
    plan, previous = prepare_out_dir(plan, raw_plan, options.out_dir, options.resume)
    data = plan.data
    start = time.monotonic()
    configure_torch(data["threads"])  # before the record describes the numeric settings
    record = new_record(plan, options.workers)
    if previous is not None:
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
    display = options.display
    if done:
        display.message(f"resuming: seeds {sorted(done)} already complete")
    if pending:
        if options.workers <= 1:
            _run_in_process(data, pending, options, record)
        else:
            _run_in_workers(data, pending, options, record)
    if pending or "wall_seconds" not in record:
        # Wall time of the invocation that finished the run (a resumed run's last part).
        record["wall_seconds"] = time.monotonic() - start
        _write_record(options.out_dir, record, data["seeds"])
    summary_path = options.out_dir / SUMMARY_FILE
    if summary_path.exists():
        display.message("the run was already complete; nothing to do")
    else:
        summary = summary_for(record, data)
        publish_bytes(summary_path, summary_bytes(summary))
    if read_fingerprint_file(options.out_dir) is None:
        # Last, over the finished files: the one hash a reader notes to check the run later.
        value = run_fingerprint(options.out_dir, options.out_dir / RECORD_FILE, record).value
        publish_bytes(options.out_dir / FINGERPRINT_FILE, fingerprint_file_bytes(value))
    return record


def _arm_inputs(sft: dict[str, Any]) -> dict[str, Any]:
    """What an arm task needs of its seed's SFT task: the two starting points."""
    return {"state_dict": sft["state_dict"], "untrained_state_dict": sft["untrained_state_dict"]}


def _finish_seed(assembly: _SeedAssembly, record: dict[str, Any], options: RunOptions,
                 seeds: list[int]) -> None:
    record["runs"].append(assembly.entry())
    record.setdefault("parameters", assembly.sft["parameters"] if assembly.sft else None)
    _write_record(options.out_dir, record, seeds)
    options.display.handle({"kind": "seed_done", "seed": assembly.sft["seed"]})


def _run_in_process(data: dict[str, Any], pending: list[int], options: RunOptions,
                    record: dict[str, Any]) -> None:
    global _EMIT
    configure_torch(data["threads"])
    _EMIT = options.display.handle
    try:
        for seed in pending:
            assembly = _SeedAssembly(arm_names(data))
            assembly.sft = sft_task(data, seed, options.out_dir, options.progress_every)
            for arm in arm_names(data):
                assembly.arm_results[arm] = arm_task(data, seed, arm, _arm_inputs(assembly.sft),
                                                     options.out_dir, options.progress_every)
            _finish_seed(assembly, record, options, data["seeds"])
    finally:
        _EMIT = None


def _run_in_workers(data: dict[str, Any], pending: list[int], options: RunOptions,
                    record: dict[str, Any]) -> None:
    context = worker_context()
    queue = context.SimpleQueue()
    pump = threading.Thread(target=_pump, args=(queue, options.display), daemon=True)
    pump.start()
    executor = cf.ProcessPoolExecutor(max_workers=options.workers, mp_context=context,
                                      initializer=_worker_init,
                                      initargs=(queue, data["threads"]))
    assemblies = {seed: _SeedAssembly(arm_names(data)) for seed in pending}
    futures: dict[cf.Future, tuple] = {}
    out, every = options.out_dir, options.progress_every
    try:
        for seed in pending:
            futures[executor.submit(sft_task, data, seed, out, every)] = ("sft", seed)
        while futures:
            finished, _ = cf.wait(futures, return_when=cf.FIRST_COMPLETED)
            for future in finished:
                kind, seed, *rest = futures.pop(future)
                result = future.result()
                if result["capability"] != record["numerics"]["cpu_capability"]:
                    raise RunFailed(f"a worker ran torch CPU capability {result['capability']}, "
                                    f"the main process {record['numerics']['cpu_capability']}")
                assembly = assemblies[seed]
                if kind == "sft":
                    assembly.sft = result
                    for arm in arm_names(data):
                        job = executor.submit(arm_task, data, seed, arm, _arm_inputs(result),
                                              out, every)
                        futures[job] = ("arm", seed, arm)
                else:
                    assembly.arm_results[rest[0]] = result
                if assembly.complete():
                    _finish_seed(assembly, record, options, data["seeds"])
    except cf.process.BrokenProcessPool:
        raise RunFailed("a worker process died; completed seeds are kept") from None
    finally:
        for process in list(getattr(executor, "_processes", {}).values()):
            if process.is_alive():
                process.kill()
        executor.shutdown(wait=True, cancel_futures=True)
        queue.put(None)
        pump.join(timeout=5)


def _pump(queue: Any, display: Quiet) -> None:
    while True:
        event = queue.get()
        if event is None:
            return
        display.handle(event)
