"""Tensor math of the RL update shared by every variant: log-probs, clipping, entropy.

Pure functions on tensors; shapes are (sequences, response_length) unless stated. The order
of floating-point operations is part of the contract: the teaching plan must reproduce the
reference's numbers bit for bit, so expressions are written as that contract fixes them.
"""

from __future__ import annotations

import torch


def group_reward_std(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Per-group population std of the rewards (groups, 1); a group whose std is 0 has zero
    variance and carries no learning signal (counted as ``zero_variance_groups``)."""
    return rewards.reshape(-1, group_size).std(-1, unbiased=False, keepdim=True)


def token_log_probs(log_dist: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log pi(token) at each position from (seq, len, vocab) log-probabilities."""
    return log_dist.gather(-1, tokens[..., None]).squeeze(-1)


def clipped_gain(ratio: torch.Tensor, advantage: torch.Tensor, clip_low: float,
                 clip_high: float) -> torch.Tensor:
    """PPO's per-token min(r*A, clip(r, 1-low, 1+high)*A); ``advantage`` is per sequence.

    Separate bounds are DAPO's clip-higher (Yu et al. 2025, arXiv:2503.14476); equal bounds
    are the symmetric PPO clip (Schulman et al. 2017).
    """
    per_token = advantage[:, None]
    return torch.minimum(ratio * per_token,
                         ratio.clamp(1 - clip_low, 1 + clip_high) * per_token)


def outside_clip(ratio: torch.Tensor, clip_low: float, clip_high: float) -> torch.Tensor:
    """Where the ratio lies outside the clip range (a statistic, not a gradient mask)."""
    if clip_low == clip_high:
        return (ratio - 1).abs() > clip_low
    return (ratio < 1 - clip_low) | (ratio > 1 + clip_high)


def entropy(log_dist: torch.Tensor) -> torch.Tensor:
    return -(log_dist.exp() * log_dist).sum(-1)


def per_token_loss(gain: torch.Tensor, kl: torch.Tensor, kl_beta: float) -> torch.Tensor:
    """-gain + beta * KL at each position; a loss reduction turns it into a scalar."""
    return -gain + kl_beta * kl


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over valid positions as a Python float (the statistic recorded per update)."""
    return (values * mask).sum().item() / mask.sum().item()
