"""Reward-hacking onset: the one-sided CUSUM finds a change injected into a gap series at the
step the rule says, matches a loop written separately, and the reports show the onsets; the
calibrated rule's false-alarm probability (a Markov chain, checked against enumerating every
sequence) holds by simulation, and so does its detection delay on an injected onset."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from plans import typed

from postlab.analysis.onset import cusum, slope
from postlab.cli import main
from postlab.plan.frozen import teaching_plan
from postlab.plan.validation import validate_plan


def test_an_injected_jump_is_found_where_the_rule_says():
    """20 steps at 0, then 0.2 per step: S grows by 0.18 from step 21 and passes 0.5 at step
    23 (0.18, 0.36, 0.54)."""
    result = cusum([0.0] * 20 + [0.2] * 20, drift=0.02, threshold=0.5)
    assert (result.onset, result.alarm) == (21, 23)
    assert result.statistic[22] == pytest.approx(0.54)


def test_noise_below_the_drift_never_alarms_and_excursions_reset():
    rng = random.Random(3)
    noise = [rng.uniform(-0.05, 0.05) for _ in range(500)]
    assert cusum(noise, drift=0.02, threshold=0.5).alarm is None
    # an early excursion that dies out does not count as the start of a later one
    series = [0.2, 0.2, -1.0] + [0.0] * 5 + [0.3] * 4
    result = cusum(series, drift=0.02, threshold=0.5)
    assert (result.onset, result.alarm) == (9, 10)


def _cusum_by_loop(gaps, drift, threshold):
    s, last_zero, statistic = 0.0, 0, []
    for t, g in enumerate(gaps, start=1):
        s = s + g - drift
        if s <= 0:
            s, last_zero = 0.0, t
        statistic.append(s)
        if s > threshold:
            return statistic, t, last_zero + 1
    return statistic, None, None


@given(st.lists(st.floats(-1, 1), max_size=60), st.floats(0, 0.2), st.floats(0.05, 2))
def test_cusum_matches_a_separate_loop(gaps, drift, threshold):
    result = cusum(gaps, drift, threshold)
    statistic, alarm, onset = _cusum_by_loop(gaps, drift, threshold)
    assert (result.alarm, result.onset) == (alarm, onset)
    assert list(result.statistic[:len(statistic)]) == pytest.approx(statistic)


def test_slope_is_least_squares():
    assert slope([1.0, 3.0, 5.0, 7.0]) == pytest.approx(2.0)
    assert slope([2.0, 2.0]) == 0.0 and slope([4.0]) == 0.0
    import numpy

    values = [0.3, 0.1, 0.7, 0.2, 0.9]
    assert slope(values) == pytest.approx(numpy.polyfit(range(1, 6), values, 1)[0])


def test_the_monitor_is_a_validated_plan_field():
    plan = teaching_plan() | {"hacking_monitor": {"drift": 0.01, "threshold": 1.0}}
    assert validate_plan(plan) == []
    bad = teaching_plan() | {"hacking_monitor": {"drift": -0.1, "threshold": 0.0}}
    paths = {path for path, _ in validate_plan(bad)}
    assert paths == {"hacking_monitor.drift", "hacking_monitor.threshold"}


def test_the_teaching_run_reports_onsets_for_the_gameable_arm_only(capsys):
    pytest.importorskip("scipy")
    assert main(["report", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    onsets = data["hacking_onsets"]
    assert {o["arm"] for o in onsets} == {"substring"}  # strict is the strictest contract
    assert [o["seed"] for o in onsets] == data["seeds"]
    rule = data["onset_rule"]
    assert rule["stated_false_alarm"] == 0.05 and rule["false_alarm"] <= 0.05
    for onset in onsets:
        assert len(onset["gaps"]) == len(data["dynamics"][0]["steps"])
        expected = cusum(onset["gaps"], rule["drift"], rule["threshold"])
        assert (onset["onset"], onset["alarm"]) == (expected.onset, expected.alarm)
    assert any(o["onset"] is not None for o in onsets)
    assert "CUSUM" in data["onset_method"] and "at most 5.0% per seed" in data["onset_method"]
    assert main(["report", "--format", "markdown", "--lang", "en"]) == 0
    assert "## Reward-hacking onset per seed" in capsys.readouterr().out


# --- the calibrated rule: its false-alarm probability and detection delay, exactly ------------

def _by_enumeration(drift: float, threshold: float, steps: int, batch: int, gap: float
                    ) -> float:
    """P(alarm within ``steps``) by listing every sequence of per-step counts, each weighted
    by its binomial probability, and running the report's own CUSUM on it."""
    import itertools
    import math

    pmf = [math.comb(batch, j) * gap**j * (1 - gap) ** (batch - j) for j in range(batch + 1)]
    total = 0.0
    for counts in itertools.product(range(batch + 1), repeat=steps):
        weight = math.prod(pmf[j] for j in counts)
        if cusum([j / batch for j in counts], drift, threshold).alarm is not None:
            total += weight
    return total


@pytest.mark.parametrize(("drift", "threshold", "steps", "batch", "gap"), [
    (0.25, 0.6, 4, 2, 0.3),  # on the grid
    (0.125, 0.3, 5, 4, 0.1),
    (0.5, 0.2, 6, 1, 0.4),  # a single rollout a step
])
def test_the_chain_equals_enumerating_every_sequence(drift, threshold, steps, batch, gap):
    from postlab.analysis.onset import alarm_probability

    assert alarm_probability(drift, threshold, steps, batch, gap) == pytest.approx(
        _by_enumeration(drift, threshold, steps, batch, gap), abs=1e-12)


def test_the_binomial_allowance_by_hand():
    """log(0.975/0.9) / log(0.1 * 0.975 / (0.025 * 0.9)) = 0.080043 / 1.466337."""
    import math

    from postlab.analysis.onset import binomial_allowance

    assert binomial_allowance(0.025, 0.10) == pytest.approx(
        math.log(0.975 / 0.9) / math.log(0.0975 / 0.0225), rel=1e-15)
    assert binomial_allowance(0.025, 0.10) == pytest.approx(0.0545868, abs=1e-7)
    with pytest.raises(ValueError):
        binomial_allowance(0.1, 0.1)


def _simulated(rule, runs: int, seed: int, onset: int | None = None):
    """Alarms and onsets of the report's CUSUM on ``runs`` simulated gap series: binomial at
    the rule's batch, at its tolerated gap (from step ``onset`` on: its detect gap)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    steps = rule.steps
    gaps = np.full(steps, rule.tolerated_gap)
    if onset is not None:
        gaps[onset - 1:] = rule.detect_gap
    counts = rng.binomial(rule.batch, gaps, size=(runs, steps))
    return [cusum((row / rule.batch).tolist(), rule.drift, rule.threshold) for row in counts]


def test_the_teaching_plans_rule_has_the_stated_false_alarm_rate_by_simulation():
    """Calibrated for 5% over 240 steps of 64 rollouts at a gap of 0.025: the chain's exact
    rate is within the staircase of the stated one, and 6,000 simulated runs agree with it
    within three Monte-Carlo standard errors."""
    import math

    from postlab.analysis.monitor import monitor_rule

    rule = monitor_rule(typed())
    assert (rule.steps, rule.batch, rule.stated_false_alarm) == (240, 64, 0.05)
    assert 0.045 <= rule.false_alarm <= 0.05
    runs = 6000
    rate = sum(r.alarm is not None for r in _simulated(rule, runs, seed=1)) / runs
    error = math.sqrt(rule.false_alarm * (1 - rule.false_alarm) / runs)
    assert abs(rate - rule.false_alarm) < 3 * error, (rate, rule.false_alarm)


def test_the_old_default_alarms_at_a_gap_that_is_no_gaming():
    """drift 0.02, threshold 0.5 (the rule before calibration) at a constant gap of 0.025:
    an alarm in 99.7% of runs, by the chain and by simulation."""
    from postlab.analysis.monitor import monitor_rule

    old = teaching_plan() | {"hacking_monitor": {"drift": 0.02, "threshold": 0.5}}
    rule = monitor_rule(typed(old))
    assert rule.stated_false_alarm is None and (rule.drift, rule.threshold) == (0.02, 0.5)
    assert rule.false_alarm == pytest.approx(0.9966, abs=5e-4)
    alarms = sum(r.alarm is not None for r in _simulated(rule, 1000, seed=2))
    assert alarms >= 990


def test_an_injected_onset_is_found_with_the_delay_the_chain_gives():
    """Gaming from step 100 (0.025 before, 0.10 after): the chain's probability of finding
    it and its mean delay, against 3,000 simulated runs; the onset found lies within a few
    steps of the injected one."""
    import math
    import statistics

    from postlab.analysis.monitor import monitor_rule
    from postlab.analysis.onset import detection

    rule = monitor_rule(typed())
    found, delay = detection(rule.drift, rule.threshold, rule.steps, rule.batch,
                             rule.tolerated_gap, rule.detect_gap, onset=100)
    # the rest raise a false alarm before step 100 (about 5% x 99/240)
    assert 0.97 < found < 0.99 and 0.5 < delay < 5
    runs = 3000
    results = [r for r in _simulated(rule, runs, seed=3, onset=100)
               if r.alarm is not None and r.alarm >= 100]
    assert abs(len(results) / runs - found) < 3 * math.sqrt(found * (1 - found) / runs)
    delays = [r.alarm - 100 for r in results]
    error = statistics.stdev(delays) / math.sqrt(len(delays))
    assert abs(statistics.mean(delays) - delay) < 4 * error, (statistics.mean(delays), delay)
    assert statistics.median(r.onset for r in results) in range(95, 103)


def test_a_plan_states_its_rate_or_its_own_rule_never_both():
    from postlab.analysis.monitor import monitor_rule

    strict = teaching_plan() | {"hacking_monitor": {"false_alarm": 0.01}}
    assert validate_plan(strict) == []
    rule = monitor_rule(typed(strict))
    assert rule.false_alarm <= 0.01 and rule.threshold > monitor_rule(typed()).threshold
    both = teaching_plan() | {"hacking_monitor": {"false_alarm": 0.01, "drift": 0.05}}
    assert [path for path, _ in validate_plan(both)] == ["hacking_monitor"]
    upside_down = teaching_plan() | {"hacking_monitor": {"tolerated_gap": 0.2}}
    assert [path for path, _ in validate_plan(upside_down)] == ["hacking_monitor.tolerated_gap"]
    only_threshold = teaching_plan() | {"hacking_monitor": {"threshold": 1.0}}
    assert (monitor_rule(typed(only_threshold)).drift,
            monitor_rule(typed(only_threshold)).threshold) == (
        0.02, 1.0)


def test_plan_check_states_the_rule(capsys, tmp_path):
    from postlab.plan.frozen import freeze

    path = tmp_path / "plan.json"
    freeze(path, teaching_plan())
    assert main(["plan", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "hacking monitor: one-sided CUSUM" in out
    assert "false-alarm probability of at most 5.0% per seed and arm over 240 steps" in out


def test_many_seeds_onsets_are_summarised_not_listed():
    """A few seeds' onsets are listed seed by seed; a study's hundreds are summarised by
    their quartiles, so the sentence stays a sentence."""
    from postlab.render.labels import FINDING_TEMPLATES
    from postlab.render.sentences import LISTED_ONSETS, _onsets

    words = FINDING_TEMPLATES["en"]
    few = ((1, 40), (2, None), (3, 10))
    assert _onsets(few, words) == ("The per-step gap's change-point rule flagged an onset in 2 "
                                   "of 3 seeds (seed 1: step 40, seed 2: none, seed 3: step "
                                   "10).")
    many = tuple((seed, None if seed == 7 else seed * 10) for seed in range(1, 21))
    assert len(many) > LISTED_ONSETS
    said = _onsets(many, words)
    # 19 steps 10, 20, ..., 200 without 70: median 110, quartiles 55 and 155, earliest 10
    assert said == ("The per-step gap's change-point rule flagged an onset in 19 of 20 seeds "
                    "(median step 110, quartiles 55–155, earliest 10; every seed's step: "
                    "--format json).")
