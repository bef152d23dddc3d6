"""Comparing plan versions: rate intervals stay in [0, 1] (checked against hand-computed
values and a loop written separately), paired differences pair by seed, and ``postlab
compare`` reads a sweep or run folders into text, JSON, Markdown and one HTML page."""

from __future__ import annotations

import json
import math
import re

import pytest
from browser import check_page_renders, chromium
from hypothesis import given
from hypothesis import strategies as st
from plans import SMALL, typed, write_plan

from postlab.analysis.intervals import Interval, interval
from postlab.analysis.results import Analysis, Band, Outcome
from postlab.analysis.versions import (
    VersionInput,
    compare,
    rate_interval,
)
from postlab.cli import main

pytest.importorskip("scipy")

T_975_DF2 = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom


def test_rate_interval_by_hand():
    """Three seeds at 2/10, 4/10, 6/10: mean 0.4, spread 0.2 (above one seed's binomial sd),
    se 0.2 / sqrt(3) on 2 df. Korn-Graubard: effective trials 0.24 / se^2 = 18, times
    (1.96 / 4.303)^2 = 3.735, so Clopper-Pearson at 1.494 of 3.735."""
    from scipy.stats import beta

    trials = 0.24 / (0.2 / math.sqrt(3)) ** 2 * (1.959963984540054 / T_975_DF2) ** 2
    assert trials == pytest.approx(3.735, abs=1e-3)
    hits = 0.4 * trials
    got = rate_interval([0.2, 0.4, 0.6], 10)
    assert got.mean == pytest.approx(0.4)
    assert got.low == pytest.approx(beta.ppf(0.025, hits, trials - hits + 1))
    assert got.high == pytest.approx(beta.ppf(0.975, hits + 1, trials - hits))
    assert 0.0 < got.low < 0.1 and 0.85 < got.high < 1.0


def test_seeds_that_agree_by_chance_keep_the_sampling_uncertainty():
    """Three seeds at 0 of 12: the spread over seeds is 0 and the share is 0, so the bounds
    are Clopper-Pearson's for 0 of all 36 answers: [0, 1 - 0.025^(1/36)]."""
    got = rate_interval([0.0, 0.0, 0.0], 12)
    assert got.low == 0.0 and got.mean == 0.0
    assert got.high == pytest.approx(1 - 0.025 ** (1 / 36))
    for rate in (0.5, 1.0):
        got = rate_interval([rate] * 4, 20)
        assert got.low < rate
        assert got.low <= rate <= got.high <= 1.0


def test_a_rate_interval_stays_inside_and_near_t_with_many_seeds():
    """Two seeds at coverage 0.105 and 0.474: the t interval [-1.38, 1.96] leaves [0, 1];
    Korn-Graubard's stays inside it, wide. With 64 seeds it is close to the t interval."""
    got = rate_interval([0.105, 0.474], 19)
    plain = interval([0.105, 0.474])
    assert plain.low < 0 < 1 < plain.high and 0.0 <= got.low < 0.05 and got.high > 0.9
    many = [0.0] * 32 + [5 / 19] * 32  # spread 0.13, above the binomial floor 0.08
    got = rate_interval(many, 19)
    plain = interval(many)
    assert got.low == pytest.approx(plain.low, abs=0.01)
    assert got.high == pytest.approx(plain.high, abs=0.01)


def test_one_seed_has_no_interval():
    got = rate_interval([0.3], 10)
    assert (got.mean, got.low, got.high) == (0.3, None, None)


@given(st.lists(st.integers(0, 30), min_size=2, max_size=12))
def test_rate_intervals_stay_in_the_unit_interval_and_hold_the_mean(counts):
    rates = [c / 30 for c in counts]
    got = rate_interval(rates, 30)
    assert 0.0 <= got.low <= got.mean <= got.high <= 1.0
    assert got.high > got.low  # never certain


def _analysis(seeds: tuple[int, ...], rates: dict[str, tuple[float, ...]]) -> Analysis:
    outcomes = tuple(
        Outcome(stage="strict", split="test", decoding="sampled", metric=metric,
                value=Interval(per_seed=values, mean=sum(values) / len(values), low=None,
                               high=None), change_from_sft=None)
        for metric, values in rates.items())
    band = Band(mean=(), low=(), high=())
    return Analysis(schema="x", plan_sha256="0" * 64, seeds=seeds, stages=("strict",),
                    arms=("strict",), splits=("test",), eval_samples=4,
                    interval_method="", band_method="", outcomes=outcomes, hacking_gaps=(),
                    pass_at_k=(), dynamics=(), sft_loss=band)


def _difference_by_loop(a: dict[int, float], b: dict[int, float]) -> tuple[float, float, float]:
    pairs = [s for s in a if s in b]
    diffs = []
    for seed in pairs:
        diffs.append(a[seed] - b[seed])
    mean = 0.0
    for d in diffs:
        mean += d
    mean /= len(diffs)
    var = 0.0
    for d in diffs:
        var += (d - mean) ** 2
    var /= len(diffs) - 1
    from scipy.stats import t

    half = t.ppf(0.975, len(diffs) - 1) * math.sqrt(var / len(diffs))
    return mean, mean - half, mean + half


def test_differences_are_paired_by_seed_over_the_seeds_both_trained():
    plan = typed()
    base = _analysis((1, 2, 3, 4), {"strict_rate": (0.50, 0.60, 0.70, 0.80)})
    # seed order differs and seed 4 is missing: pairing is by seed, not by position
    other = _analysis((3, 1, 2), {"strict_rate": (0.75, 0.58, 0.61)})
    result = compare([VersionInput(name="base", changes={}, analysis=base, plan=plan),
                      VersionInput(name="b", changes={"kl_beta": 0.1}, analysis=other,
                                   plan=plan)])
    (metric,) = result.metrics
    value = metric.values[1]
    assert value.paired_seeds == (3, 1, 2)
    mean, low, high = _difference_by_loop({3: 0.75, 1: 0.58, 2: 0.61},
                                          {1: 0.50, 2: 0.60, 3: 0.70, 4: 0.80})
    assert value.difference.mean == pytest.approx(mean)
    assert value.difference.low == pytest.approx(low)
    assert value.difference.high == pytest.approx(high)
    # pairing removes the seed effect: the paired interval is far narrower than the spread
    # of either version's seeds
    assert value.difference.high - value.difference.low < 0.2
    assert metric.values[0].difference is None
    assert result.swept == ("kl_beta", {"base": plan.kl_beta, "b": 0.1})


def test_a_comparison_needs_two_versions():
    plan = typed()
    base = _analysis((1, 2), {"strict_rate": (0.5, 0.6)})
    with pytest.raises(ValueError):
        compare([VersionInput(name="base", changes={}, analysis=base, plan=plan)])


# --- the command, on a bundled-size sweep ---------------------------------------------------

@pytest.mark.slow
def test_compare_reads_a_sweep_and_run_folders(tmp_path, capsys):
    hypothesis = {"id": "rl-helps", "statement": "RL under strict raises success",
                  "metric": "success", "direction": "increase", "margin": 0.0,
                  "compare": {"stage": "strict", "split": "test", "versus_stage": "initial"}}
    write_plan(tmp_path / "base.json", **(SMALL | {"sft_steps": 300, "sft_lr": 0.02,
                                                   "hypotheses": {"tests": [hypothesis]}}))
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps({"base": "base.json", "seeds": [3, 4],
                                "grid": {"rl_lr": [0.001, 0.01]}}))
    out = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--out-dir", str(out), "--workers", "1", "--quiet"]) == 0
    capsys.readouterr()

    assert main(["compare", str(out), "--lang", "en"]) == 0
    text = capsys.readouterr().out
    assert "paired difference from base" in text and "rl_lr=0.001" in text
    assert main(["compare", str(out), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["versions"] == ["base", "rl_lr=0.001", "rl_lr=0.01"]
    assert data["swept"][0] == "rl_lr"
    # every version decides its own preregistered hypothesis on its own seeds
    assert set(data["verdicts"]) == set(data["versions"])
    assert all(v[0]["id"] == "rl-helps" and v[0]["outcome"] in
               ("confirmed", "refuted", "inconclusive") for v in data["verdicts"].values())
    for metric in data["metrics"]:
        for value in metric["values"]:
            if metric["is_rate"] and value["value"]["low"] is not None:
                assert 0 <= value["value"]["low"] <= value["value"]["high"] <= 1
    assert main(["compare", str(out), "--format", "markdown", "--lang", "en",
                 "--split", "test"]) == 0
    markdown = capsys.readouterr().out
    assert "| version |" in markdown and ", dev split" not in markdown

    # run folders given one by one: the first is the base, changes found from the plans
    assert main(["compare", str(out / "base"), str(out / "rl_lr=0.01"), "--format",
                 "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["changes"]["rl_lr=0.01"] == {"rl_lr": 0.01}

    page = tmp_path / "compare.html"
    assert main(["compare", str(out), "--html", str(page), "--lang", "en"]) == 0
    capsys.readouterr()
    html = page.read_text()
    assert "paired difference from base" in html
    assert html.count("data:image/png;base64,") >= 3
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", html)
    if chromium() is not None:
        check_page_renders(page, tmp_path / "shot.png")
    before = page.read_bytes()
    assert main(["compare", str(out), "--html", str(page)]) == 2
    assert page.read_bytes() == before
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "needle"), [
    (["compare", "nowhere"], "needs at least two versions"),
    (["compare", "a", "b"], "a: record not found"),
])
def test_bad_compare_arguments_are_one_line(args, needle, capsys, tmp_path, monkeypatch):
    """Nothing to compare, or folders that hold no record."""
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
