"""Preregistered hypotheses: the plan check refuses what cannot be decided, and the decision
rule (one-sided t bounds at Holm's levels) is checked against hand-computed values and a
separately written loop."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from plans import check_example

from postlab.analysis.hypotheses import decide
from postlab.cli import main
from postlab.plan.frozen import teaching_plan
from postlab.plan.hypotheses import METRICS, can_decide
from postlab.plan.schema import Hypothesis
from postlab.plan.validation import validate_plan

pytest.importorskip("scipy")

T_95_DF3 = 2.353363434801823  # one-sided 95% Student t quantile, 3 degrees of freedom


def _hypothesis(**changes: Any) -> dict[str, Any]:
    return {"id": "h", "statement": "RL under strict raises held-out success",
            "metric": "success",
            "compare": {"stage": "strict", "split": "test", "versus_stage": "initial"},
            "direction": "increase", "margin": 0.02} | changes


def _typed(**changes: Any) -> Hypothesis:
    """The hypothesis ``_hypothesis(**changes)`` as the typed model ``decide`` takes."""
    return Hypothesis.model_validate(_hypothesis(**changes))


def _plan(*tests: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return teaching_plan() | {"hypotheses": {"alpha": 0.05, "tests": list(tests)}} | changes


def test_a_well_formed_hypothesis_passes_the_plan_check():
    assert validate_plan(_plan(_hypothesis())) == []
    assert validate_plan(_plan(
        _hypothesis(id="gap", metric="hacking_gap",
                    compare={"stage": "substring", "split": "test", "versus_stage": "strict"}),
        _hypothesis(id="p4", metric="pass_at_k", k=16, direction="decrease"),
        _hypothesis(id="sub", metric="rate", contract="substring", decoding="greedy"),
        _hypothesis(id="gen", compare={"stage": "strict", "split": "test",
                                       "versus_split": "train"}, direction="decrease"))) == []


@pytest.mark.parametrize(("changes", "path", "needle"), [
    ({"metric": "accuracy"}, "hypotheses.tests.0.metric", "unknown metric 'accuracy'"),
    ({"compare": {"stage": "strikt", "split": "test", "versus_stage": "initial"}},
     "hypotheses.tests.0.compare.stage", "unknown stage 'strikt'"),
    ({"compare": {"stage": "strict", "split": "holdout", "versus_stage": "initial"}},
     "hypotheses.tests.0.compare.split", "unknown split 'holdout'"),
    ({"compare": {"stage": "strict", "split": "test"}}, "hypotheses.tests.0.compare",
     "exactly one of versus_stage and versus_split"),
    ({"compare": {"stage": "strict", "split": "test", "versus_stage": "strict"}},
     "hypotheses.tests.0.compare", "compares a place with itself"),
    ({"margin": 1.0}, "hypotheses.tests.0.margin", "can never be exceeded"),
    ({"metric": "rate"}, "hypotheses.tests.0.contract", "not one of the plan's contracts"),
    ({"metric": "rate", "contract": "exact"}, "hypotheses.tests.0.contract",
     "not one of the plan's contracts"),
    ({"metric": "pass_at_k", "k": 17}, "hypotheses.tests.0.k", "k from 1 to eval_samples"),
    ({"metric": "coverage", "decoding": "greedy"}, "hypotheses.tests.0.decoding",
     "sampled answers only"),
    ({"k": 2}, "hypotheses.tests.0.k", "success takes no k"),
    ({"direction": "up"}, "hypotheses.tests.0.direction", "increase"),
])
def test_malformed_hypotheses_are_refused_with_their_field_path(changes, path, needle):
    problems = validate_plan(_plan(_hypothesis(**changes)))
    assert any(where == path and needle in message for where, message in problems), problems


def test_ids_are_unique_and_one_seed_can_never_decide():
    problems = validate_plan(_plan(_hypothesis(), _hypothesis()))
    assert ("hypotheses.tests.1.id", "'h' is used twice") in problems
    problems = validate_plan(_plan(_hypothesis(), seeds=[11]))
    assert any(where == "seeds" and "at least two seeds" in message
               for where, message in problems)


def test_hypotheses_are_part_of_the_plan_hash():
    from postlab.plan.frozen import plan_bytes, sha256_hex

    with_one = sha256_hex(plan_bytes(_plan(_hypothesis())))
    assert with_one != sha256_hex(plan_bytes(teaching_plan()))
    assert with_one != sha256_hex(plan_bytes(_plan(_hypothesis(margin=0.03))))


def test_every_metric_has_a_range_and_decidability_follows_it():
    for name in METRICS:
        spec = METRICS[name]
        assert spec.low < spec.high
        assert can_decide(name, spec.high - spec.low, 8) is not None
        assert can_decide(name, (spec.high - spec.low) / 2, 8) is None
        assert can_decide(name, 0.0, 1) is not None


def test_one_hypothesis_by_hand():
    """Four seeds, differences 0.10, 0.12, 0.08, 0.14; margin 0.02; one hypothesis, so Holm
    leaves alpha = 0.05: bound = mean - t(0.95, 3) * sd / 2."""
    d = [0.10, 0.12, 0.08, 0.14]
    mean = sum(d) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 3)
    (verdict,) = decide([_typed()], [d])
    assert verdict.level == pytest.approx(0.05)
    assert verdict.mean == pytest.approx(0.11)
    assert verdict.bound == pytest.approx(mean - T_95_DF3 * sd / 2)
    assert verdict.opposite == pytest.approx(mean + T_95_DF3 * sd / 2)
    assert verdict.outcome == "confirmed"


def test_refuted_inconclusive_and_decrease():
    # tightly around zero: the upper bound is below the margin, so the effect is ruled out
    (refuted,) = decide([_typed(margin=0.05)], [[0.001, -0.002, 0.0, 0.002]])
    assert refuted.outcome == "refuted"
    # wide: neither bound decides
    (unsure,) = decide([_typed()], [[0.3, -0.2, 0.25, -0.1]])
    assert unsure.outcome == "inconclusive"
    # a decrease is confirmed by differences well below -margin; bounds keep their sign
    (down,) = decide([_typed(direction="decrease")], [[-0.2, -0.25, -0.18, -0.22]])
    assert down.outcome == "confirmed" and down.mean < 0 and down.bound < -0.02


def _holm_by_loop(p_values: list[float], alpha: float) -> list[float]:
    """Holm's levels written out: sort, step down, stop at the first failure."""
    m = len(p_values)
    indexed = sorted(enumerate(p_values), key=lambda pair: (pair[1], pair[0]))
    levels = [0.0] * m
    failed_at = None
    for rank in range(m):
        original = indexed[rank][0]
        threshold = alpha / (m - rank)
        if failed_at is None and indexed[rank][1] > threshold:
            failed_at = threshold
        levels[original] = failed_at if failed_at is not None else threshold
    return levels


def test_holm_levels_match_a_separate_loop():
    hypotheses = [_typed(id=f"h{i}") for i in range(4)]
    differences = [[0.30, 0.32, 0.28, 0.31],   # very clear
                   [0.05, 0.30, -0.10, 0.20],  # unclear
                   [0.10, 0.12, 0.09, 0.11],   # clear
                   [0.04, 0.06, 0.02, 0.08]]   # borderline
    verdicts = decide(hypotheses, differences, alpha=0.05)
    expected = _holm_by_loop([v.p_value for v in verdicts], 0.05)
    assert [v.level for v in verdicts] == pytest.approx(expected)
    assert sorted(v.level for v in verdicts)[0] == pytest.approx(0.05 / 4)
    assert verdicts[0].outcome == "confirmed" and verdicts[1].outcome == "inconclusive"


def test_a_rule_over_one_seed_is_a_bug_not_a_verdict():
    with pytest.raises(ValueError, match="at least two"):
        decide([_typed()], [[0.1]])


# --- the example plan, run, in every report form ---------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hypotheses.json"
EXPECTED = {"coverage-narrows": "confirmed", "strict-gains": "refuted",
            "strict-coverage": "inconclusive"}


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("hypotheses") / "run"
    assert main(["run", "--plan", str(EXAMPLE), "--out-dir", str(out), "--workers", "1",
                 "--quiet"]) == 0
    return out


@pytest.mark.slow
def test_the_example_decides_one_of_each_and_every_form_shows_it(example_run, capsys,
                                                                    tmp_path):
    """The example plan verifies and reports as every example does (it is trained here, not
    in tests/project/test_examples.py), and decides one hypothesis of each outcome."""
    data = check_example(json.loads(EXAMPLE.read_text()), example_run, capsys)
    assert {v["id"]: v["outcome"] for v in data["verdicts"]} == EXPECTED
    for verdict in data["verdicts"]:
        assert len(verdict["per_seed"]) == 3 and 0 < verdict["level"] <= 0.05

    assert main(["report", str(example_run), "--lang", "en"]) == 0
    text = capsys.readouterr().out
    for ident, outcome in EXPECTED.items():
        assert f"{ident}: {outcome.upper()}" in text
    assert main(["report", str(example_run), "--format", "markdown", "--lang", "en"]) == 0
    markdown = capsys.readouterr().out
    assert "## Hypotheses" in markdown
    assert all(outcome in markdown for outcome in EXPECTED.values())
    # fixed in the plan's hash, but no registration says when: never "registered"
    assert markdown.count("in the plan (not registered") == len(EXPECTED)
    assert "registered before training" not in markdown
    page = tmp_path / "report.html"
    assert main(["report", str(example_run), "--html", str(page), "--lang", "zh"]) == 0
    html = page.read_text()
    assert "假设（按计划中的规则判定" in html and all(w in html for w in ("证实", "否定", "无定论"))
    assert "写在计划中" in html and "训练前已预注册" not in html


def test_a_plan_without_hypotheses_reports_as_before(capsys):
    assert main(["report", "--format", "json"]) == 0
    assert "verdicts" not in json.loads(capsys.readouterr().out)
