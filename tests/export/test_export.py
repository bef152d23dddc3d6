"""``postlab export`` and ``postlab.load_run``: counts and scores read back from Parquet and CSV
equal those counted from the record by a plain loop; the queries docs/export.md shows run and
agree with summary.json; a sweep's tables carry its versions; bad input is one line, exit 2,
and nothing written."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from plans import SMALL, typed, write_plan
from recordfiles import write_record

import postlab
from postlab.cli import main
from postlab.errors import UserError
from postlab.export.files import read_export
from postlab.export.tables import TABLES, UPDATE_STATISTICS, Source
from postlab.records.models import Record
from postlab.records.record import bundled_run_dir, load_record
from postlab.tasks.contracts import CONTRACTS, contracts_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "export.md"
#: The folder the documented queries read, relative to where they run.
FOLDER = "run-tables"


def _record() -> Record:
    return load_record(bundled_run_dir() / "record.json.gz")


def _accepts(contract: str, a: int, b: int, text: str, terminated: bool) -> bool:
    """The contract called directly, with the teaching task's answer a + b."""
    return bool(CONTRACTS[contract]((a, b), text, terminated, a + b))


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """The bundled run exported as Parquet into ``<tmp>/run-tables``."""
    out = tmp_path_factory.mktemp("export") / FOLDER
    assert main(["export", "--out-dir", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def record() -> Record:
    return _record()


# --- round trip -------------------------------------------------------------------------------

def test_evaluation_counts_and_scores_equal_the_record(exported, record):
    expected_rows: Counter = Counter()
    expected_accepted: Counter = Counter()
    for run in record.runs:
        for stage, splits in run.evaluations.items():
            for split, decoded in splits.items():
                for decoding, rows in (("greedy", decoded.greedy), ("sampled", decoded.sampled)):
                    key = (run.seed, stage, split, decoding)
                    expected_rows[key] += len(rows)
                    for a, b, text, terminated in rows:
                        for contract in contracts_for("integer"):
                            expected_accepted[(*key, contract)] += _accepts(
                                contract, a, b, text, terminated)
    rows: Counter = Counter()
    accepted: Counter = Counter()
    for row in pq.read_table(exported / "eval_samples.parquet").to_pylist():
        key = (row["seed"], row["stage"], row["split"], row["decoding"])
        rows[key] += 1
        for contract in contracts_for("integer"):
            accepted[(*key, contract)] += row[contract]
    assert rows == expected_rows
    assert accepted == expected_accepted
    assert sum(rows.values()) == 3 * 3 * (100 + 100 * 16)


def test_rollout_counts_scores_and_rewards_equal_the_record(exported, record):
    expected: Counter = Counter()
    for run in record.runs:
        for arm, history in run.arms.items():
            for step in history:
                for a, b, text, terminated in step.rows:
                    key = (run.seed, arm, step.step)
                    expected[(*key, "rows")] += 1
                    for contract in contracts_for("integer"):
                        expected[(*key, contract)] += _accepts(contract, a, b, text, terminated)
    found: Counter = Counter()
    for row in pq.read_table(exported / "rollout_samples.parquet").to_pylist():
        assert row["kept"] and row["rewarded_by"] == row["arm"]  # teaching arms: no dropping
        key = (row["seed"], row["arm"], row["step"])
        found[(*key, "rows")] += 1
        for contract in contracts_for("integer"):
            found[(*key, contract)] += row[contract]
    assert +found == +expected


def test_updates_steps_and_sft_losses_equal_the_record(exported, record):
    updates = pq.read_table(exported / "updates.parquet").to_pylist()
    steps = pq.read_table(exported / "steps.parquet").to_pylist()
    expected_updates, expected_steps = [], []
    for run in record.runs:
        for arm, history in run.arms.items():
            for step in history:
                assert set().union(*(update.model_fields_set for update in step.updates)) \
                    == set(UPDATE_STATISTICS)
                expected_updates += [{"seed": run.seed, "arm": arm, "step": step.step,
                                      "update": index, **update.model_dump()}
                                     for index, update in enumerate(step.updates)]
                expected_steps.append((run.seed, arm, step.step, len(step.rows),
                                       step.zero_variance_groups, len(step.updates)))
    assert updates == expected_updates
    assert [tuple(s.values())[:6] for s in steps] == expected_steps
    assert all(s["groups_drawn"] is None for s in steps)
    losses = pq.read_table(exported / "sft_losses.parquet").to_pylist()
    assert [(r["seed"], r["stage"], r["step"], r["loss"]) for r in losses] == [
        (run.seed, "initial", index + 1, loss)
        for run in record.runs for index, loss in enumerate(run.sft_loss or [])]


def test_summary_table_equals_summary_json(exported):
    summary = json.loads((bundled_run_dir() / "summary.json").read_text())
    table = {(r["seed"], r["stage"], r["split"], r["decoding"]): r
             for r in pq.read_table(exported / "summary.parquet").to_pylist()}
    count = 0
    for entry in summary:
        for split, decoded in entry.items():
            if split in ("seed", "stage"):
                continue
            for decoding, metrics in decoded.items():
                row = table[(entry["seed"], entry["stage"], split, decoding)]
                assert {key: row[key] for key in metrics} == metrics
                assert row["covered_under"] == "strict"
                count += 1
    assert count == len(table) == 3 * 3 * 3 * 2


def test_csv_reads_back_equal_to_parquet(exported, tmp_path):
    out = tmp_path / "csv"
    assert main(["export", "--format", "csv", "--out-dir", str(out)]) == 0
    from_csv, from_parquet = read_export(out), read_export(exported)
    assert list(from_csv) == list(TABLES)
    for name, table in from_parquet.items():
        assert from_csv[name].equals(table), name


def test_schema_json_and_parquet_metadata_say_what_the_folder_holds(exported, record):
    schema = json.loads((exported / "schema.json").read_text())
    assert schema["schema"] == "postlab.export/1"
    assert schema["postlab_version"] == postlab.__version__
    assert schema["format"] == "parquet" and schema["sweep"] is False
    assert schema["contracts"] == contracts_for("integer")
    [run] = schema["runs"]
    assert run["plan_sha256"] == record.plan_sha256 and run["seeds"] == [11, 22, 33]
    assert sorted(p.name for p in exported.iterdir()) == sorted(
        ["schema.json", *(f"{name}.parquet" for name in TABLES)])
    for name, entry in schema["tables"].items():
        table = pq.read_table(exported / entry["file"])
        assert table.num_rows == entry["rows"]
        assert table.column_names == [c["name"] for c in entry["columns"]]
        meta = json.loads(table.schema.metadata[b"postlab.export"])
        assert meta["table"] == name and meta["runs"] == schema["runs"]


# --- the documentation ------------------------------------------------------------------------

def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_the_document_lists_every_column_with_its_type():
    text = DOC.read_text()
    for name, spec in TABLES.items():
        section = text.split(f"### `{name}`\n", 1)[1].split("\n#", 1)[0]
        for column in spec.columns:
            kind = column.type + (" (nullable)" if column.nullable else "")
            assert f"| `{column.name}` | {kind} | {column.meaning} |" in section, (name, column)


def test_the_documented_duckdb_query_equals_summary_json(exported, monkeypatch):
    [query] = _blocks("sql")
    monkeypatch.chdir(exported.parent)
    result = duckdb.sql(query).fetchall()
    summary = json.loads((bundled_run_dir() / "summary.json").read_text())
    assert [(stage, split) for stage, split, *_ in result] == [
        (stage, split) for split in ("dev", "test")
        for stage in ("initial", "strict", "substring")]
    for stage, split, answers, *rates in result:
        sampled = [e[split]["sampled"] for e in summary if e["stage"] == stage]
        assert answers == sum(m["n"] for m in sampled)
        for contract, rate in zip(("strict", "substring", "exact"), rates, strict=True):
            counted = [m[f"{contract}_rate"] for m in sampled if f"{contract}_rate" in m]
            if counted:  # summary.json holds the plan's contracts only
                assert rate == pytest.approx(sum(counted) / len(counted), abs=1e-12)
        if split == "test":  # the numbers the document quotes
            assert f"{rates[0]:.4f}" in DOC.read_text() and f"{rates[1]:.4f}" in DOC.read_text()


def test_the_documented_polars_query_equals_a_loop_over_the_record(exported, record,
                                                                   monkeypatch):
    [query] = [block for block in _blocks("python") if "import polars" in block]
    monkeypatch.chdir(exported.parent)
    names: dict = {}
    exec(query, names)
    gap = {(r["arm"], r["step"]): r["gap"] for r in names["gap"].to_dicts()}
    expected: dict = {}
    for run in record.runs:
        for arm, history in run.arms.items():
            for step in history:
                for a, b, text, terminated in step.rows:
                    lenient = _accepts("substring", a, b, text, terminated)
                    strict = _accepts("strict", a, b, text, terminated)
                    total = expected.setdefault((arm, step.step), [0, 0])
                    total[0] += lenient - strict
                    total[1] += 1
    assert gap.keys() == expected.keys()
    for key, (difference, rows) in expected.items():
        assert gap[key] == pytest.approx(difference / rows, abs=1e-12)


def test_the_documented_load_run_example_runs(capsys):
    [example] = [block for block in _blocks("python") if "load_run" in block]
    exec(example, {})
    assert "substring" in capsys.readouterr().out


# --- load_run ---------------------------------------------------------------------------------

def test_load_run_views_equal_the_exported_tables(exported):
    run = postlab.load_run()
    assert run.seeds == (11, 22, 33)
    assert run.stages == ("initial", "strict", "substring")
    assert run.arms == ("strict", "substring")
    assert run.rewarded_by == {"strict": "strict", "substring": "substring"}
    assert run.plan_sha256 == run.record.plan_sha256 == run.plan.sha256
    tables = run.tables()
    assert list(tables) == list(TABLES)
    for name, table in tables.items():
        assert table.equals(pq.read_table(exported / f"{name}.parquet")), name
        frame = getattr(run, name)()
        plain = table.to_pandas()
        assert (frame.astype(object).where(frame.notna(), None).equals(
            plain.astype(object).where(plain.notna(), None))), name
        assert list(frame.columns) == table.column_names
        for column in table.schema:  # integers stay integers, nullable where values may miss
            if str(column.type) == "int64":
                assert str(frame[column.name].dtype) == "Int64", (name, column.name)
    groups = run.steps()["groups_drawn"]
    assert groups.isna().all() and str(groups.dtype) == "Int64"  # no dynamic sampling
    assert "record=" not in repr(run) and "seeds=(11, 22, 33)" in repr(run)
    assert postlab.load_run(str(bundled_run_dir())).record_sha256 == run.record_sha256


def test_import_postlab_stays_light():
    code = ("import sys, postlab; assert 'postlab.export' not in sys.modules; "
            "assert 'pyarrow' not in sys.modules; assert callable(postlab.load_run)")
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)


# --- pure tables ------------------------------------------------------------------------------

class _Built:
    """One table as an export builds it (columnar), whole, its columns as lists."""

    def __init__(self, name: str, sources: list[Source], contracts: list[str]) -> None:
        import pyarrow as pa

        from postlab.export.columnar import columnar_batches
        from postlab.export.tables import arrow_schema, table_columns

        self.schema = arrow_schema(table_columns(name, sources, contracts))
        batches = [batch for _, batch in columnar_batches(sources, contracts,
                                                          {name: self.schema}, 1 << 20)]
        self.arrow = pa.Table.from_batches(batches, schema=self.schema)

    def column(self, name: str) -> list:
        return self.arrow.column(name).to_pylist()


build_table = _Built


def _hand_made() -> Source:
    """One seed, one stage, one split of two questions, two samples each; one empty answer."""
    greedy = [[1, 2, "3", True], [4, 5, "", True]]
    sampled = [[1, 2, "03", True], [1, 2, "", False], [4, 5, "9", True], [4, 5, "19", False]]
    record = {"plan_sha256": "0" * 64, "runs": [{
        "seed": 7, "evaluations": {"initial": {"test": {"greedy": greedy,
                                                         "sampled": sampled}}}}]}
    return Source(Record.of(record), typed(eval_samples=2))


def test_positions_scores_and_empty_texts():
    table = build_table("eval_samples", [_hand_made()], ["strict", "substring", "exact"])
    assert table.column("question") == [0, 1, 0, 0, 1, 1]
    assert table.column("sample") == [0, 0, 0, 1, 0, 1]
    assert table.column("text") == ["3", "", "03", "", "9", "19"]
    assert table.column("tokens") == [2, 1, 3, 0, 2, 2]
    assert table.column("strict") == [True, False, True, False, True, False]
    assert table.column("exact") == [True, False, False, False, True, False]
    assert table.column("substring") == [True, False, True, False, True, True]


def test_csv_keeps_empty_texts_apart_from_nulls(tmp_path):
    import pyarrow.csv as csv

    from postlab.export.tables import arrow_schema, table_columns

    table = build_table("eval_samples", [_hand_made()], ["strict"]).arrow
    csv.write_csv(table, tmp_path / "t.csv")
    options = csv.ConvertOptions(column_types={f.name: f.type for f in table.schema},
                                 strings_can_be_null=False)
    back = csv.read_csv(tmp_path / "t.csv", convert_options=options)
    schema = arrow_schema(table_columns("eval_samples", [], ["strict"]))
    assert back.cast(schema).equals(table)


def test_a_registered_contract_gets_its_own_column():
    def odd_length(pair, text, terminated, expected=None):
        return int(len(text) % 2 == 1)

    with CONTRACTS.registered("odd_length", odd_length):
        table = build_table("eval_samples", [_hand_made()], contracts_for("integer"))
        summary = build_table("summary", [_hand_made()], contracts_for("integer"))
    assert table.column("odd_length") == [True, False, False, False, True, False]
    assert summary.column("odd_length") == [1, 1]
    assert summary.column("odd_length_rate") == [0.5, 0.25]


def test_a_contract_named_like_a_column_is_refused():
    with (CONTRACTS.registered("text", lambda *args: 1),
          pytest.raises(UserError, match=r"clashes .* column text")):
        build_table("eval_samples", [_hand_made()], contracts_for("integer"))


# --- refusals ---------------------------------------------------------------------------------

def _one_line(capsys, args: list[str]) -> str:
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    return captured.err


def _nothing_left(folder: Path, out: Path) -> None:
    assert not out.exists()
    assert not list(folder.glob(".*.partial"))


def test_an_existing_out_dir_is_refused_and_left_alone(tmp_path, capsys):
    out = tmp_path / "tables"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    assert "already exists" in _one_line(capsys, ["export", "--out-dir", str(out)])
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_an_unknown_format_is_refused(tmp_path, capsys):
    out = tmp_path / "tables"
    err = _one_line(capsys, ["export", "--format", "xlsx", "--out-dir", str(out)])
    assert "--format xlsx: unknown; choose one of parquet, csv" in err
    _nothing_left(tmp_path, out)


def test_what_is_not_a_run_is_refused(tmp_path, capsys):
    out = tmp_path / "tables"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "record not found" in _one_line(capsys, ["export", str(empty), "--out-dir",
                                                    str(out)])
    (empty / "record.json").write_text("{}")
    assert "missing field 'plan_sha256'" in _one_line(capsys, ["export", str(empty),
                                                               "--out-dir", str(out)])
    _nothing_left(tmp_path, out)


def _copy_of_bundled(folder: Path, change) -> Path:
    folder.mkdir()
    shutil.copy(bundled_run_dir() / "plan.json", folder / "plan.json")
    record = json.loads(gzip.decompress((bundled_run_dir() / "record.json.gz").read_bytes()))
    change(record)
    write_record(folder, record)
    return folder


def test_a_changed_record_is_refused(tmp_path, capsys):
    def edit(record):
        record["runs"][1]["evaluations"]["strict"]["test"]["sampled"][0][2] = "77"

    run = _copy_of_bundled(tmp_path / "run", edit)
    out = tmp_path / "tables"
    err = _one_line(capsys, ["export", str(run), "--out-dir", str(out)])
    assert "changed since it was recorded" in err and "seed 22" in err
    _nothing_left(tmp_path, out)
    with pytest.raises(UserError, match="changed since it was recorded"):
        postlab.load_run(run)


def test_a_record_of_another_plan_is_refused(tmp_path, capsys):
    def other_plan(record):
        record["plan_sha256"] = "0" * 64

    run = _copy_of_bundled(tmp_path / "run", other_plan)
    out = tmp_path / "tables"
    assert "record was made under plan sha256 000" in _one_line(
        capsys, ["export", str(run), "--out-dir", str(out)])
    _nothing_left(tmp_path, out)


def test_missing_pyarrow_names_the_extra(tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.setitem(sys.modules, name, None)
    out = tmp_path / "tables"
    err = _one_line(capsys, ["export", "--out-dir", str(out)])
    assert "pip install 'postlab[export]'" in err
    _nothing_left(tmp_path, out)


# --- sweeps -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_sweep_exports_every_version_with_a_version_column(tmp_path, capsys):
    write_plan(tmp_path / "base.json", **SMALL)
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps({"base": "base.json", "seeds": [3], "versions": [
        {"name": "dynamic", "set": {"dynamic_sampling": {"max_extra_groups": 2}}}]}))
    sweep = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--out-dir", str(sweep), "--executor", "local",
                 "--workers", "1", "--quiet"]) == 0
    out = tmp_path / "tables"
    assert main(["export", str(sweep), "--out-dir", str(out)]) == 0
    capsys.readouterr()
    tables = read_export(out)
    schema = json.loads((out / "schema.json").read_text())
    assert schema["sweep"] is True
    assert [r["version"] for r in schema["runs"]] == ["base", "dynamic"]
    for name, table in tables.items():
        assert table.column_names[0] == "version"
        versions = table.column("version").to_pylist()
        assert versions == sorted(versions, key=["base", "dynamic"].index), name
        for version in ("base", "dynamic"):
            alone = postlab.load_run(sweep / version).tables()[name]
            mine = table.filter(pc.equal(table.column("version"), version)).drop_columns(
                ["version"])
            assert mine.equals(alone), (name, version)
    steps = tables["steps"].to_pylist()
    assert {s["groups_drawn"] is None for s in steps if s["version"] == "base"} == {True}
    assert all(s["groups_drawn"] is not None for s in steps if s["version"] == "dynamic")
    rollouts = tables["rollout_samples"].to_pylist()
    dropped = [r for r in rollouts if not r["kept"]]
    assert {r["version"] for r in dropped} <= {"dynamic"}
    assert len(dropped) == sum(s["groups_dropped"] or 0 for s in steps) * SMALL["group_size"]

    (sweep / "dynamic" / "record.json").unlink()  # as if its seed had not finished
    partial = tmp_path / "partial"
    assert main(["export", str(sweep), "--out-dir", str(partial)]) == 0
    assert "dynamic: no completed seed yet; left out" in capsys.readouterr().err
    assert set(read_export(partial)["eval_samples"].column("version").to_pylist()) == {"base"}
    with pytest.raises(UserError, match="is a sweep folder"):
        postlab.load_run(sweep)
