"""The RL update's math, written once for every engine: log-probs, clipping, KL, the loss.

Pure functions on tensors. Shapes are ``(sequences, response_length)`` for one model, with an
optional leading member dimension ``(members, sequences, response_length)`` for the ensemble
engine; per-sequence values drop the last dimension, per-model results keep only the leading
ones. Settings (``clip_low``, ``kl_beta``, ...) are Python floats for one model, or tensors
``[members]`` holding each member's own value.

The order of floating-point operations is part of the contract: the teaching plan must
reproduce the reference's numbers bit for bit, so expressions are written as that contract
fixes them (a Python float and a float32 tensor holding the same setting give the same bits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

#: A plan setting: one number for one model, or a tensor [members] for stacked members.
Setting = float | torch.Tensor


def broadcast_members(value: Setting, like: torch.Tensor) -> Setting:
    """A per-member setting shaped to broadcast over ``like``'s trailing dimensions."""
    if not isinstance(value, torch.Tensor):
        return value
    return value.reshape(*value.shape, *([1] * (like.dim() - value.dim())))


def group_reward_std(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Per-group population std of the rewards ``(..., groups, 1)``; a group whose std is 0
    has zero variance and carries no learning signal (counted as ``zero_variance_groups``)."""
    grouped = rewards.reshape(*rewards.shape[:-1], -1, group_size)
    return grouped.std(-1, unbiased=False, keepdim=True)


def token_log_probs(log_dist: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log pi(token) at each position from ``(..., len, vocab)`` log-probabilities."""
    return log_dist.gather(-1, tokens[..., None]).squeeze(-1)


def ratio_bounds(clip_low: Setting, clip_high: Setting,
                 dtype: torch.dtype = torch.float32) -> tuple[Setting, Setting]:
    """The ratio's clip range ``(1 - low, 1 + high)``, computed in double precision and then
    rounded to the ratio's dtype, as torch rounds a Python float bound: per-member tensors
    then hold exactly the bound a lone model's float gives."""
    if isinstance(clip_low, torch.Tensor) and isinstance(clip_high, torch.Tensor):
        return (1 - clip_low.double()).to(dtype), (1 + clip_high.double()).to(dtype)
    return 1 - clip_low, 1 + clip_high


def clipped_gain(ratio: torch.Tensor, advantage: torch.Tensor, clip_low: Setting,
                 clip_high: Setting) -> torch.Tensor:
    """PPO's per-token min(r*A, clip(r, 1-low, 1+high)*A); ``advantage`` is per sequence.

    Separate bounds are DAPO's clip-higher (Yu et al. 2025, arXiv:2503.14476); equal bounds
    are the symmetric PPO clip (Schulman et al. 2017).
    """
    per_token = advantage[..., None]
    lower, upper = ratio_bounds(clip_low, clip_high, ratio.dtype)
    clamped = ratio.clamp(broadcast_members(lower, ratio), broadcast_members(upper, ratio))
    return torch.minimum(ratio * per_token, clamped * per_token)


def outside_clip(ratio: torch.Tensor, clip_low: Setting, clip_high: Setting) -> torch.Tensor:
    """Where the ratio lies outside the clip range (a statistic, not a gradient mask)."""
    lower, upper = ratio_bounds(clip_low, clip_high, ratio.dtype)
    if not isinstance(clip_low, torch.Tensor):
        if clip_low == clip_high:
            return (ratio - 1).abs() > clip_low
        return (ratio < lower) | (ratio > upper)
    symmetric = broadcast_members(clip_low == clip_high, ratio)
    threshold = broadcast_members(clip_low.to(ratio.dtype), ratio)
    outside = (ratio < broadcast_members(lower, ratio)) | (ratio > broadcast_members(upper, ratio))
    return torch.where(symmetric, (ratio - 1).abs() > threshold, outside)


def entropy(log_dist: torch.Tensor) -> torch.Tensor:
    return -(log_dist.exp() * log_dist).sum(-1)


def per_token_loss(gain: torch.Tensor, kl: torch.Tensor, kl_beta: Setting) -> torch.Tensor:
    """-gain + beta * KL at each position; a loss reduction turns it into a scalar."""
    return -gain + broadcast_members(kl_beta, kl) * kl


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over each model's valid positions, summed in the values' dtype and divided in
    double precision (the statistic recorded per update): a 0-dim tensor for one model,
    ``[members]`` for stacked members."""
    total = (values.detach() * mask).sum((-2, -1)).double()
    return total / mask.sum((-2, -1)).double()


#: SAPO's gate temperatures for positive and for negative advantages where a plan states
#: none: the paper's (Gao et al. 2025; a steeper gate for negative advantages, whose
#: off-policy tokens the paper finds more destabilising).
SAPO_TEMPERATURES = (1.0, 1.05)


@dataclass(frozen=True)
class PolicySettings:
    """What a policy loss reads of the plan: the clip range (``clip_low``, ``clip_high``) and
    SAPO's gate temperatures for positive and negative advantages; each a float for one model
    or a ``[members]`` tensor."""

    clip_low: Setting
    clip_high: Setting
    tau_positive: Setting = SAPO_TEMPERATURES[0]
    tau_negative: Setting = SAPO_TEMPERATURES[1]


@dataclass(frozen=True)
class Surrogate:
    """A policy loss's per-token objective (maximised; the loss is its negative plus the KL
    penalty) and where the ratio lies outside the plan's clip range, the statistic
    ``ratio_outside_clip`` (where a clipping loss's clip acts; for SAPO, which has none, how
    far off the sampling policy the update went)."""

    gain: torch.Tensor
    outside: torch.Tensor


#: A policy loss: (log pi now, log pi of the sampling policy, per-sequence advantage, mask,
#: settings) -> its surrogate, per token (:data:`postlab.rl.algorithms.POLICY_LOSSES`).
PolicyLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, PolicySettings],
                      Surrogate]


@dataclass(frozen=True)
class Algorithm:
    """The plan's registered options, resolved to their functions (see :mod:`.algorithms`)."""

    advantage: Callable[[torch.Tensor], torch.Tensor]
    reduce: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]
    kl: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    policy: PolicyLoss


@dataclass(frozen=True)
class UpdateTerms:
    """One update's loss and the per-token tensors its statistics are read from."""

    loss: torch.Tensor  # scalar, or [members]
    logp: torch.Tensor  # log pi(token) under the policy being updated
    outside: torch.Tensor  # where the ratio lies outside the clip range (Surrogate.outside)
    kl: torch.Tensor
    entropy: torch.Tensor  # detached: a statistic


def policy_loss(log_dist: torch.Tensor, ref_log_dist: torch.Tensor, tokens: torch.Tensor,
                mask: torch.Tensor, advantage: torch.Tensor, old_logp: torch.Tensor | None, *,
                algorithm: Algorithm, settings: PolicySettings, kl_beta: Setting,
                max_tokens: int) -> UpdateTerms:
    """The KL-penalised policy loss of one update: the plan's policy loss (PPO's clip,
    GSPO, CISPO, SAPO), its KL estimate and its reduction.

    ``old_logp`` None means the policy that sampled is the one being updated (the first
    update of a rollout): the ratio is then 1 and ``logp.detach()`` is the old value.
    """
    logp = token_log_probs(log_dist, tokens)
    old = logp.detach() if old_logp is None else old_logp
    surrogate = algorithm.policy(logp, old, advantage, mask, settings)
    kl = algorithm.kl(log_dist, ref_log_dist, tokens)
    loss = algorithm.reduce(per_token_loss(surrogate.gain, kl, kl_beta), mask, max_tokens)
    with torch.no_grad():
        spread = entropy(log_dist)
    return UpdateTerms(loss=loss, logp=logp, outside=surrogate.outside, kl=kl, entropy=spread)


def update_statistics(terms: UpdateTerms, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The per-update statistics a record keeps, except the gradient norm (the caller's):
    each a 0-dim tensor for one model or ``[members]``."""
    return {"loss": terms.loss.detach(),
            "kl": masked_mean(terms.kl, mask),
            "entropy": masked_mean(terms.entropy, mask),
            "ratio_outside_clip": masked_mean(terms.outside, mask)}
