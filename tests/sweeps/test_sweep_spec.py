"""Sweep files: typed reading, expansion into plan versions that name their parent, and every
problem refused in one line before anything trains."""

from __future__ import annotations

import json

import pytest

from postlab.errors import UserError
from postlab.plan.frozen import teaching_plan_loaded
from postlab.plan.validation import validate_plan
from postlab.sweeps.spec import expand, parse_sweep

TODAY = "2026-11-30"
SEEDS = list(range(1, 9))


def _expand(**spec):
    raw = json.dumps({"seeds": SEEDS} | spec).encode()
    return expand(parse_sweep(raw, "sweep.json"), teaching_plan_loaded(), TODAY, "sweep.json")


def test_a_grid_over_kl_beta_gives_the_base_and_one_version_per_other_value():
    versions = _expand(grid={"kl_beta": [0.0, 0.03, 0.1]})
    assert [v.name for v in versions] == ["base", "kl_beta=0.0", "kl_beta=0.1"]
    base = versions[0]
    teaching = teaching_plan_loaded()
    assert base.plan.seeds == SEEDS and base.plan.kl_beta == 0.03
    assert base.data["parent"] == {"sha256": teaching.sha256, "changes": ["seeds"]}
    assert base.plan.version == teaching.model.version + 1
    for version, beta in zip(versions[1:], (0.0, 0.1), strict=True):
        assert version.plan.kl_beta == beta and version.changes == {"kl_beta": beta}
        assert version.data["parent"] == {"sha256": base.sha256, "changes": ["kl_beta"]}
        assert version.plan.seeds == SEEDS
        assert version.plan.version == base.plan.version + 1
        assert not validate_plan(version.data)
        differing = {k for k in version.data.keys() | base.data.keys()
                     if version.data.get(k) != base.data.get(k)}
        assert differing == {"kl_beta", "version", "parent"}


def test_grids_multiply_and_named_versions_come_first():
    versions = _expand(versions=[{"name": "clip-higher", "set": {"clip_high": 0.28}}],
                       grid={"kl_beta": [0.0, 0.1], "rl_lr": [0.01, 0.02]})
    assert [v.name for v in versions] == [
        "base", "clip-higher", "kl_beta=0.0+rl_lr=0.01", "kl_beta=0.0+rl_lr=0.02",
        "kl_beta=0.1+rl_lr=0.01", "kl_beta=0.1+rl_lr=0.02"]
    assert len({v.sha256 for v in versions}) == len(versions)


def test_settings_may_be_written_as_freeze_takes_them():
    versions = _expand(versions=[{"name": "a", "set": ["clip_high=0.28", "kl=k3"]},
                                 {"name": "b", "set": {"clip_high": 0.3}}])
    assert versions[1].changes == {"clip_high": 0.28, "kl": "k3"}
    with pytest.raises(UserError, match="clip_high is set twice"):
        _expand(versions=[{"name": "a", "set": ["clip_high=0.28", "clip_high=0.3"]}])
    with pytest.raises(UserError, match="expected key=value"):
        _expand(versions=[{"name": "a", "set": ["clip_high"]}])


def test_seeds_equal_to_the_base_plans_keep_the_base_plan_itself():
    teaching = teaching_plan_loaded()
    raw = json.dumps({"seeds": teaching.data["seeds"], "grid": {"kl_beta": [0.1]}}).encode()
    versions = expand(parse_sweep(raw, "s"), teaching, TODAY, "s")
    assert versions[0].sha256 == teaching.sha256
    assert versions[1].plan.parent.sha256 == teaching.sha256


def test_the_same_inputs_expand_to_the_same_bytes():
    first = [v.raw for v in _expand(grid={"kl_beta": [0.0, 0.1]})]
    assert first == [v.raw for v in _expand(grid={"kl_beta": [0.0, 0.1]})]


@pytest.mark.parametrize(("spec", "needle"), [
    ({"grid": {"kl_bta": [0.1]}}, "unknown plan key 'kl_bta'"),
    ({"grid": {"kl_beta": [-1.0]}}, "version kl_beta=-1.0: kl_beta"),
    ({"grid": {"seeds": [[1]]}}, "seeds is set by the sweep"),
    ({"grid": {"version": [9]}}, "version is set by the sweep"),
    ({"grid": {"kl_beta": []}}, "grid: Value error, kl_beta: needs at least one value"),
    ({"grid": {"kl_beta": [0.1, 0.1]}}, "values must be distinct"),
    ({"versions": [{"name": "a", "set": {"kl_beta": 0.1}},
                   {"name": "a", "set": {"kl_beta": 0.2}}]}, "named twice"),
    ({"versions": [{"name": "a", "set": {"kl_beta": 0.1}},
                   {"name": "b", "set": {"kl_beta": 0.1}}]}, "a and b are the same plan"),
    ({"versions": [{"name": "base", "set": {"kl_beta": 0.1}}]}, "versions.0.name"),
    ({"versions": [{"name": "../x", "set": {"kl_beta": 0.1}}]}, "versions.0.name"),
    ({"versions": [{"name": "a", "set": {}}]}, "versions.0.set"),
    ({"sweeps": 1}, "sweeps: Extra inputs are not permitted"),
    ({"versions": [{"name": "sweep.json", "set": {"kl_beta": 0.1}}]},
     "a name the sweep folder uses"),
    ({"versions": [{"name": "Versions.json", "set": {"kl_beta": 0.1}}]},
     "a name the sweep folder uses"),
    ({"versions": [{"name": "x", "set": {"kl_beta": 0.1}},
                   {"name": "X", "set": {"kl_beta": 0.2}}]}, "letter case aside"),
    ({"versions": [{"name": "Base", "set": {"kl_beta": 0.1}}]}, "letter case aside"),
    ({"versions": [{"name": "same", "set": {"kl_beta": 0.03}}]}, "equals the base plan's"),
    ({"grid": {"split": [{"train": [[1, 2]], "dev": [], "test": []}]}},
     "share their held-out questions"),
])
def test_bad_sweeps_are_refused_in_one_line(spec, needle):
    with pytest.raises(UserError) as caught:
        _expand(**spec)
    message = str(caught.value)
    assert needle in message and "\n" not in message


@pytest.mark.parametrize(("raw", "needle"), [
    (b'{"seeds": []}', "seeds"),
    (b'{"seeds": [1, 1]}', "seeds must be distinct"),
    (b'{"seeds": [1.5]}', "seeds.0"),
    (b'{"grid": {}}', "seeds: Field required"),
    (b"[1]", "(top level)"),
])
def test_bad_sweep_files_are_refused_in_one_line(raw, needle):
    with pytest.raises(UserError) as caught:
        parse_sweep(raw, "sweep.json")
    assert needle in str(caught.value)
