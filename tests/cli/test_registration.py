"""Registration before training: `postlab register` fixes hypotheses with a time, `run
--registration` copies it into the run folder before the first step, reports say
"registered before training" and decide hypotheses given afterwards apart as exploratory, and
verify catches a registration changed, removed or dated after training began."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import REGISTERED_HYPOTHESES
from plans import SMALL, write_plan

from postlab.cli import main
from postlab.plan.frozen import load_plan
from postlab.plan.registration import (
    REGISTRATION_FILE,
    SCHEMA,
    hypotheses_sha256,
    make_registration,
    parse_time,
    registration_problems,
)

pytest.importorskip("scipy")

ROOT = Path(__file__).resolve().parents[2]


def _test(ident: str, margin: float = 0.0, stage: str = "strict") -> dict:
    return {"id": ident, "statement": f"RL under {stage} raises held-out success",
            "metric": "success", "compare": {"stage": stage, "split": "test",
                                              "versus_stage": "initial"},
            "direction": "increase", "margin": margin}


REGISTERED = {"alpha": 0.05, "tests": [_test("strict-gains")]}
assert REGISTERED == REGISTERED_HYPOTHESES  # the hypotheses the shared run registered
LATER = {"alpha": 0.05, "tests": [_test("substring-gains", stage="substring"),
                                  _test("strict-gains-more", margin=0.01)]}


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _refused(capsys, args: list[str], needle: str) -> str:
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("postlab: ") and needle in err, err
    return err


@pytest.fixture(scope="module")
def registered_run(registered_small_run) -> tuple[Path, Path, Path]:
    """A small plan without hypotheses of its own, its registration, and a run trained with
    it (the session's, tests/conftest.py): (plan, registration, run folder)."""
    folder = registered_small_run.parent
    return folder / "plan.json", folder / "registration.json", registered_small_run


# --- the registration's form ------------------------------------------------------------------

def test_the_hypotheses_hash_is_by_content_not_layout():
    reordered = {"tests": [dict(reversed(list(REGISTERED["tests"][0].items())))],
                 "alpha": 0.05}
    assert hypotheses_sha256(reordered) == hypotheses_sha256(REGISTERED)
    changed = {"alpha": 0.05, "tests": [_test("strict-gains", margin=0.01)]}
    assert hypotheses_sha256(changed) != hypotheses_sha256(REGISTERED)


def test_registration_problems_name_each_fault(tmp_path):
    plan = load_plan(write_plan(tmp_path / "plan.json", **SMALL))
    sound = make_registration(plan.sha256, REGISTERED, "2026-01-31T12:00:00Z")
    assert registration_problems(sound, plan.model, plan.sha256) == []
    faults = {
        "missing field 'registered_at'": {k: v for k, v in sound.items()
                                          if k != "registered_at"},
        "unknown field 'note'": sound | {"note": "x"},
        "is not 'postlab.registration/1'": sound | {"schema": "postlab.registration/0"},
        "is not a UTC time": sound | {"registered_at": "yesterday"},
        "not this plan's": sound | {"plan_sha256": "0" * 64},
        "changed since registration": sound | {"hypotheses": LATER},
        "hypotheses.tests.0.metric": make_registration(
            plan.sha256, {"tests": [_test("h") | {"metric": "charm"}]}, sound["registered_at"]),
    }
    for needle, registration in faults.items():
        problems = registration_problems(registration, plan.model, plan.sha256)
        assert problems and needle in problems[0], (needle, problems)
    assert registration_problems([], plan.model, plan.sha256) == [
        "not a registration (a JSON object)"]
    own = plan.model.replace(hypotheses=LATER)
    assert "hypotheses of its own" in registration_problems(sound, own, plan.sha256)[0]
    assert parse_time("2026-01-31T12:00:00Z").isoformat() == "2026-01-31T12:00:00+00:00"


def test_the_example_hypotheses_are_the_example_plans_and_make_examples_writes_them():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from make_examples import HYPOTHESES, SECTIONS
    finally:
        sys.path.remove(str(ROOT / "examples"))
    on_their_own = json.loads((ROOT / "examples" / "hypotheses" / "teaching.json").read_text())
    in_the_plan = json.loads((ROOT / "examples" / "hypotheses.json").read_text())["hypotheses"]
    assert on_their_own == in_the_plan == HYPOTHESES == SECTIONS["hypotheses/teaching"]


# --- register -----------------------------------------------------------------------------

def test_register_writes_the_hypotheses_with_their_hashes_and_the_time(registered_run):
    plan, registration, _ = registered_run
    written = json.loads(registration.read_text())
    assert written["schema"] == SCHEMA and written["hypotheses"] == REGISTERED
    assert written["plan_sha256"] == load_plan(plan).sha256
    assert written["hypotheses_sha256"] == hypotheses_sha256(REGISTERED)
    assert parse_time(written["registered_at"]) is not None


def test_register_refuses_bad_input_and_writes_nothing(registered_run, tmp_path, capsys):
    plan, registration, _ = registered_run
    hypotheses = tmp_path / "h.json"
    hypotheses.write_text(json.dumps(REGISTERED))
    before = registration.read_bytes()
    _refused(capsys, ["register", "--plan", str(plan), "--hypotheses", str(hypotheses),
                      "--out", str(registration)], "already exists")
    assert registration.read_bytes() == before
    out = tmp_path / "r.json"
    _refused(capsys, ["register", "--plan", str(plan), "--out", str(out)],
             "states no hypotheses")
    own = write_plan(tmp_path / "own.json", **SMALL, hypotheses=REGISTERED)
    _refused(capsys, ["register", "--plan", str(own), "--hypotheses", str(hypotheses),
                      "--out", str(out)], "states hypotheses of its own")
    hypotheses.write_text(json.dumps({"tests": [_test("h") | {"margin": 2.0}]}))
    _refused(capsys, ["register", "--plan", str(plan), "--hypotheses", str(hypotheses),
                      "--out", str(out)], "hypotheses.tests.0.margin: margin 2.0 can never")
    hypotheses.write_text("{not json")
    _refused(capsys, ["register", "--plan", str(plan), "--hypotheses", str(hypotheses),
                      "--out", str(out)], str(hypotheses))
    assert not out.exists()
    # a plan's own hypotheses register without a file
    assert main(["register", "--plan", str(own), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["hypotheses"] == REGISTERED


# --- a registered run -------------------------------------------------------------------------

def test_the_run_keeps_the_registration_and_names_it_before_training(registered_run):
    _, registration, out = registered_run
    kept = out / REGISTRATION_FILE
    assert kept.read_bytes() == registration.read_bytes()
    named = json.loads((out / "record.json").read_text())["registration"]
    assert named["sha256"] == hashlib.sha256(kept.read_bytes()).hexdigest()
    assert named["hypotheses_sha256"] == hypotheses_sha256(REGISTERED)
    assert named["registered_at"] == json.loads(kept.read_text())["registered_at"]
    assert parse_time(named["registered_at"]) <= parse_time(named["training_started_at"])


def test_reports_say_registered_before_training(registered_run, capsys):
    _, _, out = registered_run
    named = json.loads((out / "record.json").read_text())["registration"]
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["registration"] == {key: named[key] for key in
                                    ("registered_at", "training_started_at", "sha256")}
    assert [(v["id"], v["standing"]) for v in data["verdicts"]] == [
        ("strict-gains", "registered")]
    assert main(["report", str(out), "--lang", "en"]) == 0
    text = capsys.readouterr().out
    assert f"registered before training ({named['registered_at']})" in text
    assert f"training began {named['training_started_at']}" in text
    assert main(["report", str(out), "--format", "markdown", "--lang", "zh"]) == 0
    assert f"训练前已预注册（{named['registered_at']}）" in capsys.readouterr().out
    assert main(["verify", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("PASS  registration: 1 hypothesis registered") for line in lines)


def test_hypotheses_given_afterwards_are_exploratory_and_a_family_of_their_own(
        registered_run, tmp_path, capsys):
    _, _, out = registered_run
    later = tmp_path / "later.json"
    later.write_text(json.dumps(LATER))
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    alone = json.loads(capsys.readouterr().out)["verdicts"]
    assert main(["report", str(out), "--format", "json", "--hypotheses", str(later)]) == 0
    both = json.loads(capsys.readouterr().out)["verdicts"]
    assert [(v["id"], v["standing"]) for v in both] == [
        ("strict-gains", "registered"), ("substring-gains", "exploratory"),
        ("strict-gains-more", "exploratory")]
    # looking later cannot move a registered hypothesis's Holm level (one test: alpha)
    assert both[0] == alone[0] and both[0]["level"] == 0.05
    assert min(v["level"] for v in both[1:]) == 0.025  # Holm over two: alpha / 2 first
    assert main(["report", str(out), "--lang", "en", "--hypotheses", str(later)]) == 0
    assert capsys.readouterr().out.count("exploratory (given after training)") == 2
    # an exploratory hypothesis may not wear a registered one's id
    later.write_text(json.dumps(REGISTERED))
    _refused(capsys, ["report", str(out), "--hypotheses", str(later)],
             "'strict-gains' is already one the run fixed")


def _copy(run: Path, folder: Path) -> Path:
    copy = folder / "run"
    shutil.copytree(run, copy)
    return copy


def _rewrite(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data) + "\n")


def _verify_fails(capsys, run: Path, needle: str) -> None:
    capsys.readouterr()
    assert main(["verify", str(run)]) == 1
    lines = capsys.readouterr().out.splitlines()
    failed = [line for line in lines if line.startswith("FAIL  registration")]
    assert failed and needle in failed[0], lines
    _refused(capsys, ["report", str(run)], needle)


def test_verify_catches_a_registration_changed_after_training(registered_run, tmp_path,
                                                              capsys):
    run = _copy(registered_run[2], tmp_path)

    def loosen(registration: dict) -> None:
        # consistent in itself: the hash of the hypotheses is recomputed
        registration["hypotheses"]["tests"][0]["margin"] = -0.5
        registration["hypotheses_sha256"] = hypotheses_sha256(registration["hypotheses"])

    _rewrite(run / REGISTRATION_FILE, loosen)
    _verify_fails(capsys, run, "changed since training")


def test_verify_catches_a_missing_registration(registered_run, tmp_path, capsys):
    run = _copy(registered_run[2], tmp_path)
    (run / REGISTRATION_FILE).unlink()
    _verify_fails(capsys, run, "missing; the record names a registration")


def test_verify_catches_a_registration_dated_after_training_began(registered_run, tmp_path,
                                                                  capsys):
    """Even with the record's hashes made to agree, a time after training began fails."""
    run = _copy(registered_run[2], tmp_path)
    path = run / REGISTRATION_FILE
    _rewrite(path, lambda r: r.update(registered_at="2099-01-01T00:00:00Z"))

    def rename(record: dict) -> None:
        record["registration"].update(registered_at="2099-01-01T00:00:00Z",
                                      sha256=hashlib.sha256(path.read_bytes()).hexdigest())

    _rewrite(run / "record.json", rename)
    _verify_fails(capsys, run, "after training began")


def test_a_stray_registration_is_not_evidence(registered_run, tmp_path, capsys):
    """A registration beside a record that names none is warned about, never counted."""
    run = _copy(registered_run[2], tmp_path)
    _rewrite(run / "record.json", lambda record: record.pop("registration"))
    capsys.readouterr()
    main(["verify", str(run)])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("WARN  registration: registration.json is in the folder but "
                               "the record names none") for line in lines), lines
    assert any(line.startswith("FAIL  fingerprint") for line in lines)


def test_run_refuses_a_registration_that_does_not_fit_and_writes_nothing(registered_run,
                                                                         tmp_path, capsys):
    plan, registration, _ = registered_run
    out = tmp_path / "run"
    other = write_plan(tmp_path / "other.json", **SMALL | {"rl_steps": 5})
    _refused(capsys, ["run", "--plan", str(other), "--registration", str(registration),
                      "--out-dir", str(out), "--quiet"], "not this plan's")
    future = tmp_path / "future.json"
    future.write_text(json.dumps(make_registration(load_plan(plan).sha256, REGISTERED,
                                                   "2099-01-01T00:00:00Z")))
    _refused(capsys, ["run", "--plan", str(plan), "--registration", str(future),
                      "--out-dir", str(out), "--quiet"], "a time still to come")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    _refused(capsys, ["run", "--plan", str(plan), "--registration", str(broken),
                      "--out-dir", str(out), "--quiet"], str(broken))
    _refused(capsys, ["run", "--plan", str(plan), "--registration", str(tmp_path / "none"),
                      "--out-dir", str(out), "--quiet"], "not found")
    assert not out.exists()


def test_a_resumed_run_keeps_the_registration_it_began_with(registered_run, tmp_path, capsys):
    plan, _, run = registered_run
    copy = _copy(run, tmp_path)
    snapshot = _snapshot(copy)
    other = tmp_path / "other.json"
    # sound for the plan, registered earlier still, but not the one the run began with
    other.write_text(json.dumps(make_registration(load_plan(plan).sha256, REGISTERED,
                                                  "2026-01-01T00:00:00Z")))
    _refused(capsys, ["run", "--resume", "--out-dir", str(copy), "--registration",
                      str(other), "--quiet"], "not the registration given")
    assert _snapshot(copy) == snapshot


def test_the_bundled_run_decides_the_example_hypotheses_as_exploratory(capsys):
    """The bundled run was trained before its hypotheses were written: given to its report
    they are decided as exploratory, with the verdicts of the plan that states them."""
    capsys.readouterr()
    assert main(["report", "--format", "json", "--hypotheses",
                 str(ROOT / "examples" / "hypotheses" / "teaching.json")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "registration" not in data
    assert {v["id"]: (v["outcome"], v["standing"]) for v in data["verdicts"]} == {
        "coverage-narrows": ("confirmed", "exploratory"),
        "strict-gains": ("refuted", "exploratory"),
        "strict-coverage": ("inconclusive", "exploratory")}


def test_the_python_api_registers_and_reports_the_same(registered_run, tmp_path):
    import postlab

    plan, _, run = registered_run
    hypotheses = tmp_path / "later.json"
    hypotheses.write_text(json.dumps(LATER))
    written = postlab.register(tmp_path / "again.json", plan, hypotheses)
    assert written["hypotheses"] == LATER
    assert json.loads((tmp_path / "again.json").read_text()) == written
    report = postlab.report(run, hypotheses=hypotheses)
    assert [v.standing for v in report.analysis.verdicts] == [
        "registered", "exploratory", "exploratory"]
    assert report.analysis.registration["registered_at"] == json.loads(
        (run / REGISTRATION_FILE).read_text())["registered_at"]
    assert any("(registered before training, " in line for line in report.findings)
