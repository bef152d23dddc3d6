"""SFT and RL loops for one seed: the exact engine's sampling around the shared learning
(:mod:`postlab.engines.steps`, where every ``backward()`` and ``step()`` is).

Random streams, fixed by the plan's seed so any stage can be re-run alone:
``random.Random(seed + 1000)`` draws SFT batches, ``random.Random(seed + 2000)`` draws RL
prompts, a torch generator seeded ``seed + 3000`` samples rollouts, evaluation seeds its own
generators (see :func:`postlab.engines.rollout.evaluate_model`), and an SFT-only arm draws its extra
batches from ``random.Random(seed + 5000)``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn import functional as F

from postlab.engines.episodes import generate_episodes, replay_log_dist
from postlab.engines.optim import adam_for
from postlab.engines.options import algorithm_of, policy_settings
from postlab.engines.rollout import generate, to_rows
from postlab.engines.steps import (
    Check,
    UpdateRule,
    advantages,
    gradient_step,
    policy_updates,
)
from postlab.errors import NonFiniteError
from postlab.policies import Policy
from postlab.policies.lora import AdaptersOff
from postlab.records.metrics import metrics
from postlab.rl import objective
from postlab.tasks.arithmetic import ARITHMETIC_CONTRACTS
from postlab.tasks.contracts import CONTRACTS, DRAWN, random_rewards, score
from postlab.tasks.registry import task_for
from postlab.tasks.rows import Row
from postlab.tasks.selection import SELECTIONS, order

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

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


#: A demonstration: its text, or its parts as (text, written by the policy); parts the
#: policy did not write (a tool's output) are read but not trained on.
Demonstration = Callable[[Any], "str | Sequence[tuple[str, bool]]"]


def demonstration_tokens(tokenizer: Any, shown: str | Sequence[tuple[str, bool]]
                         ) -> tuple[list[int], list[int]]:
    """A demonstration's tokens and its training targets (pad where not trained), EOS
    last; each part is encoded on its own, as an episode's rollout splices it."""
    parts = [(shown, True)] if isinstance(shown, str) else list(shown)
    ids: list[int] = []
    wanted: list[int] = []
    for text, trained in parts:
        encoded = tokenizer.encode(text)
        ids += encoded
        wanted += encoded if trained else [tokenizer.pad_id] * len(encoded)
    return [*ids, tokenizer.eos_id], [*wanted, tokenizer.eos_id]


def sft_loss(model: Policy, demonstration: Demonstration, pairs: list, *,
             positions: int | None = None) -> torch.Tensor:
    """Teacher-forced cross-entropy (0-dim, float32) of the demonstrations of ``pairs``.

    ``positions``: score only the sequences' last ``positions`` positions in one forward pass
    of as many (the cost estimate's bounded measurement of a long sequence); None, the
    training step: the whole response after each prompt."""
    tokenizer = model.tokenizer
    pad = tokenizer.pad_id
    shown = [demonstration_tokens(tokenizer, demonstration(pair)) for pair in pairs]
    width = max(len(ids) for ids, _ in shown)
    target = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in shown],
                          device=model.device)
    trained = torch.tensor([wanted + [pad] * (width - len(wanted)) for _, wanted in shown],
                           device=model.device)
    prompts = model.prompts(pairs)
    if positions is None:
        with model.autocast():
            logits = model.continuation(prompts, target)
        wanted = trained
    else:
        sequence = torch.cat([prompts, target], dim=1)
        inputs, wanted = sequence[:, :-1][:, -positions:], sequence[:, 1:][:, -positions:]
        scored = min(inputs.shape[1], width)
        with model.autocast():
            logits = model(inputs)[:, -scored:]
        wanted = wanted[:, -scored:]
    logits = logits.float()  # the loss in float32 (a no-op for a float32 forward pass)
    # the model's output width, which a pretrained model may have wider than its
    # tokenizer's vocabulary
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), wanted.flatten(),
                           ignore_index=pad)


def _checker(what: str, where: str) -> Check:
    """The exact engine's finiteness check of a step's loss and gradient norm."""
    def check(loss: torch.Tensor, norm: torch.Tensor) -> None:
        _check_finite(loss.item(), what, where)
        _check_finite(norm.item(), "gradient norm", where)
    return check


def supervised(model: Policy, plan: Plan, seed: int,
               hook: Callable[[int, float], None] | None = None, *, steps: int | None = None,
               rng_offset: int = 1000, selection: str = "random") -> list[float]:
    """Teacher-forced cross-entropy on train pairs, drawn each step by the demonstration
    ``selection`` rule (:mod:`postlab.tasks.selection`); returns the loss of every step."""
    rng = random.Random(seed + rng_offset)
    optimizer = adam_for(model.parameters(), plan.sft_lr)
    task = task_for(plan)
    demonstrated = getattr(task, "demonstration_parts", task.demonstration)
    split = order(plan.split["train"], task.difficulty, selection)
    choose = SELECTIONS[selection]
    losses = []
    total = plan.sft_steps if steps is None else steps
    for step in range(total):
        pairs = choose(split, rng, step, total, plan.sft_batch)
        loss = sft_loss(model, demonstrated, pairs)
        gradient_step(loss, optimizer,
                      lambda: nn.utils.clip_grad_norm_(model.parameters(), plan.gradient_clip),
                      _checker("SFT loss", f"seed {seed}, SFT step {step + 1}"))
        value = loss.item()
        losses.append(value)
        if hook is not None:
            hook(step + 1, value)
    return losses


def reference_log_dist(reference: Policy | AdaptersOff, prompts: torch.Tensor,
                       tokens: torch.Tensor, read: Callable[..., torch.Tensor] = sequence_log_dist
                       ) -> torch.Tensor:
    """The KL anchor's log-probabilities at each response position (no gradient), read as
    the policy's are (``read``: in one pass, or an episode's replay)."""
    with torch.no_grad():
        return read(reference, prompts, tokens)


def update_rule(plan: Plan, updates: int | None = None) -> UpdateRule:
    """The plan's RL update settings for one model (``updates``: the plan's by default)."""
    # the most tokens a policy writes in one rollout: an episode's every turn
    written = plan.max_new_tokens * (1 if plan.agent is None else plan.agent.turns)
    return UpdateRule(algorithm_of(plan), policy_settings(plan), plan.kl_beta, written,
                      plan.updates_per_rollout if updates is None else updates)


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

    def __init__(self, model: Policy, plan: Plan, pairs: list, rewards_of: Callable,
                 generator: torch.Generator) -> None:
        self.pairs = pairs
        if plan.agent is not None:  # episodes: tool tokens in the context, out of the mask
            episodes = generate_episodes(model, task_for(plan), pairs, plan.max_new_tokens,
                                         plan.temperature, generator)
            self.tokens, self.mask, self.rows = episodes.tokens, episodes.mask, episodes.rows
        else:
            self.tokens, self.mask = generate(model, pairs, plan.max_new_tokens,
                                              plan.temperature, generator)
            self.rows = to_rows(model, pairs, self.tokens, self.mask)
        self.rewards = rewards_of(self.rows, self.mask)


def _resample_constant_groups(batch: _Rollout, model: Policy, plan: Plan,
                              rng: random.Random, generator: torch.Generator,
                              rewards_of: Callable) -> dict[str, Any]:
    """Dynamic sampling (DAPO): replace groups whose rewards are all equal with fresh mixed
    groups, drawing at most ``max_extra_groups`` extra groups this step."""
    size = plan.group_size
    budget = plan.dynamic_sampling.max_extra_groups
    pairs, rows = list(batch.pairs), list(batch.rows)
    tokens, mask, rewards = batch.tokens, batch.mask, batch.rewards.clone()
    constant = [g for g, std in enumerate(objective.group_reward_std(rewards, size).flatten())
                if std == 0]
    drawn = dropped = replaced = 0
    dropped_rows: list = []
    while constant and drawn < budget:
        count = min(len(constant), budget - drawn)
        questions = rng.choices(plan.split["train"], k=count)
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


def _update(model: Policy, reference: Policy | AdaptersOff, plan: Plan, rule: UpdateRule,
            optimizer: Any, trainable: list, tokens: torch.Tensor,
            mask: torch.Tensor, rewards: torch.Tensor, pairs: list, where: str
            ) -> list[dict[str, float]]:
    """The step's ``updates_per_rollout`` clipped policy-gradient updates on one batch of
    whole groups (:func:`postlab.engines.steps.policy_updates`); each update's statistics."""
    advantage = advantages(rule.algorithm, rewards, plan.group_size)
    prompts = model.prompts(pairs)
    # episodes are read back by the calls that sampled them (engines.episodes)
    read = sequence_log_dist if plan.agent is None else replay_log_dist
    reference_dist = reference_log_dist(reference, prompts, tokens, read)
    model.train()
    updates = policy_updates(
        rule, lambda: read(model, prompts, tokens), reference_dist, tokens, mask,
        advantage, optimizer=optimizer,
        clip=lambda: nn.utils.clip_grad_norm_(trainable, plan.gradient_clip),
        check=_checker("RL loss", where))
    return [{key: value.item() for key, value in update.items()} for update in updates]


def reinforce(model: Policy, reference: Policy | AdaptersOff, plan: Plan, seed: int,
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
    rule = update_rule(plan)
    rng = random.Random(seed + 2000)
    generator = torch.Generator(model.device).manual_seed(seed + 3000)
    trainable = model.trainable()  # every weight, or only the adapters
    optimizer = adam_for(trainable, plan.rl_lr)
    group_size = plan.group_size
    dynamic = plan.dynamic_sampling is not None
    drop_constant = dynamic and plan.dynamic_sampling.constant_groups == "drop"
    compute = {"completions": 0, "tokens_generated": 0, "gradient_steps": 0,
               "examples_seen": 0}

    def rewards_of(rows: list, mask: torch.Tensor) -> torch.Tensor:
        typed = [Row.of(r) for r in rows]
        compute["completions"] += len(typed)
        # tokens sampled, EOS included: a row's characters plus EOS under the character
        # tokenizer, fewer under a BPE
        compute["tokens_generated"] += int(mask.sum())
        if contract_name in DRAWN:  # paid at random, by each row's place in the batch
            assert plan.random_rate is not None  # the plan's validation asks for it
            return random_rewards(seed, step, len(typed), plan.random_rate).to(model.device)
        return torch.tensor([score(row, contract_name, answer) for row in typed],
                            dtype=torch.float32, device=model.device)

    history = []
    for step in range(1, plan.rl_steps + 1):
        where = f"seed {seed}, arm {label or contract_name}, RL step {step}"
        questions = rng.choices(plan.split["train"], k=plan.prompts_per_step)
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
            updates = _update(model, reference, plan, rule, optimizer, trainable, tokens, mask,
                              rewards, pairs, where)
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


def sft_compute(plan: Plan, steps: int) -> dict[str, int]:
    """What an SFT phase of ``steps`` steps costs, in the units RL arms report."""
    return {"completions": 0, "tokens_generated": 0, "gradient_steps": steps,
            "examples_seen": steps * plan.sft_batch}


def rollout_rates(rows: list, answer: Callable = sum,
                  contracts: tuple[str, ...] = ARITHMETIC_CONTRACTS) -> dict[str, float]:
    """Acceptance of one step's rollouts under each contract, for progress lines."""
    m = metrics(rows, answer, contracts)
    return {name: m[f"{name}_rate"] for name in contracts}
