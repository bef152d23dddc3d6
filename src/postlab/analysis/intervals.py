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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from postlab.plan.margins import default

CONFIDENCE = default("intervals.confidence")
CROSSED_METHOD = ("seeds x questions, two-way random effects: variance of the mean = the seeds' "
                  "spread / S + max(0, MS_questions - MS_residual) / (S I), at least the "
                  "pooled binomial p(1-p)/N (a difference of two arms: both arms' summed), "
                  "Satterthwaite degrees of freedom; rates "
                  "Korn-Graubard Clopper-Pearson at the effective trials, differences t; 95% "
                  "two-sided; no interval with one seed")
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

    def interval(self, confidence: float = CONFIDENCE, *, rate: bool = False) -> Interval:
        """The t interval, or for a ``rate`` Korn and Graubard's interval for a proportion
        (module docstring)."""
        if len(self.per_seed) < 2:
            return Interval(per_seed=self.per_seed, mean=self.mean, low=None, high=None)
        if rate:
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
    if seeds < 2:
        return Spread(per_seed=values, mean=mean, se=math.nan, df=math.nan, draws=draws)
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
                      draws=draws)
    # Satterthwaite (1946): the df of a combination of independent mean squares
    terms = sum((c * m) ** 2 / df for c, m, df in parts)
    return Spread(per_seed=values, mean=mean, se=math.sqrt(variance),
                  df=variance ** 2 / terms if terms > 0 else math.inf, draws=draws)


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
