"""Records whose seeds live in Parquet chunks: what a chunk holds reads back as the JSON it
was, readers and verify name every way the files can differ from the manifest, and records of
the earlier one-document layout stay readable and resume into chunks."""

import hashlib
import json
import shutil
import subprocess
import sys

import pytest
from plans import SMALL, rows, write_plan
from recordfiles import inline_record, read_record, write_record

from postlab.cli import main
from postlab.errors import UserError
from postlab.jsonio import dump_json
from postlab.machine.cache import CACHE_VARIABLE
from postlab.plan.frozen import load_plan
from postlab.records.chunks import (
    ChunkedRuns,
    check_manifest,
    chunk_bytes,
    chunk_entry,
    chunk_name,
    chunk_problems,
)
from postlab.records.fingerprint import run_fingerprint
from postlab.records.record import load_record
from postlab.runs.orchestration import RunOptions, run_plan


def _rows(*texts):
    return [[1, 2, text, text != "999"] for text in texts]


def _entry(seed: int) -> dict:
    """A seed's entry with every part a chunk stores, keys in an unusual order."""
    step = {"step": 1, "rows": _rows("3", "03"), "zero_variance_groups": 0,
            "updates": [{"loss": 0.5, "gradient_norm_before_clip": 1.25, "kl": 0.0,
                         "entropy": 2.0, "ratio_outside_clip": 0.125}],
            "sampling": {"drawn": 3, "kept": 2, "dropped": 1, "replaced": 0,
                         "dropped_rows": _rows("999")}}
    return {"seed": seed, "sft_loss": [2.5, 1.0000000000000002],
            "evaluations": {"initial": {"test": {"greedy": _rows("3"),
                                                 "sampled": _rows("3", "999")}},
                            "strict": {"train": {"greedy": _rows("4")}}},
            "training": {"strict": [step, dict(step, step=2)]},
            "checkpoints": {"sft": {"file": "seed3-sft.pt", "sha256": "ab" * 32,
                                    "reload_equal": True}},
            "compute": {"sft": {"completions": 0, "tokens_generated": 0,
                                "gradient_steps": 30, "examples_seen": 240}},
            "arm_sft_loss": {}, "digests": {"evaluations": "cd" * 32}}


def _as_read(entry, where):
    """The entry's JSON as the chunk decodes it (a record's reader types it: records.models)."""
    return entry


def test_a_chunk_reads_back_as_the_json_it_was_written_from(tmp_path):
    entries = [_entry(3), _entry(9)]
    data = chunk_bytes(entries)
    (tmp_path / "rows").mkdir()
    (tmp_path / chunk_name(0)).write_bytes(data)
    chunk = chunk_entry(chunk_name(0), data, [3, 9])
    runs = ChunkedRuns(tmp_path, [chunk], [9, 3], _as_read, "record.json")
    # record order is the manifest's 'seeds', not the file's
    assert [run["seed"] for run in runs] == [9, 3]
    for seed, entry in ((9, entries[1]), (3, entries[0])):
        assert json.dumps(runs.entry(seed)) == json.dumps(entry)  # key order included
    assert chunk_problems(tmp_path, [chunk]) == []


def test_a_check_added_later_runs_once_per_seed_before_the_walk_sees_it(tmp_path):
    entries = [_entry(3), _entry(9)]
    data = chunk_bytes(entries)
    (tmp_path / "rows").mkdir()
    (tmp_path / chunk_name(0)).write_bytes(data)
    runs = ChunkedRuns(tmp_path, [chunk_entry(chunk_name(0), data, [3, 9])], [3, 9],
                       _as_read, "record.json")
    assert runs[0]["seed"] == 3  # read (and kept) before the check below exists
    seen = []
    runs.on_each(lambda entry: seen.append(entry["seed"]))
    assert seen == []  # nothing is read to run it
    for _ in range(3):
        assert [run["seed"] for run in runs] == [3, 9]
    assert seen == [3, 9]  # the kept seed too, and each once however often it is walked

    def refuse_nine(entry):
        if entry["seed"] == 9:
            raise UserError("seed 9 refused")

    runs.on_each(refuse_nine)
    walked = []
    with pytest.raises(UserError, match="seed 9 refused"):
        for run in runs:
            walked.append(run["seed"])
    assert walked == [3]  # the refused seed never reached the walk
    with pytest.raises(UserError, match="seed 9 refused"):
        runs.entry(9)  # and stays refused


@pytest.mark.parametrize("row, message", [
    ([10**10, 2, "3", True], "operand is outside"),
    ([-1, 2, "3", True], "operand is outside"),
    ([1, 2, "9" * 2000, True], "longer than any plan"),
    ([1, 2, None, True], "missing value"),
])
def test_a_rewritten_chunk_with_a_bad_row_is_refused(tmp_path, row, message):
    # a chunk rewritten with its manifest entry (the digest passes): the rows' columns are
    # checked as the record's row check checks each row
    entry = _entry(3)
    entry["evaluations"]["initial"]["test"]["sampled"][1] = row
    data = chunk_bytes([entry])
    (tmp_path / "rows").mkdir()
    (tmp_path / chunk_name(0)).write_bytes(data)
    runs = ChunkedRuns(tmp_path, [chunk_entry(chunk_name(0), data, [3])], [3], _as_read,
                       "record.json")
    with pytest.raises(UserError, match=message):
        runs.entry(3)


def test_a_chunk_refuses_an_integer_where_floats_are_kept():
    entry = _entry(3)
    entry["sft_loss"] = [2, 1.0]  # JSON would read 2 back as an int, a chunk as 2.0
    with pytest.raises(ValueError, match="floats only"):
        chunk_bytes([entry])


@pytest.mark.parametrize("chunks, seeds, message", [
    ([{"file": "rows/chunk-00000.parquet", "sha256": "0" * 64, "bytes": 1, "seeds": [1]}],
     [1, 2], "exactly the seeds"),
    ([{"file": "rows/chunk-00000.parquet", "sha256": "0" * 64, "bytes": 1, "seeds": [1]},
      {"file": "rows/chunk-00000.parquet", "sha256": "0" * 64, "bytes": 1, "seeds": [2]}],
     [1, 2], "named twice"),
    ([{"file": "rows/chunk-00000.parquet", "sha256": "0" * 64, "bytes": 1, "seeds": [1, 1]}],
     [1], "more than one chunk"),
    ([{"file": "../elsewhere.parquet", "sha256": "0" * 64, "bytes": 1, "seeds": [1]}],
     [1], "expected"),
])
def test_a_malformed_manifest_is_refused(chunks, seeds, message):
    with pytest.raises(UserError, match=message):
        check_manifest(chunks, seeds, "record.json")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The small plan on three seeds, trained by each engine into a chunked run."""
    folder = tmp_path_factory.mktemp("chunks")
    plan = write_plan(folder / "plan.json", **(SMALL | {"seeds": [3, 4, 5]}))
    out = {}
    for engine in ("exact", "ensemble"):
        out[engine] = folder / engine
        run_plan(load_plan(plan), plan.read_bytes(),
                 RunOptions(out_dir=out[engine], workers=1, engine=engine))
    return out


@pytest.fixture
def run_copy(trained, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(trained["ensemble"], target)
    return target


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["exact", "ensemble"])
def test_both_engines_write_chunked_records_that_verify(trained, engine, capsys):
    out = trained[engine]
    header = json.loads((out / "record.json").read_text())
    assert "runs" not in header and header["seeds"] == [3, 4, 5]
    named = sorted(chunk["file"] for chunk in header["chunks"])
    assert named == sorted(f"rows/{p.name}" for p in (out / "rows").iterdir())
    held = sorted(seed for chunk in header["chunks"] for seed in chunk["seeds"])
    assert held == [3, 4, 5]
    if engine == "ensemble":  # seeds finished together share a chunk
        assert len(header["chunks"]) < 3
    assert main(["verify", str(out)]) == 0, capsys.readouterr().out


@pytest.mark.slow
def test_the_fingerprint_covers_every_chunk(trained):
    out = trained["ensemble"]
    record_path = out / "record.json"
    header = json.loads(record_path.read_text())
    parts = dict(run_fingerprint(out, record_path, load_record(record_path)).parts)
    for chunk in header["chunks"]:
        assert parts[chunk["file"]] == hashlib.sha256((out / chunk["file"]).read_bytes()
                                                      ).hexdigest() == chunk["sha256"]


def _first_chunk(folder):
    header = json.loads((folder / "record.json").read_text())
    return header, header["chunks"][0], folder / header["chunks"][0]["file"]


def _missing(folder):
    _, _, path = _first_chunk(folder)
    path.unlink()
    return path.name


def _extra(folder):
    (folder / "rows" / "chunk-00099.parquet").write_bytes(b"PAR1")
    return "chunk-00099.parquet"


def _edited(folder):
    _, _, path = _first_chunk(folder)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x20
    path.write_bytes(bytes(data))
    return path.name


def _truncated(folder):
    # the manifest updated to match, so the digest passes and the file itself is the problem
    header, chunk, path = _first_chunk(folder)
    data = path.read_bytes()[:-200]
    path.write_bytes(data)
    header["chunks"][0] = chunk_entry(chunk["file"], data, chunk["seeds"])
    (folder / "record.json").write_bytes(dump_json(header))
    return path.name


def _mixed(folder):
    header = json.loads((folder / "record.json").read_text())
    header["runs"] = []
    (folder / "record.json").write_bytes(dump_json(header))
    return "two layouts"


DAMAGE = {"missing": _missing, "extra": _extra, "edited": _edited, "truncated": _truncated,
          "mixed": _mixed}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", ["report", "export", "samples"])
def test_readers_refuse_damaged_chunks_in_one_line(run_copy, tmp_path, capsys, damage,
                                                   command):
    named = DAMAGE[damage](run_copy)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    args = {"report": ["report", str(run_copy)],
            "export": ["export", str(run_copy), "--out-dir", str(tmp_path / "tables")],
            "samples": ["samples", str(run_copy)]}[command]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err, err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.slow
@pytest.mark.parametrize("command", ["report", "report-html", "export", "samples-jsonl",
                                     "compare"])
def test_a_seed_edited_with_its_manifest_is_refused_before_anything_is_out(
        run_copy, tmp_path, capsys, command):
    # the last seed's rows edited and its chunk rewritten with a new digest, as a careful
    # editor would: its own digests (taken in training) no longer match, and the readers,
    # which check each seed on their one walk over the rows, refuse before printing or
    # writing anything
    twin = tmp_path / "twin"
    shutil.copytree(run_copy, twin)
    record = read_record(run_copy)
    record["runs"][-1]["evaluations"]["initial"]["test"]["greedy"][0][2] += "9"
    write_record(run_copy, record)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    args = {"report": ["report", str(run_copy), "--format", "json"],
            "report-html": ["report", str(run_copy), "--html", str(tmp_path / "page.html")],
            "export": ["export", str(run_copy), "--out-dir", str(tmp_path / "tables")],
            "samples-jsonl": ["samples", str(run_copy), "--format", "jsonl"],
            "compare": ["compare", str(twin), str(run_copy)]}[command]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "changed since it was recorded: seed 5, stage initial, split test" in err, err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["missing", "extra", "edited", "truncated"])
def test_verify_names_the_damaged_chunk_and_checks_no_rows_without_it(run_copy, capsys,
                                                                       damage):
    named = DAMAGE[damage](run_copy)
    assert main(["verify", str(run_copy)]) == 1
    out = capsys.readouterr().out
    lines = {line[6:].split(":")[0]: line for line in out.splitlines() if line[:4] in
             ("PASS", "FAIL", "SKIP", "WARN")}
    assert lines["row files"].startswith("FAIL") and named in lines["row files"], out
    assert lines["raw rows"].startswith("SKIP"), out
    assert out.splitlines()[-1].startswith("NOT VERIFIED")


@pytest.mark.slow
def test_verify_catches_one_edited_chunk_among_many(trained, tmp_path, capsys):
    # the exact engine writes a chunk per seed: the edited one is named, the others pass
    target = tmp_path / "run"
    shutil.copytree(trained["exact"], target)
    header = json.loads((target / "record.json").read_text())
    assert len(header["chunks"]) == 3
    path = target / header["chunks"][1]["file"]
    data = bytearray(path.read_bytes())
    data[-100] ^= 1
    path.write_bytes(bytes(data))
    assert main(["verify", str(target)]) == 1
    out = capsys.readouterr().out
    failing = next(line for line in out.splitlines() if "row files" in line)
    assert path.name in failing and header["chunks"][0]["file"] not in failing


def _as_old_layout(folder, keep_seeds):
    """The run as an earlier version would have left it mid-run: one JSON record holding
    ``keep_seeds``, no chunks, no summary yet."""
    record = inline_record(read_record(folder))
    record["runs"] = [run for run in record["runs"] if run["seed"] in keep_seeds]
    shutil.rmtree(folder / "rows")
    (folder / "record.json").write_text(json.dumps(record))
    for name in ("summary.json", "fingerprint.txt"):
        (folder / name).unlink()


@pytest.mark.slow
def test_an_old_layout_record_is_read_then_resumed_into_chunks(trained, tmp_path, capsys):
    whole = read_record(trained["exact"])
    target = tmp_path / "run"
    shutil.copytree(trained["exact"], target)
    _as_old_layout(target, {3, 5})
    done = subprocess.run([sys.executable, "-m", "postlab", "run", "--out-dir", str(target),
                           "--resume", "--workers", "1", "--quiet"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    header = json.loads((target / "record.json").read_text())
    assert "runs" not in header and header["seeds"] == [3, 4, 5]
    assert rows(read_record(target)) == rows(whole)
    assert ((target / "summary.json").read_bytes()
            == (trained["exact"] / "summary.json").read_bytes())
    assert main(["verify", str(target)]) == 0, capsys.readouterr().out


@pytest.mark.slow
def test_a_chunk_left_by_a_crash_is_removed_on_resume(trained, tmp_path, capsys):
    target = tmp_path / "run"
    shutil.copytree(trained["exact"], target)
    header = json.loads((target / "record.json").read_text())
    # the crash came after the last seed's chunk was published, before the record named it
    last = header["chunks"].pop()
    header["seeds"] = [seed for seed in header["seeds"] if seed not in last["seeds"]]
    (target / "record.json").write_bytes(dump_json(header))
    (target / "summary.json").unlink()
    (target / "fingerprint.txt").unlink()
    assert main(["verify", str(target)]) == 1  # a stray chunk: not verified
    capsys.readouterr()
    done = subprocess.run([sys.executable, "-m", "postlab", "run", "--out-dir", str(target),
                           "--resume", "--workers", "1", "--quiet"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert rows(read_record(target)) == rows(read_record(trained["exact"]))
    assert main(["verify", str(target)]) == 0, capsys.readouterr().out


def _counted_reads(monkeypatch):
    """Decodes per seed from now on, with no entry kept (so every access decodes)."""
    from collections import Counter

    from postlab.records import chunks

    reads = Counter()
    read = chunks.ChunkedRuns._read

    def counting(self, seed):
        reads[seed] += 1
        return read(self, seed)

    monkeypatch.setattr(chunks, "KEPT_SEEDS", 0)
    monkeypatch.setattr(chunks.ChunkedRuns, "_read", counting)
    return reads


def test_verify_and_the_page_after_it_decode_no_seed(trained, tmp_path,
                                                                         monkeypatch, capsys):
    # verify's checks are columnar (no seed decoded), and the key its memo is filed under
    # hashes the folder's checkpoint files without decoding any seed either
    from postlab.runs import remembered

    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "memo"))
    reads = _counted_reads(monkeypatch)
    assert main(["verify", str(trained["ensemble"])]) == 0, capsys.readouterr().out
    assert reads == {}
    # the page after it reuses those checks (no seed is decoded for them); its analysis,
    # answer tables, pair grids and gaming finding are columnar: no seed is decoded at all
    monkeypatch.setattr(remembered, "verify_walked", None)  # would fail if called
    assert main(["report", str(trained["ensemble"]), "--format", "json",
                 "--html", str(tmp_path / "page.html")]) == 0
    assert "reused" in (tmp_path / "page.html").read_text()
    assert reads == {}
    capsys.readouterr()


def test_export_decodes_no_seed(trained, tmp_path, monkeypatch):
    # the checks and the run's names ride on one columnar pass, the six tables on another
    reads = _counted_reads(monkeypatch)
    assert main(["export", str(trained["ensemble"]), "--out-dir", str(tmp_path / "t")]) == 0
    assert reads == {}
