"""Control arms: the `format` contract pays a well-formed answer whatever its value, a plan
names a control arm, and reports give every other arm's held-out change against it, paired by
seed and question, saying when an arm's gain is not distinguishable from the control's."""

from __future__ import annotations

import json

import pytest
from plans import SMALL, trained_with_the_cli

from postlab.analysis.aggregate import analyse
from postlab.cli import main
from postlab.plan.frozen import teaching_plan
from postlab.plan.schema import Plan
from postlab.plan.validation import validate_plan
from postlab.records.metrics import summary_for
from postlab.records.opened import open_run
from postlab.tasks.contracts import score
from postlab.tasks.rows import Row

FORMAT_WORDS = "terminated, nonempty ASCII digits, whatever their value"
CONTROLLED = SMALL | {"arms": ["strict", "format"], "control": "format",
                      "rewards": teaching_plan()["rewards"] | {"format": FORMAT_WORDS}}


@pytest.mark.parametrize(("text", "terminated", "paid"), [
    ("3", True, 1), ("9", True, 1), ("007", True, 1),  # any value, any spelling of digits
    ("", True, 0), ("3", False, 0), ("3 ", True, 0), ("-3", True, 0), ("٣", True, 0)])
def test_format_pays_a_well_formed_answer_whatever_its_value(text, terminated, paid):
    assert score(Row(1, 2, text, terminated), "format") == paid


def test_a_control_must_be_one_of_several_arms():
    plan = teaching_plan()
    assert validate_plan(plan | {"arms": ["strict", "format"], "control": "format"}) == []
    assert validate_plan(plan | {"control": "format"})[0][0] == "control"
    assert "needs another arm" in validate_plan(
        plan | {"arms": ["format"], "control": "format"})[0][1]


@pytest.fixture(scope="module")
def controlled(tmp_path_factory) -> object:
    return trained_with_the_cli(tmp_path_factory.mktemp("control"), **CONTROLLED)


def test_each_arm_is_compared_with_the_control_paired_by_seed(controlled):
    opened = open_run(controlled)
    plan = opened.plan.model
    analysis = analyse(opened.record, plan)
    assert analysis.control == "format"
    summary = summary_for(opened.record, plan)

    def per_seed(stage: str) -> list[float]:
        return [entry["test"]["sampled"]["strict"] / entry["test"]["sampled"]["n"]
                for entry in summary if entry["stage"] == stage]

    differences = [a - b for a, b in zip(per_seed("strict"), per_seed("format"), strict=True)]
    outcome = analysis.outcome("strict", "test", "sampled", "strict_rate")
    change = outcome.change_from_control
    assert change is not None and change.low is not None and change.high is not None
    assert change.mean == pytest.approx(sum(differences) / len(differences), abs=1e-12)
    assert change.low <= change.mean <= change.high
    # the control itself and the SFT model are not compared with the control
    assert analysis.outcome("format", "test", "sampled", "strict_rate").change_from_control \
        is None
    assert analysis.outcome("initial", "test", "sampled", "strict_rate").change_from_control \
        is None


def test_reports_say_how_each_arm_stands_against_the_control(controlled, capsys):
    assert main(["report", str(controlled), "--lang", "en"]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if "control arm" in line)
    assert line.startswith("- RL under strict") and "(RL under format)" in line
    # the control is paid for answers whatever their value by design: not called gaming
    assert "paid by the format contract yet wrong" not in text
    assert main(["report", str(controlled), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["control"] == "format"
    compared = [o for o in data["outcomes"] if o["change_from_control"] is not None]
    assert {o["stage"] for o in compared} == {"strict"}
    assert main(["report", str(controlled), "--lang", "zh", "--format", "markdown"]) == 0
    assert "对照组" in capsys.readouterr().out


def test_a_report_without_a_control_keeps_its_json_as_before(tmp_path, capsys):
    run = trained_with_the_cli(tmp_path, **SMALL)
    assert main(["report", str(run), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "control" not in data
    assert all("change_from_control" not in outcome for outcome in data["outcomes"])
    assert Plan.of(teaching_plan() | SMALL).control is None
