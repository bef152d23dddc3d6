"""Bit-for-bit agreement with the reference implementation, run beside postlab.

Skipped when the reference is not beside the checkout. Every row, loss and update statistic
must be equal: same random streams in the same order and the same floating-point operations.
"""

import gzip
import json

import pytest
from conftest import recomputes_bundled_bits, reference_report, run_reference
from plans import VARIANT_A, VARIANT_B, rows, write_plan
from recordfiles import inline_record, read_record

from postlab.cli import main
from postlab.plan.frozen import freeze, load_plan
from postlab.records.compare import compare_records
from postlab.records.record import bundled_record_path, load_record
from postlab.runs.orchestration import RunOptions, run_plan


def _load(path):
    return json.loads(path.read_text())


def test_teaching_plan_matches_the_reference(reference_teaching_run, postlab_teaching_run):
    theirs = _load(reference_teaching_run / "record.json")
    ours = read_record(postlab_teaching_run)
    assert rows(ours) == rows(theirs)
    for key in ("plan_sha256", "parameters", "torch", "python", "device", "dtype"):
        assert ours[key] == theirs[key]
    theirs_summary = (reference_teaching_run / "summary.json").read_bytes()
    assert (postlab_teaching_run / "summary.json").read_bytes() == theirs_summary


@pytest.mark.parametrize("variant", [VARIANT_A, VARIANT_B], ids=["variant-a", "variant-b"])
def test_other_plans_match_the_reference(tmp_path, variant):
    plan = write_plan(tmp_path / "plan.json", **variant)
    theirs = _load(run_reference(tmp_path / "reference", plan))
    ours = run_plan(load_plan(plan), plan.read_bytes(),
                    RunOptions(out_dir=tmp_path / "postlab", workers=2))
    assert rows(ours) == rows(theirs)
    theirs_summary = (tmp_path / "reference" / "summary.json").read_bytes()
    assert (tmp_path / "postlab" / "summary.json").read_bytes() == theirs_summary


def test_reference_reads_our_record(postlab_teaching_run, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    freeze(plan)
    # the reference reads one JSON document: our record's seeds, inline, as a reader gets them
    document = tmp_path / "record.json"
    document.write_text(json.dumps(inline_record(read_record(postlab_teaching_run))))
    theirs = reference_report(plan, document)
    assert main(["report", "--record", str(postlab_teaching_run), "--lang", "zh"]) == 0
    assert capsys.readouterr().out == theirs


@recomputes_bundled_bits
def test_bundled_record_matches_the_reference(reference_teaching_run):
    path = bundled_record_path()
    assert path is not None
    bundled = json.loads(gzip.decompress(path.read_bytes()))
    assert rows(bundled) == rows(_load(reference_teaching_run / "record.json"))


def test_report_with_no_arguments_reads_the_bundled_record(reference_teaching_run, tmp_path,
                                                           capsys):
    plan = tmp_path / "plan.json"
    freeze(plan)
    assert main(["report", "--lang", "zh"]) == 0
    assert capsys.readouterr().out == reference_report(plan,
                                                       reference_teaching_run / "record.json")


def test_chinese_report_equals_the_reference(reference_teaching_run, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    freeze(plan)
    record = reference_teaching_run / "record.json"
    assert main(["report", "--plan", str(plan), "--record", str(record), "--lang", "zh"]) == 0
    ours = capsys.readouterr().out
    assert ours == reference_report(plan, record)
    assert main(["report", "--record", str(record), "--lang", "en"]) == 0
    english = capsys.readouterr().out.splitlines()
    # The same rows; only the SFT stage's name differs (the reference's Chinese says initial).
    theirs_rows = [line for line in ours.splitlines() if line[:2].strip().isdigit()]
    assert [line.replace(" SFT       ", " initial   ", 1) for line in english
            if line[:2].strip().isdigit()] == theirs_rows


@recomputes_bundled_bits
def test_the_bundled_run_is_reproduced_row_for_row(postlab_teaching_run):
    """A fresh run of the teaching plan (two workers) equals the bundled record in every row,
    statistic and checkpoint hash, as ``postlab reproduce`` compares them (its command line is
    run on each seed in tests/machine/test_numerics.py)."""
    bundled = load_record(bundled_record_path())
    comparison = compare_records(bundled, load_record(postlab_teaching_run / "record.json"))
    assert comparison.identical, comparison.first
    assert comparison.compared["checkpoints"] == 2 * 3 * 3  # seeds x stages x (hash, reload)
