"""``--engine ensemble`` end to end: an ordinary run folder that verify, reproduce, report,
sweeps and export read as they read any other; refusals before anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from plans import SMALL, rows, write_plan
from recordfiles import read_record, write_record

from postlab.cli import main
from postlab.plan.schema import Plan
from postlab.policies.base import build_policy
from postlab.policies.checkpoint import load_checkpoint
from postlab.records.record import load_record

pytestmark = pytest.mark.slow

PIPELINES = [{"name": "sft-then-rl", "pipeline": "sft-then-rl", "contract": "strict"},
             {"name": "rl-only", "pipeline": "rl-only", "contract": "substring"},
             {"name": "sft-more", "pipeline": "sft-only", "sft_steps": 12}]


def _run(tmp_path: Path, name: str = "run", *extra: str, **plan) -> Path:
    path = write_plan(tmp_path / f"{name}.json", **(SMALL | plan))
    out = tmp_path / name
    assert main(["run", "--plan", str(path), "--out-dir", str(out), "--engine", "ensemble",
                 "--workers", "1", "--quiet", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def ensemble_run(tmp_path_factory) -> Path:
    return _run(tmp_path_factory.mktemp("ensemble"))


def test_an_ensemble_run_is_an_ordinary_verified_run(ensemble_run, capsys):
    record = load_record(ensemble_run / "record.json")
    assert record.engine == "ensemble"
    assert [run.seed for run in record.runs] == SMALL["seeds"]
    plan = Plan.of(json.loads((ensemble_run / "plan.json").read_text()))
    for run in record.runs:
        assert list(run.evaluations) == ["initial", "strict", "substring"]
        assert len(run.arms["strict"]) == SMALL["rl_steps"]
        assert run.checkpoints is not None
        for info in run.checkpoints.values():  # ordinary CharGRU checkpoints
            state = load_checkpoint(ensemble_run / info.file, info.sha256)["state_dict"]
            build_policy(plan).load_state_dict(state)
            assert info.reload_equal is True
    capsys.readouterr()
    assert main(["verify", str(ensemble_run)]) == 0
    out = capsys.readouterr().out
    assert "checkpoint re-evaluation: 6 checkpoints reloaded and re-evaluated" in out


def test_verify_re_evaluates_with_the_record_s_engine(ensemble_run, tmp_path, capsys):
    """Read as an exact-engine record, the same checkpoints evaluate to other rows: the
    engine named in the record is what verify must use."""
    copy = tmp_path / "copy"
    shutil.copytree(ensemble_run, copy)
    record = read_record(copy)
    del record["engine"]
    write_record(copy, record)
    capsys.readouterr()
    assert main(["verify", str(copy)]) == 1
    assert "FAIL  checkpoint re-evaluation" in capsys.readouterr().out


def test_reproduce_uses_the_record_s_engine(ensemble_run, tmp_path, capsys):
    assert main(["reproduce", str(ensemble_run), "--out-dir", str(tmp_path / "again"),
                 "--workers", "1", "--quiet"]) == 0
    assert "identical" in capsys.readouterr().out
    assert load_record(tmp_path / "again" / "record.json").engine == "ensemble"


def test_a_spot_check_of_one_member_is_identical(ensemble_run, tmp_path, capsys):
    """A member's bits do not depend on the members trained beside it: one seed alone
    reproduces its rows and checkpoints."""
    assert main(["reproduce", str(ensemble_run), "--seed", "4", "--out-dir",
                 str(tmp_path / "again"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "seeds 4 (1 of the record's 2;" in out and out.splitlines()[-1].startswith("identical")


def test_workers_processes_and_resume_give_the_same_bits(ensemble_run, tmp_path, capsys):
    other = tmp_path / "two"
    plan = ensemble_run / "plan.json"
    assert main(["run", "--plan", str(plan), "--out-dir", str(other), "--engine", "ensemble",
                 "--workers", "2", "--quiet"]) == 0
    assert rows(load_record(other / "record.json")) == rows(load_record(ensemble_run /
                                                                        "record.json"))
    # an interrupted run (no seed recorded yet) resumes to the same bits ...
    for name in ("record.json", "summary.json", "fingerprint.txt"):
        (other / name).unlink()
    for checkpoint in other.glob("seed-4-*.pt"):
        checkpoint.unlink()
    assert main(["run", "--out-dir", str(other), "--resume", "--engine", "ensemble",
                 "--workers", "1", "--quiet"]) == 0
    assert rows(load_record(other / "record.json")) == rows(load_record(ensemble_run /
                                                                        "record.json"))
    # ... and only with the engine it was started with
    (other / "summary.json").unlink()
    capsys.readouterr()
    assert main(["run", "--out-dir", str(other), "--resume", "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "started with the ensemble engine; resume it with --engine ensemble" in err


def test_pipelines_and_differing_engines_differ_only_in_bits(tmp_path, capsys):
    out = _run(tmp_path, "pipelines", arms=PIPELINES)
    record = load_record(out / "record.json")
    for run in record.runs:
        assert list(run.evaluations) == ["initial", "sft-then-rl", "rl-only", "sft-more"]
        assert set(run.arms) == {"sft-then-rl", "rl-only"}
        assert run.arm_sft_loss is not None and len(run.arm_sft_loss["sft-more"]) == 12
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    assert main(["report", str(out), "--format", "json"]) == 0
    assert main(["exercises", "9", str(out)]) == 0


def test_a_sweep_through_the_ensemble_engine(tmp_path, capsys):
    write_plan(tmp_path / "base.json", **SMALL)
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps({"base": "base.json", "seeds": [3, 4, 5], "versions": [
        {"name": "more-kl", "set": {"kl_beta": 0.3}}]}))
    sweep = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--out-dir", str(sweep), "--engine", "ensemble",
                 "--executor", "local", "--workers", "1", "--quiet"]) == 0
    for version in ("base", "more-kl"):
        assert load_record(sweep / version / "record.json").engine == "ensemble"
        assert main(["verify", str(sweep / version)]) == 0
    # both versions trained as members of one batch; each equals its plan trained alone
    alone = tmp_path / "alone"
    assert main(["run", "--plan", str(sweep / "more-kl" / "plan.json"), "--out-dir", str(alone),
                 "--engine", "ensemble", "--workers", "1", "--quiet"]) == 0
    assert rows(load_record(alone / "record.json")) == rows(
        load_record(sweep / "more-kl" / "record.json"))
    capsys.readouterr()
    assert main(["compare", str(sweep), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["versions"] == ["base", "more-kl"]
    assert main(["export", str(sweep), "--out-dir", str(tmp_path / "tables")]) == 0


@pytest.mark.parametrize(("changes", "words"), [
    ({"dynamic_sampling": {"max_extra_groups": 2}}, "dynamic_sampling"),
    ({"precision": "bf16"}, "precision bf16"),
    ({"gradient_checkpointing": True, "policy": {
        "kind": "transformer", "architecture": "gpt2", "layers": 1, "heads": 2, "width": 16,
        "max_positions": 32}}, "gradient_checkpointing"),
    ({"threads": 2}, "threads 2"),
])
def test_what_the_ensemble_cannot_train_is_refused_first(tmp_path, capsys, changes, words):
    path = write_plan(tmp_path / "p.json", **(SMALL | changes))
    out = tmp_path / "run"
    assert main(["run", "--plan", str(path), "--out-dir", str(out), "--engine", "ensemble",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the ensemble engine cannot train" in err and words in err
    assert not out.exists()



def test_chunks_change_the_work_not_the_bits(tmp_path):
    """Called from a process on two threads, as a library user's would be: the engine trains
    on the plan's one thread (on two, seeds 3 and 4 differed between chunks on an AMD EPYC)
    and gives the caller its threads back."""
    from postlab.engines.ensemble.task import Part, train_parts

    plan = Plan.of(json.loads(write_plan(tmp_path / "p.json", **(SMALL | {"seeds": [3, 4, 5]}))
                              .read_text()))
    found = []
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for chunk in (1, 2, None):
            out = tmp_path / f"chunk-{chunk}"
            out.mkdir()
            results = train_parts([Part(plan, (3, 4, 5), out)], "cpu", lambda event: None,
                                  chunk)
            assert torch.get_num_threads() == 2
            found.append({(seed, stage): {k: v for k, v in result.items()
                                          if k != "checkpoint"}
                          | {"sha256": result["checkpoint"]["sha256"]}
                          for (_, seed, stage), result in results.items()})
    finally:
        torch.set_num_threads(threads)
    assert found[0] == found[1] == found[2]
    assert len(found[0]) == 3 * 3


@pytest.mark.parametrize("seeds, capacity, device, tasks", [
    (3, 2, "cpu", 2), (300, 2, "cpu", 3), (300, 1, "cpu", 3), (1000, 1, "cuda", 1),
    (3000, 1, "cuda", 3),
])
def test_tasks_hold_a_bounded_number_of_seeds(tmp_path, seeds, capacity, device, tasks):
    # a task's results wait in its process until it ends: no task may hold every seed of a
    # large run, whatever the number of workers
    from postlab.engines.ensemble.task import ENSEMBLE, TASK_SEEDS
    from postlab.engines.registry import Work

    plan = Plan.of(json.loads(write_plan(tmp_path / "p.json", **SMALL).read_text()))
    work = Work(plan, tuple(range(1, seeds + 1)), tmp_path, device=device)
    made = ENSEMBLE.tasks([work], capacity)
    assert len(made) == tasks
    held = [seed for task in made for part in task.parts for seed in part.seeds]
    assert sorted(held) == list(range(1, seeds + 1))
    assert all(sum(len(part.seeds) for part in task.parts) <= TASK_SEEDS[device]
               for task in made)
    assert {task.shares for task in made} == {min(capacity, seeds)}


def test_a_cpu_chunk_keeps_an_rl_pass_in_the_cache(monkeypatch):
    # the teaching plan's rollouts: 64 rows x 3 x 48 floats a member, 2 RL members a seed
    from postlab.engines.ensemble import task
    from postlab.machine import resources
    from postlab.plan.frozen import teaching_plan_loaded

    plan = teaching_plan_loaded().model
    monkeypatch.setattr(resources, "l2_cache_bytes", lambda: 2 << 20)
    monkeypatch.setattr(task, "free_bytes", lambda device: 64 << 30)
    assert task.cache_seeds(plan) == (2 << 20) // (64 * 3 * 48 * 4 * 2) == 28
    assert task.chunk_seeds(plan, "cpu", 3) == 28
    assert task.chunk_seeds(plan, "cuda", 3) > 900  # a GPU takes what memory holds
    monkeypatch.setattr(task, "free_bytes", lambda device: 64 << 20)
    assert task.chunk_seeds(plan, "cpu", 3) < 28  # and memory still bounds a CPU chunk
    monkeypatch.setattr(resources, "l2_cache_bytes", lambda: 1024)
    assert task.cache_seeds(plan) == task.MIN_CACHE_SEEDS  # never fewer than that
    monkeypatch.setattr(resources, "l2_cache_bytes", lambda: 2 << 20)
    assert task.cache_seeds(plan.replace(arms=["strict"])) == 56  # one RL member a seed
    monkeypatch.setattr(task, "arm_specs", lambda plan: [])  # no RL: not measured, no cap
    assert task.cache_seeds(plan) is None
    monkeypatch.setattr(task, "free_bytes", lambda device: 64 << 30)
    assert task.chunk_seeds(plan, "cpu", 1) > 28


def test_live_logs_are_refused_with_the_ensemble(tmp_path, capsys):
    path = write_plan(tmp_path / "p.json", **SMALL)
    assert main(["run", "--plan", str(path), "--out-dir", str(tmp_path / "run"), "--engine",
                 "ensemble", "--log", "tensorboard", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "the ensemble engine cannot train with --log tensorboard: it writes no live logs" in err
    assert not (tmp_path / "run").exists()


def test_a_member_that_diverges_stops_the_batch_naming_its_seed(tmp_path, capsys,
                                                                monkeypatch):
    """A NaN loss in one member (forced here: the second seed's cross-entropy at every step)
    stops the run before any weight moves or is saved, naming that seed."""
    from postlab.engines.ensemble import engine

    real = engine._cross_entropy

    def poisoned(logits, target, pad):
        loss = real(logits, target, pad)
        return loss + torch.tensor([0.0, float("nan")])[: loss.shape[0]]

    monkeypatch.setattr(engine, "_cross_entropy", poisoned)
    path = write_plan(tmp_path / "p.json", **SMALL)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(path), "--out-dir", str(out), "--engine", "ensemble",
                 "--workers", "1", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"non-finite loss or gradient norm at seed {SMALL['seeds'][1]}, SFT step 1" in err
    assert "Traceback" not in err
    assert not list(out.glob("*.pt"))  # stopped before any weight was saved


def test_an_interrupted_ensemble_run_resumes_only_with_its_engine(tmp_path, capsys,
                                                                 monkeypatch):
    from postlab.engines.ensemble import task

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    path = write_plan(tmp_path / "p.json", **SMALL)
    out = tmp_path / "run"
    monkeypatch.setattr(task, "train_parts", interrupted)
    assert main(["run", "--plan", str(path), "--out-dir", str(out), "--engine", "ensemble",
                 "--workers", "1", "--quiet"]) == 130
    monkeypatch.undo()
    capsys.readouterr()
    assert main(["run", "--out-dir", str(out), "--resume", "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "started with the ensemble engine; resume it with --engine ensemble" in err
    assert main(["run", "--out-dir", str(out), "--resume", "--engine", "ensemble",
                 "--workers", "1", "--quiet"]) == 0
    assert main(["verify", str(out)]) == 0


def _interrupted_after_first_chunk(ensemble_run: Path, out: Path, monkeypatch) -> list:
    """Train the run one seed a chunk and interrupt it in the second chunk; returns the list
    the (patched) chunk trainer appends each chunk's seeds to."""
    from postlab.engines.ensemble import task

    real = task._train_members
    trained: list[list[int]] = []

    def interrupted_after_one(members, device):
        if trained:
            raise KeyboardInterrupt
        trained.append([seed for _, seed in members])
        return real(members, device)

    monkeypatch.setattr(task, "chunk_seeds", lambda *args, **kwargs: 1)
    monkeypatch.setattr(task, "_train_members", interrupted_after_one)
    assert main(["run", "--plan", str(ensemble_run / "plan.json"), "--out-dir", str(out),
                 "--engine", "ensemble", "--workers", "1", "--quiet"]) == 130
    trained_then = list(trained)
    trained.clear()

    def recorded(members, device):
        trained.append([seed for _, seed in members])
        return real(members, device)

    monkeypatch.setattr(task, "_train_members", recorded)
    trained.append(trained_then)
    return trained


def test_an_interrupted_ensemble_run_keeps_its_finished_chunks(ensemble_run, tmp_path, capsys,
                                                               monkeypatch):
    """One seed a chunk, interrupted in the second: the first seed's results are kept, the
    resumed run trains only the second seed, and the record is the uninterrupted run's."""
    out = tmp_path / "run"
    trained = _interrupted_after_first_chunk(ensemble_run, out, monkeypatch)
    first, second = SMALL["seeds"]
    assert trained.pop() == [[first]]
    stages = ["initial", "strict", "substring"]
    assert sorted(p.name for p in (out / "tasks").glob("seed-*.json")) == sorted(
        f"seed-{first}-{stage}.json" for stage in stages)
    assert not (out / "record.json").exists()
    capsys.readouterr()
    assert main(["run", "--out-dir", str(out), "--resume", "--engine", "ensemble",
                 "--workers", "1"]) == 0
    assert "3 finished tasks of incomplete seeds kept" in capsys.readouterr().out
    assert trained == [[second]]
    assert rows(load_record(out / "record.json")) == rows(load_record(ensemble_run /
                                                                      "record.json"))
    assert not (out / "tasks").exists()
    assert main(["verify", str(out)]) == 0


def test_a_seed_kept_in_part_trains_again_whole(ensemble_run, tmp_path, capsys, monkeypatch):
    """The kept seed's RL checkpoint is damaged after the interruption: its kept result is
    unusable, so the seed trains again whole, and its old checkpoints, which nothing names
    any more, are replaced rather than refused."""
    out = tmp_path / "run"
    trained = _interrupted_after_first_chunk(ensemble_run, out, monkeypatch)
    first = SMALL["seeds"][0]
    trained.pop()
    damaged = out / f"seed-{first}-strict.pt"
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 1
    damaged.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["run", "--out-dir", str(out), "--resume", "--engine", "ensemble",
                 "--workers", "1"]) == 0
    said = capsys.readouterr().out
    assert "unusable" in said and "checkpoints of seeds not finished whole" in said
    assert trained == [[seed] for seed in SMALL["seeds"]]  # still one seed a chunk
    assert rows(load_record(out / "record.json")) == rows(load_record(ensemble_run /
                                                                      "record.json"))
    assert main(["verify", str(out)]) == 0
