"""A run's pending seeds trained as one ensemble: SFT of every seed, then every arm of every

seed, each stage's members stacked; results in the form the exact engine's tasks return, so
the run folder, record and every tool downstream are the same.

Checkpoints are ordinary checkpoints of the plan's policy kind. Each is reloaded from disk by
hash and re-evaluated in another company, and the first alone, and must give the rows it gave:
every run checks, for every checkpoint, that its members did not depend on each other.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from postlab import counter
from postlab.engines.ensemble import engine
from postlab.engines.ensemble.nets import (
    NETS,
    Net,
    configuration,
    configuration_problem,
    net_for,
)
from postlab.engines.registry import Emit, EngineTask, StageKey, Work, cpu_capability
from postlab.errors import RunFailed, UserError
from postlab.plan.arms import arm_names, arm_specs
from postlab.policies.base import POLICIES, Policy, build_policy, policy_kind
from postlab.policies.checkpoint import (
    checkpoint_bytes,
    checkpoint_name,
    load_checkpoint,
    publish_checkpoint,
)
from postlab.records.record import keep_results
from postlab.tasks.registry import task_for

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

NAME = "ensemble"


def problems(plan: Plan) -> list[str]:
    """What the ensemble engine cannot train in a plan (empty: it can)."""
    if plan.agent is not None:
        return ["agent episodes (the ensemble engine decodes one answer per question, with "
                "no tool turns; use --engine exact)"]
    found = []
    if task_for(plan).operand_limit is None:
        found.append(f"the {plan.task} task (the ensemble engine trains the arithmetic "
                     "tasks, whose prompts it builds from operand pairs; use --engine exact)")
    if plan.tokenizer is not None:
        found.append("a trained tokenizer (the ensemble engine reads the plan's characters; "
                     "use --engine exact)")
    if policy_kind(plan) not in NETS:
        found.append(f"the {policy_kind(plan)!r} policy (the ensemble engine trains "
                     f"{', '.join(NETS.names())}; use --engine exact)")
    elif (problem := configuration_problem(plan)) is not None:
        found.append(problem)
    if plan.lora is not None:
        found.append("lora (the ensemble engine trains every weight of its members; use "
                     "--engine exact)")
    if plan.dynamic_sampling:
        found.append("dynamic_sampling (its resampling loop is per model; use --engine exact)")
    if any(arm.pipeline == "sft-selected" for arm in arm_specs(plan)):
        found.append("sft-selected arms (demonstrations chosen by difficulty are drawn from "
                     "the plan's random stream per model; use --engine exact)")
    if plan.gradient_checkpointing:
        found.append("gradient_checkpointing (the ensemble engine runs its members' blocks "
                     "whole; use --engine exact)")
    if plan.precision == "bf16":
        found.append("precision bf16 (the ensemble engine computes in float32)")
    if plan.threads > 1:
        found.append(f"threads {plan.threads} (with more than one thread torch splits "
                     "large sums by size, so a member's bits would depend on its company; "
                     "the ensemble runs one thread per worker)")
    return found


def evaluate_alone(state: dict[str, torch.Tensor], plan: Plan, seed: int,
                   device: str = "cpu", net: Net | None = None) -> dict[str, Any]:
    """One checkpoint's evaluation rows, as the ensemble engine computed them in company
    (``net``: the plan's, if the caller has it; else built, which reads a pretrained folder
    again)."""
    return evaluate_together([state], plan, [seed], device, net)[0]


def evaluate_together(states: Sequence[dict[str, torch.Tensor]], plan: Plan,
                      seeds: Sequence[int], device: str = "cpu", net: Net | None = None
                      ) -> list[dict[str, Any]]:
    """Checkpoints' evaluation rows (``seeds[i]`` the seed of ``states[i]``), computed as
    one ensemble: a member's rows do not depend on its company, which training checks on
    every checkpoint it saves (``_save_all``)."""
    net = net or net_for(plan, device)
    tables = engine.Tables(plan, torch.device(device), net.tokenizer)
    stacked = torch.tensor(list(seeds), device=device)
    return engine.evaluate(net.stack(list(states)), net, tables, [plan] * len(states),
                           stacked)


def _compute_of(history: list[dict[str, Any]], plan: Plan) -> dict[str, int]:
    rows = [row for step in history for row in step["rows"]]
    steps = len(history) * plan.updates_per_rollout
    return {"completions": len(rows),
            "tokens_generated": sum(len(r[2]) + int(r[3]) for r in rows),
            "gradient_steps": steps,
            "examples_seen": steps * (len(rows) // max(1, len(history)))}


@dataclass(frozen=True)
class _Saved:
    """One member's checkpoint to publish: where it goes and the rows it gave in company."""

    plan: Plan
    seed: int
    stage: str
    out_dir: Path
    member: int
    rows: dict[str, Any]


def _save_all(params: dict[str, torch.Tensor], net: Net, tables: engine.Tables,
              items: list[_Saved], device: str) -> list[dict[str, Any]]:
    """Publish each member's checkpoint, reload them all from disk by hash, and re-evaluate:
    all together in reversed order (another company, another position for every member)
    and the first one alone. Each must give the rows it gave in the ensemble: the run checks
    that its members did not depend on each other."""
    published, restored = [], []
    for item in items:
        state = net.unstack(params, item.member)
        path = item.out_dir / checkpoint_name(item.seed, item.stage)
        digest = publish_checkpoint(path, checkpoint_bytes(item.plan.data(), state, net.kind))
        published.append({"file": path.name, "sha256": digest, "reload_equal": True})
        restored.append(load_checkpoint(path, digest, kind=net.kind)["state_dict"])
    order = list(reversed(range(len(items))))
    where = torch.device(device)
    again = net.stack([restored[i] for i in order])
    seeds = torch.tensor([items[i].seed for i in order], device=where)
    fresh = engine.evaluate(again, net, tables, [items[i].plan for i in order], seeds)
    alone = evaluate_alone(restored[0], items[0].plan, items[0].seed, device, net)
    for position, i in enumerate(order):
        if fresh[position] != items[i].rows or (i == 0 and alone != items[0].rows):
            item = items[i]
            raise RunFailed(f"seed {item.seed}, stage {item.stage}: the reloaded checkpoint "
                            f"{published[i]['file']} re-evaluates differently in another "
                            "company or alone than in the ensemble")
    return published


@dataclass(frozen=True)
class Part:
    """Seeds of one run folder (a plan version) for the ensemble to train."""

    plan: Plan
    seeds: tuple[int, ...]
    out_dir: Path


#: Plan keys that may differ between members of one batch: numbers the computation reads
#: per member, not shapes, plus what only names or describes a plan. Learning rates are not
#: among them: torch's Adam takes one per parameter group, and a batch's members share their
#: stacked tensors, so versions that differ in a learning rate train as separate batches.
BATCHABLE_KEYS = frozenset({"kl_beta", "clip", "clip_high", "sapo_tau_pos", "sapo_tau_neg",
                            "temperature", "gradient_clip",
                            "version", "date", "parent", "seeds", "hypotheses",
                            "hacking_monitor"})


def batch_key(plan: Plan) -> str:
    """Plans with equal keys can train as members of one batch."""
    import json

    return json.dumps({k: v for k, v in plan.data().items() if k not in BATCHABLE_KEYS},
                      sort_keys=True)


def member_bytes(plan: Plan) -> int:
    """A generous estimate of one RL member's peak memory in bytes: its weights, gradients,
    Adam state, reference and starting copies, and the activations of one update (kept for
    the backward pass) or of evaluation, whichever is larger."""
    from postlab.policies.gru import gru_size

    prompt = task_for(plan).longest_prompt
    time_steps = prompt + plan.max_new_tokens
    if policy_kind(plan) == "gru":
        parameters, _ = gru_size(plan)
        hidden, vocab = plan.hidden, len(plan.vocab)
        per_token = 12 * hidden + 8 * vocab
        per_decoded = 5 * hidden + 4 * vocab
    else:  # a transformer: per layer and token, the residual stream's tensors, the MLP's
        # and the attention rows of every head; then the logits at the model's output width
        parameters, _ = POLICIES[policy_kind(plan)].size(plan)
        config = configuration(plan, check_folder=False)
        hidden, heads = config.hidden_size, config.num_attention_heads
        inner = (getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None)
                 or 4 * hidden)
        per_layer = 12 * hidden + 3 * inner + 2 * heads * time_steps
        per_token = config.num_hidden_layers * per_layer + 8 * config.vocab_size
        per_decoded = per_token // 2
    rollout = plan.prompts_per_step * plan.group_size * time_steps * per_token * 3
    questions = max(len(pairs) for pairs in plan.split.values())
    evaluation = questions * plan.eval_samples * time_steps * per_decoded
    return 4 * (8 * parameters + max(rollout, evaluation))


def free_bytes(device: str) -> int:
    """Memory free for the ensemble on ``device`` now."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    import os

    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4 << 30  # where the system does not say: assume 4 GiB


#: The fewest seeds :func:`cache_seeds` gives: below 8, each small operation's fixed cost
#: outweighs the cache (an RL member-step took 2.65 ms with 8 seeds and 3.79 ms with 4).
MIN_CACHE_SEEDS = 8


def cache_seeds(plan: Plan) -> int | None:
    """How many seeds of a GRU plan train fastest at once on a CPU: as many as keep one RL
    pass's gate activations (rollouts x 3 x hidden floats a member) within a core's L2 cache.
    None for other policies and for plans without RL (not measured).

    Each GRU step is a dozen elementwise passes over those activations; once they spill out
    of the cache, memory bandwidth sets the pace. Measured on the teaching plan (Intel Xeon,
    2 MiB L2, one thread, 2026-12-07): an RL member-step took 2.41-2.49 ms with 12 to 32
    seeds together, 2.63 ms with 64 and 2.97 ms with 128 (before, chunks were as large as
    memory allowed: 128 seeds a task); this rule gives 28.
    """
    rl_members = sum(arm.is_rl for arm in arm_specs(plan))
    if policy_kind(plan) != "gru" or not rl_members:
        return None
    from postlab.machine.resources import l2_cache_bytes

    per_member = plan.prompts_per_step * plan.group_size * 3 * plan.hidden * 4
    return max(MIN_CACHE_SEEDS, l2_cache_bytes() // (per_member * rl_members))


def chunk_seeds(plan: Plan, device: str, members_per_seed: int,
                shares: int = 1) -> int:
    """How many seeds train at once: as many as half the free memory holds, shared by the
    ``shares`` ensemble tasks that run at the same time; on a CPU, no more than
    :func:`cache_seeds`."""
    budget = free_bytes(device) // (2 * max(1, shares))
    most = max(1, budget // (member_bytes(plan) * max(1, members_per_seed)))
    fastest = cache_seeds(plan) if device == "cpu" else None
    return most if fastest is None else min(most, fastest)


def train_parts(parts: list[Part], device: str, emit: Emit, chunk: int | None = None,
                shares: int = 1, keep: bool = False
                ) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Every stage of every part's seeds: (out_dir, seed, stage) -> the result the exact
    engine's task for that stage would return. Parts must share a :func:`batch_key`; members
    are trained ``chunk`` seeds at a time (None: as many as memory holds), which changes the
    work, not a bit of any member. With ``keep``, each chunk's results are also written to
    the run folders' kept results as soon as the chunk is done.

    Trains on the plan's one thread whoever calls it, restoring the caller's count after:
    with two threads a batched product splits its members between the threads differently
    from one member alone (seen on an Intel Xeon and on an AMD EPYC, Zen 3), so a member's
    bits would depend on its chunk."""
    keys = {batch_key(part.plan) for part in parts}
    if len(keys) != 1:
        raise ValueError("parts of one ensemble batch must differ only in numeric settings")
    plan = parts[0].plan
    found = problems(plan)
    if found:
        raise UserError(f"the ensemble engine cannot train {found[0]}")
    members = [(part, seed) for part in parts for seed in part.seeds]
    rl_arms = sum(arm.is_rl for arm in arm_specs(plan))
    size = chunk or chunk_seeds(plan, device, 1 + rl_arms, shares)
    results: dict[tuple[str, int, str], dict[str, Any]] = {}
    started = time.monotonic()
    threads = torch.get_num_threads()
    torch.set_num_threads(plan.threads)
    try:
        for first in range(0, len(members), size):
            part_results = _train_members(members[first:first + size], device)
            if keep:
                keep_results(part_results)  # as each chunk finishes
            results.update(part_results)
            done = min(first + size, len(members))
            emit({"kind": "message", "text": f"ensemble: {done} of {len(members)} seeds "
                                             f"trained ({time.monotonic() - started:.1f} s)"})
    finally:
        torch.set_num_threads(threads)
    return results


def _train_members(members: list[tuple[Part, int]], device: str
                   ) -> dict[tuple[str, int, str], dict[str, Any]]:
    """SFT of every member's seed, then every arm of each, as stacked members."""
    from postlab.engines.train import sft_compute

    plan = members[0][0].plan
    plans = [part.plan for part, _ in members]
    seeds = [seed for _, seed in members]
    where = torch.device(device)
    untrained = []
    for seed in seeds:
        torch.manual_seed(seed)  # the exact engine's initial weights, seed by seed
        untrained.append(build_policy(plan).state_dict())
    net = net_for(plan, where)
    tables = engine.Tables(plan, where, net.tokenizer)
    seed_tensor = torch.tensor(seeds, device=where)
    params = net.stack(untrained)
    parameters = sum(v[0].numel() for v in params.values())
    losses = engine.supervised(params, net, tables, plan, seed_tensor,
                               engine.shared(plans, "sft_lr"),
                               engine.per_member(plans, "gradient_clip", where),
                               plan.sft_steps)
    sft_params = {k: v.detach().clone() for k, v in params.items()}
    evaluations = engine.evaluate(sft_params, net, tables, plans, seed_tensor)
    results: dict[tuple[str, int, str], dict[str, Any]] = {}
    saved = _save_all(sft_params, net, tables, [
        _Saved(plan=part.plan, seed=seed, stage="initial", out_dir=part.out_dir, member=m,
               rows=evaluations[m]) for m, (part, seed) in enumerate(members)], device)
    for m, (part, seed) in enumerate(members):
        results[(str(part.out_dir), seed, "initial")] = {
            "seed": seed, "sft_loss": losses[m], "evaluation": evaluations[m],
            "checkpoint": saved[m], "parameters": parameters, "capability": cpu_capability(),
            "compute": sft_compute(part.plan, part.plan.sft_steps)}
    untrained_params = net.stack(untrained)
    arms = arm_specs(plan)
    rl = [(arm, m) for arm in arms if arm.is_rl for m in range(len(members))]
    if rl:
        index = torch.tensor([m for _, m in rl], device=where)
        from_untrained = torch.tensor([arm.pipeline == "rl-only" for arm, _ in rl],
                                      device=where)
        start = {k: torch.where(from_untrained.reshape(-1, *[1] * (v.dim() - 1)),
                                untrained_params[k][index], v[index])
                 for k, v in sft_params.items()}
        reference = {k: v.clone() for k, v in start.items()}
        rl_seeds = seed_tensor[index]
        rl_plans = [plans[m] for _, m in rl]
        histories = engine.reinforce(start, reference, net, tables, rl_plans, rl_seeds,
                                     [arm.contract for arm, _ in rl])
        rows = engine.evaluate(start, net, tables, rl_plans, rl_seeds)
        saved = _save_all(start, net, tables, [
            _Saved(plan=members[m][0].plan, seed=members[m][1], stage=arm.name,
                   out_dir=members[m][0].out_dir, member=j, rows=rows[j])
            for j, (arm, m) in enumerate(rl)], device)
        for j, (arm, m) in enumerate(rl):
            part, seed = members[m]
            results[(str(part.out_dir), seed, arm.name)] = {
                "seed": seed, "arm": arm.name, "history": histories[j],
                "compute": _compute_of(histories[j], part.plan), "evaluation": rows[j],
                "checkpoint": saved[j], "capability": cpu_capability()}
    for arm in (a for a in arms if not a.is_rl):
        more = {k: v.clone() for k, v in sft_params.items()}
        extra = engine.supervised(more, net, tables, plan, seed_tensor,
                                  engine.shared(plans, "sft_lr"),
                                  engine.per_member(plans, "gradient_clip", where),
                                  arm.sft_steps, stream=counter.SFT_ONLY_BATCH,
                                  stage=f"arm {arm.name}, SFT")
        rows = engine.evaluate(more, net, tables, plans, seed_tensor)
        saved = _save_all(more, net, tables, [
            _Saved(plan=part.plan, seed=seed, stage=arm.name, out_dir=part.out_dir, member=m,
                   rows=rows[m]) for m, (part, seed) in enumerate(members)], device)
        for m, (part, seed) in enumerate(members):
            results[(str(part.out_dir), seed, arm.name)] = {
                "seed": seed, "arm": arm.name, "sft_loss": extra[m],
                "compute": sft_compute(part.plan, arm.sft_steps), "evaluation": rows[m],
                "checkpoint": saved[m], "capability": cpu_capability()}
    return results


#: The most seeds one task trains, by device. A task returns its seeds' results together, as
#: Python rows (about 6 MB per teaching seed), and its process holds them until then: 128
#: seeds keep a CPU task under about 0.8 GB whatever the number of seeds (one task per worker
#: made the main process of a 32-seed run peak 76 MiB above a 16-seed one's, growing without
#: bound). On CUDA one process trains, and wider batches keep the GPU busy: 1,024 (about
#: 6 GB of host memory).
TASK_SEEDS = {"cpu": 128, "cuda": 1024}


@dataclass(frozen=True)
class EnsembleTask:
    """Every stage of the pending seeds of one or more runs (plan versions that differ only
    in numeric settings), trained as one batched computation. Its result maps each (run
    folder, seed, stage) to what that stage's exact task returns."""

    parts: tuple[Part, ...]  # one per run
    device: str = "cpu"
    shares: int = 1  # ensemble tasks running at once: they share the memory

    @property
    def seed(self) -> int:
        return self.parts[0].seeds[0]

    @property
    def keys(self) -> tuple[StageKey, ...]:
        return tuple((str(part.out_dir), seed, stage) for part in self.parts
                     for seed in part.seeds
                     for stage in ("initial", *arm_names(part.plan)))

    def __call__(self, emit: Emit) -> dict[StageKey, dict[str, Any]]:
        return train_parts(list(self.parts), self.device, emit, shares=self.shares, keep=True)


class EnsembleEngine:
    """All pending seeds and arms of runs that differ only in numeric settings, as stacked
    members of one computation, split into as many shares as the executor runs at once."""

    name = NAME
    summary = ("many seeds, arms and plan versions as one batched computation; the exact "
               "engine's results in distribution, not in bits")
    keeps_results = True  # each chunk of members keeps its seeds' results as it finishes
    whole_seeds = True  # a seed trains whole: what is kept of one in part is trained again

    def problems(self, plan: Plan, log: Sequence[str] = ()) -> list[str]:
        found = problems(plan)
        if log:
            found.append(f"with --log {log[0]}: it writes no live logs yet (its members "
                         "train as one computation); use --engine exact to watch training, "
                         "or read the finished run's dynamics in its report")
        return found

    def batch_key(self, plan: Plan) -> str:
        return batch_key(plan)

    def tasks(self, works: Sequence[Work], capacity: int) -> list[EngineTask]:
        # As many tasks as the executor runs at once, each a share of the seeds, and more
        # where a share would exceed TASK_SEEDS: members do not depend on their company, so
        # the split changes the work, not the bits.
        members = [(work, seed) for work in works for seed in work.seeds]
        shares = min(capacity, len(members))
        most = TASK_SEEDS["cuda" if works and works[0].device.startswith("cuda") else "cpu"]
        count = max(shares, -(-len(members) // most))
        tasks: list[EngineTask] = []
        for share in range(count):
            mine = members[share::count]
            parts = [Part(work.plan, seeds, work.out_dir) for work in works
                     if (seeds := tuple(seed for owner, seed in mine if owner is work))]
            tasks.append(EnsembleTask(tuple(parts), works[0].device, shares))
        return tasks

    def after(self, task: EngineTask, results: Mapping[StageKey, dict[str, Any]],
              work: Work) -> list[EngineTask]:
        return []

    def evaluate_many(self, models: Sequence[Policy], plan: Plan,
                      seeds: Sequence[int], device: str) -> list[dict[str, Any]]:
        return evaluate_together([model.state_dict() for model in models], plan, seeds,
                                 device)


ENSEMBLE = EnsembleEngine()
