"""A run's page reuses an earlier verification only while every input of its checks is
unchanged, says when the checks ran, and checks afresh after any change; ``postlab verify``
always checks afresh."""

from __future__ import annotations

import shutil

import pytest
from recordfiles import read_record

from postlab.cli import main
from postlab.machine import provenance
from postlab.machine.cache import CACHE_VARIABLE
from postlab.records.models import Record
from postlab.records.record import bundled_run_dir, load_record, locate_run
from postlab.render.overview import verification_line
from postlab.runs import remembered
from postlab.runs.verdicts import Check
from postlab.runs.verify import Verified


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A copy of the bundled run, and a memo folder of this test's own."""
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "memo"))
    target = tmp_path / "run"
    shutil.copytree(bundled_run_dir(), target)
    return target


def _opened(folder):
    files = locate_run(folder)
    return files, load_record(files.record)


def _counting(monkeypatch) -> list[int]:
    """Count the real verifications the memo asks for."""
    calls = []
    real = remembered.verify_walked

    def counted(files, record):
        calls.append(1)
        return real(files, record)

    monkeypatch.setattr(remembered, "verify_walked", counted)
    return calls


def _faking(monkeypatch, checks, calls=None) -> None:
    """Checks that cost nothing, of a record that names no checkpoint."""
    def fake(files, record):
        if calls is not None:
            calls.append(1)
        return Verified(checks=checks, checkpoint_files=frozenset())

    monkeypatch.setattr(remembered, "verify_walked", fake)


def test_the_page_reuses_checks_until_a_file_changes(run, tmp_path, monkeypatch, capsys):
    calls = _counting(monkeypatch)
    first = remembered.verify_remembered(*_opened(run))
    assert calls == [1] and first.reused_from is None
    # the page, rendered next, reuses them and says when they ran
    page = tmp_path / "page.html"
    assert main(["report", str(run), "--html", str(page), "--lang", "en",
                 "--format", "json"]) == 0
    assert calls == [1]
    again = remembered.verify_remembered(*_opened(run))
    assert again.checks == first.checks and again.reused_from is not None
    assert f"checks of {again.reused_from}, reused" in page.read_text()
    # one byte more in a checkpoint: checked afresh, and the damage is found
    checkpoint = run / "seed-11-strict.pt"
    checkpoint.write_bytes(checkpoint.read_bytes() + b"x")
    damaged = remembered.verify_remembered(*_opened(run))
    assert calls == [1, 1] and damaged.reused_from is None
    hashes = next(c for c in damaged.checks if c.name == "checkpoint hashes")
    assert hashes.status == "fail"
    # 'postlab verify' never reads the memo: it checks afresh
    assert main(["verify", str(run)]) == 1
    assert calls == [1, 1, 1]
    assert "NOT VERIFIED" in capsys.readouterr().out


def test_a_page_after_verify_shows_that_verification(run, tmp_path, monkeypatch, capsys):
    calls = _counting(monkeypatch)
    assert main(["verify", str(run)]) == 0
    assert calls == [1]  # verify checks afresh, and remembers what it found
    page = tmp_path / "page.html"
    assert main(["report", str(run), "--html", str(page), "--lang", "en",
                 "--format", "json"]) == 0
    assert calls == [1]
    assert ", reused" in page.read_text()
    # with an expected fingerprint its checks are not the page's: checked, not remembered
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "other-memo"))
    expected = (run / "fingerprint.txt").read_text().split()[0]  # the run fingerprint
    assert main(["verify", str(run), "--expect", expected]) == 0
    assert not (tmp_path / "other-memo").exists()
    capsys.readouterr()


@pytest.mark.parametrize("change", ["checkpoint", "new checkpoint file", "summary", "plan",
                                    "record",
                                    "fingerprint file", "dangling fingerprint link", "source",
                                    "code path", "moved"])
def test_every_input_of_the_checks_is_in_the_key(run, tmp_path, monkeypatch, change):
    before = remembered.state_key(*_opened(run))
    assert before is not None and before == remembered.state_key(*_opened(run))
    folder = run
    if change == "checkpoint":
        (run / "seed-22-initial.pt").write_bytes(b"other")
    elif change == "new checkpoint file":  # the key hashes every .pt file, named or not
        (run / "seed-99-initial.pt").write_bytes(b"more")
    elif change == "summary":
        (run / "summary.json").write_bytes((run / "summary.json").read_bytes() + b" ")
    elif change == "plan":
        (run / "plan.json").write_bytes((run / "plan.json").read_bytes() + b" ")
    elif change == "record":  # the same value, other bytes (compressed afresh)
        import gzip

        path = next(run.glob("record.json*"))
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        path.write_bytes(gzip.compress(raw, compresslevel=1, mtime=1))
    elif change == "fingerprint file":
        (run / "fingerprint.txt").write_text("0" * 64 + "\n")
    elif change == "dangling fingerprint link":
        (run / "fingerprint.txt").unlink()
        (run / "fingerprint.txt").symlink_to(run / "nowhere")
        assert remembered.state_key(*_opened(run)) is None  # verify fails it: no reuse
        return
    elif change == "source":
        hashes = provenance.source_hashes()
        monkeypatch.setattr(provenance, "source_hashes",
                            lambda: hashes | {"postlab/new.py": "0" * 64})
    elif change == "code path":
        monkeypatch.setattr(remembered.numerics, "current_pin", lambda: "some-other-path")
    else:
        folder = tmp_path / "moved"
        shutil.copytree(run, folder)
    assert remembered.state_key(*_opened(folder)) != before, change


def test_a_bad_memo_means_the_checks_run_again(run, monkeypatch):
    fake = [Check(name="plan", status="pass", detail="x")]
    calls = []
    _faking(monkeypatch, fake, calls)
    files, record = _opened(run)
    remembered.verify_remembered(files, record)
    memo = remembered._memo_path(remembered.state_key(files, record))
    assert memo is not None and memo.is_file()
    for damage in (b"", b"not json", b"[]", b'{"memo": 1}', memo.read_bytes().replace(
            b'"pass"', b'"fine"')):
        memo.write_bytes(damage)
        result = remembered.verify_remembered(files, record)
        assert result.reused_from is None and result.checks == fake
    assert len(calls) == 6


def test_an_unwritable_memo_folder_costs_only_the_reuse(run, tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(CACHE_VARIABLE, str(blocked))
    fake = [Check(name="plan", status="pass", detail="x")]
    _faking(monkeypatch, fake)
    for _ in range(2):
        result = remembered.verify_remembered(*_opened(run))
        assert result.checks == fake and result.reused_from is None


def test_checks_of_a_record_naming_a_checkpoint_the_key_missed_are_not_kept(run,
                                                                          monkeypatch):
    # the key hashes the folder's .pt files without decoding the seeds; a record that names
    # another file (here, one not named .pt: a record cannot name one in a subfolder) fails
    # verify, and that failure is not kept, since a change to that file would not change
    # the key
    calls = _counting(monkeypatch)
    files, _ = _opened(run)
    shutil.copy(run / "seed-11-strict.pt", run / "seed-11-strict.ckpt")
    data = read_record(files.record)
    data["runs"][0]["checkpoints"]["strict"]["file"] = "seed-11-strict.ckpt"
    record = Record.of(data, str(files.record))
    for _ in range(2):
        result = remembered.verify_remembered(files, record)
        assert result.reused_from is None
        assert next(c for c in result.checks if c.name == "record").status == "fail"
    assert calls == [1, 1]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_line_says_when_reused_checks_ran(lang):
    checks = [Check(name="plan", status="pass", detail=""),
              Check(name="summary", status="fail", detail="")]
    fresh, passed = verification_line(checks[:1], lang)
    reused, again = verification_line(checks[:1], lang, reused_from="2026-12-02 08:00:00 UTC")
    assert passed is again is True
    assert reused.startswith(fresh) and "2026-12-02 08:00:00 UTC" in reused
    failed, verdict = verification_line(checks, lang, reused_from="2026-12-02 08:00:00 UTC")
    assert verdict is False and "2026-12-02 08:00:00 UTC" in failed
