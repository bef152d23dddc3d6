"""Scalar forms of the policy-loss pieces: the clipped surrogate and per-token weights.

The tensor versions used in training live beside the trainer; these plain functions state the
rules on numbers a reader can check by hand (answers 4 and 5).
"""

from __future__ import annotations

from collections.abc import Sequence

from postlab.registry import Registry

REDUCTIONS: Registry = Registry("loss reduction")


def clipped_term(ratio: float, advantage: float, clip: float) -> float:
    """PPO's min(r*A, clip(r, 1-eps, 1+eps)*A): the per-token gain that is maximised.

    With A < 0 the unclipped r*A is the smaller value when r > 1+eps, so a ratio outside the
    range does not mean its gradient was cut (answer 5).
    """
    clipped = min(max(ratio, 1 - clip), 1 + clip)
    return min(ratio * advantage, clipped * advantage)


@REDUCTIONS.register("token-mean")
def token_mean(lengths: Sequence[int], max_tokens: int | None = None) -> list[list[float]]:
    """Every valid token in the batch weighs the same: sum over tokens / total tokens."""
    total = sum(lengths)
    return [[1 / total] * n for n in lengths]


@REDUCTIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(lengths: Sequence[int],
                        max_tokens: int | None = None) -> list[list[float]]:
    """Average within each sequence, then over sequences (original GRPO): short answers'
    tokens weigh more."""
    count = len(lengths)
    return [[1 / (count * n)] * n for n in lengths]


@REDUCTIONS.register("constant-normaliser")
def constant_normaliser(lengths: Sequence[int],
                        max_tokens: int | None = None) -> list[list[float]]:
    """Sum over tokens / (sequences x max_tokens) (Dr. GRPO): no length-dependent weight."""
    if max_tokens is None:
        raise ValueError("constant-normaliser needs max_tokens")
    if any(n > max_tokens for n in lengths):
        raise ValueError("a sequence is longer than max_tokens")
    return [[1 / (len(lengths) * max_tokens)] * n for n in lengths]


def token_coefficients(lengths: Sequence[int], reduction: str, *,
                       max_tokens: int | None = None,
                       per_sequence_units: bool = False) -> list[list[float]]:
    """The weight of each token's loss under a reduction.

    With ``per_sequence_units`` the weights are multiplied by the number of sequences, i.e.
    expressed relative to a batch mean over sequences; that is how answer 4 states them
    (1/4 and 1/16 per sequence versus 1/10 for every token, for lengths 4 and 16).
    """
    if not lengths or any(n <= 0 for n in lengths):
        raise ValueError("lengths must be positive and non-empty")
    weights = REDUCTIONS[reduction](lengths, max_tokens)
    if per_sequence_units:
        count = len(lengths)
        weights = [[w * count for w in row] for row in weights]
    return weights
