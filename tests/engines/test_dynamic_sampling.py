"""Dynamic sampling as DAPO defines it (constant_groups 'drop'): a step whose groups all lack
signal makes no update, and the record, its checks and every reader take such steps."""

from __future__ import annotations

import json
import math

import pytest
from plans import SMALL, trained_with_the_cli

from postlab.cli import main
from postlab.plan.schema import Plan
from postlab.records.opened import open_run

#: An RL-only arm starts from untrained weights, so its groups are mostly all wrong; with one
#: extra group a step, many steps keep no group with signal.
DROP = SMALL | {"arms": [{"name": "rl-only", "pipeline": "rl-only", "contract": "substring"},
                         "strict"],
                "dynamic_sampling": {"max_extra_groups": 1, "constant_groups": "drop"}}


@pytest.fixture(scope="module")
def dropped_run(tmp_path_factory):
    return trained_with_the_cli(tmp_path_factory.mktemp("dapo"), **DROP)


def test_a_step_without_signal_makes_no_update_and_the_rest_make_every_one(dropped_run):
    record = open_run(dropped_run).record
    groups = DROP["prompts_per_step"]
    idle = 0
    for run in record.runs:
        for arm, history in run.arms.items():
            for step in history:
                assert len(step.rows) == groups * DROP["group_size"]  # rows keep them all
                none_left = step.zero_variance_groups == groups
                assert len(step.updates) == (0 if none_left else 2)
                idle += none_left
            assert run.compute is not None
            assert run.compute[arm].gradient_steps == sum(
                len(step.updates) for step in history)
    assert idle > 0, "no step was left without signal: the test no longer tests that"


def test_every_reader_takes_steps_without_an_update(dropped_run, tmp_path, capsys):
    assert main(["verify", str(dropped_run)]) == 0
    capsys.readouterr()
    assert main(["report", str(dropped_run), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    kl = [value for dyn in data["dynamics"] for value in dyn["series"]["kl"]["mean"]]
    assert None in kl and any(value is not None for value in kl)  # NaN as null
    assert all(math.isfinite(o["kl_trend"]) for o in data["hacking_onsets"])
    assert main(["report", str(dropped_run), "--format", "table", "--lang", "en",
                 "--html", str(tmp_path / "page.html")]) == 0
    assert main(["reproduce", str(dropped_run), "--out-dir", str(tmp_path / "again")]) == 0
    assert "identical" in capsys.readouterr().out


def test_a_step_with_signal_and_no_update_does_not_fit_the_plan(dropped_run, tmp_path, capsys):
    """The record check knows when a step may have no update: only when no group had
    signal under DAPO's rule."""
    from postlab.records.conformance import run_plan_problems
    from postlab.records.models import SeedEntry

    record = open_run(dropped_run).record
    plan = Plan.of(json.loads((dropped_run / "plan.json").read_text()))
    run = json.loads(json.dumps(record.runs[0].data()))
    history = next(iter(run["training"].values()))
    busy = next(step for step in history if step["updates"])
    busy["updates"] = []
    assert any("rows, groups or updates do not fit" in p
               for p in run_plan_problems(SeedEntry.of(run), plan))
    keep = plan.replace(dynamic_sampling={"max_extra_groups": 1})
    idle_run = record.runs[0]
    assert any(not step.updates for h in idle_run.arms.values() for step in h)
    assert run_plan_problems(idle_run, keep)  # keeping them, every step updates
