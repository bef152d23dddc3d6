"""Live logging (``--log tensorboard``): the event files, read back with TensorBoard's own
reader, hold one value per step of every tag, equal to the numbers recomputed here from the
record; every executor logs; logging changes no bit of a run; refusals come first."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from plans import SMALL, rows, write_plan
from recordfiles import read_record

from postlab.cli import main
from postlab.engines import steplog
from postlab.errors import UserError
from postlab.plan.arms import plan_contracts
from postlab.plan.frozen import load_plan
from postlab.rl import objective
from postlab.runs.executors import EXECUTORS, LocalExecutor
from postlab.runs.orchestration import RunOptions, run_plan
from postlab.tasks.contracts import score
from postlab.tasks.registry import answer_function
from postlab.tasks.rows import Row

#: Every pipeline: an arm from SFT weights, one from untrained weights, one SFT-only.
PLAN = SMALL | {"seeds": [3, 4],
                "arms": ["strict",
                         {"name": "only", "pipeline": "rl-only", "contract": "substring"},
                         {"name": "more", "pipeline": "sft-only", "sft_steps": 5}]}
RL_ARMS = ("strict", "only")
STAGES = ("sft", "strict", "only", "more")
#: Tags of the update statistics, each with the record's key it averages over a step's updates.
UPDATE_TAGS = {"kl": "kl", "entropy": "entropy", "clip_fraction": "ratio_outside_clip",
               "gradient_norm": "gradient_norm_before_clip", "loss": "loss"}
#: Tags computed from the step's rows (and its zero-variance group count).
ROW_TAGS = ("mean_tokens", "truncated", "zero_variance_groups")


def _events(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of one TensorBoard run, by tag, as TensorBoard itself reads it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    reader = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep all
    reader.Reload()
    return {tag: [(event.step, event.value) for event in reader.Scalars(tag)]
            for tag in reader.Tags()["scalars"]}


def _logs(run: Path) -> dict[tuple[str, str], dict[str, list[tuple[int, float]]]]:
    root = run / "logs" / "tensorboard"
    return {(seed.name, stage.name): _events(stage)
            for seed in sorted(root.iterdir()) for stage in sorted(seed.iterdir())}


def _f32(value: float) -> float:
    """What an event file keeps of a value: TensorBoard scalars are float32."""
    return float(np.float32(value))


def _expected_rl(step: dict, answer, contracts) -> dict[str, float]:
    """One RL step's scalars recomputed from the record: rewards from the rows under each
    contract, update statistics averaged over the step's updates (as the report does)."""
    typed = [Row.of(raw) for raw in step["rows"]]
    n = len(typed)
    updates = step["updates"]
    values = {f"reward/{name}": sum(score(row, name, answer) for row in typed) / n
              for name in contracts}
    for tag, key in UPDATE_TAGS.items():
        values[tag] = sum(update[key] for update in updates) / len(updates)
    values["mean_tokens"] = sum(len(row.text) + row.terminated for row in typed) / n
    values["truncated"] = sum(not row.terminated for row in typed) / n
    values["zero_variance_groups"] = float(step["zero_variance_groups"])
    return values


def _comparable(path: Path) -> bytes:
    """A record's bytes with its wall time blanked (it differs run to run) and its source
    hashes (they differ only if postlab's files changed between the two runs)."""
    data = re.sub(rb'"wall_seconds": [-+.0-9eE]+', b'"wall_seconds": 0', path.read_bytes())
    return re.sub(rb'"source_sha256": \{[^}]*\}', b'"source_sha256": {}', data)


def _cli_run(plan: Path, out: Path, *extra: str) -> None:
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet", *extra]) == 0


# --- refusals: nothing trains, nothing is written ---------------------------------------------

def test_tensorboard_is_the_first_registered_logger():
    assert steplog.LOGGERS.names()[0] == "tensorboard"


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_an_unknown_logger_is_refused_in_one_line(command, tmp_path, capsys):
    out = tmp_path / "out"
    args = [command, "--out-dir", str(out), "--log", "tensorbord"]
    assert main(args + (["sweep.json"] if command == "sweep" else [])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"postlab {command}: --log tensorbord: unknown (did you mean tensorboard?)" in err
    assert not out.exists()


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_missing_tensorboard_is_refused_before_anything_is_written(command, tmp_path,
                                                                      monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if it were not installed
    plan = write_plan(tmp_path / "plan.json", **PLAN)
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps({"base": "plan.json", "seeds": [3], "grid": {"kl_beta": [0.0]}}))
    out = tmp_path / "out"
    args = ["--out-dir", str(out), "--log", "tensorboard", "--workers", "1", "--quiet"]
    args = ["run", "--plan", str(plan), *args] if command == "run" else ["sweep", str(spec),
                                                                         *args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'postlab[tensorboard]'" in err
    assert not out.exists()


def test_the_library_refuses_an_unknown_logger_before_writing(tmp_path):
    plan = write_plan(tmp_path / "plan.json", **PLAN)
    out = tmp_path / "out"
    with pytest.raises(UserError, match="unknown logger 'nope'; known: tensorboard"):
        run_plan(load_plan(plan), plan.read_bytes(), RunOptions(out_dir=out, log=("nope",)))
    assert not out.exists()


# --- a logged run ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """The same plan trained with and without --log tensorboard."""
    folder = tmp_path_factory.mktemp("logging")
    plan = write_plan(folder / "plan.json", **PLAN)
    _cli_run(plan, folder / "logged", "--log", "tensorboard")
    _cli_run(plan, folder / "plain")
    return plan, folder / "logged", folder / "plain"


@pytest.mark.slow
def test_each_seed_and_stage_is_a_run_with_one_value_per_step(logged):
    plan, out, _ = logged
    logs = _logs(out)
    assert sorted(logs) == sorted((f"seed-{seed}", stage) for seed in PLAN["seeds"]
                                  for stage in STAGES)
    contracts = plan_contracts(load_plan(plan).model)
    assert {"strict", "substring"} <= set(contracts)
    rl_tags = {f"reward/{name}" for name in contracts} | set(UPDATE_TAGS) | set(ROW_TAGS)
    rl_steps = list(range(1, PLAN["rl_steps"] + 1))
    for (seed, stage), events in logs.items():
        if stage in RL_ARMS:
            assert set(events) == rl_tags, (seed, stage)
            for tag, values in events.items():
                assert [step for step, _ in values] == rl_steps, (seed, stage, tag)
        else:
            assert set(events) == {"sft/loss"}, (seed, stage)
            steps = [step for step, _ in events["sft/loss"]]
            sft = PLAN["sft_steps"]
            # an SFT-only arm's extra steps continue the seed's SFT curve
            first, count = (1, sft) if stage == "sft" else (sft + 1, 5)
            assert steps == list(range(first, first + count)), (seed, stage)


@pytest.mark.slow
def test_logged_values_equal_the_numbers_recomputed_from_the_record(logged):
    plan_path, out, _ = logged
    plan = load_plan(plan_path).model
    answer, contracts = answer_function(plan), plan_contracts(plan)
    record = read_record(out)
    logs = _logs(out)
    checked = 0
    for run in record["runs"]:
        seed = f"seed-{run['seed']}"
        assert logs[(seed, "sft")]["sft/loss"] == [
            (step, _f32(loss)) for step, loss in enumerate(run["sft_loss"], start=1)]
        extra = run["arm_sft_loss"]["more"]
        assert logs[(seed, "more")]["sft/loss"] == [
            (PLAN["sft_steps"] + step, _f32(loss)) for step, loss in enumerate(extra, start=1)]
        for arm in RL_ARMS:
            events = logs[(seed, arm)]
            for step in run["training"][arm]:
                for tag, value in _expected_rl(step, answer, contracts).items():
                    want = (step["step"], _f32(value))
                    assert events[tag][step["step"] - 1] == want, (seed, arm, step["step"], tag)
                    checked += 1
    assert checked == len(PLAN["seeds"]) * len(RL_ARMS) * PLAN["rl_steps"] * (
        len(contracts) + len(UPDATE_TAGS) + len(ROW_TAGS))


@pytest.mark.slow
def test_logging_changes_no_bit_of_the_run(logged):
    _, out, plain = logged
    assert _comparable(out / "record.json") == _comparable(plain / "record.json")
    assert (out / "summary.json").read_bytes() == (plain / "summary.json").read_bytes()
    names = sorted(p.name for p in plain.iterdir())
    assert sorted(p.name for p in out.iterdir()) == sorted([*names, "logs"])
    checkpoints = [name for name in names if name.endswith(".pt")]
    assert len(checkpoints) == len(PLAN["seeds"]) * len(STAGES)
    for name in checkpoints:
        assert (out / name).read_bytes() == (plain / name).read_bytes(), name


@pytest.mark.slow
def test_verify_passes_with_a_logs_folder(logged, capsys):
    _, out, _ = logged
    assert main(["verify", str(out)]) == 0
    assert "VERIFIED" in capsys.readouterr().out


@pytest.mark.slow
def test_worker_processes_log_the_same_values(logged, tmp_path):
    plan, out, _ = logged
    pooled = tmp_path / "pooled"
    record = run_plan(load_plan(plan), plan.read_bytes(),
                      RunOptions(out_dir=pooled, workers=2, executor="processes",
                                 log=("tensorboard",)))
    assert rows(record) == rows(read_record(out))
    assert _logs(pooled) == _logs(out)


class _StopAfterFirstTask(LocalExecutor):
    """Runs one task, then fails the next submission: a run interrupted after its first task
    (the first seed's SFT) was kept for resume."""

    submitted = 0

    def submit(self, fn, /, *args, **kwargs):
        if self.submitted:
            raise RuntimeError("stopped for the test")
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.mark.slow
def test_a_resumed_run_logs_only_the_tasks_it_trains(logged, tmp_path):
    """Logging is no setting of the run: an interrupted run started without --log resumes
    with it; the kept task is not trained again, so it is not logged."""
    plan, out, plain = logged
    resumed = tmp_path / "resumed"
    with (EXECUTORS.registered("stop-after-first", _StopAfterFirstTask),
          pytest.raises(RuntimeError, match="stopped for the test")):
        run_plan(load_plan(plan), plan.read_bytes(),
                 RunOptions(out_dir=resumed, executor="stop-after-first"))
    assert (resumed / "tasks" / "seed-3-initial.json").is_file()
    assert not (resumed / "logs").exists()
    run_plan(None, None, RunOptions(out_dir=resumed, resume=True, log=("tensorboard",)))
    logs = _logs(resumed)
    expected = _logs(out)
    assert sorted(logs) == sorted(key for key in expected if key != ("seed-3", "sft"))
    assert logs == {key: expected[key] for key in logs}
    assert _comparable(resumed / "record.json") == _comparable(plain / "record.json")


@pytest.mark.slow
def test_a_failing_task_leaves_its_steps_so_far_readable(tmp_path, monkeypatch):
    plan = write_plan(tmp_path / "plan.json", **(PLAN | {"seeds": [3], "arms": ["strict"]}))
    real_loss, real_close = objective.per_token_loss, steplog.TensorBoardLogger.close
    calls, closed = {"n": 0}, []
    fail_at = 3 * 2 + 1  # RL step 4's first update (two updates a step)

    def poisoned(*args):
        calls["n"] += 1
        value = real_loss(*args)
        return value * float("nan") if calls["n"] == fail_at else value

    def close(self) -> None:
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(objective, "per_token_loss", poisoned)
    monkeypatch.setattr(steplog.TensorBoardLogger, "close", close)
    from postlab.errors import NonFiniteError

    with pytest.raises(NonFiniteError, match="RL step 4"):
        run_plan(load_plan(plan), plan.read_bytes(),
                 RunOptions(out_dir=tmp_path / "run", log=("tensorboard",)))
    assert len(closed) == 2  # the SFT task's logger and the failed arm's
    events = _events(tmp_path / "run" / "logs" / "tensorboard" / "seed-3" / "strict")
    assert [step for step, _ in events["loss"]] == [1, 2, 3]


@pytest.mark.slow
def test_a_sweep_logs_in_each_version_folder(tmp_path):
    write_plan(tmp_path / "base.json", **(PLAN | {"seeds": [3], "arms": ["strict"]}))
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps({"base": "base.json", "seeds": [3],
                                "grid": {"kl_beta": [0.0, 0.03]}}))
    out = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--out-dir", str(out), "--workers", "1", "--quiet",
                 "--log", "tensorboard"]) == 0
    versions = [v["name"] for v in json.loads((out / "versions.json").read_text())["versions"]]
    assert len(versions) == 2
    for name in versions:
        logs = _logs(out / name)
        assert sorted(logs) == [("seed-3", "sft"), ("seed-3", "strict")]
        record = read_record(out / name)
        losses = [step["updates"] for step in record["runs"][0]["training"]["strict"]]
        assert logs[("seed-3", "strict")]["loss"] == [
            (index, _f32(sum(u["loss"] for u in updates) / len(updates)))
            for index, updates in enumerate(losses, start=1)]


def test_a_failing_logger_stops_itself_not_the_training(tmp_path, capsys):
    """A full disk or broken writer ends that log with one line; the task goes on, and
    closing never raises over the task's own result."""
    from postlab.engines.steplog import StepLogs

    class Failing:
        def __init__(self) -> None:
            self.closed = 0

        def scalars(self, step, values) -> None:
            raise OSError("No space left on device")

        def close(self) -> None:
            self.closed += 1
            raise OSError("still no space")

    class Counting:
        def __init__(self) -> None:
            self.steps: list[int] = []
            self.closed = False

        def scalars(self, step, values) -> None:
            self.steps.append(step)

        def close(self) -> None:
            self.closed = True

    failing, counting = Failing(), Counting()
    logs = StepLogs((), tmp_path, 0, "sft")
    logs._loggers = [failing, counting]
    with logs:
        logs.scalars(1, {"sft/loss": 1.0})
        logs.scalars(2, {"sft/loss": 0.5})
    assert counting.steps == [1, 2] and counting.closed
    assert failing.closed == 1  # closed once when it failed, then dropped
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "logging stopped (Failing): No space left" in err
