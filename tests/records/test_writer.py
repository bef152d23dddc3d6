"""The record writer assembles a seed's entry from its stages' results in the record's form,
and writes nothing its models would refuse."""

import copy
import gzip
import json

import pytest
from pydantic import ValidationError

from postlab.records.record import bundled_record_path
from postlab.records.writer import SeedAssembly


def _bundled_entry() -> dict:
    raw = bundled_record_path().read_bytes()
    record = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return record["runs"][0]


def _results(entry: dict) -> dict:
    """The stage results an engine returned for ``entry``'s seed."""
    results = {"initial": {"seed": entry["seed"], "sft_loss": entry["sft_loss"],
                           "evaluation": entry["evaluations"]["initial"],
                           "checkpoint": entry["checkpoints"]["initial"],
                           "compute": entry["compute"]["initial"]}}
    for arm, history in entry["training"].items():
        results[arm] = {"history": history, "evaluation": entry["evaluations"][arm],
                        "checkpoint": entry["checkpoints"][arm],
                        "compute": entry["compute"][arm]}
    return results


def _assembled(results: dict, arms: list[str]) -> dict:
    assembly = SeedAssembly(arms)
    for stage, result in results.items():
        assert not assembly.complete()
        assembly.add(stage, result)
    assert assembly.complete()
    return assembly.entry()


def test_a_seed_is_assembled_as_the_bundled_record_holds_it():
    """Stage results in, the recorded entry out: the same keys in the same order, the same
    values, and the digests recomputed equal to those recorded."""
    entry = _bundled_entry()
    assembled = _assembled(_results(entry), list(entry["training"]))
    assert list(assembled) == list(entry)
    assert json.dumps(assembled) == json.dumps(entry)


def test_an_entry_its_models_refuse_is_not_written():
    """An engine that returned a statistic out of range is a bug: a traceback before anything
    is kept, not a record no reader accepts."""
    entry = copy.deepcopy(_bundled_entry())
    arm = next(iter(entry["training"]))
    entry["training"][arm][0]["updates"][0]["ratio_outside_clip"] = 2.0
    with pytest.raises(ValidationError, match="ratio_outside_clip"):
        _assembled(_results(entry), list(entry["training"]))


def test_a_record_whose_seeds_lack_digests_finishes_with_them_taken_from_its_rows(tmp_path):
    """A seed an earlier version recorded without digests: finishing the run (a resume's
    last step) takes them from its rows, and the results fingerprint is the one the digests
    recorded in training give."""
    from plans import SMALL, trained_with_the_cli
    from recordfiles import read_record, write_record

    from postlab.jsonio import parse_json
    from postlab.plan.frozen import load_plan
    from postlab.records.fingerprint import FINGERPRINT_FILE, read_fingerprints
    from postlab.records.layout import RECORD_FILE, SUMMARY_FILE
    from postlab.records.writer import finish_record

    run = trained_with_the_cli(tmp_path, **SMALL)
    _, results = read_fingerprints(run)
    record = read_record(run)
    for entry in record["runs"]:
        del entry["digests"]
    write_record(run, record)
    (run / SUMMARY_FILE).unlink()
    (run / FINGERPRINT_FILE).unlink()
    header = parse_json((run / RECORD_FILE).read_bytes(), "record")
    finished = finish_record(run, header, load_plan(run / "plan.json").model, print)
    assert [entry.digests for entry in finished.runs] == [None, None]
    assert read_fingerprints(run)[1] == results
