"""Bad inputs: one line naming the file and the problem, exit 2, nothing written or changed."""

import errno
import gzip
import hashlib
import json
import os
import pickle
import tempfile

import pytest
import torch
from conftest import tiny_record
from plans import SMALL, write_plan
from recordfiles import read_record, write_record

from postlab.cli import main
from postlab.plan.frozen import freeze, load_plan, plan_bytes, teaching_plan
from postlab.policies.checkpoint import CheckpointError, load_checkpoint


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _fails_cleanly(capsys, args, needle, folder=None):
    before = _snapshot(folder) if folder else None
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("postlab: ") and needle in err, err
    assert "Traceback" not in err
    if folder:
        assert _snapshot(folder) == before
    return err


@pytest.fixture
def tiny(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_bytes(plan_bytes(teaching_plan() | {"eval_samples": 2}))
    record = tmp_path / "record.json"
    record.write_text(json.dumps(tiny_record(load_plan(plan).sha256)))
    return plan, record


def test_record_truncated_at_every_cut_point(tiny, capsys):
    _, record = tiny
    raw = record.read_bytes()
    for cut in range(len(raw) - 1):
        record.write_bytes(raw[:cut])
        assert main(["report", str(record.parent)]) == 2, cut
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(record) in err, (cut, err)


def test_compressed_record_truncated(tiny, capsys):
    _, record = tiny
    packed = gzip.compress(record.read_bytes())
    record.unlink()
    target = record.parent / "record.json.gz"
    for cut in (10, len(packed) // 2, len(packed) - 3):
        target.write_bytes(packed[:cut])
        _fails_cleanly(capsys, ["report", str(record.parent)], "record.json.gz")


def test_a_record_file_must_hold_what_its_name_says(tiny, capsys):
    """gzip data under record.json, or plain JSON under record.json.gz, is refused even where
    it would decode to the same record."""
    _, record = tiny
    plain = record.read_bytes()
    record.write_bytes(gzip.compress(plain))
    _fails_cleanly(capsys, ["report", str(record.parent)], "gzip data under a name without .gz")
    _fails_cleanly(capsys, ["verify", str(record.parent)], "gzip data under a name without .gz")
    record.unlink()
    packed = record.parent / "record.json.gz"
    packed.write_bytes(plain)
    _fails_cleanly(capsys, ["report", str(record.parent)], "named .gz but not gzip data")


def test_a_folder_with_two_different_records_is_refused(tiny, capsys):
    _, record = tiny
    plain = record.read_bytes()
    packed = record.parent / "record.json.gz"
    packed.write_bytes(gzip.compress(plain))
    assert main(["report", str(record.parent)]) == 0  # the same record twice is fine
    capsys.readouterr()
    packed.write_bytes(b"garbage that is no gzip")
    _fails_cleanly(capsys, ["report", str(record.parent)], "named .gz but not gzip data")
    other = json.loads(plain)
    other["runs"][0]["seed"] = 8
    packed.write_bytes(gzip.compress(json.dumps(other).encode()))
    for command in ("report", "verify"):
        _fails_cleanly(capsys, [command, str(record.parent)], "different records",
                       record.parent)


@pytest.mark.parametrize(("text", "needle"), [
    ('{"version": 1, "version": 2}', "duplicate key 'version'"),
    ('{"clip": NaN}', "NaN"),
    ('{"clip": Infinity}', "Infinity"),
    ('{"clip": -Infinity}', "-Infinity"),
    ("[]", "JSON object"),
    ('{"version": "one"}', "version"),
])
def test_bad_plan_files(tmp_path, capsys, text, needle):
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    _fails_cleanly(capsys, ["run", "--plan", str(plan), "--out-dir", str(tmp_path / "out")],
                   needle, tmp_path)
    assert not (tmp_path / "out").exists()


def test_plan_not_utf8(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_bytes(b'{"date": "\xff"}')
    _fails_cleanly(capsys, ["plan", "diff", str(plan), str(plan)], "UTF-8", tmp_path)


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda r: r["runs"][0].update(seed=True), "seed: wrong type"),
    (lambda r: r["runs"][0]["evaluations"]["initial"]["test"].update(greedy=[[1, 2, 3, True]]),
     "greedy[0]"),
    (lambda r: r["runs"][0].update(sft_loss=["x"]), "sft_loss"),
    (lambda r: r["runs"][0].update(checkpoints={"initial": {"file": "../x.pt", "sha256": "a",
                                                            "reload_equal": True}}),
     "checkpoints.initial.file"),
    (lambda r: r["runs"][0].update(training={"strict": [{"step": 1, "rows": [],
                                                         "zero_variance_groups": 0,
                                                         "updates": []}]}),
     "training.strict[0].rows"),
    (lambda r: r.update(runs={}), "runs: wrong type"),
])
def test_wrong_types_in_records(tiny, capsys, edit, needle):
    _, record = tiny
    data = json.loads(record.read_text())
    edit(data)
    record.write_text(json.dumps(data))
    _fails_cleanly(capsys, ["report", str(record.parent)], needle, record.parent)


def test_nonexistent_paths(tmp_path, capsys):
    missing = tmp_path / "missing"
    _fails_cleanly(capsys, ["report", str(missing)], "not found")
    _fails_cleanly(capsys, ["verify", str(missing)], "not found")
    _fails_cleanly(capsys, ["reproduce", str(missing), "--out-dir", str(tmp_path / "x")],
                   "not found")
    _fails_cleanly(capsys, ["plan", "diff", str(missing), str(missing)], "not found")
    _fails_cleanly(capsys, ["freeze", str(tmp_path / "v2.json"), "--from", str(missing),
                            "--set", "clip=0.3"], "not found")
    _fails_cleanly(capsys, ["run", "--plan", str(missing), "--out-dir", str(tmp_path / "o")],
                   "not found")
    _fails_cleanly(capsys, ["run", "--out-dir", str(missing), "--resume"], "no run folder")
    assert sorted(tmp_path.iterdir()) == []


def test_directory_where_a_file_is_expected(tmp_path, capsys):
    _fails_cleanly(capsys, ["run", "--plan", str(tmp_path), "--out-dir",
                            str(tmp_path / "o")], "is a directory")


def test_unreadable_plan(tmp_path, capsys, monkeypatch):
    plan = tmp_path / "plan.json"
    freeze(plan)
    real_open = os.open

    def denied(path, *args, **kwargs):
        if os.fspath(path) == str(plan):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, *args, **kwargs)

    # Root reads a chmod-000 file anyway, so the refusal is simulated at the open call.
    monkeypatch.setattr(os, "open", denied)
    _fails_cleanly(capsys, ["plan", "diff", str(plan), str(plan)], "not readable")


def test_unwritable_folder(tmp_path, capsys, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    _fails_cleanly(capsys, ["freeze", str(tmp_path / "plan.json")], "not writable", tmp_path)


def test_out_dir_under_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _fails_cleanly(capsys, ["run", "--out-dir", str(blocker / "run")], "cannot create",
                   tmp_path)


def test_out_dir_colliding_with_the_plan(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", **SMALL)
    _fails_cleanly(capsys, ["run", "--plan", str(plan), "--out-dir", str(plan)],
                   "already exists", tmp_path)


def test_reproduce_into_its_own_run_folder(tmp_path, capsys):
    from postlab.runs.orchestration import RunOptions, run_plan

    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"seeds": [3], "rl_steps": 2}))
    run = tmp_path / "run"
    run_plan(load_plan(plan), plan.read_bytes(), RunOptions(out_dir=run, workers=1))
    _fails_cleanly(capsys, ["reproduce", str(run), "--out-dir", str(run)], "already exists",
                   tmp_path)


def test_resume_with_another_plan(tmp_path, capsys):
    from postlab.runs.orchestration import RunOptions, run_plan

    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"seeds": [3], "rl_steps": 2}))
    other = write_plan(tmp_path / "other.json", **(SMALL | {"seeds": [4], "rl_steps": 2}))
    run = tmp_path / "run"
    run_plan(load_plan(plan), plan.read_bytes(), RunOptions(out_dir=run, workers=1))
    _fails_cleanly(capsys, ["run", "--plan", str(other), "--out-dir", str(run), "--resume"],
                   "is not the plan given", tmp_path)


def test_full_disk_while_writing_the_record_keeps_the_previous_one(tmp_path, capsys,
                                                                    monkeypatch):
    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"rl_steps": 2}))
    out = tmp_path / "run"
    real_fsync = os.fsync
    record_writes = {"n": 0}

    def fsync(fd):
        name = os.readlink(f"/proc/self/fd/{fd}")
        if ".record.json." in name:
            record_writes["n"] += 1
            if record_writes["n"] == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "record.json" in err
    record = read_record(out)
    assert [run["seed"] for run in record["runs"]] == [3]
    assert not list(out.glob(".*.partial"))


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("format_", ["pickle", "torch"])
def test_checkpoint_crafted_to_execute_code_does_not(tmp_path, format_):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    if format_ == "pickle":
        path.write_bytes(pickle.dumps({"state_dict": _Exploit(marker)}))
    else:
        torch.save({"state_dict": _Exploit(marker)}, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(CheckpointError, match="not a weights-only checkpoint"):
        load_checkpoint(path, digest)
    assert not marker.exists()


def test_verify_refuses_a_crafted_checkpoint(tmp_path, capsys):
    from postlab.runs.orchestration import RunOptions, run_plan

    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"seeds": [3], "rl_steps": 2}))
    run = tmp_path / "run"
    run_plan(load_plan(plan), plan.read_bytes(), RunOptions(out_dir=run, workers=1))
    marker = tmp_path / "pwned"
    evil = run / "seed-3-strict.pt"
    evil.unlink()
    torch.save({"state_dict": _Exploit(marker)}, evil)
    record = read_record(run)
    evil_digest = hashlib.sha256(evil.read_bytes()).hexdigest()
    record["runs"][0]["checkpoints"]["strict"]["sha256"] = evil_digest
    write_record(run, record)
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert "not a weights-only checkpoint" in out
    assert not marker.exists()


def test_run_refuses_a_taken_folder_or_a_bad_plan_before_saying_anything(tmp_path, capsys):
    """No code-path line and no cost estimate before the refusal: they would read as if the
    run were about to start."""
    taken = tmp_path / "taken"
    taken.mkdir()
    for args, needle in ((["run", "--out-dir", str(taken)], "already exists"),
                         (["run", "--plan", str(tmp_path / "none.json"), "--out-dir",
                           str(tmp_path / "new")], "none.json")):
        assert main(args) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1 and needle in captured.err
