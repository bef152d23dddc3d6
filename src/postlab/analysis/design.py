"""How many seeds (and samples per question) a study needs to detect an effect, from a pilot.

A held-out difference is estimated from a seeds x questions table of paired per-question
differences (:func:`~postlab.analysis.intervals.crossed_spread`): under the two-way
random-effects model the intervals use, a table of S seeds over the plan's fixed I questions
has

    Var(estimate) = (sigma_seed^2 + sigma_residual^2 / I) / S + sigma_question^2 / I,

where sigma_seed is the seeds' own spread, sigma_question the questions' (which more seeds do
not shrink: the plan's questions are fixed), and sigma_residual the seed-by-question cells'
(an interaction plus each cell's binomial sampling noise, which shrinks as 1/k with k samples
per question), and never below the intervals' pooled binomial floor p(1-p) / (S I k) (for a
difference of two arms, both arms' p(1-p) summed). The
pilot's mean squares estimate each component, exactly as the pilot's own interval uses them,
so at the pilot's seeds the predicted variance is the pilot interval's.

A difference D is detected when its interval excludes zero (a registered hypothesis: when
its one-sided bound at its Holm level clears its margin), with se as the intervals take it
and df by Satterthwaite (1946) over the seeds' part (S - 1 df, whichever side of the cells'
part a new study's seeds fall) and the questions' mean squares, also where the floor holds
(the intervals' df is then infinite; the planner stays cautious, :meth:`Components.df`). Its
probability is the noncentral t's at noncentrality (D - margin) / se. The intervals'
estimated variance runs a little above the true one on average (its floor and its parts are
kept at or above their bounds), so in simulations the power achieved is within 5 points of
the power planned in most regimes of 100 or more questions and in few of 19
(``bench/interval_coverage.py --power``). Pure functions of arrays; the command (``postlab
design``) reads the pilot record and prices the seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from postlab.analysis.intervals import mean_squares, pooled_share, t_quantile

#: Seeds a study needs at most before the planner says "more than this", and at least (two
#: leave the seeds' spread one degree of freedom).
MAX_SEEDS = 100_000
MIN_SEEDS = 3


@dataclass(frozen=True, kw_only=True)
class Components:
    """The variance components of a seeds x questions table of (differences of) rates, kept
    as ``crossed_spread`` computes its interval from them."""

    seed: float  # sigma_seed^2 (0 where the seeds' spread is below what the cells put in)
    question: float  # sigma_question^2
    cells: float  # the pilot's residual mean square, at its ``samples`` per question
    binomial: float  # one sample's within-cell variance (0 for greedy answers)
    questions: int
    samples: int  # k, the pilot's samples per question
    pilot_seeds: int
    mean: float
    #: one draw's binomial variance behind the intervals' floor, p~(1 - p~) of the pooled
    #: share (half a success smoothed in), summed over both arms for a difference of two
    draw_variance: float = 0.0

    def floor(self, seeds: int, samples: int) -> float:
        """The intervals' binomial floor on the variance at ``seeds`` and ``samples``."""
        return self.draw_variance / (seeds * self.questions * samples)

    def residual(self, samples: int) -> float:
        """sigma_residual^2 at ``samples`` per question: the pilot's, its binomial part
        rescaled (never below zero)."""
        return max(0.0, self.cells + self.binomial * (1 / samples - 1 / self.samples))

    def _parts(self, seeds: int, samples: int) -> list[tuple[float, float]]:
        """The variance as ``crossed_spread`` combines it: (term, its df) for the seeds' part
        (the seeds' spread, or the cells' where the seeds add nothing) and the questions'
        (their mean square less the cells')."""
        residual, questions = self.residual(samples), self.questions
        # the seeds' part with S - 1 df either way: the intervals give the cells' part more
        # where the seeds' spread falls short of it, but a new study's seeds may fall either
        # side, and planned 2-seed studies then reached 0.5 of a planned 0.8 (the check)
        parts = [((self.seed + residual / questions) / seeds, seeds - 1.0)]
        if self.question > 0:
            scale = 1.0 / (seeds * questions)
            parts += [(scale * (seeds * self.question + residual), questions - 1.0),
                      (-scale * residual, (seeds - 1.0) * (questions - 1.0))]
        return parts

    def variance(self, seeds: int, samples: int | None = None) -> float:
        """The estimate's variance with ``seeds`` seeds (and ``samples`` per question)."""
        k = self.samples if samples is None else samples
        model = sum(term for term, _ in self._parts(seeds, k))
        return max(model, self.floor(seeds, k))

    def df(self, seeds: int, samples: int | None = None) -> float:
        """Satterthwaite's df of the variance's parts, also where the binomial floor holds in
        expectation. The intervals take the normal's quantile there (df infinite); the
        planner does not, by design: a small planned study's own estimate lands above the
        floor often enough, with its few df, that planning at the normal's quantile
        overpromised (the power check fell below its 23 of 41 regimes within 5 points of
        the planned power that way, once a difference's floor counted both arms' draws)."""
        k = self.samples if samples is None else samples
        parts = self._parts(seeds, k)
        model = sum(term for term, _ in parts)
        if model <= 0:
            return math.inf
        terms = sum(term ** 2 / df for term, df in parts if df > 0)
        return model ** 2 / terms if terms > 0 else math.inf


def components(difference: np.ndarray, samples: int,
               within: np.ndarray | None = None,
               arms: Sequence[np.ndarray] | None = None) -> Components:
    """The components of a seeds x questions table of per-cell differences (or rates).

    ``within``: each cell's within-cell variance of one sample (for a difference of two
    independent rates, the sum of p(1-p) k/(k-1) of each), from which the binomial part is
    taken; None for greedy answers (one deterministic answer per cell: no sampling noise).
    ``arms``: the two arms' tables of a difference, whose binomial floors floor it, as the
    intervals floor it (:func:`~postlab.analysis.intervals.paired_difference`).
    """
    table = np.asarray(difference, dtype=np.float64)
    seeds, questions = table.shape
    if seeds < 2 or questions < 2:
        raise ValueError("a pilot needs at least two seeds and two questions")
    squares = mean_squares(table, samples)
    ms_questions, ms_residual = squares.questions, squares.residual
    spread = float(squares.row.var(ddof=1))
    binomial = 0.0 if within is None else float(np.mean(within))
    # as crossed_spread keeps them: the seeds' part where their spread reaches what the cells
    # put into a seed's mean, the questions' where their mean square exceeds the cells'
    seed = spread - ms_residual / questions if spread >= ms_residual / questions * (1 - 1e-9) \
        else 0.0
    question = ((ms_questions - ms_residual) / seeds
                if ms_questions > ms_residual * (1 + 1e-9) else 0.0)
    shares = ([pooled_share(np.asarray(arm, dtype=np.float64), samples) for arm in arms]
              if arms is not None else [squares.share])
    return Components(seed=max(0.0, seed), question=question, cells=ms_residual,
                      binomial=binomial, questions=questions, samples=samples,
                      pilot_seeds=seeds, mean=float(squares.row.mean()),
                      draw_variance=sum(p * (1 - p) for p in shares))


def within_variance(rates: np.ndarray, samples: int) -> np.ndarray:
    """One sample's unbiased within-cell variance, p(1-p) k/(k-1), of a table of rates
    each the mean of ``samples`` 0/1 draws (0 where k is 1: a single draw shows none)."""
    rates = np.asarray(rates, dtype=np.float64)
    if samples < 2:
        return np.zeros_like(rates)
    return rates * (1 - rates) * samples / (samples - 1)


@dataclass(frozen=True, kw_only=True)
class Criterion:
    """What a study's difference must clear: two-sided at ``alpha`` against zero (an
    interval excluding zero), or one-sided at ``alpha`` against ``margin`` (a hypothesis's
    bound clearing its margin, at its Holm level)."""

    alpha: float = 0.05
    one_sided: bool = False
    margin: float = 0.0


TWO_SIDED = Criterion()


def detectable(found: Components, seeds: int, effect: float, *, power: float,
               test: Criterion = TWO_SIDED, samples: int | None = None) -> bool:
    """Whether a true difference ``effect`` is detected with probability ``power`` at
    ``seeds`` seeds."""
    achieved = achieved_power(found, seeds, effect, test=test, samples=samples)
    if math.isnan(achieved):
        raise ValueError(f"no power computed at {seeds} seeds for an effect of {effect}")
    return achieved >= power


def seeds_needed(found: Components, effect: float, *, power: float = 0.8,
                 test: Criterion = TWO_SIDED, samples: int | None = None) -> int | None:
    """The fewest seeds (at least 3, as a pilot) that detect ``effect``; None where no number
    does (the effect does not exceed the margin, or the questions' own spread, which seeds
    do not shrink, is already too large for it)."""
    distance = abs(effect) - test.margin
    if distance <= 0:
        return None
    floor = found.question / found.questions
    level = test.alpha if test.one_sided else test.alpha / 2
    z = _normal(1 - level) + _normal(power)
    if floor > 0 and distance <= z * math.sqrt(floor):
        return None
    low, high = MIN_SEEDS, MIN_SEEDS
    while not detectable(found, high, effect, power=power, test=test, samples=samples):
        if high >= MAX_SEEDS:
            return None
        low, high = high, min(2 * high, MAX_SEEDS)
    # the smallest detecting count between the last that did not and the first that did:
    # power grows with seeds as the variance falls (the df need not rise everywhere, but
    # no case of 19 or more questions turned back in a grid search)
    while low < high:
        middle = (low + high) // 2
        if detectable(found, middle, effect, power=power, test=test, samples=samples):
            high = middle
        else:
            low = middle + 1
    return high


def achieved_power(found: Components, seeds: int, effect: float, *, test: Criterion = TWO_SIDED,
                   samples: int | None = None) -> float:
    """The probability that a study of ``seeds`` seeds detects a true difference
    ``effect``: its interval excludes zero (two-sided), or its one-sided bound clears the
    margin; by the noncentral t (the normal's where the df are unbounded). A tail scipy
    cannot evaluate (it returns NaN far out) is taken as 0."""
    from scipy import stats

    df = found.df(seeds, samples)
    se = math.sqrt(found.variance(seeds, samples))
    shift = (abs(effect) - test.margin) / se
    critical = t_quantile(1 - (2 * test.alpha if test.one_sided else test.alpha), df)
    law = stats.norm if math.isinf(df) else stats.nct(df, shift)
    if math.isinf(df):
        upper = float(law.sf(critical - shift))
        lower = float(law.cdf(-critical - shift))
    else:
        upper = float(law.sf(critical))
        lower = float(law.cdf(-critical))
    upper = upper if math.isfinite(upper) else 0.0
    lower = lower if math.isfinite(lower) and not test.one_sided else 0.0
    return upper + lower


def _normal(probability: float) -> float:
    return float(t_quantile(2 * probability - 1, math.inf))
