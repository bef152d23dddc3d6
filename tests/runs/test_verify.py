"""postlab verify and reproduce: pass on honest runs, name each kind of tampering."""

import gzip
import json
import re
import shutil

import pytest
from conftest import needs_bundled_path
from plans import SMALL, write_plan
from recordfiles import inline_record, read_record, write_record

from postlab.cli import main
from postlab.machine.numerics import portable_path
from postlab.plan.frozen import load_plan
from postlab.records.record import bundled_run_dir
from postlab.runs.orchestration import RunOptions, run_plan


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("verify")
    plan = write_plan(folder / "plan.json", **SMALL)
    out = folder / "run"
    run_plan(load_plan(plan), plan.read_bytes(), RunOptions(out_dir=out, workers=1))
    return out


@pytest.fixture
def run_copy(small_run, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(small_run, target)
    return target


def _verify(capsys, target):
    code = main(["verify", str(target)])
    return code, capsys.readouterr().out


def _line(out, name):
    return next(line for line in out.splitlines() if line[6:].startswith(name + ":"))


def _edit_record(folder, change):
    """Change the record as a careful editor would: chunks rewritten, manifest updated."""
    record = read_record(folder)
    change(record)
    write_record(folder, record)


def test_verify_passes_on_a_fresh_run(small_run, capsys):
    code, out = _verify(capsys, small_run)
    assert code == 0, out
    assert out.splitlines()[-1].startswith("VERIFIED")
    for name in ("plan", "checkpoint hashes", "checkpoint re-evaluation", "summary", "counts",
                 "raw rows", "environment", "source"):
        assert _line(out, name).startswith("PASS"), out


@needs_bundled_path
def test_verify_passes_on_the_bundled_run(capsys):
    assert bundled_run_dir() is not None
    code = main(["verify"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert _line(out, "checkpoint re-evaluation").startswith("PASS")
    assert _line(out, "raw rows").startswith("PASS")


def test_tampered_rollout_row_is_named(run_copy, capsys):
    def change(record):
        record["runs"][1]["training"]["substring"][3]["rows"][5][2] = "12"

    _edit_record(run_copy, change)
    code, out = _verify(capsys, run_copy)
    assert code == 1
    line = _line(out, "raw rows")
    assert line.startswith("FAIL") and "seed 4, arm substring, step 4: rollout rows" in line
    assert out.splitlines()[-1].startswith("NOT VERIFIED")


def test_tampered_update_statistic_is_named(run_copy, capsys):
    def change(record):
        record["runs"][0]["training"]["strict"][0]["updates"][1]["kl"] += 1e-12

    _edit_record(run_copy, change)
    code, out = _verify(capsys, run_copy)
    assert code == 1
    assert "seed 3, arm strict, step 1: update statistics" in _line(out, "raw rows")


def test_tampered_evaluation_row_fails_re_evaluation(run_copy, capsys):
    def change(record):
        row = record["runs"][0]["evaluations"]["strict"]["test"]["sampled"][2]
        row[2] = row[2] + "9"

    _edit_record(run_copy, change)
    code, out = _verify(capsys, run_copy)
    assert code == 1
    line = _line(out, "checkpoint re-evaluation")
    assert line.startswith("FAIL") and "seed 3, stage strict: split test, sampled row 2" in line
    assert _line(out, "summary").startswith("FAIL")


def test_tampered_checkpoint_is_named_and_not_loaded(run_copy, capsys, monkeypatch):
    import torch

    target = run_copy / "seed-3-substring.pt"
    data = bytearray(target.read_bytes())
    data[100] ^= 0xFF
    target.write_bytes(bytes(data))
    seen = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda src, *a, **k: seen.append(src.getvalue())
                        or real(src, *a, **k))
    code, out = _verify(capsys, run_copy)
    assert code == 1
    line = _line(out, "checkpoint hashes")
    assert line.startswith("FAIL") and "seed-3-substring.pt" in line
    assert bytes(data) not in seen


def test_changed_plan_fails(run_copy, capsys):
    plan = run_copy / "plan.json"
    plan.write_bytes(plan.read_bytes().replace(b'"clip": 0.2', b'"clip": 0.25'))
    code, out = _verify(capsys, run_copy)
    assert code == 1 and _line(out, "plan").startswith("FAIL")


def test_tampered_summary_fails(run_copy, capsys):
    path = run_copy / "summary.json"
    summary = json.loads(path.read_text())
    summary[1]["test"]["greedy"]["strict"] += 1
    path.write_text(json.dumps(summary, indent=2) + "\n")
    code, out = _verify(capsys, run_copy)
    assert code == 1 and "seed 3, stage strict" in _line(out, "summary")


def test_count_mismatch_fails(run_copy, capsys):
    def change(record):
        del record["runs"][0]["training"]["strict"][-1]

    _edit_record(run_copy, change)
    code, out = _verify(capsys, run_copy)
    assert code == 1
    assert _line(out, "counts").startswith("FAIL")
    assert "5 RL steps" in _line(out, "counts")


def test_environment_and_source_differences_warn(run_copy, capsys):
    def change(record):
        record["torch"] = "1.0.0"
        record["source_sha256"]["postlab/train.py"] = "0" * 64

    _edit_record(run_copy, change)
    (run_copy / "fingerprint.txt").unlink()  # else the changed record fails the fingerprint
    code, out = _verify(capsys, run_copy)
    assert code == 0, out
    assert _line(out, "environment").startswith("WARN") and "1.0.0" in out
    assert _line(out, "source").startswith("WARN") and "postlab/train.py" in out


def test_verify_cannot_check_missing_or_malformed(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nothing")]) == 2
    assert "not found" in capsys.readouterr().err
    (tmp_path / "record.json").write_text('{"runs": [')
    assert main(["verify", str(tmp_path)]) == 2
    assert "malformed JSON" in capsys.readouterr().err


def test_reproduce_pinpoints_an_injected_divergence(run_copy, tmp_path, capsys):
    def change(record):
        record["runs"][1]["training"]["strict"][2]["rows"][7][2] = "77"

    _edit_record(run_copy, change)
    code = main(["reproduce", str(run_copy), "--out-dir", str(tmp_path / "again"),
                 "--workers", "1", "--quiet"])
    out = capsys.readouterr().out
    assert code == 1
    assert "first divergence at seed 4, arm strict, step 3, row 7: recorded [" in out
    assert "'77', " in out
    assert "rollout rows: 1 of" in out and "evaluation rows: 0 of" in out


def test_reproduce_identical_for_a_fresh_run(small_run, tmp_path, capsys):
    assert main(["reproduce", str(small_run), "--out-dir", str(tmp_path / "again"),
                 "--workers", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"code path: {portable_path()}")
    assert "the record's, pinned" in out
    assert out.splitlines()[-1].startswith("identical:")


def test_bundled_record_is_compressed_and_complete():
    folder = bundled_run_dir()
    record = json.loads(gzip.decompress((folder / "record.json.gz").read_bytes()))
    files = {info["file"] for run in record["runs"] for info in run["checkpoints"].values()}
    assert all((folder / name).is_file() for name in files)
    assert (folder / "PROVENANCE.json").is_file()


# --- verification fails closed: removing evidence never turns a failure into a pass ----------

def _remove_digests(folder):
    _edit_record(folder, lambda record: record["runs"][0].pop("digests"))


def _remove_summary(folder):
    (folder / "summary.json").unlink()


def _remove_checkpoint_entry(folder):
    _edit_record(folder, lambda record: record["runs"][1]["checkpoints"].pop("strict"))


def _remove_checkpoint_entry_and_file(folder):
    _remove_checkpoint_entry(folder)
    (folder / "seed-4-strict.pt").unlink()


def _remove_checkpoint_entry_garbage_file(folder):
    _remove_checkpoint_entry(folder)
    (folder / "seed-4-strict.pt").write_bytes(b"garbage")


def _remove_numerics(folder):
    _edit_record(folder, lambda record: record.pop("numerics"))


def _remove_postlab_version(folder):
    _edit_record(folder, lambda record: record.pop("postlab_version"))


def _edit_row(folder):
    def change(record):
        record["runs"][0]["training"]["strict"][1]["rows"][0][2] = "42"
        record["runs"][0]["evaluations"]["strict"]["test"]["sampled"][0][2] = "42"
    _edit_record(folder, change)


REMOVALS = {"digests": _remove_digests, "summary": _remove_summary,
            "checkpoint entry": _remove_checkpoint_entry,
            "checkpoint entry and file": _remove_checkpoint_entry_and_file,
            "checkpoint entry, garbage file": _remove_checkpoint_entry_garbage_file,
            "numerics": _remove_numerics, "postlab_version": _remove_postlab_version}


@pytest.mark.parametrize("edited", [False, True], ids=["alone", "with-edited-row"])
@pytest.mark.parametrize("removal", list(REMOVALS))
def test_missing_evidence_fails(run_copy, capsys, removal, edited):
    if edited:
        _edit_row(run_copy)
    REMOVALS[removal](run_copy)
    (run_copy / "fingerprint.txt").unlink(missing_ok=True)
    code, out = _verify(capsys, run_copy)
    assert code == 1, out
    assert out.splitlines()[-1].startswith("NOT VERIFIED")


def test_all_evidence_removed_with_an_edited_row_fails(run_copy, capsys):
    _edit_row(run_copy)
    for removal in ("digests", "summary", "checkpoint entry and file"):
        REMOVALS[removal](run_copy)
    _edit_record(run_copy, lambda record: record["runs"][0].pop("digests", None))
    (run_copy / "fingerprint.txt").unlink(missing_ok=True)
    code, out = _verify(capsys, run_copy)
    assert code == 1
    record_line = _line(out, "record")
    assert record_line.startswith("FAIL")
    assert "seed 3: digests" in record_line
    assert "seed 4: checkpoint entry of stage strict" in record_line
    assert _line(out, "summary").startswith("FAIL") and "summary not found" in out


def test_a_reference_record_is_checked_but_not_verified(run_copy, capsys):
    record = inline_record(read_record(run_copy))  # the reference writes one document
    for key in ("postlab_version", "threads", "workers", "numerics"):
        record.pop(key)
    for run in record["runs"]:
        for key in ("digests", "compute"):
            run.pop(key)
    shutil.rmtree(run_copy / "rows")
    write_record(run_copy, record)
    code, out = _verify(capsys, run_copy)
    assert code == 1
    assert _line(out, "record").startswith("FAIL") and "made by another program" in out
    assert _line(out, "raw rows").startswith("SKIP")
    assert _line(out, "checkpoint re-evaluation").startswith("PASS")  # what can be checked is


def test_summary_changed_only_in_type_fails(run_copy, capsys):
    path = run_copy / "summary.json"
    original = path.read_bytes()
    zero = rb": 0\.0," if re.search(rb": 0\.0,", original) else rb": 0,"
    edits = ((rb'"n": (\d+),', rb'"n": \1.0,'), (rb'": 1,', rb'": true,'), (zero, rb": -0.0,"))
    for pattern, replacement in edits:
        changed = re.sub(pattern, replacement, original, count=1)
        assert changed != original, pattern
        assert json.loads(changed) == json.loads(original)  # equal as Python values
        path.write_bytes(changed)
        code, out = _verify(capsys, run_copy)
        assert code == 1 and "values are equal but their JSON is not" in _line(out, "summary")
    path.write_bytes(original)


@pytest.mark.parametrize("target", ["summary.json", "record.json"])
def test_summary_or_record_that_is_not_a_file(run_copy, capsys, target):
    path = run_copy / target
    path.unlink()
    path.mkdir()
    code = main(["verify", str(run_copy)])
    captured = capsys.readouterr()
    if target == "summary.json":
        assert code == 1 and "summary" in _line(captured.out, "summary")
    else:
        assert code == 2 and captured.err.count("\n") == 1


@pytest.mark.parametrize("key,value", [("threads", 3), ("parameters", 7),
                                       ("wall_seconds", -1.0), ("workers", 0),
                                       ("device", "tpu"), ("dtype", "float8"),
                                       ("surprise", 1)])
def test_impossible_provenance_is_refused(run_copy, capsys, key, value):
    _edit_record(run_copy, lambda record: record.update({key: value}))
    code = main(["verify", str(run_copy)])
    captured = capsys.readouterr()
    assert code in (1, 2) and "Traceback" not in captured.err
    if code == 1:
        assert _line(captured.out, "provenance").startswith("FAIL")
    else:
        assert captured.err.count("\n") == 1


# --- the run fingerprint ---------------------------------------------------------------------

def test_fingerprint_is_kept_and_checked(small_run, capsys):
    from postlab.records.fingerprint import (
        read_fingerprints,
        results_fingerprint,
        run_fingerprint,
    )
    from postlab.records.record import load_record

    kept, results = read_fingerprints(small_run)
    record = load_record(small_run / "record.json")
    assert kept == run_fingerprint(small_run, small_run / "record.json", record).value
    assert results == results_fingerprint(small_run, record).value != kept
    code, out = _verify(capsys, small_run)
    assert code == 0 and _line(out, "fingerprint").startswith("WARN")
    assert out.splitlines()[-1] == "VERIFIED: no check failed (1 warning: fingerprint)"
    for expected, which in ((results, "results"), (kept, "run")):
        assert main(["verify", str(small_run), "--expect", expected]) == 0
        line = _line(capsys.readouterr().out, "fingerprint")
        assert line.startswith(f"PASS  fingerprint: {which} fingerprint {expected} is the "
                               "expected one")


def test_two_runs_of_a_plan_share_the_results_fingerprint_only(small_run, tmp_path, capsys):
    """Another run of the same plan (another worker count, another wall time): the same
    results fingerprint, another run fingerprint; each verifies against the other's results
    one, and reproduce says the results fingerprints agree."""
    from postlab.records.fingerprint import read_fingerprints

    again = tmp_path / "again"
    assert main(["run", "--plan", str(small_run / "plan.json"), "--out-dir", str(again),
                 "--workers", "2", "--quiet"]) == 0
    (run_a, results_a), (run_b, results_b) = read_fingerprints(small_run), \
        read_fingerprints(again)
    assert results_a == results_b and run_a != run_b
    assert main(["verify", str(again), "--expect", results_a]) == 0
    capsys.readouterr()
    assert main(["reproduce", str(small_run), "--out-dir", str(tmp_path / "third")]) == 0
    out = capsys.readouterr().out
    assert f"results fingerprint: recorded {results_a}, new {results_a}: the same" in out


def test_expect_catches_an_edit_whose_inner_hashes_were_rewritten(run_copy, capsys):
    """What the per-part digests cannot catch: an editor who rewrites them too."""
    from postlab.records.fingerprint import read_fingerprints
    from postlab.records.integrity import run_digests

    expected = read_fingerprints(run_copy)[1]  # the results fingerprint, as a reader notes

    def change(record):
        run = record["runs"][0]
        run["training"]["strict"][1]["rows"][0][2] = "42"
        run["digests"] = run_digests(run)

    _edit_record(run_copy, change)
    (run_copy / "fingerprint.txt").unlink()
    code, out = _verify(capsys, run_copy)
    assert code == 0, out  # every inner check passes: the rewritten digests agree
    assert main(["verify", str(run_copy), "--expect", expected]) == 1
    line = _line(capsys.readouterr().out, "fingerprint")
    assert line.startswith("FAIL") and f"expected {expected}" in line


def test_a_stale_fingerprint_file_fails(run_copy, capsys):
    (run_copy / "fingerprint.txt").write_text("0" * 64 + "\n")
    code, out = _verify(capsys, run_copy)
    assert code == 1 and "fingerprint.txt says 000" in _line(out, "fingerprint")


def test_expect_must_be_a_fingerprint(small_run, capsys):
    assert main(["verify", str(small_run), "--expect", "abc"]) == 2
    assert "64 hexadecimal digits" in capsys.readouterr().err


def test_run_prints_its_fingerprint(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"seeds": [3], "rl_steps": 2}))
    assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "run"),
                 "--workers", "1"]) == 0
    from postlab.records.fingerprint import read_fingerprints

    out = capsys.readouterr().out
    kept, results = read_fingerprints(tmp_path / "run")
    assert f"results fingerprint: {results} (note it: the same for every run" in out
    assert f"run fingerprint: {kept} (every file of this run" in out


# --- parts that only some plans have: the plan decides they must be there -------------------

@pytest.fixture(scope="module")
def sampled_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("verify-options")
    plan = write_plan(folder / "plan.json", **(SMALL | {
        "seeds": [3], "rl_steps": 3, "dynamic_sampling": {"max_extra_groups": 2},
        "arms": ["strict", {"name": "more", "pipeline": "sft-only", "sft_steps": 5}]}))
    out = folder / "run"
    run_plan(load_plan(plan), plan.read_bytes(), RunOptions(out_dir=out, workers=1))
    return out


def _drop_sampling(record):
    run = record["runs"][0]
    for step, digests in zip(run["training"]["strict"], run["digests"]["training"]["strict"],
                             strict=True):
        step.pop("sampling")
        digests.pop("sampling")


def _drop_sft_only_losses(record):
    run = record["runs"][0]
    run.pop("arm_sft_loss")
    run["digests"].pop("arm_sft_loss")


@pytest.mark.parametrize("change", [_drop_sampling, _drop_sft_only_losses],
                         ids=["dynamic-sampling-record", "sft-only-losses"])
def test_parts_the_plan_requires_cannot_be_removed_with_their_digests(sampled_run, tmp_path,
                                                                      capsys, change):
    run = tmp_path / "run"
    shutil.copytree(sampled_run, run)
    assert _verify(capsys, run)[0] == 0
    _edit_record(run, change)
    (run / "fingerprint.txt").unlink()
    code, out = _verify(capsys, run)
    assert code == 1, out
    assert _line(out, "counts").startswith("FAIL")


# --- verify --quick, and what re-evaluation costs ------------------------------------------

def test_quick_verify_checks_everything_but_reevaluation_and_says_so(run_copy, capsys,
                                                                   monkeypatch):
    import postlab.runs.seed_walk as seed_walk

    def never(*args, **kwargs):
        raise AssertionError("--quick loaded a checkpoint")

    monkeypatch.setattr(seed_walk, "load_checkpoint", never)
    capsys.readouterr()
    assert main(["verify", str(run_copy), "--quick"]) == 0
    out = capsys.readouterr().out
    assert "SKIP  checkpoint re-evaluation: --quick: no checkpoint was re-evaluated" in out
    assert "PASS  checkpoint hashes: 6 checkpoints match" in out
    assert out.splitlines()[-1].startswith("VERIFIED (quick, no checkpoint re-evaluated): ")
    # the hashes are still checked, byte for byte, and every other check still runs
    checkpoint = run_copy / "seed-4-strict.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:-1] + b"x")
    summary = run_copy / "summary.json"
    summary.write_bytes(summary.read_bytes().replace(b"\n", b"\n ", 1))
    assert main(["verify", str(run_copy), "--quick"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  checkpoint hashes: " in out and "seed-4-strict.pt: sha256" in out
    assert "FAIL  summary: " in out
    assert out.splitlines()[-1].startswith("NOT VERIFIED: 3 of")  # and the fingerprint


def test_full_verify_prices_its_reevaluation_per_seed(small_run, capsys):
    capsys.readouterr()
    assert main(["verify", str(small_run)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("PASS  checkpoint re-evaluation: "))
    assert re.search(r"6 checkpoints reloaded and re-evaluated: every row equal \(reloading "
                     r"and re-evaluating took \d+\.\d\d s a seed\)$", line), line


# --- re-evaluation together, where the engine can ------------------------------------------

def _rows(text: str) -> dict:
    return {"test": {"greedy": [[1, 2, text, True]], "sampled": [[1, 2, text, True]]}}


def test_a_checkpoint_that_cannot_be_evaluated_is_named_though_it_was_in_company():
    """Evaluated together, one checkpoint whose weights cannot be sampled from fails the whole
    computation; each is then evaluated alone, so that one is named and the others checked."""
    from postlab.runs.seed_walk import Walk, _Loaded, _reevaluate

    class Engine:
        def __init__(self) -> None:
            self.calls: list[list[int]] = []

        def evaluate_many(self, models, plan, seeds, device):
            self.calls.append(list(seeds))
            if 4 in seeds:
                raise RuntimeError("probability tensor contains either inf, nan or element < 0")
            return [_rows(model) for model in models]

    waiting = [_Loaded(seed=3, stage="strict", model="3", recorded=_rows("3"),
                       reload_equal=True),
               _Loaded(seed=4, stage="strict", model="x", recorded=_rows("x"),
                       reload_equal=True),
               _Loaded(seed=5, stage="strict", model="6", recorded=_rows("5"),
                       reload_equal=True)]
    seen = Walk()
    engine = Engine()
    _reevaluate(waiting, {}, "cpu", engine, seen)
    assert engine.calls == [[3, 4, 5], [3], [4], [5]]
    assert seen.reloaded == 2
    assert seen.eval_problems == [
        "seed 4, stage strict: cannot be evaluated (probability tensor contains either inf, "
        "nan or element < 0)",
        "seed 5, stage strict: split test, greedy row 0: recorded [1, 2, '5', True], now "
        "[1, 2, '6', True]"]


@pytest.mark.slow
def test_an_ensemble_record_is_reevaluated_together_with_the_rows_each_gives_alone(
        tmp_path, monkeypatch):
    import postlab.runs.seed_walk as seed_walk
    import postlab.runs.verify as verify
    from postlab.engines.ensemble.task import ENSEMBLE
    from postlab.records.record import load_record, locate_run

    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"seeds": [3, 4, 5]}))
    out = tmp_path / "run"
    run_plan(load_plan(plan), plan.read_bytes(),
             RunOptions(out_dir=out, workers=1, engine="ensemble"))
    calls = []
    real = type(ENSEMBLE).evaluate_many

    def counted(self, models, plan, seeds, device):
        calls.append(len(models))
        return real(self, models, plan, seeds, device)

    monkeypatch.setattr(type(ENSEMBLE), "evaluate_many", counted)

    def checks() -> list:
        files = locate_run(out)
        return [(c.name, c.status, re.sub(r"took \d+\.\d\d s", "took", c.detail))
                for c in verify.verify_run(files, load_record(files.record))]

    together = checks()
    assert calls == [9]  # three seeds' three checkpoints, one computation
    calls.clear()
    monkeypatch.setattr(seed_walk, "EVALUATION_BATCH", 1)
    assert checks() == together and calls == [3, 3, 3]  # one seed at a time
    assert ("checkpoint re-evaluation", "pass") in [(n, s) for n, s, _ in together]
