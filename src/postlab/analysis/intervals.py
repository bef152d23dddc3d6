"""Intervals over seeds: the one place their arithmetic lives.

Seeds are the unit: each is an independent repetition of the experiment, while questions
within a seed share one model and are not independent draws of it. All intervals are 95%
two-sided, with no interval from a single seed.

* A **rate** (a share of outputs or questions, pass@k): Student t over seeds on the empirical
  logit of each seed's rate, ``log((x + 1/2) / (n - x + 1/2))`` for x accepted of n, mapped
  back through that transform's exact inverse. The spread over seeds is never taken below the
  binomial sampling variance of one seed's logit, ``1/(x + 1/2) + 1/(n - x + 1/2)``, so seeds
  that agree by chance (three seeds at 0 of 12 questions) do not make a zero-width interval.
  It stays inside [0, 1] at any number of seeds, is asymmetric near the bounds as a rate's
  uncertainty is, and is defined when a seed scores 0 or 1. A t interval on the rates
  themselves crosses 0 or 1 exactly where rates sit near them (two seeds at 0.105 and 0.474
  give [-1.38, 1.96]); a percentile bootstrap stays inside but covers far less than 95% with
  the handful of seeds a run has.
* A **difference** (a change from SFT, a hacking gap, a paired difference between versions):
  Student t over the per-seed differences, which live in [-1, 1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
RATE_METHOD = ("Student t over seeds on the empirical logit log((x+1/2)/(n-x+1/2)) of each "
               "seed's rate (spread at least one seed's binomial sampling variance), 95% "
               "two-sided, mapped back to [0, 1] by its exact inverse; no interval with one "
               "seed")
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


def empirical_logit(rate: float, trials: int) -> float:
    accepted = rate * trials
    return math.log((accepted + 0.5) / (trials - accepted + 0.5))


def rate_interval(rates: Sequence[float], trials: int,
                  confidence: float = CONFIDENCE) -> Interval:
    """Mean of per-seed rates (each of ``trials`` outputs or questions), with a t interval on
    the empirical-logit scale mapped back into [0, 1]."""
    n = len(rates)
    mean = sum(rates) / n
    if n < 2:
        return Interval(per_seed=tuple(rates), mean=mean, low=None, high=None)
    logits = [empirical_logit(r, trials) for r in rates]
    centre = sum(logits) / n
    spread = sum((z - centre) ** 2 for z in logits) / (n - 1)
    # Seeds that agree by chance (all at 0 of a few questions, say) must not claim certainty:
    # the spread is never taken below the sampling variance of one seed's empirical logit,
    # 1/(x+1/2) + 1/(n-x+1/2), averaged over seeds.
    sampling = sum(1 / (r * trials + 0.5) + 1 / (trials - r * trials + 0.5)
                   for r in rates) / n
    half = t_quantile(confidence, n - 1) * math.sqrt(max(spread, sampling) / n)
    low, high = _rate_of(centre - half, trials), _rate_of(centre + half, trials)
    # The plain mean is the point reported; the logit scale's centre can sit a little apart
    # from it when seeds differ a lot, and an interval should never exclude its own point.
    return Interval(per_seed=tuple(rates), mean=mean, low=min(low, mean), high=max(high, mean))


def _rate_of(z: float, trials: int) -> float:
    """The exact inverse of :func:`empirical_logit`, held to [0, 1] (the half-count
    correction alone can reach half a count outside)."""
    share = 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
    return min(1.0, max(0.0, (share * (trials + 1) - 0.5) / trials))
