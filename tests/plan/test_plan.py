import hashlib
import json
import os

import pytest

from postlab.cli import main
from postlab.errors import UserError
from postlab.jsonio import publish_bytes
from postlab.plan import frozen as planmod

TEACHING_SHA256 = "bcdfa765d205daabe1d5ce7e2e6942586f70608d996979f793ac9daa111fcc45"


def test_teaching_plan_bytes_match_the_reference_hash(tmp_path):
    path = tmp_path / "plan.json"
    assert main(["freeze", str(path)]) == 0
    raw = path.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == TEACHING_SHA256
    assert raw.endswith(b"}\n") and b'\n  "version": 1,' in raw


def test_freeze_matches_the_reference_freeze(tmp_path):
    import subprocess
    import sys

    from conftest import reference_dir

    ref = reference_dir()
    theirs = tmp_path / "theirs.json"
    subprocess.run([sys.executable, str(ref / "post_training_frontier.py"), "--freeze",
                    str(theirs)], check=True, capture_output=True)
    ours = tmp_path / "ours.json"
    assert main(["freeze", str(ours)]) == 0
    assert ours.read_bytes() == theirs.read_bytes()


def test_split_is_computed_from_the_shuffle_seed():
    default = planmod.split_by_unordered_pair()
    other = planmod.split_by_unordered_pair(seed=1)
    assert default != other
    for split in (default, other):
        assert sum(len(v) for v in split.values()) == 100
        everything = sorted(p for pairs in split.values() for p in pairs)
        assert everything == [[a, b] for a in range(10) for b in range(10)]
        unordered = {k: {tuple(sorted(p)) for p in v} for k, v in split.items()}
        assert not unordered["train"] & unordered["test"]
        assert not unordered["train"] & unordered["dev"]
        assert not unordered["dev"] & unordered["test"]
        for pairs in split.values():
            assert pairs == sorted(pairs)
            assert all([b, a] in pairs for a, b in pairs)


def test_existing_path_is_refused_and_untouched(tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_bytes(b"precious")
    assert main(["freeze", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err
    assert path.read_bytes() == b"precious"


def test_crash_mid_write_leaves_nothing(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"

    def crash(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(UserError, match="No space left"):
        planmod.freeze(path)
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_killed_writer_leaves_no_file_at_the_target(tmp_path, monkeypatch):
    path = tmp_path / "out.bin"

    class Killed(BaseException):
        pass

    def die(src, dst):
        raise Killed

    monkeypatch.setattr(os, "link", die)
    with pytest.raises(Killed):
        publish_bytes(path, b"data")
    assert not path.exists()


def test_freeze_into_missing_folder_is_one_line_error(tmp_path, capsys):
    assert main(["freeze", str(tmp_path / "no" / "plan.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_loaded_plan_is_typed_and_hashed_over_bytes(tmp_path):
    path = tmp_path / "plan.json"
    planmod.freeze(path)
    loaded = planmod.load_plan(path)
    assert loaded.sha256 == TEACHING_SHA256
    assert loaded.model.group_size == 8 and loaded.model.clip == 0.2
    assert loaded.model.split["test"] == loaded.data["split"]["test"]
    # Same content, other layout: another file, so another hash.
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(loaded.data))
    assert planmod.load_plan(compact).sha256 != TEACHING_SHA256


@pytest.mark.parametrize(("change", "message"), [
    ({"extra_field": 1}, "extra_field"),
    ({"group_size": "8"}, "group_size"),
    ({"clip": None}, "clip"),
    ({"seeds": [1.5]}, "seeds"),
])
def test_invalid_plans_name_the_field(tmp_path, change, message):
    data = planmod.teaching_plan() | change
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=message):
        planmod.load_plan(path)
