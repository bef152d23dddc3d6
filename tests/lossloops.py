"""The policy losses written out again from their papers as loops over one sequence's tokens
in Python floats: the oracles both the loss tests (``tests/rl``) and the training tests
(``tests/engines/test_options_in_training.py``) check the library's tensors against.

Each takes the sequence's log-probabilities under the policy being updated and under the one
that sampled, the sequence's advantage, and (clip_low, clip_high, tau_pos, tau_neg); it gives
each token's gain (the objective maximised), whether the loss's clip acts there (the
statistic ``ratio_outside_clip``), and the ratio that decides it (a token's, or GSPO's
sequence ratio), so a caller can tell a ratio too close to a bound to call.
"""

from __future__ import annotations

import math
from collections.abc import Callable

Tokens = list[float]
Loop = Callable[..., tuple[list[float], list[bool], list[float]]]


def _outside(ratio: float, low: float, high: float) -> bool:
    return ratio < 1 - low or ratio > 1 + high


def ppo_clip(logp: Tokens, old: Tokens, a: float, low: float, high: float,
             tau_pos: float, tau_neg: float):
    """PPO (clip-higher where high differs): min(r A, clip(r, 1-low, 1+high) A)."""
    gains, outside, ratios = [], [], []
    for now, before in zip(logp, old, strict=True):
        ratio = math.exp(now - before)
        gains.append(min(ratio * a, min(max(ratio, 1 - low), 1 + high) * a))
        outside.append(_outside(ratio, low, high))
        ratios.append(ratio)
    return gains, outside, ratios


def gspo(logp: Tokens, old: Tokens, a: float, low: float, high: float,
         tau_pos: float, tau_neg: float):
    """GSPO: s = exp(mean over the sequence's tokens of log(pi / pi_old)), clipped per
    sequence; every token carries the sequence's clipped term."""
    total = 0.0
    for now, before in zip(logp, old, strict=True):
        total += now - before
    s = math.exp(total / len(logp))
    gain = min(s * a, min(max(s, 1 - low), 1 + high) * a)
    n = len(logp)
    return [gain] * n, [_outside(s, low, high)] * n, [s] * n


def cispo(logp: Tokens, old: Tokens, a: float, low: float, high: float,
          tau_pos: float, tau_neg: float):
    """CISPO: clip(r, 1-low, 1+high) (a constant to the gradient) x A x log pi."""
    gains, outside, ratios = [], [], []
    for now, before in zip(logp, old, strict=True):
        ratio = math.exp(now - before)
        gains.append(min(max(ratio, 1 - low), 1 + high) * a * now)
        outside.append(_outside(ratio, low, high))
        ratios.append(ratio)
    return gains, outside, ratios


def sapo(logp: Tokens, old: Tokens, a: float, low: float, high: float,
         tau_pos: float, tau_neg: float):
    """SAPO: sigmoid(tau (r - 1)) x 4/tau x A, tau by the advantage's sign (positive:
    tau_pos, else tau_neg); no clip, the statistic is the plan's clip range's."""
    tau = tau_pos if a > 0 else tau_neg
    gains, outside, ratios = [], [], []
    for now, before in zip(logp, old, strict=True):
        ratio = math.exp(now - before)
        gains.append(4 / tau / (1 + math.exp(-tau * (ratio - 1))) * a)
        outside.append(_outside(ratio, low, high))
        ratios.append(ratio)
    return gains, outside, ratios


LOOPS: dict[str, Loop] = {"ppo-clip": ppo_clip, "gspo": gspo, "cispo": cispo, "sapo": sapo}
#: Losses whose value holds a factor the gradient does not see (CISPO's stopped weight).
STOPPED = {"cispo"}
