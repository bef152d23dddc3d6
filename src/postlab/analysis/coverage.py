"""How often do the intervals cover the truth? Synthetic runs drawn from known truths.

Each regime fixes a number of seeds, of held-out questions, a true rate, how much seeds vary
and how much questions vary; each replicate draws fresh seeds and fresh questions from those
populations, the way a new run of a new split would, and asks each interval whether it holds
the population's rate (or difference). The model is the one the intervals assume for the
crossed kind: on the logit scale a seed effect plus a question effect, each normal, and a
Bernoulli answer per seed and question (a greedy answer), or 16 of them of which the cell
holds the share accepted (a sampled evaluation; ``Regime.samples``). Nothing here is fitted to
what the intervals do: the truths are computed by quadrature, the draws by numpy's PCG64.

Interval types (:mod:`postlab.analysis.intervals`):

* ``crossed rate``: a held-out rate, seeds x questions.
* ``crossed difference``: two arms on the same questions, paired by seed and question (a
  change from SFT, a hacking gap, an arm against another); the arms share each question's
  difficulty and differ by a question-by-arm effect.
* ``seed-t difference``: the same difference by Student t over per-seed differences alone,
  the method before the crossed one, shown for what it missed.
* ``nested rate``: a rate whose draws are each seed's own (a training reward from rollouts).

And two wrong-verdict rates, with the arms' true difference on a margin of 0.05: the share of
runs a one-sided 5% test calls "confirmed" (an increase beyond the margin), by the crossed
difference and by seed-t. Each should be at most 5%.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from postlab.analysis.intervals import (
    CONFIDENCE,
    Interval,
    centre_for,
    crossed_spread,
    interval,
    paired_difference,
    population_rate,
    rate_interval,
    t_quantile,
)
from postlab.plan.margins import default

#: The difference a verdict is tested against, and the one-sided level of its test.
VERDICT_MARGIN = default("coverage.verdict_margin")
VERDICT_LEVEL = default("coverage.verdict_level")
#: Spread of question difficulty on the logit scale: a question's odds of success vary about
#: e-fold between a typical easy and a typical hard one, as the teaching plan's sums with
#: and without a carry do.
QUESTION_SD = 1.0
#: Spread of the question-by-arm effect in a difference (arms that help some questions more).
ARM_QUESTION_SD = 0.5


@dataclass(frozen=True, kw_only=True)
class Regime:
    seeds: int
    questions: int
    rate: float
    seed_sd: float  # of the seed effect, logit scale
    question_sd: float = QUESTION_SD
    #: answers per seed and question: 1 greedy, or a sampled evaluation's (the cell is then
    #: the share of its samples accepted)
    samples: int = 1


def answers(rng: np.random.Generator, chance: np.ndarray, samples: int) -> np.ndarray:
    """A seeds x questions table of answers at each cell's ``chance``: 0/1 for one answer
    (greedy), else each cell's share of ``samples`` independent answers."""
    if samples == 1:
        return (rng.random(chance.shape) < chance).astype(float)
    return rng.binomial(samples, chance) / samples


@dataclass(frozen=True, kw_only=True)
class Result:
    regime: Regime
    replicates: int
    coverage: dict[str, float]  # interval type -> share of replicates covering the truth
    confirmed_at_margin: dict[str, float]  # method -> share "confirmed" at a true margin

    @property
    def monte_carlo_se(self) -> float:
        """The binomial standard error of a coverage near 95% from this many replicates."""
        return math.sqrt(0.95 * 0.05 / self.replicates)


def _expit(x: np.ndarray | float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def _covers(found: Interval, truth: float) -> bool:
    assert found.low is not None and found.high is not None
    return found.low <= truth <= found.high


def _confirmed(spread_mean: float, se: float, df: float) -> bool:
    """A one-sided test at VERDICT_LEVEL: the lower bound clears the margin."""
    return spread_mean - t_quantile(1 - 2 * VERDICT_LEVEL, df) * se > VERDICT_MARGIN


@dataclass(frozen=True)
class _Arms:
    """A difference's two arms: B sits VERDICT_MARGIN above A in population rate, A at the
    regime's rate (below it where B would pass 0.99); logit centres and the true difference."""

    a_centre: float
    b_centre: float
    difference: float

    @classmethod
    def of(cls, regime: Regime) -> _Arms:
        total_sd = math.hypot(regime.seed_sd, regime.question_sd)
        arm_sd = math.hypot(total_sd, ARM_QUESTION_SD)
        a_rate = (regime.rate if regime.rate + VERDICT_MARGIN <= 0.99
                  else regime.rate - VERDICT_MARGIN)
        a_centre = centre_for(a_rate, total_sd)
        b_centre = centre_for(a_rate + VERDICT_MARGIN, arm_sd)
        return cls(a_centre, b_centre,
                   population_rate(b_centre, arm_sd) - population_rate(a_centre, total_sd))

    def tables(self, rng: np.random.Generator, regime: Regime, seeds: int,
               seed_effect: np.ndarray | None = None,
               question_effect: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """One run's seeds x questions answers (0/1) of arms A and B: the same questions'
        difficulty, A with the given seed effects, B with its own seed effect and a
        question-by-arm effect."""
        q = regime.questions
        if seed_effect is None:
            seed_effect = rng.normal(0.0, regime.seed_sd, (seeds, 1))
        if question_effect is None:
            question_effect = rng.normal(0.0, regime.question_sd, (1, q))
        a = answers(rng, _expit(self.a_centre + seed_effect + question_effect), regime.samples)
        b_logit = (self.b_centre + rng.normal(0.0, regime.seed_sd, (seeds, 1)) + question_effect
                   + rng.normal(0.0, ARM_QUESTION_SD, (1, q)))
        return a, answers(rng, _expit(b_logit), regime.samples)


def _counts(drawn: np.ndarray, size: int) -> np.ndarray:
    """How often each of ``size`` indices was drawn, per row of ``drawn``: [rows, size]."""
    offset = np.arange(drawn.shape[0])[:, None] * size
    return np.bincount((drawn + offset).ravel(), minlength=drawn.shape[0] * size
                       ).reshape(drawn.shape[0], size).astype(np.float64)


def pigeonhole_interval(table: np.ndarray, rng: np.random.Generator, resamples: int,
                        confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The cluster bootstrap of a crossed table (Owen 2007's pigeonhole bootstrap): seeds
    and questions resampled independently, with replacement; the percentile interval of the
    resampled grand means. A candidate for skewed rates and few seeds, run through the
    simulation beside the crossed intervals (``simulate(..., bootstrap=B)``; the coverage
    benchmark's ``--bootstrap``). Not adopted: on 120 regimes it covered in none where they
    miss, and missed in 59 where they cover (bench/results/interval_bootstrap.json)."""
    seeds, questions = table.shape
    rows = _counts(rng.integers(0, seeds, (resamples, seeds)), seeds)
    columns = _counts(rng.integers(0, questions, (resamples, questions)), questions)
    means = ((rows @ table) * columns).sum(axis=1) / (seeds * questions)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def simulate(regime: Regime, replicates: int, seed: int = 0, bootstrap: int = 0) -> Result:
    """Coverage of each interval type, and wrong "confirmed" rates, over ``replicates``
    synthetic runs of ``regime``; with ``bootstrap`` resamples, also the pigeonhole
    bootstrap's (:func:`pigeonhole_interval`, from a stream of its own, so the other
    figures are the same with or without it)."""
    rng = np.random.default_rng(seed)
    resampling = np.random.default_rng([seed, 1])
    s, q = regime.seeds, regime.questions
    total_sd = math.hypot(regime.seed_sd, regime.question_sd)
    centre = centre_for(regime.rate, total_sd)
    arms = _Arms.of(regime)
    difference = arms.difference
    hits = {"crossed rate": 0, "crossed difference": 0, "seed-t difference": 0,
            "nested rate": 0}
    if bootstrap:
        hits |= {"bootstrap rate": 0, "bootstrap difference": 0}
    confirmed = {"crossed difference": 0, "seed-t difference": 0}
    for _ in range(replicates):
        seed_effect = rng.normal(0.0, regime.seed_sd, (s, 1))
        question_effect = rng.normal(0.0, regime.question_sd, (1, q))
        n = regime.samples
        y = answers(rng, _expit(centre + seed_effect + question_effect), n)
        found = crossed_spread([(1.0, y)], n).interval(CONFIDENCE, rate=True)
        hits["crossed rate"] += _covers(found, regime.rate)
        a, b = arms.tables(rng, regime, s, seed_effect, question_effect)
        spread = paired_difference((b, n), (a, n))
        hits["crossed difference"] += _covers(spread.interval(CONFIDENCE), difference)
        confirmed["crossed difference"] += _confirmed(spread.mean, spread.se, spread.df)
        per_seed = (b - a).mean(axis=1)
        plain = interval(per_seed.tolist())
        hits["seed-t difference"] += _covers(plain, difference)
        sd = float(per_seed.std(ddof=1))
        confirmed["seed-t difference"] += (sd == 0 and plain.mean > VERDICT_MARGIN) or (
            sd > 0 and _confirmed(plain.mean, sd / math.sqrt(s), s - 1))
        # nested: as many draws as questions, each seed's own (rollouts on prompts drawn
        # afresh), at the seed's rate over the question population
        own = [population_rate(centre + effect, regime.question_sd) for effect in seed_effect[:, 0]]
        rates = rng.binomial(q, own) / q
        hits["nested rate"] += _covers(rate_interval(rates.tolist(), q), regime.rate)
        if bootstrap:
            low, high = pigeonhole_interval(y, resampling, bootstrap)
            hits["bootstrap rate"] += low <= regime.rate <= high
            low, high = pigeonhole_interval(b - a, resampling, bootstrap)
            hits["bootstrap difference"] += low <= difference <= high
    return Result(regime=regime, replicates=replicates,
                  coverage={k: v / replicates for k, v in hits.items()},
                  confirmed_at_margin={k: v / replicates for k, v in confirmed.items()})


#: The power a study is planned for, the pilot that plans it, and the largest planned study
#: the check simulates (a larger one is reported as not simulated).
PLANNED_POWER = 0.8
PILOT_SEEDS = 1000
MOST_PLANNED = 400


@dataclass(frozen=True, kw_only=True)
class PowerCheck:
    """A study planned from a pilot by ``postlab.analysis.design`` and simulated at the
    planned size: the seeds planned, the power the planner predicts for them, and the share
    of simulated studies whose interval excluded zero (None where nothing was simulated:
    no number of seeds, or more than MOST_PLANNED)."""

    regime: Regime
    difference: float
    planned_seeds: int | None
    planned_power: float | None
    achieved: float | None
    replicates: int

    @property
    def monte_carlo_se(self) -> float:
        shown = self.achieved if self.achieved is not None else PLANNED_POWER
        return math.sqrt(shown * (1 - shown) / max(self.replicates, 1))


def power_check(regime: Regime, replicates: int, seed: int = 0) -> PowerCheck:
    """Plan a study of the regime's difference (arm B over arm A, as :func:`simulate` draws
    it) from a pilot of PILOT_SEEDS seeds at power PLANNED_POWER, then simulate
    ``replicates`` studies of the planned size, each judged by its crossed interval."""
    from postlab.analysis.design import achieved_power, components, seeds_needed

    if regime.samples != 1:
        raise ValueError("the power check draws greedy regimes (one answer a question)")
    rng = np.random.default_rng(seed)
    arms = _Arms.of(regime)
    a, b = arms.tables(rng, regime, PILOT_SEEDS)
    # greedy regimes: one answer a cell, so its spread is all the cells'
    found = components(b - a, 1, arms=(b, a))
    planned = seeds_needed(found, arms.difference, power=PLANNED_POWER)
    if planned is None or planned > MOST_PLANNED:
        return PowerCheck(regime=regime, difference=arms.difference, planned_seeds=planned,
                          planned_power=None, achieved=None, replicates=0)
    replicates = replicates_for(dataclasses.replace(regime, seeds=planned), replicates)
    detected = 0
    for _ in range(replicates):
        a, b = arms.tables(rng, regime, planned)
        found_interval = paired_difference((b, 1), (a, 1)).interval(CONFIDENCE)
        assert found_interval.low is not None and found_interval.high is not None
        detected += found_interval.low > 0 or found_interval.high < 0
    return PowerCheck(regime=regime, difference=arms.difference, planned_seeds=planned,
                      planned_power=achieved_power(found, planned, arms.difference),
                      achieved=detected / replicates, replicates=replicates)


#: The regimes of the shipped table: seeds, questions, rates and seed spreads the lab produces.
SEEDS = (3, 10, 100, 1000)
QUESTIONS = (19, 100, 1000)
RATES = (0.02, 0.1, 0.5, 0.9, 0.98)
SEED_SDS = (0.0, 0.5, 1.5)
#: Answers per question: greedy, and the sampled evaluation's 16 (the teaching plan's).
SAMPLES = (1, 16)


def regimes(seeds: Sequence[int] = SEEDS, questions: Sequence[int] = QUESTIONS,
            rates: Sequence[float] = RATES, seed_sds: Sequence[float] = SEED_SDS,
            samples: Sequence[int] = SAMPLES) -> Iterator[Regime]:
    for n in samples:
        for s in seeds:
            for q in questions:
                for rate in rates:
                    for sd in seed_sds:
                        yield Regime(seeds=s, questions=q, rate=rate, seed_sd=sd, samples=n)


def replicates_for(regime: Regime, most: int, cells: int = 20_000_000) -> int:
    """Fewer replicates for the largest tables, so a regime draws about ``cells`` cells a
    table; at least 200 (a Monte-Carlo se of 1.5 points at 95%)."""
    return max(200, min(most, cells // (regime.seeds * regime.questions)))
