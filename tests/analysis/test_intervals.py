"""Intervals over seeds and questions: the crossed estimate against hand-computed values and a
plain loop written separately, Korn-Graubard bounds against the exact binomial interval, the
nested rate by hand, and a slice of the shipped coverage simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postlab.analysis.coverage import Regime, simulate
from postlab.analysis.intervals import (
    crossed_spread,
    nested_spread,
    proportion_bounds,
    rate_interval,
)

pytest.importorskip("scipy")


def test_crossed_spread_by_hand():
    """Seeds x questions [[1,0,0],[1,1,1],[1,0,0]]: row means 1/3, 1, 1/3 (grand 5/9), column
    means 1, 1/3, 1/3. MS_questions = 3 (16+4+4)/81 / 2 = 4/9; the residuals are 2/9, -1/9,
    -1/9 | -4/9, 2/9, 2/9 | 2/9, -1/9, -1/9, so MS_residual = (36/81) / 4 = 1/9. The seeds'
    spread of row means is 4/27 (above the 1/27 the residuals put into a seed), its part
    4/81; the questions' part (4/9 - 1/9) / 9 = 3/81. Variance 7/81; Satterthwaite df
    (7/81)^2 / ((4/81)^2/2 + (4/81)^2/2 + (1/81)^2/4) = 49 / 16.25."""
    table = np.array([[1, 0, 0], [1, 1, 1], [1, 0, 0]], dtype=float)
    found = crossed_spread([(1.0, table)])
    assert found.mean == pytest.approx(5 / 9)
    assert found.per_seed == pytest.approx((1 / 3, 1.0, 1 / 3))
    assert found.se == pytest.approx(math.sqrt(7) / 9)
    assert found.df == pytest.approx(49 / 16.25)
    assert found.draws == 9


def _by_loop(tables: list[tuple[float, list[list[float]]]], trials: list[int]
             ) -> tuple[float, float, float]:
    """The same estimate, element by element: mean squares by nested loops, each part and its
    degrees of freedom kept in a list."""
    seeds = len(tables[0][1])
    per_seed = [0.0] * seeds
    questions_terms, residual_terms = [], []
    floor = 0.0
    for (sign, table), per_cell in zip(tables, trials, strict=True):
        n = len(table[0])
        rows = [sum(r) / n for r in table]
        cols = [sum(table[s][j] for s in range(seeds)) / seeds for j in range(n)]
        grand = sum(rows) / seeds
        for s in range(seeds):
            per_seed[s] += sign * rows[s]
        if n > 1:
            ms_q = seeds * sum((c - grand) ** 2 for c in cols) / (n - 1)
            ss_e = 0.0
            for s in range(seeds):
                for j in range(n):
                    ss_e += (table[s][j] - rows[s] - cols[j] + grand) ** 2
            df_e = (seeds - 1) * (n - 1)
            ms_e = ss_e / df_e
            residual_terms.append((ms_e / (seeds * n), df_e))
            if ms_q > ms_e * (1 + 1e-9):
                questions_terms.append((ms_q / (seeds * n), n - 1))
                questions_terms.append((-ms_e / (seeds * n), df_e))
        total = sum(abs(v) for r in table for v in r) * per_cell
        cells = seeds * n * per_cell
        share = (total + 0.5) / (cells + 1)
        floor += share * (1 - share) / cells
    mean = sum(per_seed) / seeds
    spread = sum((v - mean) ** 2 for v in per_seed) / (seeds - 1)
    implied = sum(v for v, _ in residual_terms) * seeds
    seed_terms = [(spread / seeds, seeds - 1)] if spread >= implied * (1 - 1e-9) else residual_terms
    terms = seed_terms + questions_terms
    variance = sum(v for v, _ in terms)
    if variance <= floor:
        return mean, math.sqrt(floor), math.inf
    return mean, math.sqrt(variance), variance ** 2 / sum(v * v / df for v, df in terms)


cells = st.integers(0, 4)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(2, 7), st.integers(1, 7), st.data())
def test_crossed_spread_matches_a_plain_loop(seeds, questions, other, data):
    """One table of shares of 4 samples, and test against train (two tables of opposite
    signs, different question counts)."""
    first = [[data.draw(cells) / 4 for _ in range(questions)] for _ in range(seeds)]
    second = [[data.draw(cells) / 4 for _ in range(other)] for _ in range(seeds)]
    for tables, trials in (([(1.0, first)], [4]), ([(1.0, first), (-1.0, second)], [4, 4])):
        found = crossed_spread([(s, np.array(t)) for s, t in tables], trials)
        mean, se, df = _by_loop(tables, trials)
        assert found.mean == pytest.approx(mean, abs=1e-12)
        assert found.se == pytest.approx(se, rel=1e-9)
        assert found.df == pytest.approx(df, rel=1e-9) or (found.df == df == math.inf)


def test_identical_per_seed_differences_do_not_decide_with_certainty():
    """Three seeds each lose 2 of 19 questions' coverage, at different questions: the
    per-seed differences agree exactly, yet the questions still vary."""
    table = np.zeros((3, 19))
    table[0, [1, 2]] = table[1, [5, 9]] = table[2, [3, 17]] = -1
    found = crossed_spread([(1.0, table)])
    assert found.per_seed == pytest.approx((-2 / 19,) * 3)
    assert found.se > 0.02
    interval = found.interval()
    assert interval.low < interval.mean < interval.high


def test_a_table_of_zeros_keeps_the_pooled_binomial_floor():
    found = crossed_spread([(1.0, np.zeros((3, 12)))])
    share = 0.5 / 37
    assert found.se == pytest.approx(math.sqrt(share * (1 - share) / 36))
    assert found.df == math.inf
    interval = found.interval(rate=True)
    assert interval.low == 0.0 and 0.0 < interval.high < 0.2


def test_two_arms_that_agree_everywhere_keep_both_arms_binomial_floor():
    """3 seeds x 19 questions x 16 samples, both arms accepting the same 9 of 16 on every
    question: the difference table is all zeros, but each arm's answers are its own draws,
    so the floor is both arms' binomial variance (N = 912 draws each), not +-0.0015."""
    from postlab.analysis.intervals import paired_difference

    arm = np.full((3, 19), 9 / 16)
    found = paired_difference((arm, 16), (arm.copy(), 16))
    n = 3 * 19 * 16
    share = (9 / 16 * n + 0.5) / (n + 1)  # each arm's pooled share, half a success added
    assert found.se == pytest.approx(math.sqrt(2 * share * (1 - share) / n), rel=1e-12)
    assert found.df == math.inf and found.mean == 0.0
    interval = found.interval()
    assert interval.high > 0.045 and interval.low < -0.045  # about +-0.046
    # the difference table alone (net difference per cell over one arm's draws) decided
    alone = crossed_spread([(1.0, arm - arm)], 16).interval()
    assert alone.high < 0.002
    # arms far apart are floored by both too, each at its own share
    other = np.full((3, 19), 1 / 16)
    apart = paired_difference((arm, 16), (other, 16))
    shares = [(x * n + 0.5) / (n + 1) for x in (9 / 16, 1 / 16)]
    assert apart.se == pytest.approx(math.sqrt(sum(p * (1 - p) for p in shares) / n))
    with pytest.raises(ValueError, match="as many draws"):
        paired_difference((arm, 16), (arm, 8))


def test_one_seed_gives_no_interval():
    found = crossed_spread([(1.0, np.ones((1, 5)))])
    interval = found.interval(rate=True)
    assert (interval.mean, interval.low, interval.high) == (1.0, None, None)


@pytest.mark.parametrize(("hits", "n"), [(0, 19), (3, 19), (10, 20), (19, 19), (1, 300)])
def test_korn_graubard_with_binomial_variance_is_clopper_pearson(hits, n):
    """At the binomial variance and infinite df the effective trials are the trials, so the
    bounds are the exact binomial (Clopper-Pearson) interval."""
    from scipy.stats import binomtest

    share = hits / n
    se = math.sqrt(share * (1 - share) / n)
    low, high = proportion_bounds(share, se, math.inf, n)
    exact = binomtest(hits, n).proportion_ci(0.95, method="exact")
    assert low == pytest.approx(exact.low, abs=1e-9)
    assert high == pytest.approx(exact.high, abs=1e-9)


def test_korn_graubard_narrows_its_trials_for_few_degrees_of_freedom():
    """Clustered draws: the effective trials are p(1-p)/se^2, times (z / t_df)^2; so a
    variance estimated on 2 df gives a wider interval than the same variance known."""
    known = proportion_bounds(0.3, 0.05, math.inf, 100)
    estimated = proportion_bounds(0.3, 0.05, 2.0, 100)
    assert estimated[0] < known[0] < 0.3 < known[1] < estimated[1]
    # effective trials 0.21 / 0.0025 = 84 at df inf: Clopper-Pearson at 25.2 of 84
    from scipy.stats import beta

    assert known[0] == pytest.approx(beta.ppf(0.025, 25.2, 84 - 25.2 + 1))


def test_nested_rate_by_hand():
    """Three seeds at 2/10, 4/10, 6/10: spread 0.2, above one seed's binomial sd at the
    pooled p = 12.5/31, so se 0.2/sqrt(3) on 2 df. Four seeds at 3..6/10: spread 0.129 is
    below the binomial sd at p = 18.5/41, 0.157, which is then known: the normal's df."""
    found = nested_spread([0.2, 0.4, 0.6], 10)
    assert found.se == pytest.approx(0.2 / math.sqrt(3)) and found.df == 2
    found = nested_spread([0.3, 0.4, 0.5, 0.6], 10)
    p = 18.5 / 41
    assert found.se == pytest.approx(math.sqrt(p * (1 - p) / 10) / 2)
    assert found.df == math.inf
    got = rate_interval([0.0, 0.0, 0.0], 12)
    assert got.low == 0.0 and 0.0 < got.high < 0.2


def test_coverage_slice():
    """A fast slice of the shipped simulation (the README's table is the whole of it): each
    crossed interval near 95%, "confirmed" rare at a true margin, and the seed-only t
    interval of a difference visibly short of 95% with many seeds on few questions (what the
    crossed one was built for; a check that the simulation can tell)."""
    few = simulate(Regime(seeds=3, questions=19, rate=0.5, seed_sd=0.5), 300, seed=11)
    many = simulate(Regime(seeds=300, questions=19, rate=0.3, seed_sd=0.5), 200, seed=12)
    for result in (few, many):
        for kind in ("crossed rate", "crossed difference", "nested rate"):
            assert 0.90 <= result.coverage[kind] <= 0.995, (result.regime, kind)
        assert result.confirmed_at_margin["crossed difference"] <= 0.09
    assert many.coverage["seed-t difference"] < 0.8
    assert many.confirmed_at_margin["seed-t difference"] > 0.1


def test_coverage_slice_of_sampled_answers():
    """The simulation's sampled regimes: each cell the share of 16 answers, read with 16
    draws a cell; the crossed intervals near 95% at a middle rate."""
    sampled = simulate(Regime(seeds=10, questions=19, rate=0.5, seed_sd=0.5, samples=16),
                       300, seed=13)
    for kind in ("crossed rate", "crossed difference"):
        assert 0.90 <= sampled.coverage[kind] <= 0.995, kind


def test_the_pigeonhole_bootstrap_resamples_seeds_and_questions():
    """Checked against a plain loop that resamples rows and columns one at a time."""
    from postlab.analysis.coverage import pigeonhole_interval

    table = np.random.default_rng(3).random((4, 6))
    low, high = pigeonhole_interval(table, np.random.default_rng(9), 500)
    rng = np.random.default_rng(9)
    rows = rng.integers(0, 4, (500, 4))
    columns = rng.integers(0, 6, (500, 6))
    means = [sum(table[r, c] for r in row for c in column) / 24
             for row, column in zip(rows, columns, strict=True)]
    assert (low, high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), abs=1e-12)
    # the bootstrap draws from a stream of its own: the other figures do not change
    regime = Regime(seeds=3, questions=19, rate=0.5, seed_sd=0.5)
    plain, boot = simulate(regime, 50, seed=2), simulate(regime, 50, seed=2, bootstrap=50)
    assert {k: boot.coverage[k] for k in plain.coverage} == plain.coverage
    assert "bootstrap rate" in boot.coverage and "bootstrap difference" in boot.coverage


def _pivot_by_loop(table: np.ndarray, per_cell: int) -> tuple[float, float]:
    """The logit-normal pivot written out draw by draw, from its definition: smoothed logits
    of each seed's and each question's rate, their variances less their binomial parts, the
    centre whose population rate is the smoothed share, and per draw the chi-square pivots,
    the normal pivot of the centre (at least the pooled binomial variance) and the
    population rate by quadrature."""
    from scipy.special import expit

    from postlab.analysis import intervals

    seeds, questions = table.shape

    def logits(counts, n):
        values, noise = [], []
        for x in counts:
            p = (x + 0.5) / (n + 1)
            values.append(math.log(p / (1 - p)))
            noise.append(1 / ((n + 1) * p * (1 - p)))
        return values, sum(noise) / len(noise)

    def variance(values):
        mean = sum(values) / len(values)
        return sum((v - mean) ** 2 for v in values) / (len(values) - 1)

    u, bu = logits([sum(row) * per_cell for row in table], questions * per_cell)
    w, bw = logits([sum(col) * per_cell for col in table.T], seeds * per_cell)
    vu, vw = variance(u), variance(w)
    n = seeds * questions * per_cell
    share = (table.sum() * per_cell + 0.5) / (n + 1)
    centre = intervals.centre_for(share, math.sqrt(max(0, vu - bu) + max(0, vw - bw)))
    rng = np.random.default_rng(intervals.PIVOT_SEED)
    chi_seeds = rng.chisquare(seeds - 1, intervals.PIVOT_DRAWS)
    chi_questions = rng.chisquare(questions - 1, intervals.PIVOT_DRAWS)
    normals = rng.standard_normal(intervals.PIVOT_DRAWS)
    nodes, weights = np.polynomial.hermite_e.hermegauss(64)
    rates = []
    for k in range(intervals.PIVOT_DRAWS):
        va = vu * (seeds - 1) / chi_seeds[k]
        vb = vw * (questions - 1) / chi_questions[k]
        se = math.sqrt(max(va / seeds + vb / questions, 1 / (n * share * (1 - share))))
        mu = centre - normals[k] * se
        sd = math.sqrt(max(0, va - bu) + max(0, vb - bw))
        rates.append(sum(wt * expit(mu + sd * x) for x, wt in zip(nodes, weights, strict=True))
                     / weights.sum())
    low, high = np.quantile(rates, [0.025, 0.975])
    return float(low), float(high)


@pytest.mark.parametrize(("seeds", "questions", "per_cell", "rate"), [
    (3, 100, 16, 0.1), (5, 1000, 1, 0.03), (1000, 19, 1, 0.9)])
def test_the_logit_normal_pivot_matches_a_plain_loop(seeds, questions, per_cell, rate):
    from postlab.analysis.intervals import logit_normal_bounds

    rng = np.random.default_rng(seeds + questions)
    logit = math.log(rate / (1 - rate))
    chance = 1 / (1 + np.exp(-(logit + rng.normal(0, 1.2, (seeds, 1))
                               + rng.normal(0, 1.0, (1, questions)))))
    table = rng.binomial(per_cell, chance) / per_cell
    low, high = logit_normal_bounds(table, per_cell)
    assert (low, high) == pytest.approx(_pivot_by_loop(table, per_cell), abs=1e-9)
    assert 0 < low < table.mean() < high < 1
    assert logit_normal_bounds(table, per_cell) == (low, high)  # a function of its table


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_the_pivot_of_a_uniform_table_holds_its_mean(value):
    """3 seeds x 19 questions x 16 samples, every answer refused (or every one accepted):
    the bounds reach the observed 0 (or 1) and stay within the pooled binomial's reach."""
    from postlab.analysis.intervals import logit_normal_bounds

    low, high = logit_normal_bounds(np.full((3, 19), value), 16)
    if value == 0.0:
        assert low == 0.0 and 0.0 < high < 0.02
    else:
        assert high == 1.0 and 0.98 < low < 1.0


def test_the_pivot_is_chosen_by_the_design_not_the_answers():
    """Each seed's rate on 300 answers or more, or each question's on 1,000: a crossed rate
    gets the pivot; a difference, or a table too thin, keeps Korn-Graubard."""
    from postlab.analysis.intervals import logit_normal_applies, proportion_bounds

    assert logit_normal_applies((3, 19), 16) and logit_normal_applies((3, 1000), 1)
    assert logit_normal_applies((1000, 19), 1)
    assert not logit_normal_applies((10, 100), 1) and not logit_normal_applies((3, 19), 1)
    thin = np.zeros((3, 19))
    thin[0, 3] = 1
    spread = crossed_spread([(1.0, thin)])
    kg = proportion_bounds(spread.mean, spread.se, spread.df, spread.draws)
    assert (spread.interval(rate=True).low, spread.interval(rate=True).high) == kg
    difference = crossed_spread([(1.0, thin), (-1.0, np.zeros((3, 19)))], [16, 16])
    assert difference.table is None


def test_the_pivot_covers_skewed_seeds_where_korn_graubard_missed():
    """3 seeds x 1,000 questions at a true rate of 0.02, seeds spread widely (sd 1.5 on the
    logit scale): Korn-Graubard's interval covered 86.7% of 1,000 synthetic runs, missing
    below the truth; the pivot, which the design now chooses there, near 95%."""
    result = simulate(Regime(seeds=3, questions=1000, rate=0.02, seed_sd=1.5), 300, seed=17)
    assert 0.92 <= result.coverage["crossed rate"] <= 0.985
