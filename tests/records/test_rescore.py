import datetime
import hashlib
import json

import pytest
from conftest import tiny_record

from postlab.cli import main
from postlab.plan.frozen import freeze, load_plan, plan_bytes, teaching_plan
from postlab.records.models import Record
from postlab.records.rescore import rescore


def _leading_zeros_json() -> dict:
    record = tiny_record("0" * 64)
    # strict stage, test split: greedy "03" for 1+2 (strict yes, exact no), "9" for 4+5
    record["runs"][0]["evaluations"]["strict"]["test"]["greedy"][0][2] = "03"
    # sampled for 1+2: "3", "003"; for 4+5: "9", "09"
    sampled = record["runs"][0]["evaluations"]["strict"]["test"]["sampled"]
    sampled[1][2] = "003"
    sampled[3][2] = "09"
    return record


def _record_with_leading_zeros() -> Record:
    return Record.of(_leading_zeros_json())


def test_rescore_by_hand():
    result = rescore(_record_with_leading_zeros(), {"strict": "strict"}, ["strict", "exact"])
    by_key = {(r.stage, r.decoding): r for r in result.rows}
    strict_greedy = by_key[("strict", "greedy")]
    assert strict_greedy.trained_on == "strict" and strict_greedy.n == 2
    assert strict_greedy.accepted == {"strict": 2, "exact": 1}
    assert by_key[("strict", "sampled")].accepted == {"strict": 4, "exact": 2}
    # initial stage: greedy "3" and "8" -> 1 each; sampled "3", "03" (strict only),
    # "999999" unterminated, "19" -> strict 2, exact 1
    assert by_key[("initial", "greedy")].accepted == {"strict": 1, "exact": 1}
    assert by_key[("initial", "sampled")].accepted == {"strict": 2, "exact": 1}
    assert by_key[("initial", "sampled")].trained_on is None
    gaps = {(g.looser, g.stricter): g for g in result.gaps}
    # strict-only acceptances: "03" (initial sampled), "03", "003", "09" (strict stage)
    assert gaps[("strict", "exact")].accepted_only_by_looser == 4
    assert gaps[("strict", "exact")].with_leading_zeros == 4
    assert gaps[("exact", "strict")].accepted_only_by_looser == 0


def test_report_with_contracts_leaves_the_record_untouched(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_bytes(plan_bytes(teaching_plan() | {"eval_samples": 2}))
    record = tmp_path / "record.json"
    data = _leading_zeros_json()
    data["plan_sha256"] = load_plan(plan).sha256
    record.write_text(json.dumps(data))
    before = hashlib.sha256(record.read_bytes()).hexdigest()
    assert main(["report", str(tmp_path), "--contract", "strict", "--contract", "exact",
                 "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "strict=2/2 (trained on) exact=1/2" in out
    assert "accepted by strict but not by exact: 4, of which 4 with leading zeros" in out
    assert "(no RL contract)" in out
    assert hashlib.sha256(record.read_bytes()).hexdigest() == before
    assert main(["report", str(tmp_path), "--contract", "lenient"]) == 2
    known = ("known: episode-anywhere, episode-strict, exact, format, per-call, rg-final, "
             "rg-score, rg-strict, rg-substring, strict, substring")
    assert known in capsys.readouterr().err
    assert main(["report", str(tmp_path), "--contract", "exact", "--split", "nope"]) == 2


def test_freeze_a_new_version(tmp_path, capsys):
    old = tmp_path / "v1.json"
    freeze(old)
    new = tmp_path / "v2.json"
    assert main(["freeze", str(new), "--from", str(old), "--set", "clip=0.3",
                 "--set", 'arms=["strict", "exact"]']) == 0
    data = json.loads(new.read_text())
    assert data["version"] == 2
    assert data["date"] == datetime.date.today().isoformat()
    assert data["clip"] == 0.3 and data["arms"] == ["strict", "exact"]
    assert data["parent"] == {"sha256": load_plan(old).sha256, "changes": ["clip", "arms"]}
    capsys.readouterr()
    assert main(["plan", "diff", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "is a version of" in out
    assert 'clip: 0.2 -> 0.3' in out and 'arms: ["strict", "substring"] -> ' in out
    assert "version: 1 -> 2" in out


@pytest.mark.parametrize(("setting", "message"), [
    ("colour=red", "unknown plan key"),
    ("clip=high", "clip"),
    ("clip=1.5", "clip"),
    ("group_size=[1]", "group_size"),
    ("version=7", "set automatically"),
    ("clip=0.2", "already has this value"),
    ("arms=[\"lenient\"]", "unknown reward contract"),
    ("noequals", "expected key=value"),
    ("clip=NaN", "not a valid value"),
])
def test_freeze_rejects_bad_settings(tmp_path, capsys, setting, message):
    new = tmp_path / "v2.json"
    assert main(["freeze", str(new), "--set", setting]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not new.exists()


def test_freeze_never_overwrites_a_version(tmp_path, capsys):
    old = tmp_path / "v1.json"
    freeze(old)
    before = old.read_bytes()
    assert main(["freeze", str(old), "--from", str(old), "--set", "clip=0.3"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert old.read_bytes() == before


def test_derived_plan_trains(tmp_path):
    from plans import SMALL, write_plan

    from postlab.runs.orchestration import RunOptions, run_plan

    base = write_plan(tmp_path / "base.json", **SMALL)
    new = tmp_path / "v2.json"
    assert main(["freeze", str(new), "--from", str(base), "--set",
                 'arms=["exact"]', "--set", "seeds=[3]"]) == 0
    record = run_plan(load_plan(new), new.read_bytes(),
                      RunOptions(out_dir=tmp_path / "run", workers=1))
    assert list(record.runs[0].arms) == ["exact"]
