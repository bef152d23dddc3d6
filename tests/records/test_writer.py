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
