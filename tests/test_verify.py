"""postlab verify and reproduce: pass on honest runs, name each kind of tampering."""

import gzip
import json
import shutil

import pytest
from plans import SMALL, write_plan

from postlab.cli import main
from postlab.engine import RunOptions, run_plan
from postlab.plan import load_plan
from postlab.record import bundled_run_dir


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("verify")
    plan = write_plan(folder / "plan.json", **SMALL)
    out = folder / "run"
    run_plan(load_plan(plan), plan.read_bytes(), RunOptions(out_dir=out, workers=1))
    return out


@pytest.fixture
def run_copy(small_run, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(small_run, target)
    return target


def _verify(capsys, target):
    code = main(["verify", str(target)])
    return code, capsys.readouterr().out


def _line(out, name):
    return next(line for line in out.splitlines() if line[6:].startswith(name + ":"))


def _edit_record(folder, change):
    path = folder / "record.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record, ensure_ascii=False) + "\n")


def test_verify_passes_on_a_fresh_run(small_run, capsys):
    code, out = _verify(capsys, small_run)
    assert code == 0, out
    assert out.splitlines()[-1].startswith("VERIFIED")
    for name in ("plan", "checkpoint hashes", "checkpoint re-evaluation", "summary", "counts",
                 "raw rows", "environment", "source"):
        assert _line(out, name).startswith("PASS"), out


def test_verify_passes_on_the_bundled_run(capsys):
    assert bundled_run_dir() is not None
    code = main(["verify"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert _line(out, "checkpoint re-evaluation").startswith("PASS")
    assert _line(out, "raw rows").startswith("PASS")


def test_tampered_rollout_row_is_named(run_copy, capsys):
    def change(record):
        record["runs"][1]["training"]["substring"][3]["rows"][5][2] = "12"

    _edit_record(run_copy, change)
    code, out = _verify(capsys, run_copy)
    assert code == 1
    line = _line(out, "raw rows")
    assert line.startswith("FAIL") and "seed 4, arm substring, step 4: rollout rows" in line
    assert out.splitlines()[-1].startswith("NOT VERIFIED")


def test_tampered_update_statistic_is_named(run_copy, capsys):
    def change(record):
        record["runs"][0]["training"]["strict"][0]["updates"][1]["kl"] += 1e-12

    _edit_record(run_copy, change)
    code, out = _verify(capsys, run_copy)
    assert code == 1
    assert "seed 3, arm strict, step 1: update statistics" in _line(out, "raw rows")


def test_tampered_evaluation_row_fails_re_evaluation(run_copy, capsys):
    def change(record):
        row = record["runs"][0]["evaluations"]["strict"]["test"]["sampled"][2]
        row[2] = row[2] + "9"

    _edit_record(run_copy, change)
    code, out = _verify(capsys, run_copy)
    assert code == 1
    line = _line(out, "checkpoint re-evaluation")
    assert line.startswith("FAIL") and "seed 3, stage strict: split test, sampled row 2" in line
    assert _line(out, "summary").startswith("FAIL")


def test_tampered_checkpoint_is_named_and_not_loaded(run_copy, capsys, monkeypatch):
    import torch

    target = run_copy / "seed-3-substring.pt"
    data = bytearray(target.read_bytes())
    data[100] ^= 0xFF
    target.write_bytes(bytes(data))
    seen = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda src, *a, **k: seen.append(src.getvalue())
                        or real(src, *a, **k))
    code, out = _verify(capsys, run_copy)
    assert code == 1
    line = _line(out, "checkpoint hashes")
    assert line.startswith("FAIL") and "seed-3-substring.pt" in line
    assert bytes(data) not in seen


def test_changed_plan_fails(run_copy, capsys):
    plan = run_copy / "plan.json"
    plan.write_bytes(plan.read_bytes().replace(b'"clip": 0.2', b'"clip": 0.25'))
    code, out = _verify(capsys, run_copy)
    assert code == 1 and _line(out, "plan").startswith("FAIL")


def test_tampered_summary_fails(run_copy, capsys):
    path = run_copy / "summary.json"
    summary = json.loads(path.read_text())
    summary[1]["test"]["greedy"]["strict"] += 1
    path.write_text(json.dumps(summary, indent=2) + "\n")
    code, out = _verify(capsys, run_copy)
    assert code == 1 and "seed 3, stage strict" in _line(out, "summary")


def test_count_mismatch_fails(run_copy, capsys):
    def change(record):
        del record["runs"][0]["training"]["strict"][-1]

    _edit_record(run_copy, change)
    code, out = _verify(capsys, run_copy)
    assert code == 1
    assert _line(out, "counts").startswith("FAIL")
    assert "5 RL steps" in _line(out, "counts")


def test_environment_and_source_differences_warn(run_copy, capsys):
    def change(record):
        record["torch"] = "1.0.0"
        record["source_sha256"]["postlab/train.py"] = "0" * 64

    _edit_record(run_copy, change)
    code, out = _verify(capsys, run_copy)
    assert code == 0
    assert _line(out, "environment").startswith("WARN") and "1.0.0" in out
    assert _line(out, "source").startswith("WARN") and "postlab/train.py" in out


def test_verify_cannot_check_missing_or_malformed(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nothing")]) == 2
    assert "not found" in capsys.readouterr().err
    (tmp_path / "record.json").write_text('{"runs": [')
    assert main(["verify", str(tmp_path)]) == 2
    assert "malformed JSON" in capsys.readouterr().err


def test_reproduce_pinpoints_an_injected_divergence(run_copy, tmp_path, capsys):
    def change(record):
        record["runs"][1]["training"]["strict"][2]["rows"][7][2] = "77"

    _edit_record(run_copy, change)
    code = main(["reproduce", str(run_copy), "--out-dir", str(tmp_path / "again"),
                 "--workers", "1", "--quiet"])
    out = capsys.readouterr().out
    assert code == 1
    assert "first divergence at seed 4, arm strict, step 3, row 7: recorded [" in out
    assert "'77', " in out
    assert "rollout rows: 1 of" in out and "evaluation rows: 0 of" in out


def test_reproduce_identical_for_a_fresh_run(small_run, tmp_path, capsys):
    assert main(["reproduce", str(small_run), "--out-dir", str(tmp_path / "again"),
                 "--workers", "2", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("identical:")


def test_reproduce_identical_for_the_teaching_plan(tmp_path, capsys):
    assert main(["reproduce", "--out-dir", str(tmp_path / "again"), "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("identical:")


def test_bundled_record_is_compressed_and_complete():
    folder = bundled_run_dir()
    record = json.loads(gzip.decompress((folder / "record.json.gz").read_bytes()))
    files = {info["file"] for run in record["runs"] for info in run["checkpoints"].values()}
    assert all((folder / name).is_file() for name in files)
    assert (folder / "PROVENANCE.json").is_file()
