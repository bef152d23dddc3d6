"""Calibrations kept per machine: reused by a later run of the same plan, measured again when
asked, when stale, when anything they depend on differs, or when the kept file is not ours."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest
from plans import typed

from postlab.cli.parser import build_parser
from postlab.machine.cache import CACHE_VARIABLE
from postlab.plan.frozen import teaching_plan_loaded
from postlab.runs import calibrations
from postlab.runs.estimate_text import render_estimate

TINY = {"seeds": [3], "embedding": 8, "hidden": 8, "sft_steps": 6, "sft_batch": 4,
        "rl_steps": 3, "prompts_per_step": 2, "group_size": 3, "eval_samples": 2}


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A cache folder of this test's own, and a count of the calibrations measured."""
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    measured = []
    real = calibrations.calibrate

    def counted(plan):
        measured.append(plan)
        return real(plan)

    monkeypatch.setattr(calibrations, "calibrate", counted)
    return tmp_path / "cache" / "calibrations", measured


def _plan(**changes):
    return typed(**(TINY | changes))


def _entry(folder):
    (path,) = folder.iterdir()
    return path, json.loads(path.read_text())


def test_a_second_run_of_the_plan_reuses_the_first_ones_figures(store):
    folder, measured = store
    plan = _plan()
    fresh = calibrations.calibration_for(plan)
    assert fresh.reused_from is None and len(measured) == 1
    path, entry = _entry(folder)
    assert path.name == f"{calibrations.calibration_key(plan)}.json"
    reused = calibrations.calibration_for(plan)
    assert len(measured) == 1  # not measured again
    assert reused.reused_from == entry["measured_at"]
    # the same unit costs, factors and memory; only what this process paid differs
    same = ("sft", "reference", "update", "decode", "row_seconds", "write_seconds",
            "optimizer_seconds", "factors", "decode_row_bytes", "step_bytes", "base_bytes")
    assert all(getattr(reused, name) == getattr(fresh, name) for name in same)
    # a reusing run does not calibrate: nothing of the calibration's time is its own
    assert reused.seconds == 0.0
    assert reused.started_seconds is not None


def test_recalibrate_measures_again_and_keeps_the_new_figures(store):
    folder, measured = store
    plan = _plan()
    calibrations.calibration_for(plan)
    first = _entry(folder)[1]
    again = calibrations.calibration_for(plan, recalibrate=True)
    assert len(measured) == 2 and again.reused_from is None
    kept = _entry(folder)[1]
    assert kept["calibration"]["sft"] == dataclasses.asdict(again.sft)
    assert kept["calibration"] != first["calibration"]


def test_another_plan_or_another_machine_is_calibrated_afresh(store, monkeypatch):
    folder, measured = store
    calibrations.calibration_for(_plan())
    calibrations.calibration_for(_plan(hidden=12))  # other sizes: other figures
    calibrations.calibration_for(_plan(seeds=[3, 4]))  # other seeds: another share of a run
    assert len(measured) == 3 and len(list(folder.iterdir())) == 3
    key = calibrations.calibration_key(_plan())
    monkeypatch.setattr(calibrations, "usable_cores", lambda: 64)
    assert calibrations.calibration_key(_plan()) != key
    monkeypatch.setattr(calibrations.numerics, "current_pin", lambda: "default")
    assert calibrations.calibration_key(_plan()) != key


@pytest.mark.parametrize("age", [timedelta(hours=13), timedelta(hours=-1)])
def test_stale_or_future_figures_are_measured_again(store, age):
    folder, measured = store
    plan = _plan()
    calibrations.calibration_for(plan)
    path, entry = _entry(folder)
    when = datetime.now(UTC) - age
    entry["measured_at"] = when.strftime("%Y-%m-%d %H:%M:%S UTC")
    path.write_text(json.dumps(entry))
    assert calibrations.calibration_for(plan).reused_from is None
    assert len(measured) == 2


def _damaged(entry):
    """Entries that are not a kept calibration of this plan, each a fresh copy."""
    cases = {}
    for name, change in {
        "wrong key": lambda e: e.update(key="0" * 64),
        "other layout": lambda e: e.update(store=calibrations.STORE_VERSION + 1),
        "no time": lambda e: e.pop("measured_at"),
        "time not a date": lambda e: e.update(measured_at="yesterday"),
        "missing figure": lambda e: e["calibration"].pop("row_seconds"),
        "figure a string": lambda e: e["calibration"].update(row_seconds="fast"),
        "figure a boolean": lambda e: e["calibration"].update(write_seconds=True),
        "negative figure": lambda e: e["calibration"].update(base_bytes=-1),
        "two factors": lambda e: e["calibration"].update(factors=[1.0, 1.0]),
        "line without slope": lambda e: e["calibration"]["sft"].pop("per_row"),
        "calibration a list": lambda e: e.update(calibration=[]),
    }.items():
        copy = json.loads(json.dumps(entry))
        change(copy)
        cases[name] = json.dumps(copy)
    cases["not JSON"] = "{not json"
    cases["infinite"] = json.dumps(entry).replace('"row_seconds": ', '"row_seconds": 1e999, "x": ')
    return cases


def test_a_kept_file_that_is_not_ours_is_measured_again(store):
    folder, measured = store
    plan = _plan()
    calibrations.calibration_for(plan)
    path, entry = _entry(folder)
    for name, text in _damaged(entry).items():
        path.write_text(text)
        assert calibrations.stored_calibration(plan) is None, name
    assert calibrations.calibration_for(plan).reused_from is None
    assert len(measured) == 2
    # and the fresh figures replaced the damaged file
    assert calibrations.stored_calibration(plan) is not None


def test_a_cache_that_cannot_be_written_costs_only_the_next_calibration(store, tmp_path,
                                                                        monkeypatch):
    _, measured = store
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv(CACHE_VARIABLE, str(blocked))
    plan = _plan()
    assert calibrations.calibration_for(plan).reused_from is None
    assert calibrations.calibration_for(plan).reused_from is None
    assert len(measured) == 2


def test_the_estimate_says_whose_figures_it_prices(store):
    from postlab.api.training import check_size

    plan = teaching_plan_loaded()
    first = render_estimate(check_size(plan, allow_large=False))
    assert "(calibrated in" in first
    second = render_estimate(check_size(plan, allow_large=False))
    assert "calibration of 20" in second and "reused; --recalibrate measures again" in second
    third = render_estimate(check_size(plan, allow_large=False, recalibrate=True))
    assert "(calibrated in" in third


@pytest.mark.parametrize("command", [["run", "--out-dir", "x"], ["reproduce", "--out-dir", "x"],
                                     ["sweep", "s.json", "--out-dir", "x"]])
def test_the_training_commands_take_recalibrate(command):
    parser = build_parser()
    assert parser.parse_args(command).recalibrate is False
    assert parser.parse_args([*command, "--recalibrate"]).recalibrate is True
