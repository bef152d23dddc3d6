"""A fixed model's baseline: the question-only interval by hand, and the figures of
``baseline_figures`` against a plain loop over the rows written separately."""

from __future__ import annotations

import math

import numpy as np
import pytest

from postlab.analysis.baseline import baseline_figures, ks_for
from postlab.analysis.intervals import proportion_bounds, question_spread


def test_question_spread_by_hand():
    values = [1.0, 0.0, 1.0, 1.0]  # 4 questions, one seed
    spread = question_spread(values)
    # mean 0.75; sample variance 0.25; variance of the mean 0.0625; the pooled binomial
    # floor ((3 + 1/2) / 5) (1 - 0.7) / 4 = 0.0525 is below it
    assert spread.mean == 0.75 and spread.df == 3.0
    assert math.isclose(spread.se, 0.25)
    interval = spread.interval(rate=True)
    low, high = proportion_bounds(0.75, 0.25, 3.0, 4)
    assert (interval.low, interval.high) == (low, high)
    assert 0.0 <= interval.low < 0.75 < interval.high <= 1.0


def test_question_spread_keeps_the_binomial_floor_and_needs_two_questions():
    spread = question_spread([0.0] * 10, trials=4)
    share = 0.5 / 41
    assert spread.df == math.inf and math.isclose(spread.se, math.sqrt(share * (1 - share) / 40))
    assert spread.interval(rate=True).high > 0
    assert question_spread([1.0]).interval(rate=True).low is None


def _rows(pairs, texts, ended=True):
    return [[a, b, text, ended] for (a, b), text in zip(pairs, texts, strict=True)]


def test_baseline_figures_match_a_plain_loop():
    rng = np.random.default_rng(0)
    pairs = [(a, b) for a in range(3) for b in range(3)]
    samples = 4
    evaluations = []
    for _ in range(2):  # seeds
        greedy = _rows(pairs, [str(a + b) if rng.random() < 0.5 else "7" for a, b in pairs])
        sampled_pairs = [pair for pair in pairs for _ in range(samples)]
        sampled = _rows(sampled_pairs, [str(a + b) if rng.random() < 0.4 else f"{a + b}9"
                                        for a, b in sampled_pairs])
        evaluations.append({"test": {"greedy": greedy, "sampled": sampled}})
    figures = {(f.contract, f.metric): f.value for f in
               baseline_figures(evaluations, ["test"], ["strict", "substring"], samples, sum)}
    assert ks_for(samples) == [1, 2, 4]
    for contract, accept in (("strict", lambda row: row[2] == str(row[0] + row[1])),
                             ("substring", lambda row: str(row[0] + row[1]) in row[2])):
        greedy = np.mean([[accept(row) for row in e["test"]["greedy"]] for e in evaluations])
        assert figures[contract, "greedy"].mean == pytest.approx(greedy)
        counts = [[sum(accept(row) for row in e["test"]["sampled"][i * samples:(i + 1) * samples])
                   for i in range(len(pairs))] for e in evaluations]
        sampled = np.mean(counts) / samples
        assert figures[contract, "sampled"].mean == pytest.approx(sampled)
        assert figures[contract, "coverage"].mean == pytest.approx(np.mean(np.array(counts) > 0))
        for k in (1, 2, 4):
            expected = np.mean([[1 - math.comb(samples - c, k) / math.comb(samples, k)
                                 for c in seed] for seed in counts])
            assert figures[contract, f"pass@{k}"].mean == pytest.approx(expected)
        assert figures[contract, "pass@1"].mean == pytest.approx(sampled)
        low, high = figures[contract, "sampled"].low, figures[contract, "sampled"].high
        assert low is not None and low <= sampled <= high
