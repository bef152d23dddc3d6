import math

import pytest
from conftest import tiny_record
from plans import typed

from postlab.analysis.aggregate import analyse
from postlab.analysis.intervals import interval
from postlab.analysis.passk import mean_pass_at_k, pass_at_k
from postlab.records.metrics import evaluate
from postlab.records.models import Record

T_975_DF2 = 4.302652729911275  # Student t, 97.5th percentile, 2 degrees of freedom


def test_interval_by_hand():
    value = interval([0.1, 0.2, 0.3])
    half = T_975_DF2 * 0.1 / math.sqrt(3)
    assert value.mean == pytest.approx(0.2)
    assert value.low == pytest.approx(0.2 - half) and value.high == pytest.approx(0.2 + half)
    assert value.per_seed == (0.1, 0.2, 0.3)


def test_interval_of_one_seed_is_absent():
    value = interval([0.4])
    assert value.mean == 0.4 and value.low is None and value.high is None


def test_pass_at_k_by_hand():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(16, 3, 15) == 1.0  # fewer wrong samples than k
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def _record_with_training(plan_sha="0" * 64):
    record = tiny_record(plan_sha)
    second = {"seed": 8, "evaluations": {}}
    for stage, splits in record["runs"][0]["evaluations"].items():
        second["evaluations"][stage] = {
            split: {d: [[a, b, "0" if i % 2 else text, t] for i, (a, b, text, t) in
                        enumerate(rows)] for d, rows in decoded.items()}
            for split, decoded in splits.items()}
    record["runs"].append(second)
    for run, offset in zip(record["runs"], (0.0, 1.0), strict=True):
        run["sft_loss"] = [2.0 + offset, 1.0 + offset]
        run["training"] = {"strict": [
            {"step": s, "rows": [[1, 2, "3", True], [1, 2, "33", False]],
             "zero_variance_groups": s,
             "updates": [{"loss": 0.1 * s + offset, "gradient_norm_before_clip": 1.0,
                          "kl": 0.01, "entropy": 0.5, "ratio_outside_clip": 0.0},
                         {"loss": 0.3 * s + offset, "gradient_norm_before_clip": 3.0,
                          "kl": 0.03, "entropy": 0.7, "ratio_outside_clip": 0.5}]}
            for s in (1, 2)]}
    return Record.of(record)


PLAN = typed(eval_samples=2, arms=["strict"], split={"test": [[1, 2], [4, 5]]})


def test_outcomes_changes_and_gap_by_hand():
    analysis = analyse(_record_with_training(), PLAN)
    assert analysis.seeds == (7, 8) and analysis.stages == ("initial", "strict")
    # seed 7 initial sampled: "3","03" right; "999999" (unterminated), "19" wrong -> 2/4
    # seed 8 replaces every odd row with "0": "3","0","999999","0" -> 1/4
    sampled = analysis.outcome("initial", "test", "sampled", "strict_rate").value
    assert sampled.per_seed == (0.5, 0.25)
    # strict stage: seed 7 all 4 right; seed 8 "3","0","9","0" -> 2/4; change 0.5, 0.25
    change = analysis.outcome("strict", "test", "sampled", "strict_rate").change_from_sft
    assert change.per_seed == (0.5, 0.25) and change.mean == pytest.approx(0.375)
    # substring: seed 7 initial "3","03","999999","19" all contain the sum -> gap 1 - 0.5
    gap = next(g for g in analysis.hacking_gaps if g.stage == "initial").gap
    assert gap.per_seed[0] == pytest.approx(0.5)
    coverage = analysis.outcome("initial", "test", "sampled", "coverage").value
    assert coverage.per_seed == (0.5, 0.5)


def test_pass_at_k_matches_coverage_and_sampled_rate():
    analysis = analyse(_record_with_training(), PLAN)
    for curve in analysis.pass_at_k:
        coverage = analysis.outcome(curve.stage, curve.split, "sampled", "coverage").value
        rate = analysis.outcome(curve.stage, curve.split, "sampled", "strict_rate").value
        assert [c[-1] for c in curve.per_seed] == pytest.approx(list(coverage.per_seed))
        assert [c[0] for c in curve.per_seed] == pytest.approx(list(rate.per_seed))


def test_pass_at_n_is_the_reference_coverage_on_the_bundled_record():
    import gzip
    import json

    from postlab.records.record import bundled_record_path

    record = json.loads(gzip.decompress(bundled_record_path().read_bytes()))
    rows = record["runs"][0]["evaluations"]["strict"]["test"]["sampled"]
    result = evaluate(rows, 16)
    assert mean_pass_at_k(rows, 16, 16) == pytest.approx(result["covered"] / 19)
    assert mean_pass_at_k(rows, 16, 1) == pytest.approx(result["strict_rate"])


def test_dynamics_and_sft_loss_bands_by_hand():
    analysis = analyse(_record_with_training(), PLAN)
    (dyn,) = analysis.dynamics
    assert dyn.arm == "strict" and dyn.steps == (1, 2)
    # loss per step = mean of the two updates: seed 7 step 1 -> 0.2, seed 8 -> 1.2
    assert dyn.series["loss"].mean[0] == pytest.approx(0.7)
    assert dyn.series["loss"].low[0] == pytest.approx(0.2)
    assert dyn.series["loss"].high[0] == pytest.approx(1.2)
    assert dyn.series["strict_reward"].mean == (0.5, 0.5)
    assert dyn.series["substring_reward"].mean == (1.0, 1.0)
    assert dyn.series["truncated"].mean == (0.5, 0.5)
    assert dyn.series["mean_tokens"].mean == (2.0, 2.0)  # "3"+EOS and "33"
    assert dyn.series["zero_variance_groups"].mean == (1.0, 2.0)
    assert dyn.series["ratio_outside_clip"].mean == (0.25, 0.25)
    assert analysis.sft_loss.mean == (2.5, 1.5) and analysis.sft_loss.low == (2.0, 1.0)


def test_a_band_is_what_summing_and_ranking_each_position_gives():
    # the band accumulates seed by seed; written here as the obvious per-position reduction
    import random
    from array import array

    from postlab.analysis.gathering import band_of

    rng = random.Random(7)
    specials = [0.0, -0.0, 1e300, -1e300, math.inf, -math.inf, math.nan, 0.1, 1 / 3]
    for seeds, width in ((1, 5), (3, 1), (17, 40), (200, 3)):
        columns = [array("d", [rng.choice(specials) if rng.random() < 0.1 else
                               rng.uniform(-2, 2) for _ in range(width)])
                   for _ in range(seeds)]
        band = band_of(columns)
        for position in range(width):
            values = [column[position] for column in columns]
            for got, want in ((band.mean[position], sum(values) / len(values)),
                              (band.low[position], min(values)),
                              (band.high[position], max(values))):
                assert (math.isnan(got) and math.isnan(want)) or (
                    got == want and math.copysign(1, got) == math.copysign(1, want))
    assert band_of([]).mean == ()
    with pytest.raises(ValueError):
        band_of([array("d", [1.0, 2.0]), array("d", [1.0])])
