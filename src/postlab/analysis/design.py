"""How many seeds (and samples per question) a study needs to detect an effect, from a pilot.

A held-out difference is estimated from a seeds x questions table of paired per-question
differences (:func:`~postlab.analysis.intervals.crossed_spread`): under the two-way
random-effects model the intervals use, a table of S seeds over the plan's fixed I questions
has

    Var(estimate) = (sigma_seed^2 + sigma_residual^2 / I) / S + sigma_question^2 / I,

where sigma_seed is the seeds' own spread, sigma_question the questions' (which more seeds do
not shrink: the plan's questions are fixed), and sigma_residual the seed-by-question cells'
(an interaction plus each cell's binomial sampling noise, which shrinks as 1/k with k samples
per question), and never below the intervals' pooled binomial floor p(1-p) / (S I k). The
pilot's mean squares estimate each component, exactly as the pilot's own interval uses them,
so at the pilot's seeds the predicted variance is the pilot interval's.

A difference D is detected when its interval excludes zero: |estimate| / se > t(1 - alpha/2,
df), df by Satterthwaite (1946) from the seeds' and the questions' parts, as the intervals
take it. Its probability is the noncentral t's at noncentrality D / sqrt(Var). The intervals'
estimated variance is a little above the true one on average (its floor and the seeds' part
are kept at or above their bounds), so the power planned is slightly optimistic: by 3 points
at 9 seeds in the simulation of ``tests/analysis/test_design.py`` (0.794 found against 0.825
planned, 1,000 studies of binomial rates). Pure functions of arrays; the command (``postlab
design``) reads the pilot record and prices the seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from postlab.analysis.intervals import t_quantile

#: Seeds a study needs at most before the planner says "more than this".
MAX_SEEDS = 100_000


@dataclass(frozen=True, kw_only=True)
class Components:
    """The variance components of a seeds x questions table of (differences of) rates."""

    seed: float  # sigma_seed^2
    question: float  # sigma_question^2
    interaction: float  # the residual less its binomial part
    binomial: float  # one sample's within-cell variance (0 for greedy answers)
    questions: int
    samples: int  # k, the pilot's samples per question
    pilot_seeds: int
    mean: float
    #: the pooled share behind the intervals' binomial floor (half a success smoothed in)
    share: float = 0.0

    def floor(self, seeds: int, samples: int) -> float:
        """The intervals' binomial floor on the variance at ``seeds`` and ``samples``."""
        return self.share * (1 - self.share) / (seeds * self.questions * samples)

    def residual(self, samples: int) -> float:
        """sigma_residual^2 at ``samples`` per question."""
        return self.interaction + self.binomial / samples

    def variance(self, seeds: int, samples: int | None = None) -> float:
        """The estimate's variance with ``seeds`` seeds (and ``samples`` per question)."""
        k = self.samples if samples is None else samples
        model = ((self.seed + self.residual(k) / self.questions) / seeds
                 + self.question / self.questions)
        return max(model, self.floor(seeds, k))

    def df(self, seeds: int, samples: int | None = None) -> float:
        """Satterthwaite's df of the variance's seed and question parts."""
        k = self.samples if samples is None else samples
        seed_part = (self.seed + self.residual(k) / self.questions) / seeds
        question_part = self.question / self.questions
        if seed_part + question_part <= self.floor(seeds, k):
            return math.inf  # the floor holds, as the intervals then take it
        terms = seed_part ** 2 / max(seeds - 1, 1)
        if question_part > 0 and self.questions > 1:
            terms += question_part ** 2 / (self.questions - 1)
        return (seed_part + question_part) ** 2 / terms if terms > 0 else math.inf


def components(difference: np.ndarray, samples: int,
               within: np.ndarray | None = None) -> Components:
    """The components of a seeds x questions table of per-cell differences (or rates).

    ``within``: each cell's within-cell variance of one sample (for a difference of two
    independent rates, the sum of p(1-p) k/(k-1) of each), from which the binomial part is
    taken; None for greedy answers (one deterministic answer per cell: no sampling noise).
    """
    table = np.asarray(difference, dtype=np.float64)
    seeds, questions = table.shape
    if seeds < 2 or questions < 2:
        raise ValueError("a pilot needs at least two seeds and two questions")
    row, column = table.mean(axis=1), table.mean(axis=0)
    grand = float(table.mean())
    ms_questions = seeds * float(((column - grand) ** 2).sum()) / (questions - 1)
    residual = table - row[:, None] - column[None, :] + grand
    ms_residual = float((residual ** 2).sum()) / ((seeds - 1) * (questions - 1))
    spread = float(row.var(ddof=1))
    binomial = 0.0 if within is None else float(np.mean(within))
    cells = seeds * questions * samples
    share = (float(np.abs(table).sum()) * samples + 0.5) / (cells + 1)
    return Components(seed=max(0.0, spread - ms_residual / questions),
                      question=max(0.0, (ms_questions - ms_residual) / seeds),
                      interaction=max(0.0, ms_residual - binomial / samples),
                      binomial=binomial, questions=questions, samples=samples,
                      pilot_seeds=seeds, mean=grand, share=share)


def within_variance(rates: np.ndarray, samples: int) -> np.ndarray:
    """One sample's unbiased within-cell variance, p(1-p) k/(k-1), of a table of rates
    each the mean of ``samples`` 0/1 draws (0 where k is 1: a single draw shows none)."""
    rates = np.asarray(rates, dtype=np.float64)
    if samples < 2:
        return np.zeros_like(rates)
    return rates * (1 - rates) * samples / (samples - 1)


def detectable(found: Components, seeds: int, effect: float, *, power: float, alpha: float,
               samples: int | None = None) -> bool:
    """Whether a true difference ``effect`` is detected (the interval excludes zero) with
    probability ``power`` at ``seeds`` seeds."""
    return achieved_power(found, seeds, effect, alpha=alpha, samples=samples) >= power


def seeds_needed(found: Components, effect: float, *, power: float = 0.8,
                 alpha: float = 0.05, samples: int | None = None) -> int | None:
    """The fewest seeds (at least 2) that detect ``effect``; None where no number does (the
    questions' own spread, which seeds do not shrink, is already too large for it)."""
    if effect == 0:
        return None
    floor = found.question / found.questions
    z = _normal(1 - alpha / 2) + _normal(power)
    if floor > 0 and abs(effect) <= z * math.sqrt(floor):
        return None
    low, high = 2, 2
    while not detectable(found, high, effect, power=power, alpha=alpha, samples=samples):
        if high >= MAX_SEEDS:
            return None
        low, high = high, min(2 * high, MAX_SEEDS)
    while low < high:  # detectable is monotone in seeds: its variance and df only improve
        middle = (low + high) // 2
        if detectable(found, middle, effect, power=power, alpha=alpha, samples=samples):
            high = middle
        else:
            low = middle + 1
    return high


def achieved_power(found: Components, seeds: int, effect: float, *, alpha: float = 0.05,
                   samples: int | None = None) -> float:
    """The probability that the interval of a study of ``seeds`` seeds excludes zero when
    the true difference is ``effect``: either tail of the noncentral t (the normal's where
    the df are unbounded)."""
    from scipy import stats

    df = found.df(seeds, samples)
    shift = abs(effect) / math.sqrt(found.variance(seeds, samples))
    critical = t_quantile(1 - alpha, df)
    if math.isinf(df):
        return float(stats.norm.sf(critical - shift) + stats.norm.cdf(-critical - shift))
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def _normal(probability: float) -> float:
    return float(t_quantile(2 * probability - 1, math.inf))
