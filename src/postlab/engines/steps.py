"""The learning half of a training step, written once for both engines and the estimate.

A step of either engine samples (each its own way: the exact engine from torch's generators in
a fixed order, the ensemble engine from counters keyed by each member's seed) and then learns
from what it sampled. The learning is the same computation with an optional leading member
dimension, and it lives here: the group-normalised advantage, the clipped policy updates on one
rollout, and the gradient step every SFT and RL update ends in. The exact engine calls it with
one model, the ensemble engine with stacked members, and the cost estimate times these same
functions (without an optimizer) rather than copies of them.

Bit-identity: for one model the arithmetic is the exact engine's as it always was (the loss
is a 0-dim tensor, and ``loss.sum()`` of a 0-dim tensor is that tensor, so its gradient is
unchanged); the finiteness check runs before ``optimizer.step()``, which moves no weight of a
run that stops there and changes nothing in one that does not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from postlab.engines.optim import Optimizer
from postlab.rl import objective
from postlab.rl.objective import Algorithm, PolicySettings, Setting

#: Clips the gradients just computed and returns their norm before clipping (0-dim for one
#: model, ``[members]`` for stacked members).
Clip = Callable[[], torch.Tensor]
#: Raises ``NonFiniteError`` naming the step when a loss or gradient norm is not finite.
Check = Callable[[torch.Tensor, torch.Tensor], None]

#: The statistics a record keeps of each update, in the record's order.
UPDATE_STATISTICS = ("loss", "gradient_norm_before_clip", "kl", "entropy",
                     "ratio_outside_clip")


def gradient_step(loss: torch.Tensor, optimizer: Optimizer | None, clip: Clip | None,
                  check: Check | None) -> torch.Tensor | None:
    """Backpropagate ``loss`` (0-dim, or ``[members]`` that share no parameter, so each
    member's gradient is its own), clip, check and step; the norm before clipping.

    Without an optimizer (the estimate timing the step) the gradients are only computed: the
    caller zeroes them, and neither clips nor steps."""
    if optimizer is not None:
        optimizer.zero_grad()
    loss.sum().backward()
    norms = clip() if clip is not None else None
    if check is not None:
        assert norms is not None, "a checked step clips (the check reads the norm)"
        check(loss.detach(), norms)
    if optimizer is not None:
        optimizer.step()
        # Gradients are dropped once spent, not at the next step's start: held through the
        # next rollout and forward pass, a GPT-2 124M policy's 349 MiB of them sat on top of
        # the update's peak (bench/bench_trl.py --breakdown). The next backward starts from
        # None either way, so the bits are the same.
        optimizer.zero_grad()
    return norms


def advantages(algorithm: Algorithm, rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each sequence's advantage from its group's rewards: ``rewards`` ``[sequences]`` or
    ``[members, sequences]``, groups of ``group_size`` consecutive sequences."""
    grouped = rewards.reshape(*rewards.shape[:-1], -1, group_size)
    return algorithm.advantage(grouped).reshape(rewards.shape)


@dataclass(frozen=True)
class UpdateRule:
    """What an RL update reads of the plan: floats for one model, ``[members]`` tensors for
    stacked members (each member's own setting)."""

    algorithm: Algorithm
    policy: PolicySettings
    kl_beta: Setting
    max_tokens: int
    updates: int


def policy_updates(rule: UpdateRule, log_dist: Callable[[], torch.Tensor],
                   reference_log_dist: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor,
                   advantage: torch.Tensor, *, optimizer: Optimizer | None,
                   clip: Clip | None = None, check: Check | None = None,
                   ) -> list[dict[str, torch.Tensor]]:
    """``rule.updates`` policy-gradient updates on one rollout; each update's
    statistics as tensors (0-dim, or ``[members]``), in :data:`UPDATE_STATISTICS` order
    (without a clip, no gradient norm).

    ``log_dist`` runs the policy's forward pass (log-probabilities at each response position);
    the first update's log-probabilities are the sampling policy's, so the forward pass is not
    run twice for them."""
    old_logp = None
    updates = []
    for _ in range(rule.updates):
        terms = objective.policy_loss(
            log_dist(), reference_log_dist, tokens, mask, advantage, old_logp,
            algorithm=rule.algorithm, settings=rule.policy, kl_beta=rule.kl_beta,
            max_tokens=rule.max_tokens)
        if old_logp is None:
            old_logp = terms.logp.detach()
        norms = gradient_step(terms.loss, optimizer, clip, check)
        values = objective.update_statistics(terms, mask)
        if norms is not None:
            values["gradient_norm_before_clip"] = norms
        updates.append({key: values[key] for key in UPDATE_STATISTICS if key in values})
    return updates
