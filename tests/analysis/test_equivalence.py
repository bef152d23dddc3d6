"""Equivalence of two engines' runs: the Welch interval by hand and against scipy's own, the
TOST decision at its edges, and the per-seed metrics recounted from a record."""

from __future__ import annotations

import math

import pytest
from recordfiles import inline_record, read_record
from scipy import stats

from postlab.analysis.equivalence import (
    MARGINS,
    compare_engines,
    paired_interval,
    seed_metrics,
    tost,
    welch_interval,
)
from postlab.plan.frozen import teaching_plan_loaded
from postlab.records.models import Record
from postlab.records.record import bundled_record_path, load_record
from postlab.tasks.contracts import CONTRACTS


def test_welch_interval_by_hand():
    # means 2 and 4, variances 1 and 4, three values each: df = (5/3)^2 / (17/18) = 50/17
    difference, low, high = welch_interval([1, 2, 3], [2, 4, 6])
    half = stats.t.ppf(0.95, 50 / 17) * math.sqrt(5 / 3)
    assert difference == 2
    assert math.isclose(low, 2 - half) and math.isclose(high, 2 + half)


@pytest.mark.parametrize("seed", range(5))
def test_welch_interval_agrees_with_scipy(seed):
    import random

    rng = random.Random(seed)
    first = [rng.gauss(0.3, 0.1) for _ in range(rng.randrange(2, 40))]
    second = [rng.gauss(0.32, 0.2) for _ in range(rng.randrange(2, 40))]
    difference, low, high = welch_interval(first, second)
    theirs = stats.ttest_ind(second, first, equal_var=False).confidence_interval(0.90)
    assert math.isclose(low, theirs.low, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(high, theirs.high, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(difference, sum(second) / len(second) - sum(first) / len(first))


def test_paired_interval_by_hand_and_against_scipy():
    # differences 1, 2, 3: mean 2, sd 1, so the half-width is t(0.95, 2) / sqrt(3)
    difference, low, high = paired_interval([1, 2, 3], [2, 4, 6])
    half = stats.t.ppf(0.95, 2) / math.sqrt(3)
    assert difference == 2
    assert math.isclose(low, 2 - half) and math.isclose(high, 2 + half)
    import random

    rng = random.Random(7)
    shared = [rng.gauss(0.5, 0.3) for _ in range(32)]
    first = [x + rng.gauss(0, 0.02) for x in shared]
    second = [x + rng.gauss(0.01, 0.02) for x in shared]
    difference, low, high = paired_interval(first, second)
    theirs = stats.ttest_rel(second, first).confidence_interval(0.90)
    assert math.isclose(low, theirs.low) and math.isclose(high, theirs.high)
    # the spread both engines share cancels: the paired interval is far narrower than Welch's
    _, welch_low, welch_high = welch_interval(first, second)
    assert high - low < (welch_high - welch_low) / 5
    with pytest.raises(ValueError):
        paired_interval([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        paired_interval([1.0], [1.0])


def test_a_paired_comparison_matches_runs_by_seed():
    record = load_record(bundled_record_path())
    plan = teaching_plan_loaded().model
    data = inline_record(read_record(bundled_record_path()))
    shuffled = Record.of(data | {"runs": data["runs"][::-1]})
    for result in compare_engines(record, shuffled, plan, paired=True):
        # the same runs, matched by seed however the record orders them: no difference at all
        assert result.paired and result.difference == 0 and result.low == result.high == 0
        assert result.equivalent
    unpaired = compare_engines(record, shuffled, plan)
    assert not any(result.paired for result in unpaired)
    assert any(result.low < 0 < result.high for result in unpaired)
    with pytest.raises(ValueError, match="same seeds"):
        compare_engines(record, Record.of(data | {"runs": data["runs"][:2]}), plan,
                        paired=True)


def test_tost_needs_the_whole_interval_inside_the_margin():
    same = [0.1, 0.2, 0.3, 0.2]
    _, low, high = welch_interval(same, same)
    assert math.isclose(-low, high)  # centred on zero, as wide as the spread makes it
    assert tost("m", "a", same, same, high * 1.01).equivalent
    assert not tost("m", "a", same, same, high * 0.99).equivalent
    shifted = [v + 0.05 for v in same]
    _, low, high = welch_interval(same, shifted)
    assert not tost("m", "a", same, shifted, high * 0.99).equivalent
    assert tost("m", "a", same, shifted, high * 1.01).equivalent
    constant = [0.2, 0.2, 0.2]
    assert tost("m", "a", constant, constant, 1e-9).equivalent  # no spread: a point at 0
    assert tost("m", "a", same, shifted, 0.0501, paired=True).equivalent  # differences all 0.05
    assert not tost("m", "a", same, shifted, 0.0499, paired=True).equivalent
    with pytest.raises(ValueError):
        welch_interval([1.0], [1.0, 2.0])


def test_seed_metrics_recount_the_record():
    record = load_record(bundled_record_path())
    plan = teaching_plan_loaded().model
    values = seed_metrics(record, plan)
    assert set(values) == {(m, arm) for m in MARGINS for arm in ("strict", "substring")}
    for index, run in enumerate(record.runs):
        rows = run.evaluations["substring"]["test"].sampled
        right = sum(CONTRACTS["strict"]((a, b), t, d, a + b) for a, b, t, d in rows)
        paid = sum(CONTRACTS["substring"]((a, b), t, d, a + b) for a, b, t, d in rows)
        assert values[("strict_success", "substring")][index] == right / len(rows)
        assert math.isclose(values[("hacking_gap", "substring")][index],
                            (paid - right) / len(rows))
        late = run.arms["substring"][-24:]
        kl = sum(sum(u.kl for u in s.updates) / len(s.updates) for s in late) / 24
        assert math.isclose(values[("final_kl", "substring")][index], math.log(kl))


def test_every_margin_is_written_once_with_its_reason():
    from postlab.analysis.equivalence import CI_MARGINS
    from postlab.plan import margins

    assert margins.values(margins.EQUIVALENCE) == MARGINS
    assert margins.values(margins.CI_EQUIVALENCE) == CI_MARGINS
    for chosen in margins.SETS.values():
        assert set(chosen) == set(MARGINS)
        for name, margin in chosen.items():
            assert margin.value > 0 and len(margin.why.split()) >= 8, name
    for name, margin in margins.EQUIVALENCE.items():
        # the suite's check has fewer seeds: its margins are never tighter
        assert margins.CI_EQUIVALENCE[name].value >= margin.value, name
