"""A run folder is its record: every command opens it the same way and refuses, in one line
and before writing anything, a folder with a link in it, chunks that disagree with their
manifest (names, sizes, columns), two layouts at once, a record that does not fit its plan,
or a registration that is not the one the record names; and every command leaves the process
with its own exit code, whatever native thread pools it started."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from recordfiles import read_record, to_one_document, write_record

from postlab.cli import main
from postlab.jsonio import dump_json

pytest.importorskip("scipy")

@pytest.fixture
def work(registered_small_run, tmp_path) -> Path:
    """A folder of its own holding a copy of the run (``run``) and an untouched twin
    (``twin``, the base a comparison is made against)."""
    shutil.copytree(registered_small_run, tmp_path / "run")
    shutil.copytree(registered_small_run, tmp_path / "twin")
    return tmp_path


def _tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` with what a write would change."""
    return {str(p.relative_to(root)): (p.is_symlink(), p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def _header(run: Path) -> dict:
    return json.loads((run / "record.json").read_text())


def _write_header(run: Path, header: dict) -> None:
    (run / "record.json").write_bytes(dump_json(header))


def _rewrite_chunk(run: Path, index: int, change) -> None:
    """Chunk ``index`` rewritten as ``change(table)`` and named in the manifest with its new
    digest and size, as a careful editor would."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    header = _header(run)
    chunk = header["chunks"][index]
    path = run / chunk["file"]
    table = change(pq.read_table(path))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    path.write_bytes(data)
    chunk.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    _write_header(run, header)


def _linked(run: Path, name: str) -> str:
    """``name`` (a file or folder of the run) moved out of the folder, an identical copy
    left behind only as a symbolic link to it."""
    outside = run.parent / "elsewhere" / name
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(run / name, outside)
    (run / name).symlink_to(outside, target_is_directory=outside.is_dir())
    return name


# --- each damage, and what it is said to be -------------------------------------------------

def _link_chunk(run: Path) -> str:
    return _linked(run, _header(run)["chunks"][0]["file"])


def _link_rows(run: Path) -> str:
    return _linked(run, "rows")


def _link_checkpoint(run: Path) -> str:
    return _linked(run, "seed-3-initial.pt")


def _link_registration(run: Path) -> str:
    return _linked(run, "registration.json")


def _no_seed_column(run: Path) -> str:
    _rewrite_chunk(run, 0, lambda table: table.drop_columns(["seed"]))
    return "missing seed"


def _seed_as_text(run: Path) -> str:
    import pyarrow as pa

    def change(table):
        index = table.schema.get_field_index("seed")
        return table.set_column(index, pa.field("seed", pa.string()),
                                pa.array([str(v) for v in table.column("seed").to_pylist()]))
    _rewrite_chunk(run, 0, change)
    return "column 'seed' is string"


def _extra_column(run: Path) -> str:
    import pyarrow as pa

    _rewrite_chunk(run, 0, lambda table: table.append_column(
        "note", pa.array(["x"] * table.num_rows)))
    return "not in the format note"


def _empty_chunk(run: Path) -> str:
    _rewrite_chunk(run, 0, lambda table: table.slice(0, 0))
    return "chunk-00000.parquet"


def _another_seeds_rows(run: Path) -> str:
    # the two chunks swapped, the manifest's digests and sizes made to match
    header = _header(run)
    first, second = (run / chunk["file"] for chunk in header["chunks"])
    one, two = first.read_bytes(), second.read_bytes()
    first.write_bytes(two)
    second.write_bytes(one)
    for chunk, data in zip(header["chunks"], (two, one), strict=True):
        chunk.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    _write_header(run, header)
    return "holds another seed"


def _byte_count_off(run: Path) -> str:
    header = _header(run)
    header["chunks"][0]["bytes"] += 1
    _write_header(run, header)
    return "the manifest names"


def _unnamed_chunk(run: Path) -> str:
    shutil.copy(run / "rows" / "chunk-00000.parquet", run / "rows" / "chunk-00077.parquet")
    return "chunk-00077.parquet"


def _checkpoint_entry_removed(run: Path) -> str:
    record = read_record(run)
    del record["runs"][0]["checkpoints"]["strict"]
    write_record(run, record)
    return "checkpoint entry of stage strict"


def _seed_not_in_plan(run: Path) -> str:
    # seed 4's rows relabelled seed 9 (its digests cover rows, not the seed's number)
    record = read_record(run)
    record["runs"][1]["seed"] = 9
    write_record(run, record)
    return r"seed 9 is not one of the plan's seeds|seeds \[3, 9\], plan has \[3, 4\]"


def _rows_beside_one_document(run: Path) -> str:
    chunks = run.parent / "kept-rows"
    shutil.copytree(run / "rows", chunks)
    to_one_document(run)
    shutil.copytree(chunks, run / "rows")
    return "one-document layout"


def _registration_removed(run: Path) -> str:
    (run / "registration.json").unlink()
    return "registration.json: missing"


def _registration_edited(run: Path) -> str:
    path = run / "registration.json"
    path.write_bytes(path.read_bytes().replace(b'"alpha": 0.05', b'"alpha": 0.10'))
    return "changed since training"


def _registration_redated(run: Path) -> str:
    # the file re-dated after training began, and the record's entry made to match
    path = run / "registration.json"
    registration = json.loads(path.read_text())
    registration["registered_at"] = "2099-01-01T00:00:00Z"
    path.write_text(json.dumps(registration))
    header = _header(run)
    header["registration"].update(sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                                  registered_at="2099-01-01T00:00:00Z")
    _write_header(run, header)
    return "after training began"


def _chunk_missing(run: Path) -> str:
    (run / _header(run)["chunks"][1]["file"]).unlink()
    return "missing"


def _chunk_damaged(run: Path) -> str:
    path = run / _header(run)["chunks"][1]["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return "changed or damaged"


LINKS = {"link-chunk": _link_chunk, "link-rows": _link_rows,
         "link-checkpoint": _link_checkpoint, "link-registration": _link_registration}
CHUNKS = {"no-seed-column": _no_seed_column, "seed-as-text": _seed_as_text,
          "extra-column": _extra_column, "another-seeds-rows": _another_seeds_rows,
          "empty-chunk": _empty_chunk,
          "byte-count-off": _byte_count_off, "unnamed-chunk": _unnamed_chunk,
          "chunk-missing": _chunk_missing, "chunk-damaged": _chunk_damaged}
ENTRIES = {"checkpoint-entry-removed": _checkpoint_entry_removed,
           "seed-not-in-plan": _seed_not_in_plan,
           "rows-beside-one-document": _rows_beside_one_document}
REGISTRATIONS = {"registration-removed": _registration_removed,
                 "registration-edited": _registration_edited,
                 "registration-redated": _registration_redated}
DAMAGE = LINKS | CHUNKS | ENTRIES | REGISTRATIONS

#: The commands that read a run, as argument lists over the work folder.
READERS = {
    "report": lambda w: ["report", str(w / "run")],
    "report-json": lambda w: ["report", str(w / "run"), "--format", "json"],
    "page": lambda w: ["report", str(w / "run"), "--html", str(w / "page.html")],
    "export": lambda w: ["export", str(w / "run"), "--out-dir", str(w / "tables")],
    "samples": lambda w: ["samples", str(w / "run"), "--format", "jsonl"],
    "compare": lambda w: ["compare", str(w / "twin"), str(w / "run")],
    "plot": lambda w: ["plot", str(w / "run"), "--out-dir", str(w / "figures")],
    "reproduce": lambda w: ["reproduce", str(w / "run"), "--out-dir", str(w / "again"),
                            "--quiet"],
    "resume": lambda w: ["run", "--resume", "--out-dir", str(w / "run")],
}


#: What resume says of a seed it cannot resume from, where it is not what readers say.
RESUME_SAYS = {"checkpoint-entry-removed": "seed 3 is incomplete",
               "seed-not-in-plan": "seed 9 is not a pending seed"}


def _refused(capsys, args: list[str], needle: str) -> None:
    capsys.readouterr()
    assert main(args) == 2, args
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("postlab: "), (out, err)
    assert re.search(needle, err) and "Traceback" not in err, err


#: Damage a command rightly does not refuse: reproduce trains such a record's plan again and
#: names where the record differs (tests/cli/test_hardening.py), and a chunk no manifest names
#: is what an interrupted run leaves, which resume removes (tests/records/test_chunks.py).
NOT_REFUSED = {("reproduce", "checkpoint-entry-removed"), ("reproduce", "seed-not-in-plan"),
               ("resume", "unnamed-chunk")}


@pytest.mark.slow
@pytest.mark.parametrize(("command", "damage"), [
    (command, damage) for command in sorted(READERS) for damage in sorted(DAMAGE)
    if (command, damage) not in NOT_REFUSED])
def test_every_command_refuses_a_damaged_folder_in_one_line_and_writes_nothing(
        work, capsys, damage, command):
    needle = DAMAGE[damage](work / "run")
    if damage in LINKS:
        needle = "a symbolic link"
    elif command == "resume":
        needle = RESUME_SAYS.get(damage, needle)
    before = _tree(work)
    _refused(capsys, READERS[command](work), needle)
    assert _tree(work) == before


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_verify_does_not_verify_a_damaged_folder(work, capsys, damage):
    DAMAGE[damage](work / "run")
    capsys.readouterr()
    code = main(["verify", str(work / "run")])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code in (1, 2), out
    if code == 1:
        assert out.splitlines()[-1].startswith("NOT VERIFIED"), out
    else:
        assert err.count("\n") == 1, err
    if damage in LINKS or damage == "rows-beside-one-document":
        assert "FAIL  run folder: " in out, out


@pytest.mark.slow
def test_load_run_refuses_what_the_commands_refuse(work):
    from postlab import load_run
    from postlab.errors import UserError

    _link_checkpoint(work / "run")
    with pytest.raises(UserError, match="a symbolic link"):
        load_run(work / "run")


@pytest.mark.slow
def test_resume_refuses_a_seed_not_in_the_plan_before_removing_leftovers(work, capsys):
    run = work / "run"
    _seed_not_in_plan(run)
    (run / ".record.json.partial").write_bytes(b"{}")
    before = _tree(work)
    _refused(capsys, READERS["resume"](work), "seed 9 is not a pending seed")
    assert _tree(work) == before


@pytest.mark.slow
def test_an_intact_folder_still_reads_and_reproduces(work, capsys):
    """The checks refuse damage, not runs: the same copy, untouched, is read by every
    command and reproduced bit for bit (a link to the folder itself is the user's name for
    it, not a link inside it)."""
    (work / "alias").symlink_to(work / "run", target_is_directory=True)
    for command in ("report-json", "export", "samples", "compare"):
        assert main(READERS[command](work)) == 0, command
    assert main(["verify", str(work / "alias")]) == 0
    capsys.readouterr()
    assert main(READERS["reproduce"](work)) == 0
    assert "identical" in capsys.readouterr().out


@pytest.mark.slow
def test_a_record_named_as_a_file_is_read_whatever_else_its_folder_holds(work, capsys):
    """A record file named on its own may sit in any folder: links and special files there
    that no command reads are not the run's; a link among the files it reads is."""
    run = work / "run"
    (run / "notes").symlink_to(work / "twin")
    os.mkfifo(run / "pipe")
    assert main(["report", "--record", str(run / "record.json"), "--format", "json"]) == 0
    assert main(["report", str(run), "--format", "json"]) == 2
    _link_checkpoint(run)
    _refused(capsys, ["report", "--record", str(run / "record.json"), "--format", "json"],
             "seed-3-initial.pt: a symbolic link")


# --- a clean exit every time ------------------------------------------------------------------

def _postlab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "postlab", *args], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONFAULTHANDLER=""))


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["another-seeds-rows", "seed-as-text", "no-seed-column"])
def test_a_refused_chunk_ends_the_process_with_exit_code_2_every_time(work, damage):
    """A refusal after native pools started (Arrow's, torch's) once ended in SIGABRT about
    one time in three after the right message: each try runs in a fresh process."""
    needle = DAMAGE[damage](work / "run")
    for command in (["report", str(work / "run")], ["verify", str(work / "run")]):
        for _ in range(3):
            done = _postlab(*command)
            assert done.returncode in (1, 2), (done.returncode, done.stderr[-2000:])
            assert "terminate called" not in done.stderr and "Traceback" not in done.stderr
            assert needle in done.stdout + done.stderr


@pytest.mark.slow
def test_a_correct_reproduce_ends_the_process_with_exit_code_0_every_time(work):
    for attempt in range(3):
        done = _postlab("reproduce", str(work / "run"), "--out-dir",
                        str(work / f"again-{attempt}"), "--quiet")
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        assert "identical" in done.stdout and "terminate called" not in done.stderr


@pytest.mark.parametrize(("recorded", "problem"), [
    ([3, 5], None), ([], None), ([3, 4, 5], None),  # an interrupted run records some seeds
    ([5, 3], "not each once in the plan's order"), ([3, 3], "not each once"),
    ([3, 9], "seed 9 is not one of the plan's seeds"),
])
def test_a_postlab_records_seeds_are_some_of_its_plans_in_its_order(recorded, problem):
    from postlab.records.opened import seed_order_problems

    problems = seed_order_problems(recorded, [3, 4, 5])
    assert (problems == []) if problem is None else (len(problems) == 1
                                                     and problem in problems[0])
