"""Plans from a script: ``postlab.freeze``, ``check_plan`` and ``diff_plans`` do what
``postlab freeze`` and ``postlab plan`` print, with typed results."""

from __future__ import annotations

import pytest

import postlab
from postlab.errors import UserError


def test_freeze_a_version_check_it_and_diff_it(tmp_path):
    base = postlab.freeze(tmp_path / "v1.json")
    assert base.parent is None and base.plan.version == 1
    version = postlab.freeze(tmp_path / "v2.json", parent=base.path,
                             settings=["clip=0.3", "kl=\"k3\""], today="2026-12-07")
    assert version.parent == base.sha256
    assert version.plan.version == 2 and version.plan.date == "2026-12-07"
    assert version.plan.parent.sha256 == base.sha256
    assert version.plan.parent.changes == ["clip", "kl"]
    assert version.plan.data()["parent"] == {"sha256": base.sha256, "changes": ["clip", "kl"]}
    checked = postlab.check_plan(version.path)
    assert checked.problems == [] and checked.sha256 == version.sha256
    diff = postlab.diff_plans(base.path, version.path)
    assert diff.b_is_version_of_a and not diff.identical
    assert any("clip" in line for line in diff.differences)
    assert postlab.diff_plans(base.path, base.path).identical


def test_an_existing_path_and_a_bad_plan_are_refused(tmp_path):
    base = postlab.freeze(tmp_path / "v1.json")
    with pytest.raises(UserError, match="already exists"):
        postlab.freeze(base.path, parent=base.path, settings=["clip=0.3"])
    with pytest.raises(UserError, match="takes no --from or --set"):
        postlab.freeze(tmp_path / "x.json", draft=base.path, settings=["clip=0.3"])
    bad = tmp_path / "bad.json"
    bad.write_text(base.path.read_text().replace('"clip": 0.2', '"clip": 2.0'))
    problems = postlab.check_plan(bad).problems
    assert [path for path, _ in problems] == ["clip"]


def test_the_worked_answers_from_a_script():
    answers = postlab.exercises()
    assert [a.number for a in answers] == sorted(a.number for a in answers)
    assert all(a.lines or "argument" in a.title for a in answers)
    [four] = postlab.exercises(4)
    assert four.number == 4 and four.lines
    with pytest.raises(UserError, match="answer 9 is computed on a run"):
        postlab.exercises(9)
    with pytest.raises(UserError, match="RUN is for answers 8 and 9 only"):
        postlab.exercises(4, "some-run")
    with pytest.raises(UserError, match="no answer 11"):
        postlab.exercises(11)
