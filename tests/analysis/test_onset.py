"""Reward-hacking onset: the one-sided CUSUM finds a change injected into a gap series at the
step the rule says, matches a loop written separately, and the reports show the onsets."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postlab.analysis.onset import cusum, slope
from postlab.cli import main
from postlab.plan.frozen import teaching_plan
from postlab.plan.schema import validate_plan


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
    for onset in onsets:
        assert len(onset["gaps"]) == len(data["dynamics"][0]["steps"])
        expected = cusum(onset["gaps"], 0.02, 0.5)
        assert (onset["onset"], onset["alarm"]) == (expected.onset, expected.alarm)
    assert any(o["onset"] is not None for o in onsets)
    assert "CUSUM" in data["onset_method"]
    assert main(["report", "--format", "markdown", "--lang", "en"]) == 0
    assert "## Reward-hacking onset per seed" in capsys.readouterr().out
