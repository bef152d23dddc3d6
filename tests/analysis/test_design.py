"""The power planner: its variance model is the intervals' at the pilot's size, the seeds it
asks for detect the effect as often as planned in simulated studies whose intervals are the
reports' own, and the command plans a pilot run's metrics and refuses bad input in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest
from plans import SMALL, trained_with_the_cli

from postlab.analysis.design import (
    Components,
    Criterion,
    achieved_power,
    components,
    seeds_needed,
    within_variance,
)
from postlab.analysis.intervals import crossed_interval, crossed_spread, paired_difference
from postlab.cli import main
from postlab.plan.frozen import teaching_plan


def _table(rng: np.random.Generator, seeds: int, questions: int, effect: float,
           seed_sd: float, question_sd: float, cell_sd: float) -> np.ndarray:
    """A seeds x questions table of paired differences under the two-way normal model."""
    return (effect + seed_sd * rng.standard_normal((seeds, 1))
            + question_sd * rng.standard_normal((1, questions))
            + cell_sd * rng.standard_normal((seeds, questions)))


def test_at_the_pilots_size_the_variance_is_the_pilot_intervals():
    rng = np.random.default_rng(3)
    for seeds, questions in ((3, 19), (8, 40), (16, 7)):
        table = _table(rng, seeds, questions, 0.1, 0.05, 0.08, 0.3)
        found = components(table, 1)
        pilot = crossed_spread([(1.0, table)], 1)
        assert found.variance(seeds) == pytest.approx(pilot.se ** 2, rel=1e-9)
        assert found.mean == pytest.approx(pilot.mean, abs=1e-12)
        if found.seed > 0:  # the intervals' own parts: the same Satterthwaite df too
            assert found.df(seeds) == pytest.approx(pilot.df, rel=1e-9)
    # rates of 16 samples, a binomial part beside the cells' (the bundled pilot's shape)
    for seed in range(5):
        rng = np.random.default_rng(seed)
        a, b = _rates(rng, 3, rng.normal(0, 1.0, (1, 19)), 16)
        found = components(a - b, 16, within_variance(a, 16) + within_variance(b, 16),
                           arms=(a, b))
        pilot = paired_difference((a, 16), (b, 16))
        assert found.variance(3) == pytest.approx(pilot.se ** 2, rel=1e-9)
        # two arms that agree everywhere: the floor, both arms', holds in both
        same = components(a - a, 16, 2 * within_variance(a, 16), arms=(a, a))
        floor = paired_difference((a, 16), (a, 16))
        assert same.variance(3) == pytest.approx(floor.se ** 2, rel=1e-12)


def test_components_by_hand():
    # seeds x questions = 2 x 2: rows 0.1 and 0.3 apart, columns 0.2 apart, no interaction
    table = np.array([[0.0, 0.2], [0.2, 0.4]])
    found = components(table, 1)
    assert found.cells == pytest.approx(0.0, abs=1e-15)
    assert found.seed == pytest.approx(0.02)  # row means 0.1, 0.3: variance 0.02
    assert found.question == pytest.approx(0.02)
    # more seeds shrink the seeds' part, never the questions'
    assert found.variance(10**6) == pytest.approx(found.question / 2, rel=1e-4)
    # within-cell variance of 4 draws at p = 1/2: p(1-p) k/(k-1) = 1/3
    assert within_variance(np.array([0.5]), 4).tolist() == pytest.approx([1 / 3])
    assert within_variance(np.array([0.5]), 1).tolist() == [0.0]


def test_more_samples_per_question_shrink_only_the_binomial_part():
    found = Components(seed=0.001, question=0.0, cells=0.01 + 0.2 / 8, binomial=0.2,
                       questions=20, samples=8, pilot_seeds=4, mean=0.0)
    assert found.residual(8) == pytest.approx(0.01 + 0.2 / 8)
    assert found.residual(32) == pytest.approx(0.01 + 0.2 / 32)
    # the cells' part never goes below zero, whatever the binomial part claims
    assert Components(seed=0.0, question=0.0, cells=0.001, binomial=0.2, questions=20,
                      samples=8, pilot_seeds=4, mean=0.0).residual(64) == 0.0
    fewer = seeds_needed(found, 0.05, samples=8)
    more = seeds_needed(found, 0.05, samples=32)
    assert fewer is not None and more is not None and more < fewer


def test_an_effect_the_questions_alone_hide_needs_more_than_seeds():
    found = Components(seed=0.0001, question=0.04, cells=0.01, binomial=0.0,
                       questions=10, samples=1, pilot_seeds=3, mean=0.0)
    # the questions' part alone has sd 0.063: an effect of 0.1 needs (1.96 + 0.84) x 0.063
    assert seeds_needed(found, 0.1) is None
    assert seeds_needed(found, 0.5) is not None


def test_a_large_noncentrality_is_not_lost_to_scipy():
    """scipy's noncentral t returns NaN far in its lower tail; that tail is 0 there, and the
    planner must not skip the seed counts it would have found (it asked for 42, not 3)."""
    found = Components(seed=1e-3, question=3e-5, cells=0.0, binomial=0.0, questions=19,
                       samples=1, pilot_seeds=3, mean=0.0)
    assert achieved_power(found, 3, 0.2) > 0.8
    assert seeds_needed(found, 0.2) == 3


def test_a_hypothesis_is_planned_as_it_is_decided():
    """One-sided against its margin, at its Holm level: more seeds than an interval that
    need only exclude zero, and none when the effect does not clear the margin."""
    found = Components(seed=0.002, question=0.0001, cells=0.05, binomial=0.0, questions=100,
                       samples=1, pilot_seeds=5, mean=0.0)
    against_zero = seeds_needed(found, 0.05)
    registered = seeds_needed(found, 0.05, test=Criterion(alpha=0.05 / 3, one_sided=True,
                                                     margin=0.02))
    assert against_zero is not None and registered is not None and registered > against_zero
    assert seeds_needed(found, 0.02, test=Criterion(one_sided=True, margin=0.02)) is None


def _rates(rng: np.random.Generator, seeds: int, questions: np.ndarray, samples: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """Two stages' held-out rates, seeds x questions, each cell ``samples`` 0/1 answers:
    success on the logit scale is the stage's level, the seed's, the question's (shared by
    both stages: the same questions) and the cell's."""
    def logistic(x: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-x))

    found = []
    for level in (-0.85, -1.39):  # about 0.30 against 0.20
        chance = logistic(level + rng.normal(0, 0.3, (seeds, 1)) + questions
                          + rng.normal(0, 0.5, (seeds, questions.shape[1])))
        found.append(rng.binomial(samples, chance) / samples)
    return found[0], found[1]


def test_the_planned_seeds_detect_the_effect_as_often_as_planned():
    """Studies of binomial rates simulated at the planned size, each judged by the reports'
    own interval: the share whose interval excludes zero is the planned power, within 5
    points plus two Monte-Carlo errors (the intervals' estimated variance runs a little
    high, so the planner is slightly optimistic: see postlab.analysis.design)."""
    rng = np.random.default_rng(5)
    questions, samples = 30, 8
    a, b = _rates(rng, 400, rng.normal(0, 1.0, (1, questions)), samples)  # a large pilot
    found = components(a - b, samples, within_variance(a, samples) + within_variance(b, samples))
    effect = found.mean
    planned = seeds_needed(found, effect, power=0.8)
    assert planned is not None and planned >= 3
    assert achieved_power(found, planned, effect) >= 0.8
    assert achieved_power(found, planned - 1, effect) < 0.8
    trials = 800
    for seeds in (planned - 1, planned, planned + 2):
        detected = 0
        for _ in range(trials):
            a, b = _rates(rng, seeds, rng.normal(0, 1.0, (1, questions)), samples)
            interval = crossed_interval([(1.0, a - b)], samples)
            detected += interval.low > 0 or interval.high < 0
        expected = achieved_power(found, seeds, effect)
        error = math.sqrt(expected * (1 - expected) / trials)
        assert abs(detected / trials - expected) < 0.05 + 2 * error, (seeds, detected)


def test_the_command_plans_a_pilot_and_refuses_bad_input(tmp_path, capsys):
    rewards = teaching_plan()["rewards"] | {"format": "well-formed digits, any value"}
    run = trained_with_the_cli(tmp_path, **(SMALL | {"seeds": [3, 4, 5]}),
                               arms=["strict", "format"], control="format", rewards=rewards)
    assert main(["design", str(run), "--effect", "0.2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Seeds needed to detect a held-out difference of 0.2 with power 0.8")
    for name in ("strict vs initial", "strict vs format", "format vs initial"):
        assert f"- {name} (" in out
    assert "3 samples per question:" in out and "seeds" in out
    for bad, said in ((["--effect", "0"], "--effect 0"), (["--effect", "1.5"], "--effect"),
                      (["--effect", "0.1", "--power", "1"], "--power 1"),
                      (["--effect", "0.1", "--alpha", "0.7"], "--alpha 0.7")):
        assert main(["design", str(run), *bad]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1 and "Traceback" not in err
    (tmp_path / "two").mkdir()
    two = trained_with_the_cli(tmp_path / "two", **SMALL)  # seeds 3 and 4
    assert main(["design", str(two), "--effect", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "2 completed seeds; a pilot needs at least 3" in err and err.count("\n") == 1


def test_the_coverage_simulations_power_check_plans_and_simulates_a_regime():
    """The shipped power check (bench/interval_coverage.py --power) on one regime of its
    table: a study planned from the pilot detects the difference about as often as planned;
    a regime whose questions nearly hide the difference is reported, not simulated."""
    from postlab.analysis.coverage import MOST_PLANNED, PLANNED_POWER, Regime, power_check

    check = power_check(Regime(seeds=0, questions=1000, rate=0.1, seed_sd=0.5), 400, seed=3)
    assert check.planned_seeds is not None and check.planned_power is not None
    assert check.planned_power >= PLANNED_POWER and check.achieved is not None
    assert abs(check.achieved - check.planned_power) <= 0.05 + 2 * check.monte_carlo_se
    hidden = power_check(Regime(seeds=0, questions=19, rate=0.5, seed_sd=1.5), 400, seed=3)
    assert hidden.achieved is None and hidden.planned_power is None
    assert hidden.planned_seeds is None or hidden.planned_seeds > MOST_PLANNED
