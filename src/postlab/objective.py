"""Tensor math of the RL update: group advantages, the clipped surrogate, the exact KL.

Pure functions on tensors; shapes are (sequences, response_length) unless stated. The order
of floating-point operations is part of the contract: the teaching plan must reproduce the
reference's numbers bit for bit, so expressions are written as that contract fixes them.
"""

from __future__ import annotations

import torch

from postlab.groups import STD_EPSILON


def group_advantages(rewards: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-normalised advantages (flattened) and the per-group population std.

    ``rewards`` is (groups * group_size,) float32; a group with std 0 gets zero advantages.
    """
    grouped = rewards.reshape(-1, group_size)
    std = grouped.std(-1, unbiased=False, keepdim=True)
    advantage = ((grouped - grouped.mean(-1, keepdim=True)) / (std + STD_EPSILON)).flatten()
    return advantage, std


def token_log_probs(log_dist: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log pi(token) at each position from (seq, len, vocab) log-probabilities."""
    return log_dist.gather(-1, tokens[..., None]).squeeze(-1)


def clipped_gain(ratio: torch.Tensor, advantage: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's per-token min(r*A, clip(r)*A); ``advantage`` is per sequence (seq,)."""
    per_token = advantage[:, None]
    return torch.minimum(ratio * per_token, ratio.clamp(1 - clip, 1 + clip) * per_token)


def exact_kl(log_dist: torch.Tensor, ref_log_dist: torch.Tensor) -> torch.Tensor:
    """KL(pi || ref) summed over the whole vocabulary at each visited prefix (seq, len)."""
    return (log_dist.exp() * (log_dist - ref_log_dist)).sum(-1)


def entropy(log_dist: torch.Tensor) -> torch.Tensor:
    return -(log_dist.exp() * log_dist).sum(-1)


def token_mean_loss(gain: torch.Tensor, kl: torch.Tensor, kl_beta: float,
                    mask: torch.Tensor) -> torch.Tensor:
    """Mean of (-gain + beta * KL) over every valid response token in the batch (EOS counts)."""
    return ((-gain + kl_beta * kl) * mask).sum() / mask.sum()


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over valid positions as a Python float (the statistic recorded per update)."""
    return (values * mask).sum().item() / mask.sum().item()
