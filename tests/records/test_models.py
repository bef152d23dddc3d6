"""The record's typed models are its one validator and its one reader: a damaged field is
refused in one line naming its path in the record, every record postlab writes is accepted,
and readers receive it typed (rows as Rows) with the JSON it was read from beside it."""

import copy
import gzip
import json

import pytest

from postlab.errors import UserError
from postlab.records.integrity import run_digests
from postlab.records.models import Record, SeedEntry, Step
from postlab.records.record import bundled_record_path
from postlab.tasks.rows import Row, RowList


@pytest.fixture(scope="module")
def bundled() -> dict:
    raw = bundled_record_path().read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _greedy(record: dict) -> list:
    return record["runs"][0]["evaluations"]["initial"]["test"]["greedy"]


def _update(record: dict) -> dict:
    return next(iter(record["runs"][0]["training"].values()))[0]["updates"][0]


DAMAGE = {
    "seed as text": (lambda r: r["runs"][0].update(seed="4"),
                     "r.runs[0].seed: wrong type str, expected an integer"),
    "seed as boolean": (lambda r: r["runs"][0].update(seed=True),
                        "r.runs[0].seed: wrong type bool, expected an integer"),
    "runs as object": (lambda r: r.update(runs={}), "r.runs: wrong type dict, expected a list"),
    "no plan hash": (lambda r: r.pop("plan_sha256"), "r: missing field 'plan_sha256'"),
    "unknown field": (lambda r: r.update(note=1), "r: unknown field 'note'"),
    "explicit null": (lambda r: r["runs"][0].update(training=None),
                      "r.runs[0].training: wrong type null"),
    "short row": (lambda r: _greedy(r).__setitem__(0, [1, 2, "3"]),
                  "r.runs[0].evaluations.initial.test.greedy[0]: expected a row"),
    "row as tuple": (lambda r: _greedy(r).__setitem__(0, (1, 2, "3", True)),
                     "greedy[0]: expected a row"),
    "operand too large": (lambda r: _greedy(r).__setitem__(0, [10**10, 2, "3", True]),
                          "greedy[0]: operand 10000000000 is outside"),
    "bad stage name": (lambda r: r["runs"][0]["evaluations"].update({"bad name": {}}),
                       "r.runs[0].evaluations: 'bad name' is not a valid name"),
    "no rows": (lambda r: r["runs"][0]["evaluations"]["initial"]["test"].update(greedy=[]),
                "greedy: expected a non-empty list of rows"),
    "NaN loss": (lambda r: r["runs"][0]["sft_loss"].__setitem__(0, float("nan")),
                 "r.runs[0].sft_loss[0]: nan is not a finite number"),
    "integer beyond floats": (lambda r: r["runs"][0]["sft_loss"].__setitem__(0, 10**400),
                              "sft_loss[0]: "),
    "boolean loss": (lambda r: r["runs"][0]["sft_loss"].__setitem__(0, True),
                     "sft_loss[0]: wrong type bool, expected a number"),
    "share above one": (lambda r: _update(r).update(ratio_outside_clip=2.0),
                        "ratio_outside_clip: 2.0 is outside 0.0..1.0"),
    "threads zero": (lambda r: r.update(threads=0), "r.threads: 0 is outside"),
    "numerics field": (lambda r: r["numerics"].update(fast_mode=True),
                       "r.numerics: unknown field 'fast_mode'"),
    "source path": (lambda r: r["source_sha256"].update({"../x.py": "0" * 64}),
                    "'../x.py' is not a valid source file path"),
    "two layouts": (lambda r: r.update(chunks=[], seeds=[]), "mixes two layouts"),
    "no layout": (lambda r: r.pop("runs"), "r: missing field 'runs'"),
    "update as list": (lambda r: next(iter(r["runs"][0]["training"].values()))[0].update(
        updates=[[1.0]]), "updates[0]: wrong type list, expected a JSON object"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_field_is_refused_in_one_line_naming_it(bundled, case):
    edit, message = DAMAGE[case]
    record = copy.deepcopy(bundled)
    edit(record)
    with pytest.raises(UserError) as caught:
        Record.of(record, "r")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_bundled_record_is_accepted_and_left_as_it_was(bundled):
    before = json.dumps(bundled)
    Record.of(bundled, "r")
    assert json.dumps(bundled) == before


def test_a_seed_read_from_a_chunk_is_not_checked_row_by_row_again(bundled):
    """The chunk reader checked its rows column by column; everything else is checked."""
    seed = copy.deepcopy(bundled["runs"][0])
    _greedy({"runs": [seed]})[0] = ["not", "a", "row"]
    SeedEntry.of(seed, "chunk", rows_checked=True)
    with pytest.raises(UserError, match="greedy"):
        Record.of(dict(bundled, runs=[seed]), "r")
    seed["seed"] = -1
    with pytest.raises(UserError, match=r"chunk\.seed: -1 is outside"):
        SeedEntry.of(seed, "chunk", rows_checked=True)


def test_readers_receive_the_record_typed_with_its_json_beside_it(bundled):
    record = Record.of(bundled, "r")
    assert record.plan_sha256 == bundled["plan_sha256"]
    assert record.made_by_postlab == ("postlab_version" in bundled)
    assert not record.chunked and record.seed_order() == [r["seed"] for r in bundled["runs"]]
    assert "runs" not in record.data() and record.data()["plan_sha256"] == bundled["plan_sha256"]
    for run, raw in zip(record.runs, bundled["runs"], strict=True):
        assert isinstance(run, SeedEntry) and run.data() is raw and run.seed == raw["seed"]
        # digests are taken from the JSON as written, and still match those it carries
        assert run_digests(run.data())["evaluations"] == raw["digests"]["evaluations"]
        greedy = run.evaluations["initial"]["test"].greedy
        stored = raw["evaluations"]["initial"]["test"]["greedy"]
        assert isinstance(greedy, RowList) and greedy.stored is stored
        assert list(greedy) == [Row(a, b, text, done) for a, b, text, done in stored]
        assert greedy[0] == Row(*stored[0]) and greedy[:2] == [Row(*r) for r in stored[:2]]
        for arm, history in run.arms.items():
            step = history[0]
            assert isinstance(step, Step) and step.step == 1
            assert step.updates[0].kl == raw["training"][arm][0]["updates"][0]["kl"]
            assert [row.pair for row in step.rows] == [
                (a, b) for a, b, *_ in raw["training"][arm][0]["rows"]]


def test_a_typed_record_is_frozen(bundled):
    record = Record.of(bundled, "r")
    with pytest.raises(ValueError, match="frozen"):
        record.plan_sha256 = "0" * 64
    with pytest.raises(ValueError, match="frozen"):
        record.runs[0].seed = 5
