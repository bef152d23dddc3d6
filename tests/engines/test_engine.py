import os

import pytest
import torch
from plans import SMALL, rows, write_plan
from recordfiles import read_record

from postlab.cli import main
from postlab.errors import NonFiniteError
from postlab.plan.frozen import load_plan
from postlab.rl import objective
from postlab.runs.orchestration import RunOptions, run_plan


def _run(plan_path, out, workers=1, **kw):
    plan = load_plan(plan_path)
    return run_plan(plan, plan_path.read_bytes(), RunOptions(out_dir=out, workers=workers, **kw))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    plan = write_plan(folder / "plan.json", **SMALL)
    record = _run(plan, folder / "run")
    return plan, folder / "run", record


def test_run_folder_contents(small):
    plan, out, record = small
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    # the exact engine writes the record after each seed: a chunk per seed
    assert names == sorted(["plan.json", "record.json", "summary.json", "fingerprint.txt",
                            "rows", "rows/chunk-00000.parquet", "rows/chunk-00001.parquet"]
                           + [f"seed-{s}-{stage}.pt" for s in (3, 4)
                              for stage in ("initial", "strict", "substring")])
    assert (out / "plan.json").read_bytes() == plan.read_bytes()
    on_disk = read_record(out)
    assert on_disk == record.data() | {"runs": [run.data() for run in record.runs]}
    assert record.plan_sha256 == load_plan(plan).sha256
    for key in ("postlab_version", "torch", "python", "platform", "threads", "workers",
                "source_sha256", "parameters", "wall_seconds"):
        assert getattr(record, key) is not None
    run = record.runs[0]
    assert run.sft_loss is not None and len(run.sft_loss) == SMALL["sft_steps"]
    assert list(run.evaluations) == ["initial", "strict", "substring"]
    history = run.arms["strict"]
    assert [h.step for h in history] == list(range(1, SMALL["rl_steps"] + 1))
    assert len(history[0].rows) == SMALL["prompts_per_step"] * SMALL["group_size"]
    assert len(history[0].updates) == 2
    assert run.checkpoints is not None
    assert all(c.reload_equal for c in run.checkpoints.values())


def test_results_do_not_depend_on_workers(small, tmp_path):
    plan, _, record = small
    parallel = _run(plan, tmp_path / "w3", workers=3)
    assert rows(parallel) == rows(record)
    assert parallel.workers == 3


def test_existing_out_dir_is_refused(small, capsys):
    plan, out, _ = small
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and err.count("\n") == 1
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_resume_of_a_complete_run_changes_nothing(small, capsys):
    _, out, _ = small
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main(["run", "--out-dir", str(out), "--resume", "--workers", "1"]) == 0
    assert "already complete" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_non_finite_loss_stops_with_seed_arm_step(tmp_path, monkeypatch, capsys):
    plan = write_plan(tmp_path / "plan.json", **SMALL)
    first_seed_calls = 2 * SMALL["rl_steps"] * 2  # arms x steps x updates
    real = objective.per_token_loss
    calls = {"n": 0}

    def poisoned(*args):
        calls["n"] += 1
        value = real(*args)
        return value * float("nan") if calls["n"] == first_seed_calls + 5 else value

    monkeypatch.setattr(objective, "per_token_loss", poisoned)
    # The cost estimate's calibration runs the objective too; count only training's calls.
    from postlab.runs.estimate import estimate

    monkeypatch.setattr("postlab.api.training.check_size",
                        lambda plan, allow_large, **_: estimate(plan.model, calibrated=False))
    out = tmp_path / "run"
    code = main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet"])
    assert code == 1
    err = capsys.readouterr().err
    assert "seed 4, arm strict, RL step 3" in err and "non-finite" in err
    record = read_record(out)
    assert [run["seed"] for run in record["runs"]] == [3]
    assert not (out / "summary.json").exists()


def test_non_finite_gradient_is_caught(tmp_path, monkeypatch):
    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"seeds": [3]}))
    real = torch.nn.utils.clip_grad_norm_

    def exploding(params, max_norm):
        real(params, max_norm)
        return torch.tensor(float("inf"))

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", exploding)
    with pytest.raises(NonFiniteError, match="gradient norm"):
        _run(plan, tmp_path / "run")


def test_tampered_checkpoint_is_refused_on_resume(small, tmp_path, monkeypatch, capsys):
    import shutil

    _, out, _ = small
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "summary.json").unlink()
    target = copy / "seed-4-strict.pt"
    data = bytearray(target.read_bytes())
    data[-30] ^= 1
    target.write_bytes(bytes(data))
    loaded = []
    real_load = torch.load

    def spy(source, *args, **kwargs):
        loaded.append(source.getvalue())
        return real_load(source, *args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    assert main(["run", "--out-dir", str(copy), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "seed-4-strict.pt" in err and "refusing to load" in err
    assert loaded and bytes(data) not in loaded  # refused before deserialisation


def test_progress_lines_and_quiet(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"seeds": [3]}))
    assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "a"),
                 "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "seed=3 arm=strict step=6 strict=" in out and "seed=3 done" in out
    assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "b"),
                 "--workers", "1", "--quiet"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("change", "field"), [
    ({"arms": ["strict", "lenient"]}, "arms"),
    ({"task": "chess"}, "task"),
    ({"clip": 1.5}, "clip"),
    ({"eos": "x"}, "eos"),
    ({"seeds": [1, 1]}, "seeds"),
])
def test_untrainable_plans_are_refused(tmp_path, capsys, change, field):
    plan = write_plan(tmp_path / "plan.json", **(SMALL | change))
    assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "run")]) == 2
    assert field in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_default_workers_is_the_core_count_or_the_variable(monkeypatch, tmp_path, capsys):
    from postlab.runs.workers import WORKERS_VARIABLE, default_workers

    monkeypatch.delenv(WORKERS_VARIABLE, raising=False)
    assert default_workers() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(WORKERS_VARIABLE, "3")
    assert default_workers() == 3
    plan = write_plan(tmp_path / "plan.json", **SMALL)
    for bad in ("0", "-1", "two", "1.5", "\u00b2", "+2", "5000", "9" * 5000):
        monkeypatch.setenv(WORKERS_VARIABLE, bad)
        assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err
        assert f"{WORKERS_VARIABLE}=" in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "run").exists()
    monkeypatch.delenv(WORKERS_VARIABLE)
    # a record names at most 4096 workers, so a run asks for no more
    assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "run"),
                 "--workers", "5000"]) == 2
    assert "at most 4096" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_recorded_seed_is_not_held_by_the_main_process(tmp_path, monkeypatch):
    # each seed's results are forgotten once its chunk is written: the main process of a
    # run of many seeds holds the seeds in flight, not every seed trained so far
    from postlab.runs import orchestration

    seen = []
    original = orchestration.run_tasks

    def watching(executor, runs, *args, **kwargs):
        original(executor, runs, *args, **kwargs)
        seen.extend(runs)

    monkeypatch.setattr(orchestration, "run_tasks", watching)
    plan = write_plan(tmp_path / "plan.json", **{**SMALL, "seeds": [1, 2, 3]})
    record = _run(plan, tmp_path / "run")
    (run,) = seen
    assert record.seeds is not None
    assert sorted(run.assemblies) == [1, 2, 3] == sorted(record.seeds)
    for assembly in run.assemblies.values():
        assert assembly.recorded and assembly.complete()
        assert assembly.sft is None and assembly.arm_results == {}
    assert run.kept == {} and run.unwritten == []
