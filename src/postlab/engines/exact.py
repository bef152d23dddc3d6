"""The exact engine: one model per task, the reference's bits.

Per seed, an SFT task trains and evaluates the seed's SFT stage; when it finishes, one task
per arm starts from the SFT checkpoint (read back by sha256) with the SFT model frozen as the
KL reference. Every task saves its stage's checkpoint, reloads it from disk by hash and
re-evaluates it. Tasks carry their inputs (plan, seed, arm, input checkpoint by hash), so the
record does not depend on where or how many of them ran.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from postlab.engines.registry import Emit, EngineTask, StageKey, Work, cpu_capability
from postlab.engines.rollout import evaluate_model
from postlab.engines.steplog import SFT_LOSS_TAG, SFT_STAGE, StepLogs, rl_scalars
from postlab.engines.train import reinforce, rollout_rates, sft_compute, supervised
from postlab.errors import RunFailed
from postlab.plan.arms import arm_names, arm_specs, plan_contracts
from postlab.policies import Policy, build_policy, place_policy, policy_kind
from postlab.policies.checkpoint import (
    CheckpointError,
    checkpoint_bytes,
    checkpoint_name,
    load_checkpoint,
    publish_checkpoint,
)
from postlab.policies.restore import UNTRAINED, attach_plan_adapters, policy_from_checkpoint
from postlab.policies.restore import untrained_weights as untrained_weights
from postlab.tasks.contracts import DRAWN
from postlab.tasks.registry import answer_function

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


def _save_and_check(model: Policy, plan: Plan, seed: int, stage: str,
                    out_dir: Path, rows: dict[str, Any], base: dict[str, str] | None = None,
                    inputs: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Publish the stage's checkpoint, reload it from disk by hash, and re-evaluate it.

    ``base``: an adapter checkpoint's base (stage and weights digest); ``inputs``: the
    checkpoints it may name, as a record lists them."""
    path = out_dir / checkpoint_name(seed, stage)
    data = checkpoint_bytes(plan.data(), model.checkpoint_state(), model.kind, base=base)
    digest = publish_checkpoint(path, data)
    payload = load_checkpoint(path, digest, kind=policy_kind(plan))
    restored = place_policy(policy_from_checkpoint(plan, payload, seed, out_dir, inputs or {}),
                            str(model.device.type))
    equal = evaluate_model(restored, plan, seed) == rows
    if not equal:
        raise RunFailed(f"seed {seed}, stage {stage}: the reloaded checkpoint {path.name} "
                        "re-evaluates differently")
    return {"file": path.name, "sha256": digest, "reload_equal": equal}


def sft_task(plan: Plan, seed: int, out_dir: Path, every: int,
             emit: Emit, device: str = "cpu", log: tuple[str, ...] = ()) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = build_policy(plan)
    parameters = model.parameter_count()
    # RL-only and sft-selected arms start from the untrained weights, so keep them before
    # SFT changes them.
    untrained = copy.deepcopy(model.state_dict()) if any(
        arm.from_untrained for arm in arm_specs(plan)) else None
    place_policy(model, device)  # after the CPU initialisation, so it is the same everywhere
    total = plan.sft_steps

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
            "parameters": parameters, "capability": cpu_capability(),
            "state_dict": model.state_dict(), "untrained_state_dict": untrained,
            "compute": sft_compute(plan, total)}


def arm_task(plan: Plan, seed: int, arm_name: str, sft: dict[str, Any],
             out_dir: Path, every: int, emit: Emit, device: str = "cpu",
             log: tuple[str, ...] = ()) -> dict[str, Any]:
    arm = next(a for a in arm_specs(plan) if a.name == arm_name)
    start = build_policy(plan)
    if arm.from_untrained:
        start.load_state_dict(sft["untrained_state_dict"])
    else:
        start.load_state_dict(sft["state_dict"])
    base = None
    if arm.is_rl and plan.lora is not None:
        # adapters on CPU, before placing, so their initial values are the same everywhere
        base = {"stage": UNTRAINED if arm.pipeline == "rl-only" else "initial",
                "weights_sha256": attach_plan_adapters(start, plan, seed)}
    place_policy(start, device)
    result: dict[str, Any] = {"seed": seed, "arm": arm.name, "capability": cpu_capability()}
    with StepLogs(log, out_dir, seed, arm.name) as logs:
        if arm.pipeline == "sft-only":
            model = start
            done = plan.sft_steps  # its curve continues the seed's SFT curve

            def sft_hook(step: int, loss: float) -> None:
                logs.scalars(done + step, {SFT_LOSS_TAG: loss})

            result["sft_loss"] = supervised(model, plan, seed, sft_hook if log else None,
                                            steps=arm.sft_steps, rng_offset=5000)
            result["compute"] = sft_compute(plan, arm.sft_steps)
        elif arm.pipeline == "sft-selected":
            # the seed's SFT again from the same weights and random stream, the
            # demonstrations chosen by the arm's rule: with "random" it is that SFT, bit for
            # bit, so any difference is the selection's
            model = start
            result["sft_loss"] = supervised(
                model, plan, seed, (lambda step, loss: logs.scalars(step, {SFT_LOSS_TAG: loss}))
                if log else None, selection=arm.selection or "random")
            result["compute"] = sft_compute(plan, plan.sft_steps)
        else:
            reference = start.reference_policy()
            total = plan.rl_steps
            answer = answer_function(plan)
            contracts = plan_contracts(plan)

            def hook(step: int, rows: list) -> None:
                if every and (step % every == 0 or step == total):
                    emit({"kind": "rl", "seed": seed, "arm": arm.name, "step": step,
                          "total": total, "rates": rollout_rates(rows, answer, contracts)})

            drawn = ((arm.contract, seed, plan.random_rate) if arm.contract in DRAWN
                     and plan.random_rate is not None else None)

            def observe(entry: dict[str, Any]) -> None:
                logs.scalars(entry["step"], rl_scalars(entry, answer, contracts, drawn))

            model, result["history"], result["compute"] = reinforce(
                start, reference, plan, seed, arm.contract, hook, label=arm.name,
                observe=observe if log else None)
    rows = evaluate_model(model, plan, seed)
    result["evaluation"] = rows
    result["checkpoint"] = _save_and_check(model, plan, seed, arm.name, out_dir, rows, base,
                                           sft.get("checkpoints"))
    return result


@dataclass(frozen=True)
class CheckpointRef:
    """A published checkpoint named by its file in the run folder and its sha256."""

    file: str
    sha256: str


@dataclass(frozen=True)
class SftTask:
    """One seed's SFT stage. Its result holds no weights: arms read them from its checkpoint."""

    plan: Plan
    seed: int
    out_dir: Path
    every: int
    device: str = "cpu"
    log: tuple[str, ...] = ()  # step loggers, by name: the task opens them where it runs

    @property
    def keys(self) -> tuple[StageKey, ...]:
        return ((str(self.out_dir), self.seed, "initial"),)

    def __call__(self, emit: Emit) -> dict[StageKey, dict[str, Any]]:
        result = sft_task(self.plan, self.seed, self.out_dir, self.every, emit, self.device,
                          self.log)
        result.pop("state_dict", None)
        result.pop("untrained_state_dict", None)
        return {self.keys[0]: result}


@dataclass(frozen=True)
class ArmTask:
    """One (seed, arm) run, self-contained: the SFT weights are read from the seed's
    ``initial`` checkpoint, refused unless its sha256 matches; untrained weights (RL-only arms)
    are rebuilt from the seed exactly as the SFT task built them."""

    plan: Plan
    seed: int
    arm: str
    initial: CheckpointRef
    out_dir: Path
    every: int
    device: str = "cpu"
    log: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[StageKey, ...]:
        return ((str(self.out_dir), self.seed, self.arm),)

    def __call__(self, emit: Emit) -> dict[StageKey, dict[str, Any]]:
        spec = next(a for a in arm_specs(self.plan) if a.name == self.arm)
        start: dict[str, Any] = {}
        if spec.from_untrained:
            start["untrained_state_dict"] = untrained_weights(self.plan, self.seed)
        else:
            path = self.out_dir / self.initial.file
            payload = load_checkpoint(path, self.initial.sha256, kind=policy_kind(self.plan))
            if payload.get("plan") != self.plan.data():
                raise CheckpointError(f"{path}: a checkpoint of another plan; refusing it")
            start["state_dict"] = payload["state_dict"]
            start["checkpoints"] = {"initial": {"file": self.initial.file,
                                                "sha256": self.initial.sha256}}
        result = arm_task(self.plan, self.seed, self.arm, start, self.out_dir, self.every,
                          emit, self.device, self.log)
        return {self.keys[0]: result}


def _arm_tasks(work: Work, seed: int, sft: Mapping[str, Any],
               skip: Sequence[str] = ()) -> list[EngineTask]:
    initial = CheckpointRef(sft["checkpoint"]["file"], sft["checkpoint"]["sha256"])
    return [ArmTask(work.plan, seed, arm, initial, work.out_dir, work.every, work.device,
                    work.log) for arm in arm_names(work.plan) if arm not in skip]


class ExactEngine:
    """Every seed's SFT, then its arms, each a task of one model."""

    name = "exact"
    summary = "one model per task; bit for bit the reference's results on the teaching plan"
    keeps_results = False
    whole_seeds = False

    def problems(self, plan: Plan, log: Sequence[str] = ()) -> list[str]:
        return []

    def batch_key(self, plan: Plan) -> str:
        return "each run alone"  # tasks never mix runs: any key will do

    def tasks(self, works: Sequence[Work], capacity: int) -> list[EngineTask]:
        ready: list[EngineTask] = []
        for work in works:
            for seed in work.seeds:
                sft = work.kept.get((seed, "initial"))
                if sft is None:
                    ready.append(SftTask(work.plan, seed, work.out_dir, work.every,
                                         work.device, work.log))
                else:
                    kept_arms = [arm for arm in arm_names(work.plan) if (seed, arm) in work.kept]
                    ready += _arm_tasks(work, seed, sft, kept_arms)
        return ready

    def after(self, task: EngineTask, results: Mapping[StageKey, dict[str, Any]],
              work: Work) -> list[EngineTask]:
        if not isinstance(task, SftTask):
            return []
        return _arm_tasks(work, task.seed, results[task.keys[0]])

    def evaluate_many(self, models: Sequence[Policy], plan: Plan,
                      seeds: Sequence[int], device: str) -> list[dict[str, Any]]:
        # one model at a time: the exact engine's bits are those of a lone forward pass
        return [evaluate_model(model, plan, seed)
                for model, seed in zip(models, seeds, strict=True)]


EXACT = ExactEngine()
