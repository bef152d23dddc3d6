"""SFT and RL loops for one seed. The exact engine's only calls of ``backward()`` and ``step()``.

Random streams, fixed by the plan's seed so any stage can be re-run alone:
``random.Random(seed + 1000)`` draws SFT batches, ``random.Random(seed + 2000)`` draws RL
prompts, a torch generator seeded ``seed + 3000`` samples rollouts, evaluation seeds its own
generators (see :func:`postlab.engines.rollout.evaluate_model`), and an SFT-only arm draws its extra
batches from ``random.Random(seed + 5000)``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from postlab.engines.optim import adam_for
from postlab.engines.options import algorithm_of, clip_range
from postlab.engines.rollout import generate, to_rows
from postlab.errors import NonFiniteError
from postlab.policies import Policy
from postlab.policies.lora import AdaptersOff
from postlab.records.metrics import metrics
from postlab.rl import objective
from postlab.tasks.arithmetic import ARITHMETIC_CONTRACTS
from postlab.tasks.contracts import CONTRACTS, score
from postlab.tasks.registry import task_for
from postlab.tasks.rows import Row
from postlab.tasks.selection import SELECTIONS, order

#: Called after each RL step with (step, rollout rows); used for progress display.
StepHook = Callable[[int, list], None]
#: Called after each RL step with its history entry (rows, updates, zero-variance groups), for
#: live logging; it only reads the entry.
StepObserver = Callable[[dict[str, Any]], None]


def _check_finite(value: float, what: str, where: str) -> None:
    if not math.isfinite(value):
        raise NonFiniteError(f"non-finite {what} ({value}) at {where}")


def sequence_log_dist(model: Policy, prompts: torch.Tensor,
                      tokens: torch.Tensor) -> torch.Tensor:
    """Log-probabilities (seq, len, vocab) at each response position, given the prefix."""
    with model.autocast():
        logits = model.continuation(prompts, tokens)
    # Log-probabilities in float32 whatever the forward pass ran in (a no-op for float32).
    return logits.float().log_softmax(-1)


def supervised(model: Policy, plan: dict[str, Any], seed: int,
               hook: Callable[[int, float], None] | None = None, *, steps: int | None = None,
               rng_offset: int = 1000, selection: str = "random") -> list[float]:
    """Teacher-forced cross-entropy on train pairs, drawn each step by the demonstration
    ``selection`` rule (:mod:`postlab.tasks.selection`); returns the loss of every step."""
    rng = random.Random(seed + rng_offset)
    optimizer = adam_for(model.parameters(), plan["sft_lr"])
    task = task_for(plan)
    split = order(plan["split"]["train"], task.difficulty, selection)
    choose = SELECTIONS[selection]
    tokenizer = model.tokenizer
    pad = tokenizer.pad_id
    losses = []
    total = plan["sft_steps"] if steps is None else steps
    for step in range(total):
        pairs = choose(split, rng, step, total, plan["sft_batch"])
        targets = [[*tokenizer.encode(task.demonstration(pair)), tokenizer.eos_id]
                   for pair in pairs]
        width = max(map(len, targets))
        target = torch.tensor([t + [pad] * (width - len(t)) for t in targets],
                              device=model.device)
        prompts = model.prompts(pairs)
        with model.autocast():
            logits = model.continuation(prompts, target)
        logits = logits.float()  # the loss in float32 (a no-op for a float32 forward pass)
        # the model's output width, which a pretrained model may have wider than its
        # tokenizer's vocabulary
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.flatten(),
                               ignore_index=pad)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), plan["gradient_clip"])
        optimizer.step()
        value = loss.item()
        where = f"seed {seed}, SFT step {step + 1}"
        _check_finite(value, "SFT loss", where)
        _check_finite(grad_norm.item(), "gradient norm", where)
        losses.append(value)
        if hook is not None:
            hook(step + 1, value)
    return losses


def _pad(tokens: torch.Tensor, mask: torch.Tensor, width: int,
         pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    extra = width - tokens.shape[1]
    if extra <= 0:
        return tokens, mask
    return (torch.cat([tokens, torch.full((tokens.shape[0], extra), pad,
                                          device=tokens.device)], dim=1),
            torch.cat([mask, torch.zeros(mask.shape[0], extra, dtype=torch.bool,
                                         device=mask.device)], dim=1))


class _Rollout:
    """One step's batch of groups: pairs, tokens, mask, rows and rewards."""

    def __init__(self, model: Policy, plan: dict[str, Any], pairs: list, rewards_of: Callable,
                 generator: torch.Generator) -> None:
        self.pairs = pairs
        self.tokens, self.mask = generate(model, pairs, plan["max_new_tokens"],
                                          plan["temperature"], generator)
        self.rows = to_rows(model, pairs, self.tokens, self.mask)
        self.rewards = rewards_of(self.rows, self.mask)


def _resample_constant_groups(batch: _Rollout, model: Policy, plan: dict[str, Any],
                              rng: random.Random, generator: torch.Generator,
                              rewards_of: Callable) -> dict[str, Any]:
    """Dynamic sampling (DAPO): replace groups whose rewards are all equal with fresh mixed
    groups, drawing at most ``max_extra_groups`` extra groups this step."""
    size = plan["group_size"]
    budget = plan["dynamic_sampling"]["max_extra_groups"]
    pairs, rows = list(batch.pairs), list(batch.rows)
    tokens, mask, rewards = batch.tokens, batch.mask, batch.rewards.clone()
    constant = [g for g, std in enumerate(objective.group_reward_std(rewards, size).flatten())
                if std == 0]
    drawn = dropped = replaced = 0
    dropped_rows: list = []
    while constant and drawn < budget:
        count = min(len(constant), budget - drawn)
        questions = rng.choices(plan["split"]["train"], k=count)
        fresh = _Rollout(model, plan, [q for q in questions for _ in range(size)], rewards_of,
                         generator)
        drawn += count
        width = max(tokens.shape[1], fresh.tokens.shape[1])
        pad = model.tokenizer.pad_id
        tokens, mask = _pad(tokens, mask, width, pad)
        new_tokens, new_mask = _pad(fresh.tokens, fresh.mask, width, pad)
        fresh_std = objective.group_reward_std(fresh.rewards, size).flatten()
        for index in range(count):
            part = slice(index * size, (index + 1) * size)
            if fresh_std[index] == 0:
                dropped += 1
                dropped_rows += fresh.rows[part]
                continue
            slot = constant.pop(0)
            target = slice(slot * size, (slot + 1) * size)
            dropped += 1
            replaced += 1
            dropped_rows += rows[target]
            pairs[target] = fresh.pairs[part]
            rows[target] = fresh.rows[part]
            tokens[target] = new_tokens[part]
            mask[target] = new_mask[part]
            rewards[target] = fresh.rewards[part]
    batch.pairs, batch.rows, batch.tokens, batch.mask = pairs, rows, tokens, mask
    batch.rewards = rewards
    kept = len(pairs) // size
    return {"drawn": kept + drawn, "kept": kept, "dropped": dropped,
            "replaced": replaced,
            "dropped_rows": dropped_rows}


def _signal_only(tokens: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor, pairs: list,
                 std: torch.Tensor, group_size: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list]:
    """The rows of the groups whose rewards differ (std > 0), in order: what a DAPO update
    trains on."""
    live = torch.repeat_interleave(std.flatten() != 0, group_size)
    index = live.nonzero().flatten()
    return tokens[index], mask[index], rewards[index], [pairs[i] for i in index.tolist()]


def _update(model: Policy, reference: Policy | AdaptersOff, plan: dict[str, Any],
            algorithm: Any, optimizer: Any, trainable: list, tokens: torch.Tensor,
            mask: torch.Tensor, rewards: torch.Tensor, pairs: list, where: str
            ) -> list[dict[str, float]]:
    """The step's ``updates_per_rollout`` clipped policy-gradient updates on one batch of
    whole groups; each update's statistics."""
    group_size = plan["group_size"]
    clip_low, clip_high = clip_range(plan)
    advantage = algorithm.advantage(rewards.reshape(-1, group_size)).flatten()
    prompts = model.prompts(pairs)
    with torch.no_grad():
        ref_log_dist = sequence_log_dist(reference, prompts, tokens)
    old_logp = None
    updates = []
    model.train()
    for _ in range(plan["updates_per_rollout"]):
        log_dist = sequence_log_dist(model, prompts, tokens)
        terms = objective.policy_loss(
            log_dist, ref_log_dist, tokens, mask, advantage, old_logp, algorithm=algorithm,
            clip_low=clip_low, clip_high=clip_high, kl_beta=plan["kl_beta"],
            max_tokens=plan["max_new_tokens"])
        if old_logp is None:
            # Before the first update the policy is the one that sampled: its
            # log-probabilities are this forward pass's, so it is not run twice.
            old_logp = terms.logp.detach()
        optimizer.zero_grad()
        terms.loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(trainable, plan["gradient_clip"])
        optimizer.step()
        values = objective.update_statistics(terms, mask, clip_low, clip_high)
        stats = {"loss": values["loss"].item(),
                 "gradient_norm_before_clip": grad_norm.item(),
                 **{key: values[key].item() for key in ("kl", "entropy",
                                                         "ratio_outside_clip")}}
        _check_finite(stats["loss"], "RL loss", where)
        _check_finite(stats["gradient_norm_before_clip"], "gradient norm", where)
        updates.append(stats)
    return updates


def reinforce(model: Policy, reference: Policy | AdaptersOff, plan: dict[str, Any], seed: int,
              contract_name: str, hook: StepHook | None = None, *,
              label: str | None = None, observe: StepObserver | None = None,
              ) -> tuple[Policy, list[dict[str, Any]], dict[str, int]]:
    """GRPO-style RL of ``model`` (in place) under a contract, KL-anchored to ``reference``
    (``model.reference_policy()`` taken before training: a frozen copy, or the same network
    with its adapters off, so a LoRA arm holds its base weights once).

    Returns the trained model, the per-step history and the compute it used. ``hook`` gets
    each step's rows (progress), ``observe`` its whole history entry (live logging); both
    only read what the step computed.
    """
    CONTRACTS[contract_name]  # an unknown contract fails here, before any training
    answer = task_for(plan).answer
    algorithm = algorithm_of(plan)
    rng = random.Random(seed + 2000)
    generator = torch.Generator(model.device).manual_seed(seed + 3000)
    trainable = model.trainable()  # every weight, or only the adapters
    optimizer = adam_for(trainable, plan["rl_lr"])
    group_size = plan["group_size"]
    dynamic = plan.get("dynamic_sampling") is not None
    drop_constant = dynamic and plan["dynamic_sampling"].get("constant_groups") == "drop"
    compute = {"completions": 0, "tokens_generated": 0, "gradient_steps": 0,
               "examples_seen": 0}

    def rewards_of(rows: list, mask: torch.Tensor) -> torch.Tensor:
        typed = [Row.of(r) for r in rows]
        compute["completions"] += len(typed)
        # tokens sampled, EOS included: a row's characters plus EOS under the character
        # tokenizer, fewer under a BPE
        compute["tokens_generated"] += int(mask.sum())
        return torch.tensor([score(row, contract_name, answer) for row in typed],
                            dtype=torch.float32, device=model.device)

    history = []
    for step in range(1, plan["rl_steps"] + 1):
        where = f"seed {seed}, arm {label or contract_name}, RL step {step}"
        questions = rng.choices(plan["split"]["train"], k=plan["prompts_per_step"])
        model.eval()  # sampling never runs (adapter) dropout
        batch = _Rollout(model, plan, [q for q in questions for _ in range(group_size)],
                         rewards_of, generator)
        sampling = (_resample_constant_groups(batch, model, plan, rng, generator, rewards_of)
                    if dynamic else None)
        tokens, mask, rewards, pairs = batch.tokens, batch.mask, batch.rewards, batch.pairs
        std = objective.group_reward_std(batch.rewards, group_size)
        if drop_constant:
            # DAPO: the update sees only the groups with signal (the rows keep them all)
            tokens, mask, rewards, pairs = _signal_only(tokens, mask, rewards, pairs, std,
                                                        group_size)
        updates = []
        if pairs:
            updates = _update(model, reference, plan, algorithm, optimizer, trainable,
                              tokens, mask, rewards, pairs, where)
            compute["gradient_steps"] += len(updates)
            compute["examples_seen"] += len(updates) * len(pairs)
        model.eval()
        entry = {"step": step, "rows": batch.rows,
                 "zero_variance_groups": int((std == 0).sum()), "updates": updates}
        if sampling is not None:
            entry["sampling"] = sampling
        history.append(entry)
        if hook is not None:
            hook(step, batch.rows)
        if observe is not None:
            observe(entry)
    return model, history, compute


def sft_compute(plan: dict[str, Any], steps: int) -> dict[str, int]:
    """What an SFT phase of ``steps`` steps costs, in the units RL arms report."""
    return {"completions": 0, "tokens_generated": 0, "gradient_steps": steps,
            "examples_seen": steps * plan["sft_batch"]}


def rollout_rates(rows: list, answer: Callable = sum,
                  contracts: tuple[str, ...] = ARITHMETIC_CONTRACTS) -> dict[str, float]:
    """Acceptance of one step's rollouts under each contract, for progress lines."""
    m = metrics(rows, answer, contracts)
    return {name: m[f"{name}_rate"] for name in contracts}
