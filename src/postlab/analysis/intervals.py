"""Intervals over seeds: the one place their arithmetic lives.

Seeds are the unit: each is an independent repetition of the experiment, while questions
within a seed share one model and are not independent draws of it. All intervals are 95%
two-sided, with no interval from a single seed.

* A **rate** (a share of outputs or questions, pass@k, a training reward): Student t over the
  seeds' rates, with two guards. The spread over seeds is never taken below one seed's
  binomial sampling sd, ``sqrt(p~(1 - p~) / n)`` with ``p~ = (x + 1/2) / (n + 1)`` at the
  mean's count x of n, so seeds that agree by chance (three seeds at 0 of 12 questions) keep
  the uncertainty each one's sample has. And the interval is cut to [0, 1], where the mean it
  covers lies: cutting removes only impossible values, so it covers the mean exactly as often
  as the t interval does. (Two seeds with coverage 0.105 and 0.474 had [-1.38, 1.96], which
  is [0, 1] here: two such seeds cannot tell.) An interval on the empirical-logit scale also
  stays in [0, 1], but it is an interval for another centre: with many seeds at 0 it sits
  below the mean it is printed next to.
* A **difference** (a change from SFT, a hacking gap, a paired difference between versions):
  Student t over the per-seed differences, which live in [-1, 1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
RATE_METHOD = ("Student t over the seeds' rates, 95% two-sided, the spread at least one "
               "seed's binomial sampling sd (sqrt(p(1-p)/n), p = (x+1/2)/(n+1)), cut to "
               "[0, 1]; no interval with one seed")
DIFFERENCE_METHOD = ("Student t over the per-seed differences, 95% two-sided, seeds - 1 "
                     "degrees of freedom; no interval with one seed")


@dataclass(frozen=True, kw_only=True)
class Interval:
    """Mean over seeds with its 95% interval (None when there is a single seed)."""

    per_seed: tuple[float, ...]
    mean: float
    low: float | None
    high: float | None


def t_quantile(confidence: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, df))


def interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Student-t interval of the mean of ``values`` (one value per seed): for differences."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return Interval(per_seed=tuple(values), mean=mean, low=None, high=None)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return Interval(per_seed=tuple(values), mean=mean, low=mean - half, high=mean + half)


def rate_interval(rates: Sequence[float], trials: int,
                  confidence: float = CONFIDENCE) -> Interval:
    """Mean of per-seed rates (each of ``trials`` outputs or questions), with a t interval
    whose spread is at least one seed's binomial sampling sd, cut to [0, 1]."""
    n = len(rates)
    mean = sum(rates) / n
    if n < 2:
        return Interval(per_seed=tuple(rates), mean=mean, low=None, high=None)
    spread = math.sqrt(sum((r - mean) ** 2 for r in rates) / (n - 1))
    # Seeds that agree by chance (all at 0 of a few questions, say) must not claim certainty:
    # one seed's rate varies at least as its binomial sample does.
    share = (mean * trials + 0.5) / (trials + 1)
    sampling = math.sqrt(share * (1 - share) / trials)
    half = t_quantile(confidence, n - 1) * max(spread, sampling) / math.sqrt(n)
    return Interval(per_seed=tuple(rates), mean=mean, low=max(0.0, mean - half),
                    high=min(1.0, mean + half))
