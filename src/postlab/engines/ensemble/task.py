"""A run's pending seeds trained as one ensemble: SFT of every seed, then every arm of every
seed, each stage's members stacked; results in the form the exact engine's tasks return, so
the run folder, record and every tool downstream are the same.

Checkpoints are ordinary CharGRU checkpoints. Each is reloaded from disk by hash and
re-evaluated alone (one member), and must give the rows it gave in company: every run checks,
for every checkpoint, that its members did not depend on each other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from postlab.engines.ensemble import counter, engine, stacked
from postlab.errors import UserError
from postlab.plan.arms import arm_specs
from postlab.policies.base import build_policy, policy_kind
from postlab.runs.checkpoint import checkpoint_bytes, load_checkpoint, publish_checkpoint

Emit = Callable[[dict[str, Any]], None]
NAME = "ensemble"


def problems(plan: dict[str, Any]) -> list[str]:
    """What the ensemble engine cannot train in a plan (empty: it can)."""
    found = []
    if policy_kind(plan) != "gru":
        found.append(f"the {policy_kind(plan)!r} policy (the ensemble engine trains the gru "
                     "policy; use --engine exact)")
    if plan.get("dynamic_sampling"):
        found.append("dynamic_sampling (its resampling loop is per model; use --engine exact)")
    if plan.get("precision") == "bf16":
        found.append("precision bf16 (the ensemble engine computes in float32)")
    return found


def evaluate_alone(state: dict[str, torch.Tensor], plan: dict[str, Any], seed: int,
                   device: str = "cpu") -> dict[str, Any]:
    """One checkpoint's evaluation rows, as the ensemble engine computed them in company."""
    params, allowed = stacked.stack([state], device)
    tables = engine.Tables(plan, torch.device(device))
    seeds = torch.tensor([seed], device=device)
    return engine.evaluate(params, allowed, tables, [plan], seeds)[0]


@dataclass(frozen=True)
class _Stage:
    seed: int
    name: str


def _compute_of(history: list[dict[str, Any]], plan: dict[str, Any]) -> dict[str, int]:
    rows = [row for step in history for row in step["rows"]]
    steps = len(history) * plan["updates_per_rollout"]
    return {"completions": len(rows),
            "tokens_generated": sum(len(r[2]) + int(r[3]) for r in rows),
            "gradient_steps": steps,
            "examples_seen": steps * (len(rows) // max(1, len(history)))}


def _save(plan: dict[str, Any], params: dict[str, torch.Tensor], allowed: torch.Tensor,
          member: int, seed: int, stage: str, out_dir: Path, rows: dict[str, Any],
          device: str) -> dict[str, Any]:
    from postlab.runs.orchestration import RunFailed, checkpoint_name

    state = stacked.unstack(params, allowed, member)
    path = out_dir / checkpoint_name(seed, stage)
    digest = publish_checkpoint(path, checkpoint_bytes(plan, state, "gru"))
    restored = load_checkpoint(path, digest, kind="gru")["state_dict"]
    equal = evaluate_alone(restored, plan, seed, device) == rows
    if not equal:
        raise RunFailed(f"seed {seed}, stage {stage}: the reloaded checkpoint {path.name} "
                        "re-evaluates differently alone than in the ensemble")
    return {"file": path.name, "sha256": digest, "reload_equal": equal}


def train_seeds(plan: dict[str, Any], seeds: list[int], out_dir: Path, device: str,
                emit: Emit) -> dict[tuple[int, str], dict[str, Any]]:
    """Every stage of ``seeds``: (seed, stage) -> the result the exact engine's task for that
    stage would return."""
    from postlab.engines.train import sft_compute
    from postlab.runs.orchestration import _capability

    found = problems(plan)
    if found:
        raise UserError(f"the ensemble engine cannot train {found[0]}")
    where = torch.device(device)
    tables = engine.Tables(plan, where)
    members = len(seeds)
    started = time.monotonic()
    untrained = []
    for seed in seeds:
        torch.manual_seed(seed)  # the exact engine's initial weights, seed by seed
        untrained.append(build_policy(plan).state_dict())
    parameters = sum(v.numel() for k, v in untrained[0].items() if k != "allowed")
    seed_tensor = torch.tensor(seeds, device=where)
    plans = [plan] * members
    params, allowed = stacked.stack(untrained, where)
    losses = engine.supervised(params, allowed, tables, plan, seed_tensor,
                               engine.per_member(plans, "sft_lr", where),
                               engine.per_member(plans, "gradient_clip", where),
                               plan["sft_steps"])
    sft_params = {k: v.detach().clone() for k, v in params.items()}
    evaluations = engine.evaluate(sft_params, allowed, tables, plans, seed_tensor)
    results: dict[tuple[int, str], dict[str, Any]] = {}
    for m, seed in enumerate(seeds):
        results[(seed, "initial")] = {
            "seed": seed, "sft_loss": losses[m], "evaluation": evaluations[m],
            "checkpoint": _save(plan, sft_params, allowed, m, seed, "initial", out_dir,
                                evaluations[m], device),
            "parameters": parameters, "capability": _capability(),
            "compute": sft_compute(plan, plan["sft_steps"])}
    emit({"kind": "message", "text": f"ensemble: SFT of {members} seeds done "
                                     f"({time.monotonic() - started:.1f} s)"})
    untrained_params, _ = stacked.stack(untrained, where)
    arms = arm_specs(plan)
    rl = [(arm, m) for arm in arms if arm.is_rl for m in range(members)]
    if rl:
        index = torch.tensor([m for _, m in rl], device=where)
        from_untrained = torch.tensor([arm.pipeline == "rl-only" for arm, _ in rl],
                                      device=where)
        shape = {k: (-1, *[1] * (v.dim() - 1)) for k, v in sft_params.items()}
        start = {k: torch.where(from_untrained.reshape(shape[k]), untrained_params[k][index],
                                sft_params[k][index]) for k in sft_params}
        reference = {k: v.clone() for k, v in start.items()}
        rl_seeds = seed_tensor[index]
        rl_plans = [plan] * len(rl)
        histories = engine.reinforce(start, reference, allowed, tables, rl_plans, rl_seeds,
                                     [arm.contract for arm, _ in rl])
        rows = engine.evaluate(start, allowed, tables, rl_plans, rl_seeds)
        for j, (arm, m) in enumerate(rl):
            seed = seeds[m]
            results[(seed, arm.name)] = {
                "seed": seed, "arm": arm.name, "history": histories[j],
                "compute": _compute_of(histories[j], plan), "evaluation": rows[j],
                "checkpoint": _save(plan, start, allowed, j, seed, arm.name, out_dir, rows[j],
                                    device),
                "capability": _capability()}
    for arm in (a for a in arms if not a.is_rl):
        more = {k: v.clone() for k, v in sft_params.items()}
        extra = engine.supervised(more, allowed, tables, plan, seed_tensor,
                                  engine.per_member(plans, "sft_lr", where),
                                  engine.per_member(plans, "gradient_clip", where),
                                  arm.sft_steps, stream=counter.SFT_ONLY_BATCH)
        rows = engine.evaluate(more, allowed, tables, plans, seed_tensor)
        for m, seed in enumerate(seeds):
            results[(seed, arm.name)] = {
                "seed": seed, "arm": arm.name, "sft_loss": extra[m],
                "compute": sft_compute(plan, arm.sft_steps), "evaluation": rows[m],
                "checkpoint": _save(plan, more, allowed, m, seed, arm.name, out_dir, rows[m],
                                    device),
                "capability": _capability()}
    emit({"kind": "message", "text": f"ensemble: {len(rl)} RL and "
                                     f"{sum(not a.is_rl for a in arms) * members} SFT-only "
                                     f"members done ({time.monotonic() - started:.1f} s)"})
    return results
