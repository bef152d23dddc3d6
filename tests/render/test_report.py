import json
import subprocess
import sys

import pytest
from conftest import tiny_record

from postlab.cli import default_lang, main
from postlab.plan.frozen import freeze, load_plan, plan_bytes, teaching_plan

TINY_PLAN = teaching_plan() | {"eval_samples": 2}


@pytest.fixture
def tiny(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_bytes(plan_bytes(TINY_PLAN))
    record = tmp_path / "record.json"
    record.write_text(json.dumps(tiny_record(load_plan(plan).sha256)))
    return plan, record


LAYOUT = "The counts, in the reference's layout:\n"


def _layout(out: str) -> list[str]:
    """The English text report's lines after its findings: the reference's layout."""
    findings, marker, layout = out.partition(LAYOUT)
    assert marker and findings.strip()  # the findings (or why there are none) come first
    return layout.splitlines()


def test_report_english_by_hand(tiny, capsys):
    plan, record = tiny
    assert main(["report", "--plan", str(plan), "--record", str(record), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No findings in words for this record: ")  # a partial record
    lines = _layout(out)
    assert lines[1:4] == ["p=0.01: 0.077255", "p=0.50: 0.992188", "p=0.99: 0.077255"]
    assert "covered by 2 samples" in lines[4]
    # SFT: greedy "3" right, "8" wrong; sampled 2/4 strict, 4/4 substring, 1/2 covered
    assert lines[5] == " 7 SFT       1/2 2/4 4/4 1/2"
    assert lines[6] == " 7 strict    2/2 4/4 4/4 2/2"


def test_report_finds_plan_beside_record(tiny, capsys):
    _plan, record = tiny
    assert main(["report", "--record", str(record.parent), "--lang", "zh"]) == 0
    assert capsys.readouterr().out.startswith("组内出现不同奖励的概率：\n")


def test_default_language_follows_locale():
    assert default_lang({"LANG": "zh_CN.UTF-8"}) == "zh"
    assert default_lang({"LANG": "zh_CN.UTF-8", "LC_ALL": "en_US.UTF-8"}) == "en"
    assert default_lang({"LC_MESSAGES": "zh_TW"}) == "zh"
    assert default_lang({"LANG": "C.UTF-8"}) == "en"
    assert default_lang({}) == "en"


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize(("content", "needle"), [
    ("{not json", "malformed JSON"),
    ('{"plan_sha256": "a", "plan_sha256": "b", "runs": []}', "duplicate key"),
    ('{"plan_sha256": NaN, "runs": []}', "NaN"),
    ('[1, 2]', "JSON object"),
    ('{"runs": []}', "plan_sha256"),
    ('{"plan_sha256": 5, "runs": []}', "wrong type"),
    ('{"plan_sha256": "%s", "runs": [{"seed": "11", "evaluations": {}}]}' % ("a" * 64),
     "seed: wrong type str"),
    ('{"plan_sha256": "a", "runs": []}', "plan_sha256: 'a' is not a valid value"),
])
def test_malformed_records_fail_in_one_line(tmp_path, capsys, content, needle):
    record = _write(tmp_path / "record.json", content)
    before = sorted(tmp_path.iterdir())
    assert main(["report", "--record", str(record)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and str(record) in err
    assert sorted(tmp_path.iterdir()) == before


def test_bad_row_is_named(tiny, capsys):
    plan, record = tiny
    data = json.loads(record.read_text())
    data["runs"][0]["evaluations"]["strict"]["test"]["sampled"][1][3] = "yes"
    record.write_text(json.dumps(data))
    assert main(["report", "--plan", str(plan), "--record", str(record)]) == 2
    assert "evaluations.strict.test.sampled[1]" in capsys.readouterr().err


def test_plan_hash_mismatch(tiny, tmp_path, capsys):
    _, record = tiny
    other = tmp_path / "teaching.json"
    freeze(other)
    assert main(["report", "--plan", str(other), "--record", str(record)]) == 2
    err = capsys.readouterr().err
    assert "sha256" in err and err.count("\n") == 1


@pytest.mark.parametrize("args", [
    ["report", "--record", "/nonexistent/record.json"],
    ["report", "--plan", "/nonexistent/plan.json", "--record", "/nonexistent/record.json"],
    ["report", "--lang", "fr"],
    ["nonsense"],
])
def test_bad_arguments_exit_2(args, capsys):
    assert main(args) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_unreadable_record(tiny, capsys, monkeypatch):
    from pathlib import Path

    _, record = tiny

    import os

    real_open = os.open

    def denied(path, *args, **kwargs):
        if Path(path) == record:
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    # Root reads any file whatever its mode, so the denial is simulated at the open.
    monkeypatch.setattr(os, "open", denied)
    assert main(["report", "--record", str(record)]) == 2
    err = capsys.readouterr().err
    assert "not readable" in err and err.count("\n") == 1


def test_module_entry_point_has_no_traceback(tmp_path):
    done = subprocess.run([sys.executable, "-m", "postlab", "report", "--record",
                           str(tmp_path / "missing.json")], capture_output=True, text=True)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "not found" in done.stderr


def test_report_without_arguments_reads_the_bundled_record(capsys):
    assert main(["report", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    # the English report opens with the run's own findings, in words
    assert out.startswith("What this run found (held-out test split")
    assert "- RL under substring narrowed held-out (test) coverage" in out
    table = _layout(out)[5:]
    assert len(table) == 9  # three seeds x (SFT, strict, substring)
    assert [line.split()[1] for line in table[:3]] == ["SFT", "strict", "substring"]
    assert all(line.split()[-1].endswith("/19") for line in table)


def test_missing_bundled_record_is_explained(monkeypatch, capsys):
    import postlab.records.record

    monkeypatch.setattr(postlab.records.record, "bundled_run_dir", lambda: None)
    assert main(["report"]) == 2
    assert "no bundled record" in capsys.readouterr().err


def test_group_signal_uses_the_plans_group_size(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_bytes(plan_bytes(TINY_PLAN | {"group_size": 4}))
    record = tmp_path / "record.json"
    record.write_text(json.dumps(tiny_record(load_plan(plan).sha256)))
    assert main(["report", "--record", str(record), "--lang", "en"]) == 0
    lines = _layout(capsys.readouterr().out)
    assert lines[0] == "Probability that a group of 4 holds different rewards:"
    # 1 - p^4 - (1-p)^4 by hand: p=0.5 gives 1 - 2/16; p=0.01 gives 1 - 1e-8 - 0.99^4
    assert lines[1:4] == ["p=0.01: 0.039404", "p=0.50: 0.875000", "p=0.99: 0.039404"]
    assert main(["report", "--record", str(record), "--lang", "zh"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "组内出现不同奖励的概率（每组 4 个回答）："


# --- bugs are not bad input -----------------------------------------------------------------

@pytest.mark.parametrize("target,args", [
    ("postlab.render.text.build_report", ["--lang", "en"]),
    ("postlab.analysis.aggregate.analyse", ["--format", "json"]),
])
def test_a_bug_in_report_code_is_shown_as_a_bug(capsys, monkeypatch, target, args):
    """If report code raised a KeyError, it must not pass for the user's bad input."""
    def broken(*_args, **_kwargs):
        raise KeyError("a key postlab itself forgot")

    monkeypatch.setattr(target, broken)
    code = main(["report", *args])  # the bundled run: a record that fits its plan
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" in err and "KeyError: 'a key postlab itself forgot'" in err
    assert err.rstrip().splitlines()[-1].startswith("postlab: this is a bug in postlab")
    assert "does not fit the plan" not in err
