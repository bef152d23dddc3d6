"""SFT and RL loops for one seed. The only place that calls ``backward()`` and ``step()``.

Random streams, fixed by the plan's seed so any stage can be re-run alone:
``random.Random(seed + 1000)`` draws SFT batches, ``random.Random(seed + 2000)`` draws RL
prompts, a torch generator seeded ``seed + 3000`` samples rollouts, and evaluation seeds its own
generators (see :func:`postlab.rollout.evaluate_model`).
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from postlab import objective
from postlab.contracts import CONTRACTS
from postlab.metrics import metrics
from postlab.model import CharGRU
from postlab.rollout import generate, to_rows

#: Called after each RL step with (step, rollout rows); used for progress display.
StepHook = Callable[[int, list], None]


class NonFiniteError(RuntimeError):
    """A loss or gradient norm became NaN or infinite; the run cannot continue honestly."""


def _check_finite(value: float, what: str, where: str) -> None:
    if not math.isfinite(value):
        raise NonFiniteError(f"non-finite {what} ({value}) at {where}")


def _sequence_log_dist(model: CharGRU, prompts: torch.Tensor,
                       tokens: torch.Tensor) -> torch.Tensor:
    """Log-probabilities (seq, len, vocab) at each response position, given the prefix."""
    inputs = torch.cat([prompts, tokens[:, :-1]], dim=1)
    return model(inputs)[:, prompts.shape[1] - 1:].log_softmax(-1)


def supervised(model: CharGRU, plan: dict[str, Any], seed: int,
               hook: Callable[[int, float], None] | None = None) -> list[float]:
    """Teacher-forced cross-entropy on train pairs; returns the loss of every step."""
    rng = random.Random(seed + 1000)
    optimizer = torch.optim.Adam(model.parameters(), lr=plan["sft_lr"])
    train_pairs = plan["split"]["train"]
    width_vocab = len(model.vocab)
    losses = []
    for step in range(plan["sft_steps"]):
        pairs = rng.choices(train_pairs, k=plan["sft_batch"])
        targets = [model.encode(f"{a + b}{plan['eos']}") for a, b in pairs]
        width = max(map(len, targets))
        target = torch.tensor([t + [model.pad] * (width - len(t)) for t in targets])
        prompts = model.prompts(pairs)
        inputs = torch.cat([prompts, target[:, :-1]], dim=1)
        logits = model(inputs)[:, prompts.shape[1] - 1:]
        loss = F.cross_entropy(logits.reshape(-1, width_vocab), target.flatten(),
                               ignore_index=model.pad)
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


def reinforce(initial: CharGRU, reference: CharGRU, plan: dict[str, Any], seed: int,
              arm: str, hook: StepHook | None = None) -> tuple[CharGRU, list[dict[str, Any]]]:
    """GRPO-style RL from ``initial`` under contract ``arm``, KL-anchored to ``reference``."""
    contract = CONTRACTS[arm]
    model = copy.deepcopy(initial)
    rng = random.Random(seed + 2000)
    generator = torch.Generator().manual_seed(seed + 3000)
    optimizer = torch.optim.Adam(model.parameters(), lr=plan["rl_lr"])
    group_size, clip, beta = plan["group_size"], plan["clip"], plan["kl_beta"]
    history = []
    for step in range(1, plan["rl_steps"] + 1):
        where = f"seed {seed}, arm {arm}, RL step {step}"
        questions = rng.choices(plan["split"]["train"], k=plan["prompts_per_step"])
        pairs = [pair for pair in questions for _ in range(group_size)]
        tokens, mask = generate(model, pairs, plan["max_new_tokens"], plan["temperature"],
                                generator)
        rows = to_rows(model, pairs, tokens, mask)
        rewards = torch.tensor([contract(r[:2], r[2], r[3]) for r in rows], dtype=torch.float32)
        advantage, std = objective.group_advantages(rewards, group_size)
        prompts = model.prompts(pairs)
        with torch.no_grad():
            ref_log_dist = _sequence_log_dist(reference, prompts, tokens)
        old_logp = None
        updates = []
        for _ in range(plan["updates_per_rollout"]):
            log_dist = _sequence_log_dist(model, prompts, tokens)
            logp = objective.token_log_probs(log_dist, tokens)
            if old_logp is None:
                # Before the first update the policy is the one that sampled: its
                # log-probabilities are this forward pass's, so it is not run twice.
                old_logp = logp.detach()
            ratio = (logp - old_logp).exp()
            gain = objective.clipped_gain(ratio, advantage, clip)
            kl = objective.exact_kl(log_dist, ref_log_dist)
            loss = objective.token_mean_loss(gain, kl, beta, mask)
            entropy = objective.entropy(log_dist)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), plan["gradient_clip"])
            optimizer.step()
            stats = {"loss": loss.item(), "gradient_norm_before_clip": grad_norm.item(),
                     "kl": objective.masked_mean(kl, mask),
                     "entropy": objective.masked_mean(entropy, mask),
                     "ratio_outside_clip": objective.masked_mean((ratio - 1).abs() > clip, mask)}
            _check_finite(stats["loss"], "RL loss", where)
            _check_finite(stats["gradient_norm_before_clip"], "gradient norm", where)
            updates.append(stats)
        history.append({"step": step, "rows": rows,
                        "zero_variance_groups": int((std == 0).sum()), "updates": updates})
        if hook is not None:
            hook(step, rows)
    return model, history


def rollout_rates(rows: list) -> tuple[float, float]:
    """Strict and substring acceptance of one step's rollouts, for progress lines."""
    m = metrics(rows)
    return m["strict_rate"], m["substring_rate"]
