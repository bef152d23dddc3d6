"""The columnar reading path against the per-seed one it replaced, which is kept as the
oracle: the same analysis (every number, bit for bit), the same digests, and a plan-fit
check that passes only what every per-seed check passes.

Random records are the bundled run's three seeds with random edits: answer texts (quotes,
backslashes, control characters, non-ASCII), EOS flags, operands, update statistics
(negative zero, subnormal, NaN), zero-variance counts and steps without updates."""

from __future__ import annotations

import dataclasses
import functools
import math
import pickle
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from plans import assert_export_as_oracle, assert_same

from postlab.analysis.aggregate import analyse, oracle_facts
from postlab.errors import UserError
from postlab.plan.frozen import teaching_plan_loaded
from postlab.plan.schema import Plan
from postlab.records.columns import entries_table, flatten, row_tables
from postlab.records.conformance import run_missing_parts, run_plan_problems, run_reading_problems
from postlab.records.fits import unproven_seeds
from postlab.records.integrity import digests_match, run_digests, table_digests
from postlab.records.models import Record, SeedEntry
from postlab.records.record import bundled_record_path, load_record, one_document


@functools.cache
def _bundled() -> dict:
    """The bundled record's JSON, its seeds inline: the tests below edit it."""
    return one_document(load_record(bundled_record_path()))


def _fresh() -> dict:
    return pickle.loads(_pickled())


def _typed(record: dict) -> Record | None:
    """An edited record as every reader receives it, or None where the record's reader
    refuses it (an edit out of a field's range: a reader never sees such a record)."""
    try:
        return Record.of({key: value for key, value in record.items() if key != "edits"})
    except UserError:
        return None


@functools.cache
def _pickled() -> bytes:
    return pickle.dumps(_bundled())


def _same(one, two, path="analysis"):
    assert_same(one, two, path)


def _both(record: Record, plan: Plan):
    """Each path's analysis, or the type of error it raised."""
    results = []
    for facts in (None, oracle_facts(record, plan)):
        try:
            results.append(analyse(record, plan, facts=facts))
        except ValueError as exc:
            results.append(type(exc))
    return results


def test_the_bundled_run_analyses_the_same_both_ways():
    plan = teaching_plan_loaded().model
    columnar, oracle = _both(_typed(_fresh()), plan)
    assert not isinstance(columnar, type)
    _same(columnar, oracle)


TEXTS = st.text(alphabet=st.sampled_from(list('0123456789 +-="\\\n\té\x01')), max_size=6)
FLOATS = st.sampled_from([0.0, -0.0, 5e-324, 1e-300, 1e300, -2.5, 0.1, 1 / 3, math.nan,
                          1e16, 1e-5])


def _rows_of(run: dict, rng: random.Random) -> list:
    if rng.random() < 0.5 or not run["training"]:
        stage = rng.choice(list(run["evaluations"]))
        split = rng.choice(list(run["evaluations"][stage]))
        return run["evaluations"][stage][split][rng.choice(["greedy", "sampled"])]
    return rng.choice(run["training"][rng.choice(list(run["training"]))])["rows"]


class _Edited(dict):
    """A record drawn for a test, shown by the edits that made it (not 4 MB of rows)."""

    def __repr__(self) -> str:
        return f"bundled run with edits {self['edits']}"


@st.composite
def edited_records(draw):
    record = _Edited(_fresh())
    record["edits"] = edits = []
    rng = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 12))):
        run = rng.choice(record["runs"])
        edit = draw(st.sampled_from(["text", "eos", "operand", "update", "zero variance",
                                     "no updates"]))
        edits.append(edit)
        if edit in ("text", "eos", "operand"):
            row = rng.choice(_rows_of(run, rng))
            if edit == "text":
                row[2] = draw(TEXTS)
                edits.append(row[2])
            elif edit == "eos":
                row[3] = not row[3]
            else:
                row[rng.choice([0, 1])] = draw(st.integers(0, 12))
            continue
        step = rng.choice(run["training"][rng.choice(list(run["training"]))])
        if edit == "update" and step["updates"]:
            update = rng.choice(step["updates"])
            update[rng.choice(sorted(update))] = draw(FLOATS)
        elif edit == "zero variance":
            step["zero_variance_groups"] = draw(st.integers(0, 8))
        else:
            step["updates"] = []
    return record


@settings(max_examples=6, deadline=None, database=None, derandomize=True)
@given(record=edited_records())
def test_random_records_analyse_the_same_both_ways(record):
    plan = teaching_plan_loaded().model
    typed = _typed(record)
    assume(typed is not None)
    columnar, oracle = _both(typed, plan)
    if isinstance(oracle, type) or isinstance(columnar, type):
        assert columnar == oracle  # both refuse a block that mixes questions
    else:
        _same(columnar, oracle)


@settings(max_examples=12, deadline=None, database=None, derandomize=True)
@given(record=edited_records())
def test_digests_recomputed_from_flat_tables_are_run_digests(record):
    # the tables of the record as its seeds' JSON (a NaN included, which no reader receives)
    for tables in (flatten(entries_table(record["runs"])),):
        found = table_digests(tables)
        for entry, digests in zip(record["runs"], found, strict=True):
            texts = [row[2] for rows in _all_rows(entry) for row in rows]
            nan = any(math.isnan(v) for step in _steps(entry) for u in step["updates"]
                      for v in u.values())
            if any(ord(c) < 0x20 for t in texts for c in t) or nan:
                assert digests is None  # left to the row-by-row check
            if digests is None:  # (a batch with such a text is left to it whole)
                continue
            assert digests == run_digests(entry)
            assert digests_match(digests, tables.runs.column("digests")[
                record["runs"].index(entry)].as_py()) == (digests == entry["digests"])


def _steps(entry):
    return [step for history in entry["training"].values() for step in history]


def _all_rows(entry):
    for splits in entry["evaluations"].values():
        for decoded in splits.values():
            yield from decoded.values()
    for step in _steps(entry):
        yield step["rows"]


def _seed_passes(entry: dict, plan: Plan) -> bool:
    """Every per-seed check: the entry's structure (its models), then its fit to the plan."""
    from postlab.plan.arms import arm_names

    try:
        typed = SeedEntry.of(entry)
    except UserError:
        return False
    return not (run_plan_problems(typed, plan) or run_reading_problems(typed, plan)
                or run_missing_parts(typed, ["initial", *arm_names(plan)]))


def test_the_bundled_runs_seeds_are_proven_to_fit_their_plan():
    plan = teaching_plan_loaded().model
    (tables,) = row_tables(_typed(_fresh()))
    assert unproven_seeds(tables, plan, None) == []


BREAKS = {
    "operand": lambda e: e["evaluations"]["initial"]["test"]["greedy"][0].__setitem__(0, 9),
    "step removed": lambda e: e["training"]["strict"].pop(),
    "row removed": lambda e: e["training"]["strict"][3]["rows"].pop(),
    "update removed": lambda e: e["training"]["substring"][0]["updates"].pop(),
    "nan loss": lambda e: e["sft_loss"].__setitem__(2, math.nan),
    "ratio above one": lambda e: e["training"]["strict"][0]["updates"][0].__setitem__(
        "ratio_outside_clip", 1.5),
    "checkpoint entry removed": lambda e: e["checkpoints"].pop("strict"),
    "checkpoint file renamed": lambda e: e["checkpoints"]["strict"].__setitem__(
        "file", "seed-1-strict.pt"),
    "compute removed": lambda e: e.pop("compute"),
    "digests removed": lambda e: e.pop("digests"),
    "group mixed": lambda e: e["training"]["strict"][0]["rows"][1].__setitem__(1, 9),
    "sampled question": lambda e: e["evaluations"]["strict"]["dev"]["sampled"][5]
    .__setitem__(0, 7),
    "split removed": lambda e: e["evaluations"]["substring"].pop("dev"),
    "sft loss short": lambda e: e["sft_loss"].pop(),
}


@pytest.mark.parametrize("damage", sorted(BREAKS))
def test_a_seed_that_does_not_fit_is_not_proven(damage):
    plan = teaching_plan_loaded().model
    record = _fresh()
    BREAKS[damage](record["runs"][1])
    assert not _seed_passes(record["runs"][1], plan)
    tables = flatten(entries_table(record["runs"]))
    # the damaged seed, never another (a batch that cannot be compared is all unproven)
    assert record["runs"][1]["seed"] in unproven_seeds(tables, plan, None)


@settings(max_examples=10, deadline=None, database=None, derandomize=True)
@given(record=edited_records())
def test_a_proven_seed_passes_every_per_seed_check(record):
    plan = teaching_plan_loaded().model
    tables = flatten(entries_table(record["runs"]))
    unproven = set(unproven_seeds(tables, plan, None))
    for entry in record["runs"]:
        if entry["seed"] not in unproven:
            assert _seed_passes(entry, plan)


def test_the_bundled_runs_digests_are_recomputed_from_its_flat_tables():
    record = _fresh()
    (tables,) = row_tables(_typed(record))
    assert table_digests(tables) == [entry["digests"] for entry in record["runs"]]


def test_chunks_are_read_in_the_records_seed_order(tmp_path):
    # the writer keeps chunks in the record's order; a record in another order reads in its
    from recordfiles import write_record

    from postlab.jsonio import dump_json, parse_json
    from postlab.records.columns import _runs_of_groups

    assert list(_runs_of_groups([(0, 0), (0, 1), (1, 0), (0, 2), (2, 1), (2, 2)])) == [
        (0, 0, 2), (1, 0, 1), (0, 2, 3), (2, 1, 3)]
    record = _fresh()
    record["chunks"], record["seeds"] = [], []
    write_record(tmp_path, record)
    header = parse_json((tmp_path / "record.json").read_bytes(), "record")
    header["seeds"] = list(reversed(header["seeds"]))
    (tmp_path / "record.json").write_bytes(dump_json(header))
    reread = load_record(tmp_path / "record.json")
    batches = list(row_tables(reread, batch=2))
    assert [tables.seeds for tables in batches] == [(33, 22), (11,)]
    assert [d["sft_loss"] for t in batches for d in table_digests(t)] == [
        entry["digests"]["sft_loss"] for entry in reversed(record["runs"])]


def _oracle_page_samples(record: Record, plan: Plan, split: str):
    from postlab.analysis.samples import PairCells, StageTallies, iter_samples

    cells, tallies = PairCells(plan), StageTallies(plan, split)
    for sample in iter_samples(record, plan, decoding="sampled"):
        cells.add(sample)
        tallies.add(sample)
    return cells.grids(), tallies.result(3)


def _oracle_gamed(record: Record, plan: Plan, split: str):
    from postlab.analysis.findings import _GamedTally
    from postlab.analysis.samples import iter_samples

    tally = _GamedTally(["substring", "initial"], split, "substring", plan)
    for sample in iter_samples(record, plan):
        tally.add(sample)
    return tally


@settings(max_examples=4, deadline=None, database=None, derandomize=True)
@given(record=edited_records(), split=st.sampled_from(["test", "dev"]))
def test_answers_judged_columnar_are_tallied_as_one_by_one(record, split):
    from postlab.analysis.findings import _GamedTally
    from postlab.analysis.samples import page_samples
    from postlab.records.metrics import summary_for, summary_of

    plan = teaching_plan_loaded().model
    record = _typed(record)
    assume(record is not None)
    _same(page_samples(record, plan, split, per_kind=3), _oracle_page_samples(record, plan,
                                                                              split))
    columnar = _GamedTally(["substring", "initial"], split, "substring", plan).walk(record,
                                                                                     plan)
    oracle = _oracle_gamed(record, plan, split)
    _same((columnar.total, columnar.paid), (oracle.total, oracle.paid))
    for stage in ("substring", "initial"):
        _same(columnar.gamed[stage].examples(), oracle.gamed[stage].examples())
        _same(columnar.shares(stage), oracle.shares(stage))
    try:
        expected = summary_for(record, plan)
    except ValueError:
        with pytest.raises(ValueError, match=r"mixes questions|do not form groups"):
            summary_of(record, plan)
    else:
        _same(summary_of(record, plan), expected)


@settings(max_examples=3, deadline=None, database=None, derandomize=True)
@given(record=edited_records(), batch_rows=st.sampled_from([1000, 65_536]))
def test_export_tables_built_columnar_are_those_built_row_by_row(record, batch_rows):
    from postlab.export.tables import Source
    from postlab.tasks.contracts import contracts_for

    plan = teaching_plan_loaded().model
    record = _typed(record)
    assume(record is not None)
    sources = [Source(record, plan, "one"), Source(record, plan, "two")]
    try:
        assert_export_as_oracle(sources, contracts_for("integer"), batch_rows)
    except ValueError:  # a mixed question: both builders refuse it
        from postlab.export.columnar import columnar_batches
        from postlab.export.tables import TABLES, arrow_schema, table_columns

        contracts = contracts_for("integer")
        schemas = {n: arrow_schema(table_columns(n, sources, contracts)) for n in TABLES}
        with pytest.raises(ValueError):
            list(columnar_batches(sources, contracts, schemas, batch_rows))


def _plain_rescore(record: dict, contracts: list[str], split):
    """Re-scoring written as a plain loop over the entries' JSON (the columnar one's
    oracle)."""
    from postlab.tasks.contracts import score
    from postlab.tasks.rows import Row

    rows, gaps = [], {}
    for run in record["runs"]:
        for stage, splits in run["evaluations"].items():
            for name, decoded in splits.items():
                if split is not None and name != split:
                    continue
                for decoding, outputs in decoded.items():
                    accepted = dict.fromkeys(contracts, 0)
                    for raw in outputs:
                        row = Row.of(raw)
                        verdicts = {c: score(row, c) for c in contracts}
                        for c in contracts:
                            accepted[c] += verdicts[c]
                        for a in contracts:
                            for b in contracts:
                                if a != b and verdicts[a] >= 1 and verdicts[b] < 1:
                                    only, zeros = gaps.get((a, b), (0, 0))
                                    gaps[(a, b)] = (only + 1, zeros + (
                                        len(row.text) > 1 and row.text.startswith("0")))
                    rows.append((run["seed"], stage, name, decoding, len(outputs), accepted))
    return rows, gaps


@settings(max_examples=3, deadline=None, database=None, derandomize=True)
@given(record=edited_records(), split=st.sampled_from([None, "dev"]))
def test_rescoring_columnar_counts_what_a_plain_loop_counts(record, split):
    from postlab.records.rescore import rescore

    contracts = ["strict", "substring", "exact"]
    typed = _typed(record)
    assume(typed is not None)
    result = rescore(typed, {"strict": "strict", "substring": "substring"}, contracts, split)
    rows, gaps = _plain_rescore(record, contracts, split)
    assert [(r.seed, r.stage, r.split, r.decoding, r.n, r.accepted) for r in result.rows] == rows
    for gap in result.gaps:
        assert (gap.accepted_only_by_looser, gap.with_leading_zeros) == gaps.get(
            (gap.looser, gap.stricter), (0, 0))


def _thirds(pair, text, terminated, expected=None):
    """A partial credit whose sums depend on the order they are added in (thirds, tenths)."""
    return (len(text) % 3) / 3 + (0.1 if terminated else 0.0)


@settings(max_examples=2, deadline=None, database=None, derandomize=True)
@given(record=edited_records())
def test_partial_credit_sums_are_added_as_the_oracle_adds_them(record):
    from postlab.analysis.facts import run_facts, table_facts
    from postlab.records.metrics import summarize, table_summary
    from postlab.records.rescore import rescore
    from postlab.tasks.contracts import CONTRACTS, PARTIAL_CREDIT

    contracts = ["strict", "thirds"]
    typed = _typed(record)
    assume(typed is not None)
    with CONTRACTS.registered("thirds", _thirds), PARTIAL_CREDIT.registered("thirds", True):
        (tables,) = row_tables(typed, batch=3)
        columnar = table_facts(tables, 16, sum, contracts)
        for entry, facts in zip(typed.runs, columnar, strict=True):
            oracle = run_facts(entry, 16, sum, contracts)
            _same(facts.evaluations, oracle.evaluations)
            for arm, trained in facts.training.items():
                _same(trained.accepted, {k: v.astype(trained.accepted[k].dtype)
                                         for k, v in oracle.training[arm].accepted.items()})
                _same(trained.series, oracle.training[arm].series)
                for window in (1, 24, 240):
                    _same(trained.window_sum("thirds", window),
                          oracle.training[arm].window_sum("thirds", window))
        whole = _fresh()  # (an edit may mix a question's group, which a summary refuses)
        (tables,) = row_tables(_typed(whole), batch=3)
        _same(table_summary(tables, 16, sum, contracts), summarize(_typed(whole), 16, sum,
                                                                   contracts))
        rows, _ = _plain_rescore(whole, contracts, None)
        found = rescore(_typed(whole), {}, contracts)
        assert [(r.seed, r.stage, r.split, r.decoding, r.n, r.accepted)
                for r in found.rows] == rows


# --- what the columnar checks must not let through (found by a second reader) ---------------

def _chunked_bundled(tmp_path):
    """The bundled run in a folder of its own, its record rewritten as chunks (one a seed)."""
    import shutil

    from recordfiles import write_record

    from postlab.records.record import bundled_run_dir

    run = tmp_path / "run"
    shutil.copytree(bundled_run_dir(), run)
    record = _fresh()
    record["chunks"], record["seeds"] = [], []
    write_record(run, record)
    (run / "record.json.gz").unlink()
    return run


def _edit_chunk(run, index: int, edit) -> None:
    """Rewrite seed ``index``'s chunk through ``edit`` (a table in, a table out) and name
    its new digest and size in the manifest, as a careful editor would."""
    import hashlib
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    header = json.loads((run / "record.json").read_text())
    chunk = header["chunks"][index]
    path = run / chunk["file"]
    table = edit(pq.read_table(path))
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, compression="zstd") as writer:
        writer.write_table(table)
    data = sink.getvalue().to_pybytes()
    path.write_bytes(data)
    chunk.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (run / "record.json").write_text(json.dumps(header))


def _set(table, name: str, value) -> object:
    import pyarrow as pa

    return table.set_column(table.schema.get_field_index(name), table.schema.field(name),
                            pa.array([value], table.schema.field(name).type))


def _relayout(change):
    import json

    def edit(table):
        layout = json.loads(table.column("layout")[0].as_py())
        change(layout)
        return _set(table, "layout", json.dumps(layout, separators=(",", ":")))
    return edit


LAYOUTS = {
    "step without updates": lambda layout: layout["step"].remove("updates"),
    "step with sampling": lambda layout: layout["step"].append("sampling"),
    "run with a part of no chunk": lambda layout: layout["run"].append("foo"),
    "updates without statistics": lambda layout: layout.__setitem__("update", []),
}


@pytest.mark.parametrize("change", sorted(LAYOUTS))
def test_a_layout_the_per_seed_checks_refuse_is_refused_by_every_reader(tmp_path, capsys,
                                                                        change):
    from postlab.cli import main

    run = _chunked_bundled(tmp_path)
    _edit_chunk(run, 1, _relayout(LAYOUTS[change]))
    for command in (["report", str(run), "--format", "json"],
                    ["export", str(run), "--out-dir", str(tmp_path / "t")]):
        assert main(command) == 2, change
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "seed 22" in err and "Traceback" not in err, err
    assert not (tmp_path / "t").exists()
    assert main(["verify", str(run), "--quick"]) == 2  # refused, as the entry cannot be read
    assert "seed 22" in capsys.readouterr().err


@pytest.mark.parametrize("part", ["sft_loss", "compute", "checkpoints", "arm_sft_loss"])
def test_a_null_in_a_chunk_is_refused_in_one_line(tmp_path, capsys, part):
    from postlab.cli import main

    def edit(table):
        if part == "sft_loss":
            values = table.column(part)[0].as_py()
            return _set(table, part, [None, *values[1:]])
        if part == "compute":
            return _set(table, part, [None, *table.column(part)[0].as_py()[1:]])
        return _set(table, part, None)

    run = _chunked_bundled(tmp_path)
    _edit_chunk(run, 1, edit)
    assert main(["report", str(run), "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err


def test_steps_moved_to_another_seed_of_the_batch_are_not_proven():
    # seed 11 given seed 22's strict history after its own, seed 22 left its substring one:
    # the batch's arms and steps run in the template's order, but not each seed's
    import pyarrow as pa

    plan = teaching_plan_loaded().model
    table = entries_table(_fresh()["runs"])
    training = table.column("training").to_pylist()
    moved = [step for step in training[1] if step["arm"] == "strict"]
    training[0] = training[0] + moved
    training[1] = [step for step in training[1] if step["arm"] != "strict"]
    table = table.set_column(table.schema.get_field_index("training"), "training",
                             pa.array(training, table.schema.field("training").type))
    assert {11, 22} <= set(unproven_seeds(flatten(table), plan, None))


def test_a_seeds_steps_stored_out_of_arm_order_read_as_its_entry_holds_them():
    # the per-seed checks pass such a seed (its entry groups the steps by arm): the columnar
    # readers must compute from that order too
    import pyarrow as pa

    from postlab.analysis.facts import run_facts, table_facts
    from postlab.export.tables import Source

    plan = teaching_plan_loaded().model
    record = _fresh()
    table = entries_table(record["runs"])
    training = table.column("training").to_pylist()
    strict = [s for s in training[2] if s["arm"] == "strict"]
    substring = [s for s in training[2] if s["arm"] == "substring"]
    training[2] = [step for pair in zip(strict, substring, strict=True) for step in pair]
    table = table.set_column(table.schema.get_field_index("training"), "training",
                             pa.array(training, table.schema.field("training").type))
    tables = flatten(table)
    facts = table_facts(tables, plan.eval_samples, sum, ["strict", "substring"])
    typed = _typed(record)
    _same(facts[2].training, run_facts(typed.runs[2], plan.eval_samples, sum,
                                       ["strict", "substring"]).training)
    assert table_digests(tables)[2] == record["runs"][2]["digests"]
    assert_export_as_oracle([Source(typed, plan, tables=lambda: [tables])],
                            ["strict", "substring"], 4096)


def test_a_one_document_record_with_integer_numbers_reads_as_its_values():
    # another program's record may write 1 for 1.0; the per-seed checks take it
    plan = teaching_plan_loaded().model
    record = _fresh()
    record["runs"][0]["sft_loss"][0] = 1
    record["runs"][1]["training"]["strict"][0]["updates"][0]["kl"] = 0
    columnar, oracle = _both(_typed(record), plan)
    _same(columnar, oracle)


def _threads_reading_ahead() -> int:
    import threading

    return sum(thread.name == "postlab-read-ahead" for thread in threading.enumerate())


def test_reading_ahead_keeps_order_raises_in_place_and_leaves_no_thread():
    from postlab.records.columns import read_ahead

    made = []

    def items(fail_at=None):
        for item in range(6):
            if item == fail_at:
                raise ValueError(f"item {item}")
            made.append(item)
            yield item

    assert list(read_ahead(items())) == list(range(6))
    got = []
    with pytest.raises(ValueError, match="item 3"):
        for item in read_ahead(items(fail_at=3)):
            got.append(item)
    assert got == [0, 1, 2]  # the error comes where that item would have
    made.clear()
    ahead = read_ahead(items())
    assert next(ahead) == 0
    ahead.close()  # a reader that stops early (a refusal, an interrupt) joins the thread
    assert _threads_reading_ahead() == 0
    assert made[:2] == [0, 1] and len(made) <= 3  # at most one item ahead, then it stops
    with pytest.raises(KeyError):
        for _ in read_ahead(items()):
            raise KeyError("the caller's own error")
    assert _threads_reading_ahead() == 0


def _cache(tmp_path, monkeypatch):
    from postlab.machine.cache import CACHE_VARIABLE

    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_VARIABLE, str(folder))
    return folder


def _fail_if_proving(monkeypatch):
    from postlab.records import columns

    def refuse(*args, **kwargs):
        raise AssertionError("proved again")

    monkeypatch.setattr(columns, "not_proven", refuse)


def test_a_second_reader_takes_the_remembered_proof(tmp_path, monkeypatch, capsys):
    from postlab.cli import main

    cache = _cache(tmp_path, monkeypatch)
    run = _chunked_bundled(tmp_path)
    assert main(["report", str(run), "--format", "json"]) == 0
    first = capsys.readouterr().out
    assert len(list((cache / "proven").glob("*.json"))) == 1
    with monkeypatch.context() as patched:
        _fail_if_proving(patched)
        assert main(["report", str(run), "--format", "json"]) == 0
        assert capsys.readouterr().out == first
        assert main(["export", str(run), "--out-dir", str(tmp_path / "t")]) == 0


def test_a_reader_abandoned_but_held_at_exit_lets_the_process_end():
    import subprocess
    import sys

    script = ("from postlab.records.columns import read_ahead\n"
              "held = read_ahead(iter(range(10)))\n"
              "print(next(held))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr


def test_a_checkpoint_removed_while_verify_walks_leaves_no_proof(tmp_path, monkeypatch,
                                                                 capsys):
    from postlab.cli import main
    from postlab.runs import seed_walk

    cache = _cache(tmp_path, monkeypatch)
    run = _chunked_bundled(tmp_path)
    victim = sorted(run.glob("seed-22-*.pt"))[-1]
    checked = seed_walk._seed_checkpoints

    def then_removed(seed, *args, **kwargs):
        found = checked(seed, *args, **kwargs)
        if seed == 22 and victim.exists():
            victim.unlink()  # after its seed's checks, before the walk ends
        return found

    monkeypatch.setattr(seed_walk, "_seed_checkpoints", then_removed)
    main(["verify", str(run), "--quick"])
    capsys.readouterr()
    assert not list(cache.glob("proven/*.json"))
    assert main(["report", str(run), "--format", "json"]) == 2  # proven afresh: refused
    assert victim.name in capsys.readouterr().err


def test_a_cache_folder_that_cannot_be_used_means_proving(tmp_path, monkeypatch, capsys):
    from postlab.cli import main
    from postlab.machine.cache import CACHE_VARIABLE

    run = _chunked_bundled(tmp_path)
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / ("x" * 300)))  # a name too long
    assert main(["report", str(run), "--format", "json"]) == 0
    assert main(["report", str(run), "--format", "json"]) == 0


def test_verify_remembers_what_it_proved(tmp_path, monkeypatch, capsys):
    from postlab.cli import main

    cache = _cache(tmp_path, monkeypatch)
    run = _chunked_bundled(tmp_path)
    main(["verify", str(run), "--quick"])  # its fingerprint file is the unchunked record's
    out = capsys.readouterr().out
    assert "PASS  raw rows:" in out and "PASS  counts:" in out, out
    assert len(list((cache / "proven").glob("*.json"))) == 1
    capsys.readouterr()
    _fail_if_proving(monkeypatch)
    assert main(["report", str(run), "--format", "json"]) == 0


@pytest.mark.parametrize("change", ["chunk rewritten", "checkpoint gone", "source", "plan",
                                    "memo unreadable", "cache unwritable"])
def test_a_proof_is_taken_only_for_the_state_it_proved(tmp_path, monkeypatch, capsys,
                                                       change):
    from postlab.cli import main
    from postlab.machine import provenance
    from postlab.records import proofs
    from postlab.records.opened import checked_tables, open_run

    cache = _cache(tmp_path, monkeypatch)
    run = _chunked_bundled(tmp_path)
    if change == "cache unwritable":
        cache.write_text("a file where the folder would be")
    assert main(["report", str(run), "--format", "json"]) == 0
    capsys.readouterr()
    opened = open_run(run)
    key = proofs.proof_key(opened.record, opened.plan.model, run)
    if change == "chunk rewritten":
        # rows and digests changed together, the manifest naming the new chunk: the old
        # proof covers other bytes, so the seed is proven afresh, and refused
        _edit_chunk(run, 1, _relayout(LAYOUTS["step without updates"]))
        assert main(["report", str(run), "--format", "json"]) == 2
        assert "seed 22" in capsys.readouterr().err
        return
    if change == "checkpoint gone":
        next(run.glob("seed-22-*.pt")).unlink()
    elif change == "source":
        hashes = provenance.source_hashes()
        monkeypatch.setattr(provenance, "source_hashes",
                            lambda: hashes | {"postlab/new.py": "0" * 64})
    elif change == "plan":
        changed = opened.plan.model.replace(kl_beta=0.5)
        opened = dataclasses.replace(
            opened, plan=dataclasses.replace(opened.plan, model=changed, data=changed.data()))
    elif change == "memo unreadable":
        next((cache / "proven").glob("*.json")).write_text("{")
    assert (proofs.proof_key(opened.record, opened.plan.model, run) != key) == (
        change in ("checkpoint gone", "source", "plan"))
    assert not proofs.remembered(proofs.proof_key(opened.record, opened.plan.model, run))
    if change == "checkpoint gone":
        return
    proved = []
    from postlab.records import columns

    original = columns.not_proven
    monkeypatch.setattr(columns, "not_proven",
                        lambda *args: proved.append(1) or original(*args))
    list(checked_tables(opened))
    assert proved  # proven afresh
