"""Scalar views of the policy loss: the clipped term and the weight each token gets.

These state the rules on numbers a reader can check by hand (answers 4 and 5). The weights are
not re-derived here: they are the gradients of the very reductions training uses
(:mod:`postlab.rl.algorithms`), so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from postlab.rl.algorithms import REDUCTIONS


def clipped_term(ratio: float, advantage: float, clip: float,
                 clip_high: float | None = None) -> float:
    """PPO's min(r*A, clip(r, 1-eps_low, 1+eps_high)*A), the per-token gain maximised.

    With A < 0 the unclipped r*A is the smaller value when r > 1+eps, so a ratio outside the
    range does not mean its gradient was cut (answer 5).
    """
    high = clip if clip_high is None else clip_high
    clipped = min(max(ratio, 1 - clip), 1 + high)
    return min(ratio * advantage, clipped * advantage)


def token_coefficients(lengths: Sequence[int], reduction: str, *,
                       max_tokens: int | None = None,
                       per_sequence_units: bool = False) -> list[list[float]]:
    """d(loss)/d(token loss) for each valid token of sequences of the given lengths.

    With ``per_sequence_units`` the weights are multiplied by the number of sequences, i.e.
    expressed relative to a batch mean over sequences; that is how answer 4 states them
    (1/4 and 1/16 per sequence versus 1/10 for every token, for lengths 4 and 16).
    """
    if not lengths or any(n <= 0 for n in lengths):
        raise ValueError("lengths must be positive and non-empty")
    width = max(lengths) if max_tokens is None else max_tokens
    if any(n > width for n in lengths):
        raise ValueError("a sequence is longer than max_tokens")
    reduce = REDUCTIONS[reduction].fn
    mask = torch.tensor([[t < n for t in range(width)] for n in lengths])
    per_token = torch.zeros(len(lengths), width, dtype=torch.float64, requires_grad=True)
    reduce(per_token, mask, width).backward()
    grads = per_token.grad.tolist()
    scale = len(lengths) if per_sequence_units else 1
    return [[w * scale for w in row[:n]] for row, n in zip(grads, lengths, strict=True)]
