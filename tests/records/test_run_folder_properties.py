"""Random edits of a run folder, each put through every reading command and ``verify``.

An edit may touch a chunk's bytes (its manifest entry kept or rewritten to match), the
manifest, the record's other fields, a seed's entry (rewritten as a careful editor would,
digests of the chunk and manifest recomputed), the fingerprint file, the registration, a
checkpoint, the plan or the summary, or replace any file or folder with a symbolic link to an
identical copy. Whatever the edit: ``verify --expect`` (the run fingerprint noted when the
run finished) does not verify, no command shows a traceback, a command that refuses says so
in one line with exit code 2 and writes nothing, and every edit of what the readers read
(chunks, manifest, entries, registration, plan, links) is refused by every reader.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recordfiles import read_record, write_record

from postlab.cli import main
from postlab.jsonio import dump_json

pytest.importorskip("scipy")

READERS = {
    "report": lambda w: ["report", str(w / "run"), "--format", "json"],
    "export": lambda w: ["export", str(w / "run"), "--out-dir", str(w / "tables")],
    "samples": lambda w: ["samples", str(w / "run"), "--format", "jsonl"],
}


def _header(run: Path) -> dict:
    return json.loads((run / "record.json").read_text())


def _write_header(run: Path, header: dict) -> None:
    (run / "record.json").write_bytes(dump_json(header))


def _flip(path: Path, data: st.DataObject) -> None:
    raw = bytearray(path.read_bytes())
    at = data.draw(st.integers(0, len(raw) - 1), label=f"byte of {path.name}")
    raw[at] ^= data.draw(st.integers(1, 255), label="xor")
    path.write_bytes(bytes(raw))


def _chunk(run: Path, data: st.DataObject) -> tuple[dict, int]:
    header = _header(run)
    return header, data.draw(st.integers(0, len(header["chunks"]) - 1), label="chunk")


def _rematch(run: Path, header: dict, index: int) -> None:
    """The manifest entry of chunk ``index`` made to match its file again."""
    entry = header["chunks"][index]
    raw = (run / entry["file"]).read_bytes()
    entry.update(sha256=hashlib.sha256(raw).hexdigest(), bytes=len(raw))
    _write_header(run, header)


# Each edit changes the run folder and says whether every reader must refuse it (an edit of
# what readers read) or may read it (a file only verify checks: a checkpoint's bytes, the
# summary, the fingerprint file, provenance fields).

def chunk_byte(run: Path, data: st.DataObject) -> bool:
    header, index = _chunk(run, data)
    _flip(run / header["chunks"][index]["file"], data)
    return True


def chunk_byte_rematched(run: Path, data: st.DataObject) -> bool:
    # a flip in bytes no reader decodes (a footer's writer name) can leave the rows as they
    # were: then the readers rightly read them, and only verify's hashes see the edit
    header, index = _chunk(run, data)
    _flip(run / header["chunks"][index]["file"], data)
    _rematch(run, header, index)
    return False


def chunk_truncated(run: Path, data: st.DataObject) -> bool:
    header, index = _chunk(run, data)
    path = run / header["chunks"][index]["file"]
    raw = path.read_bytes()
    path.write_bytes(raw[:data.draw(st.integers(0, len(raw) - 1), label="kept bytes")])
    if data.draw(st.booleans(), label="manifest rematched"):
        _rematch(run, header, index)
    return True


def manifest_field(run: Path, data: st.DataObject) -> bool:
    header, index = _chunk(run, data)
    entry = header["chunks"][index]
    field = data.draw(st.sampled_from(["bytes", "sha256", "file", "seeds"]), label="field")
    if field == "bytes":
        entry["bytes"] += data.draw(st.integers(-50, 50).filter(bool), label="by")
    elif field == "sha256":
        entry["sha256"] = data.draw(st.text("0123456789abcdef", min_size=64, max_size=64)
                                    .filter(lambda v: v != entry["sha256"]), label="sha256")
    elif field == "file":
        entry["file"] = "rows/chunk-00042.parquet"
    else:
        entry["seeds"] = [entry["seeds"][0] + data.draw(st.integers(1, 9), label="shift")]
    _write_header(run, header)
    return True


def seed_order(run: Path, data: st.DataObject) -> bool:
    header = _header(run)
    header["seeds"] = list(reversed(header["seeds"]))
    _write_header(run, header)
    return True


def record_field(run: Path, data: st.DataObject) -> bool:
    header = _header(run)
    field = data.draw(st.sampled_from(["plan_sha256", "postlab_version", "wall_seconds",
                                       "threads"]), label="record field")
    if field == "plan_sha256":
        header[field] = "0" * 64
    elif field == "postlab_version":
        del header[field]  # then it reads as another program's record: verify says so
    elif field == "wall_seconds":
        header[field] += 1.5
    else:
        header[field] = header[field] + 1
    _write_header(run, header)
    return field == "plan_sha256"


def seed_entry(run: Path, data: st.DataObject) -> bool:
    record = read_record(run)
    entry = record["runs"][data.draw(st.integers(0, len(record["runs"]) - 1), label="seed")]
    edit = data.draw(st.sampled_from(["row text", "checkpoint entry", "rl step", "seed",
                                      "sft loss"]), label="entry edit")
    if edit == "row text":
        entry["evaluations"]["initial"]["test"]["sampled"][0][2] += "7"
    elif edit == "checkpoint entry":
        del entry["checkpoints"][data.draw(st.sampled_from(sorted(entry["checkpoints"])),
                                           label="stage")]
    elif edit == "rl step":
        entry["training"]["strict"].pop()
    elif edit == "seed":
        entry["seed"] += 100
    else:
        entry["sft_loss"][0] += 0.25
    write_record(run, record)
    return True


def fingerprint_file(run: Path, data: st.DataObject) -> bool:
    _flip(run / "fingerprint.txt", data)
    return False


def registration(run: Path, data: st.DataObject) -> bool:
    path = run / "registration.json"
    if data.draw(st.booleans(), label="removed"):
        path.unlink()
    else:
        _flip(path, data)
    return True


def checkpoint(run: Path, data: st.DataObject) -> bool:
    names = sorted(p.name for p in run.glob("seed-*.pt"))
    path = run / data.draw(st.sampled_from(names), label="checkpoint")
    how = data.draw(st.sampled_from(["byte", "removed", "another"]), label="how")
    if how == "byte":
        _flip(path, data)
    elif how == "removed":
        path.unlink()
    else:
        path.write_bytes((run / next(n for n in names if n != path.name)).read_bytes())
    return how == "removed"


def plan_file(run: Path, data: st.DataObject) -> bool:
    path = run / "plan.json"
    path.write_bytes(path.read_bytes().replace(b'"clip"', b'"clip" ', 1))
    return True


def summary(run: Path, data: st.DataObject) -> bool:
    _flip(run / "summary.json", data)
    return False


def linked(run: Path, data: st.DataObject) -> bool:
    entries = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    name = data.draw(st.sampled_from(entries), label="linked")
    outside = run.parent / "elsewhere" / name
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(run / name, outside)
    (run / name).symlink_to(outside, target_is_directory=outside.is_dir())
    return True


def unnamed_chunk(run: Path, data: st.DataObject) -> bool:
    header, index = _chunk(run, data)
    shutil.copy(run / header["chunks"][index]["file"], run / "rows" / "chunk-00099.parquet")
    return True


EDITS = [chunk_byte, chunk_byte_rematched, chunk_truncated, manifest_field, seed_order,
         record_field, seed_entry, fingerprint_file, registration, checkpoint, plan_file,
         summary, linked, unnamed_chunk]


def _tree(root: Path) -> dict[str, tuple]:
    return {str(p.relative_to(root)): (p.is_symlink(), p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


@pytest.mark.slow
@settings(max_examples=80, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edit=st.sampled_from(EDITS), data=st.data())
def test_no_edit_of_a_run_folder_is_read_as_the_run(registered_small_run, tmp_path_factory, capsys,
                                                    edit, data):
    work = tmp_path_factory.mktemp("edited")
    run = work / "run"
    shutil.copytree(registered_small_run, run)
    noted = (registered_small_run / "fingerprint.txt").read_text().split()[0]
    must_refuse = edit(run, data)
    before = _tree(work)
    for name, args in READERS.items():
        capsys.readouterr()
        code = main(args(work))
        out, err = capsys.readouterr()
        assert "Traceback" not in err, (name, err)
        if must_refuse:
            assert code == 2, (name, out[:300], err)
        assert code in (0, 2), (name, code, err)
        if code == 2:
            assert err.count("\n") == 1 and err.startswith("postlab: "), (name, err)
            assert out == "" and _tree(work) == before, name
        else:
            shutil.rmtree(work / "tables", ignore_errors=True)
            before = _tree(work)
    # the noted run fingerprint covers every file but fingerprint.txt, which verify reads
    # when no fingerprint is given
    expect = [] if edit is fingerprint_file else ["--expect", noted]
    capsys.readouterr()
    code = main(["verify", str(run), *expect])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code in (1, 2), out
    if code == 1:
        assert out.splitlines()[-1].startswith("NOT VERIFIED"), out
    else:
        assert err.count("\n") == 1 and err.startswith("postlab: "), err
