"""Intervals over seeds and questions: the one place their arithmetic lives.

What a held-out number estimates is the task's rate: over training seeds, and over the task's
questions, of which a plan's held-out split is a sample that every seed answers. A seed's
rate therefore carries two kinds of chance, and an interval has to carry both: three seeds
that agree by chance, on 19 questions, must not make a verdict certain.

* **Crossed** (every held-out outcome, change from SFT, hacking gap, pass@k, hypothesis):
  the seeds x questions table of per-cell values (a greedy answer's 0/1, a question's share
  of accepted samples, its pass@k, or the paired difference of two such cells), read as the
  two-way random-effects model ``y = mu + seed + question + residual``. The variance of the
  grand mean is the seeds' part, ``max(MS_seeds, MS_residual) / (S I)`` (seed effect and
  residual), plus the questions' part, ``max(0, MS_questions - MS_residual) / (S I)``: the
  expected-mean-squares estimate of the two-way ANOVA (Searle, Casella & McCulloch 1992,
  ch. 4), ``(MS_seeds + MS_questions - MS_residual) / (S I)``, with each variance component
  kept at or above zero. Degrees of freedom by Satterthwaite (1946).
  Comparisons of two question sets (test against train) add each set's question component.
  More seeds narrow only the seed part: 19 questions bound what any number of seeds can say
  about the task. The variance is never below the binomial variance of all the table's
  trials pooled, ``p~(1 - p~) / N`` with ``p~ = (x + 1/2) / (N + 1)``, so no finite table
  decides with certainty; for a difference of two arms, the sum of both arms' (the variance
  of two independent arms' draws: an upper bound where a seed's stages sample with the same
  random numbers, as postlab's evaluations do, which can only make their answers agree more).
* **Nested** (a training reward: each seed's rollouts are its own draws): the seeds' spread of
  rates, never below one seed's binomial sd (the random-effects moment estimate kept at or
  above its binomial part); seeds - 1 degrees of freedom, or the normal where the binomial
  part is all there is.

A difference's interval is the t interval. A rate's is Korn & Graubard's (1998) for
proportions from clustered samples: Clopper-Pearson at the effective number of trials
``p(1 - p) / variance``, scaled by ``(z / t_df)^2``. It stays inside [0, 1] and, unlike the
t interval cut to [0, 1], keeps covering rates near 0 or 1 from few successes: on 3 seeds of
100 questions at a true rate of 0.02, seeds spread widely (sd 1.5 on the logit scale), the
cut t interval covered 75% of synthetic runs and this one 93%
(:mod:`postlab.analysis.coverage` draws runs from known truths and measures how often each
interval covers them). No interval comes from one seed.

Where each seed's rate rests on 300 answers or more (questions x samples: a sampled
evaluation of 16 answers on 19 questions already does), or each question's on 1,000 (seeds x
samples), a crossed rate's interval is instead the generalized pivot of the logit-normal
random-effects model (:func:`logit_normal_bounds`): seeds spread widely near 0 or 1 make the
rate a mean of skewed values, which 3 to 10 seeds rarely show, and the pivot's draws of a
wider spread carry the skew into the interval. On 3 seeds of 1,000 questions at 0.02, seeds
spread widely, Korn and Graubard's interval covered 86.7% and the pivot 95.4%. With fewer
answers a unit's logit is mostly its smoothing and the pivot covered worse, so the rule is
the design's (seeds, questions, samples), never the answers'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from postlab.plan.margins import default

CONFIDENCE = default("intervals.confidence")
CROSSED_METHOD = ("seeds x questions, two-way random effects: variance of the mean = the seeds' "
                  "spread / S + max(0, MS_questions - MS_residual) / (S I), at least the "
                  "pooled binomial p(1-p)/N (a difference of two arms: both arms' summed), "
                  "Satterthwaite degrees of freedom; rates the logit-normal random-effects "
                  "pivot where each seed's rate rests on 300 answers or each question's on "
                  "1,000, else Korn-Graubard Clopper-Pearson at the effective trials; "
                  "differences t; 95% two-sided; no interval with one seed")
RATE_METHOD = ("the seeds' spread of rates, at least one seed's binomial sd (p(1-p)/n, "
               "p = (x+1/2)/(N+1) over all seeds' N draws); Korn-Graubard Clopper-Pearson "
               "at the effective trials, seeds - 1 degrees of freedom (normal where the "
               "binomial sd is all there is); 95% two-sided; no interval with one seed")
DIFFERENCE_METHOD = ("Student t over the per-seed differences, 95% two-sided, seeds - 1 "
                     "degrees of freedom; no interval with one seed")


@dataclass(frozen=True, kw_only=True)
class Interval:
    """Mean over seeds with its 95% interval (None when there is a single seed)."""

    per_seed: tuple[float, ...]
    mean: float
    low: float | None
    high: float | None


def t_quantile(confidence: float, df: float) -> float:
    """The two-sided t quantile; ``df`` may be ``inf`` (the normal's)."""
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, df))


@dataclass(frozen=True, kw_only=True)
class Spread:
    """An estimate over seeds: its per-seed values, mean, standard error, degrees of freedom
    (``inf`` where only binomial variance is left) and how many draws it rests on."""

    per_seed: tuple[float, ...]
    mean: float
    se: float
    df: float
    draws: int
    #: a crossed rate's seeds x questions table and draws per cell, for
    #: :func:`logit_normal_bounds` where :func:`logit_normal_applies`
    table: np.ndarray | None = field(default=None, compare=False, repr=False)
    per_cell: int = 1

    def interval(self, confidence: float = CONFIDENCE, *, rate: bool = False) -> Interval:
        """The t interval, or for a ``rate`` the logit-normal pivot's interval where it
        applies and Korn and Graubard's interval for a proportion otherwise (module
        docstring)."""
        if len(self.per_seed) < 2:
            return Interval(per_seed=self.per_seed, mean=self.mean, low=None, high=None)
        if rate and self.table is not None and logit_normal_applies(self.table.shape,
                                                                     self.per_cell):
            low, high = logit_normal_bounds(self.table, self.per_cell, confidence)
        elif rate:
            low, high = proportion_bounds(self.mean, self.se, self.df, self.draws, confidence)
        else:
            half = t_quantile(confidence, self.df) * self.se
            low, high = self.mean - half, self.mean + half
        return Interval(per_seed=self.per_seed, mean=self.mean, low=low, high=high)


def proportion_bounds(share: float, se: float, df: float, draws: int,
                      confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Korn & Graubard (1998): Clopper-Pearson bounds at the effective number of trials
    ``share (1 - share) / se^2`` (``draws`` where the share is 0 or 1), times
    ``(z / t_df)^2`` for the variance's own uncertainty."""
    from scipy.stats import beta, norm

    inside = 0.0 < share < 1.0 and se > 0
    effective = share * (1.0 - share) / se ** 2 if inside else float(draws)
    effective *= (float(norm.ppf(0.5 + confidence / 2)) / t_quantile(confidence, df)) ** 2
    hits = share * effective
    tail = (1 - confidence) / 2
    low = 0.0 if hits <= 0 else float(beta.ppf(tail, hits, effective - hits + 1))
    high = 1.0 if hits >= effective else float(beta.ppf(1 - tail, hits + 1, effective - hits))
    return low, high


def seed_spread(values: Sequence[float]) -> Spread:
    """Student t over per-seed values alone: for per-seed summaries that are not a table of
    questions (a log KL, values read back without their counts)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return Spread(per_seed=tuple(values), mean=mean, se=math.nan, df=math.nan, draws=n)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return Spread(per_seed=tuple(values), mean=mean, se=sd / math.sqrt(n), df=float(n - 1),
                  draws=n)


def question_spread(values: Sequence[float], trials: int = 1) -> Spread:
    """The mean of per-question values of one fixed model (a pretrained model's baseline,
    evaluated without training), over questions alone: the questions' spread over their
    number, at least the pooled binomial ``p~(1 - p~) / N`` as in :func:`crossed_spread`,
    questions - 1 degrees of freedom. Its ``per_seed`` holds the per-question values, so an
    interval needs two questions, not two seeds: no training seed varies."""
    n = len(values)
    if n == 0:
        raise ValueError("an estimate needs at least one question")
    array = np.asarray(values, dtype=np.float64)
    mean = float(array.mean())
    cells = n * trials
    share = (float(np.abs(array).sum()) * trials + 0.5) / (cells + 1)
    floor = share * (1 - share) / cells
    if n < 2:
        return Spread(per_seed=tuple(array.tolist()), mean=mean, se=math.nan, df=math.nan,
                      draws=cells)
    variance = float(array.var(ddof=1)) / n
    if variance <= floor:
        return Spread(per_seed=tuple(array.tolist()), mean=mean, se=math.sqrt(floor),
                      df=math.inf, draws=cells)
    return Spread(per_seed=tuple(array.tolist()), mean=mean, se=math.sqrt(variance),
                  df=float(n - 1), draws=cells)


def interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """:func:`seed_spread`'s t interval of the mean of ``values`` (one value per seed)."""
    return seed_spread(values).interval(confidence)


def nested_spread(rates: Sequence[float], trials: int) -> Spread:
    """Per-seed rates of draws each seed made for itself (``trials`` each): the seeds'
    spread, at least one seed's binomial sd (seeds that agree by chance, all at 0 of a few
    rollouts, must not claim certainty)."""
    n = len(rates)
    mean = sum(rates) / n
    if n < 2:
        return Spread(per_seed=tuple(rates), mean=mean, se=math.nan, df=math.nan,
                      draws=trials * n)
    spread = math.sqrt(sum((r - mean) ** 2 for r in rates) / (n - 1))
    # the share from every seed's draws pooled, half a success smoothed in (smoothing one
    # seed's count instead put a floor twice the binomial variance under a true 0.02 of 19
    # draws, and 99.5% coverage at 100 seeds, measured)
    draws = trials * n
    share = (mean * draws + 0.5) / (draws + 1)
    sampling = math.sqrt(share * (1 - share) / trials)
    # the binomial part is known, not estimated: where it is all there is, the normal's
    # quantile (seeds - 1 degrees of freedom would put 3 agreeing seeds' interval at 100%
    # coverage, measured)
    df = float(n - 1) if spread > sampling else math.inf
    return Spread(per_seed=tuple(rates), mean=mean, se=max(spread, sampling) / math.sqrt(n),
                  df=df, draws=draws)


def rate_interval(rates: Sequence[float], trials: int,
                  confidence: float = CONFIDENCE) -> Interval:
    """:func:`nested_spread`'s interval for a rate."""
    return nested_spread(rates, trials).interval(confidence, rate=True)


# --- crossed: seeds x questions ----------------------------------------------------------------

@dataclass(frozen=True)
class MeanSquares:
    """What the two-way model reads of one seeds x questions table: each seed's mean, the
    questions' and the residual mean squares (NaN with one seed or one question), and the
    pooled share behind the binomial floor (half a success, or for a difference half a
    disagreement, smoothed in). The intervals and the power planner read them here."""

    row: np.ndarray
    questions: float
    residual: float
    share: float


def mean_squares(table: np.ndarray, per_cell: int) -> MeanSquares:
    """The mean squares of a seeds x questions ``table`` whose cells average ``per_cell``
    draws."""
    seeds, questions = table.shape
    row = table.mean(axis=1)
    ms_questions = ms_residual = math.nan
    if seeds > 1 and questions > 1:
        column = table.mean(axis=0)
        grand = float(row.mean())
        ms_questions = seeds * float(((column - grand) ** 2).sum()) / (questions - 1)
        residual = table - row[:, None] - column[None, :] + grand
        ms_residual = float((residual ** 2).sum()) / float((seeds - 1) * (questions - 1))
    return MeanSquares(row=row, questions=ms_questions, residual=ms_residual,
                       share=pooled_share(table, per_cell))


def pooled_share(table: np.ndarray, per_cell: int) -> float:
    """The share behind the binomial floor: all the table's draws pooled, half a success (for
    a difference, half a disagreement) smoothed in, ``(x + 1/2) / (N + 1)``."""
    cells = table.size * per_cell
    return (float(np.abs(table).sum()) * per_cell + 0.5) / (cells + 1)


def binomial_floor(table: np.ndarray, per_cell: int) -> float:
    """The pooled binomial variance of a seeds x questions table's mean, ``p~(1 - p~) / N``
    over all its ``N`` draws (:func:`pooled_share`)."""
    table = np.asarray(table, dtype=np.float64)
    share = pooled_share(table, per_cell)
    return share * (1 - share) / (table.size * per_cell)


def crossed_spread(tables: Sequence[tuple[float, np.ndarray]], trials: Sequence[int] | int = 1,
                   *, floor_from: Sequence[tuple[np.ndarray, int]] | None = None) -> Spread:
    """The estimate ``sum(sign * mean(table))`` over tables of seeds x questions (rows in the
    same seed order, questions in the same order for every seed), with its variance under
    the two-way random-effects model of the module's docstring.

    Each table is one set of questions: a rate is one table with sign 1; a difference on the
    same questions (a change from SFT, a hacking gap) is one table of the per-cell
    differences, which pairs them by seed and question; test against train is two tables of
    opposite signs. ``trials`` is how many draws each cell of a table averages (samples per
    question; 1 for greedy answers), for the binomial floor.

    ``floor_from``: the tables (with their draws per cell) whose binomial floors, summed,
    floor the variance instead of each table's own: for a difference of two arms' rates
    (:func:`paired_difference`), both arms' draws. A table of per-cell differences alone
    counts a cell's net difference as its disagreements, over one arm's draws, so two arms
    that agree on every question got a floor of about ``0.5 / N^2``: +-0.0015 from 3 seeds x
    19 questions x 16 samples, near-certainty from a finite table.
    """
    if not tables:
        raise ValueError("an estimate needs at least one table")
    counts = [trials] * len(tables) if isinstance(trials, int) else list(trials)
    seeds = np.asarray(tables[0][1]).shape[0]
    per_seed = np.zeros(seeds)
    # the variance as a combination of mean squares: (coefficient, mean square, its df)
    questions_part: list[tuple[float, float, float]] = []
    residual_part: list[tuple[float, float, float]] = []
    floor, draws = 0.0, 0
    for (sign, table), per_cell in zip(tables, counts, strict=True):
        table = np.asarray(table, dtype=np.float64)
        if table.ndim != 2 or table.shape[0] != seeds or table.shape[1] == 0:
            raise ValueError(f"tables must be seeds x questions with {seeds} seeds, "
                             f"got shape {table.shape}")
        questions = table.shape[1]
        squares = mean_squares(table, per_cell)
        per_seed += sign * squares.row
        if seeds > 1 and questions > 1:
            ms_questions, ms_residual = squares.questions, squares.residual
            df_residual = float((seeds - 1) * (questions - 1))
            scale = 1.0 / (seeds * questions)
            residual_part.append((scale, ms_residual, df_residual))
            # the questions' component, kept at or above 0 (equal mean squares, up to
            # rounding, leave none: the df would otherwise jump on the last bit)
            if ms_questions > ms_residual * (1 + 1e-9):
                questions_part += [(scale, ms_questions, questions - 1.0),
                                   (-scale, ms_residual, df_residual)]
        # the pooled binomial floor: all the table's draws, with half a success (or, for a
        # difference, half a disagreement) smoothed in
        cells = seeds * questions * per_cell
        floor += squares.share * (1 - squares.share) / cells
        draws += cells
    if floor_from is not None:
        floor = sum(binomial_floor(table, per_cell) for table, per_cell in floor_from)
    values = tuple(per_seed.tolist())
    mean = float(per_seed.mean())
    # one table of shares: a rate, whose interval may be the logit-normal pivot's
    alone = ({"table": np.asarray(tables[0][1], dtype=np.float64), "per_cell": counts[0]}
             if len(tables) == 1 and tables[0][0] == 1.0 and floor_from is None else {})
    if seeds < 2:
        return Spread(per_seed=values, mean=mean, se=math.nan, df=math.nan, draws=draws,
                      **alone)
    # The seeds' part: their spread, kept at or above what the residuals alone put into a
    # seed's value (the seed component kept at or above 0); three seeds that agree by chance
    # would otherwise read as a seed effect known to be nil. (Pooling the two where an F test
    # finds no seed effect, Bancroft's rule, was tried: no nearer 95% at 3 seeds, measured.)
    spread = float(per_seed.var(ddof=1))
    implied = sum(c * m for c, m, _ in residual_part) * seeds
    seed_part = ([(1.0 / seeds, spread, seeds - 1.0)] if spread >= implied * (1 - 1e-9)
                 else residual_part)
    parts = seed_part + questions_part
    variance = sum(c * m for c, m, _ in parts)
    if variance <= floor:
        return Spread(per_seed=values, mean=mean, se=math.sqrt(floor), df=math.inf,
                      draws=draws, **alone)
    # Satterthwaite (1946): the df of a combination of independent mean squares
    terms = sum((c * m) ** 2 / df for c, m, df in parts)
    return Spread(per_seed=values, mean=mean, se=math.sqrt(variance),
                  df=variance ** 2 / terms if terms > 0 else math.inf, draws=draws, **alone)


def paired_difference(first: tuple[np.ndarray, int], second: tuple[np.ndarray, int]
                      ) -> Spread:
    """The difference of two arms' seeds x questions tables (each with its draws per cell),
    paired by seed and question: :func:`crossed_spread` of the per-cell differences, floored
    by both arms' binomial variances summed. That is the variance of two independent arms'
    draws; a seed's stages sample with the same random numbers, which can only make their
    answers agree more, so the floor is conservative, never near-certain.

    A difference of hacking gaps (each a difference of two contracts on the same answers)
    takes each gap table as an arm: its floor counts a cell's net gap as its disagreements,
    right where the looser contract accepts all the stricter one does (substring and
    strict)."""
    (a, per_cell), (b, other) = first, second
    if per_cell != other:
        raise ValueError(f"paired tables must average as many draws a cell ({per_cell} and "
                         f"{other})")
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return crossed_spread([(1.0, a - b)], per_cell, floor_from=[(a, per_cell), (b, per_cell)])


def crossed_interval(tables: Sequence[tuple[float, np.ndarray]], trials: Sequence[int] | int = 1,
                     confidence: float = CONFIDENCE, *, rate: bool = False) -> Interval:
    """:func:`crossed_spread`'s interval; ``rate`` for a rate (one table of shares)."""
    return crossed_spread(tables, trials).interval(confidence, rate=rate)


# --- crossed rates: the logit-normal pivot ---------------------------------------------------

#: Answers each seed's rate (questions x samples) or each question's rate (seeds x samples)
#: must rest on for the logit-normal pivot: with fewer, a unit's logit is mostly its
#: smoothing, and the pivot covered worse than Korn-Graubard (greedy answers on 19 or 100
#: questions at 10 to 100 seeds, measured with ``bench/interval_coverage.py``).
PIVOT_SEED_ANSWERS = 300
PIVOT_QUESTION_ANSWERS = 1000
#: Draws of the generalized pivot, from a generator seeded alike at every call, so an
#: interval is a function of its table (a report prints the same bounds every time).
PIVOT_DRAWS = 2000
PIVOT_SEED = 20261207
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(64)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def logit_normal_applies(shape: tuple[int, ...], per_cell: int) -> bool:
    """Whether a seeds x questions table's rate gets the logit-normal pivot: each seed's rate
    rests on PIVOT_SEED_ANSWERS answers or more, or each question's on
    PIVOT_QUESTION_ANSWERS (a design rule, not one read from the answers, which would
    choose the interval by the very chance it has to cover)."""
    seeds, questions = shape
    return seeds >= 2 and (questions * per_cell >= PIVOT_SEED_ANSWERS
                           or seeds * per_cell >= PIVOT_QUESTION_ANSWERS)


def _unit_logits(counts: np.ndarray, draws: int) -> tuple[np.ndarray, float]:
    """Each unit's logit of ``(x + 1/2) / (n + 1)``, and the mean binomial variance of those
    logits, ``1 / ((n + 1) p (1 - p))``, that their spread holds beside the units' own."""
    share = (counts + 0.5) / (draws + 1)
    return np.log(share / (1 - share)), float((1.0 / ((draws + 1) * share * (1 - share))).mean())


def logit_normal_bounds(table: np.ndarray, per_cell: int,
                        confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A crossed rate's interval from the logit-normal random-effects model: on the logit
    scale a seed effect plus a question effect, each normal (the hierarchical model Bowyer
    et al. 2025, arXiv:2503.01747, argue for small benchmarks), and its generalized pivotal
    quantity (Weerahandi 1993; Krishnamoorthy & Mathew 2003 for a lognormal mean).

    Why: the rate is a mean of skewed values where seeds or questions spread widely near 0
    or 1, and 3 to 10 seeds rarely show the tail; a symmetric interval around their mean
    then misses on one side (86-90% coverage, measured). The pivot draws the seeds' and the
    questions' logit variances from their chi-square pivots, the logit centre from the
    normal at those variances (never below the pooled binomial variance), and maps each
    draw to the population rate ``E[expit(centre + sd Z)]``: a draw of a wider spread moves
    the rate toward 1/2, which is the skew the data cannot show.

    Each seed's and question's logit is that of its smoothed rate; their spreads less their
    binomial parts are the model's variances. The interval holds the table's own mean (a
    table of zeros, whose smoothed centre sits above 0, gets 0 as its lower bound)."""
    from scipy.special import expit

    table = np.asarray(table, dtype=np.float64)
    seeds, questions = table.shape
    seed_logits, seed_noise = _unit_logits(table.sum(axis=1) * per_cell, questions * per_cell)
    question_logits, question_noise = _unit_logits(table.sum(axis=0) * per_cell,
                                                   seeds * per_cell)
    seed_var = float(seed_logits.var(ddof=1))
    question_var = float(question_logits.var(ddof=1)) if questions > 1 else 0.0
    total = table.size * per_cell
    share = (float(table.sum()) * per_cell + 0.5) / (total + 1)
    spread = math.sqrt(max(0.0, seed_var - seed_noise) + max(0.0, question_var - question_noise))
    centre = centre_for(share, spread)
    rng = np.random.default_rng(PIVOT_SEED)
    seed_draw = seed_var * (seeds - 1) / rng.chisquare(seeds - 1, PIVOT_DRAWS)
    question_draw = (question_var * (questions - 1) / rng.chisquare(questions - 1, PIVOT_DRAWS)
                     if questions > 1 else np.zeros(PIVOT_DRAWS))
    # the centre's variance at the drawn variances, never below the pooled binomial's
    least = 1.0 / (total * share * (1 - share))
    centres = centre - rng.standard_normal(PIVOT_DRAWS) * np.sqrt(
        np.maximum(seed_draw / seeds + question_draw / questions, least))
    spreads = np.sqrt(np.maximum(0.0, seed_draw - seed_noise)
                      + np.maximum(0.0, question_draw - question_noise))
    rates = expit(centres[:, None] + spreads[:, None] * _NODES[None, :]) @ _WEIGHTS
    tail = (1 - confidence) / 2
    low, high = np.quantile(rates, [tail, 1 - tail])
    mean = float(table.mean())
    return min(float(low), mean), max(float(high), mean)


def population_rate(centre: float, sd: float) -> float:
    """E[expit(centre + sd Z)], Z standard normal, by 64-point Gauss-Hermite quadrature: a
    logit-normal population's rate."""
    from scipy.special import expit

    return float(expit(centre + sd * _NODES) @ _WEIGHTS)


def centre_for(rate: float, sd: float) -> float:
    """The logit centre whose population rate under spread ``sd`` is ``rate`` (bisection)."""
    low, high = -30.0, 30.0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if population_rate(middle, sd) < rate else (low, middle)
    return (low + high) / 2
