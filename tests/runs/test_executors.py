"""The executor seam: where tasks run changes nothing, and a task needs only what it names."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from plans import SMALL, rows, write_plan
from recordfiles import read_record

from postlab.engines.exact import ArmTask, CheckpointRef
from postlab.plan.frozen import load_plan
from postlab.plan.schema import Plan
from postlab.policies.checkpoint import CheckpointError
from postlab.records.models import Record
from postlab.runs.executors import EXECUTORS, make_executor
from postlab.runs.orchestration import RunOptions, run_plan
from postlab.runs.progress import Quiet

#: Every pipeline, so an arm from the SFT checkpoint and one from rebuilt untrained weights.
PIPELINES = SMALL | {"seeds": [3, 4, 5],
                     "arms": ["strict",
                              {"name": "only", "pipeline": "rl-only", "contract": "substring"},
                              {"name": "more", "pipeline": "sft-only", "sft_steps": 5}]}


class Recorder(Quiet):
    def __init__(self) -> None:
        self.events: list[dict] = []

    def handle(self, event: dict) -> None:
        self.events.append(event)


def _run(plan: Path, out: Path, kind: str, workers: int) -> tuple[Record, Recorder]:
    display = Recorder()
    loaded = load_plan(plan)
    record = run_plan(loaded, plan.read_bytes(),
                      RunOptions(out_dir=out, workers=workers, executor=kind, progress_every=2,
                                 display=display))
    return record, display


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("executors")
    plan = write_plan(folder / "plan.json", **PIPELINES)
    record, display = _run(plan, folder / "local", "local", 1)
    return plan, folder / "local", record, display


def _shown(display: Recorder) -> list[str]:
    """Events as a sorted list: workers interleave them, but none may be lost or changed."""
    return sorted(json.dumps(event, sort_keys=True) for event in display.events)


def test_the_executors_are_registered():
    assert EXECUTORS.names() == ["local", "processes", "ray"]


def test_local_and_processes_give_the_same_record(local_run, tmp_path):
    plan, out, record, display = local_run
    pooled, pooled_display = _run(plan, tmp_path / "pool", "processes", 2)
    assert rows(pooled) == rows(record)
    for key in ("arm_sft_loss", "compute", "checkpoints", "digests"):
        assert [run.data()[key] for run in pooled.runs] == [run.data()[key]
                                                             for run in record.runs]
    assert (tmp_path / "pool" / "summary.json").read_bytes() == (out / "summary.json").read_bytes()
    for checkpoint in sorted(out.glob("*.pt")):
        assert (tmp_path / "pool" / checkpoint.name).read_bytes() == checkpoint.read_bytes()
    assert _shown(pooled_display) == _shown(display)
    assert {e["kind"] for e in display.events} == {"sft", "rl", "seed_done"}
    # The in-process executor finishes seed by seed, as a run always did with one worker.
    assert [e["seed"] for e in display.events if e["kind"] == "seed_done"] == [3, 4, 5]


@pytest.mark.parametrize("arm", ["strict", "only", "more"])
def test_an_arm_task_alone_reproduces_its_result(local_run, tmp_path, arm):
    plan, out, record, _ = local_run
    fresh = tmp_path / "alone"
    fresh.mkdir()
    shutil.copy(out / "seed-4-initial.pt", fresh / "seed-4-initial.pt")
    result = _alone_in(fresh, out, load_plan(plan).model, arm)
    assert record.runs[1].seed == 4
    run = record.runs[1].data()  # the task's result is JSON, as the record's entry is
    assert result["evaluation"] == run["evaluations"][arm]
    assert result["checkpoint"] == run["checkpoints"][arm]
    assert result["compute"] == run["compute"][arm]
    if arm == "more":
        assert result["sft_loss"] == run["arm_sft_loss"][arm]
    else:
        assert result["history"] == run["training"][arm]
    assert sorted(p.name for p in fresh.iterdir()) == sorted(
        ["seed-4-initial.pt", f"seed-4-{arm}.pt"])


def _alone_in(fresh: Path, run: Path, plan: Plan, arm: str,
              kind: str = "processes") -> dict:
    initial = read_record(run)["runs"][1]["checkpoints"]["initial"]
    with make_executor(kind, workers=1, threads=plan.threads, sink=lambda e: None) as pool:
        task = ArmTask(plan, 4, arm, CheckpointRef(initial["file"], initial["sha256"]),
                       fresh, every=0)
        results = pool.submit(task, pool.sink).result()
        assert list(results) == [(str(fresh), 4, arm)]
        return results[(str(fresh), 4, arm)]


def test_a_tampered_initial_checkpoint_is_refused_by_hash(local_run, tmp_path):
    plan, out, _, _ = local_run
    fresh = tmp_path / "tampered"
    fresh.mkdir()
    data = bytearray((out / "seed-4-initial.pt").read_bytes())
    data[-30] ^= 1
    (fresh / "seed-4-initial.pt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="refusing to load"):
        _alone_in(fresh, out, load_plan(plan).model, "strict", kind="local")
    assert [p.name for p in fresh.iterdir()] == ["seed-4-initial.pt"]


def test_leaving_a_pool_on_an_error_kills_its_busy_workers():
    started = time.monotonic()
    with (pytest.raises(RuntimeError, match="stop"),
          make_executor("processes", workers=2, threads=1, sink=lambda e: None) as pool):
        pid = pool.submit(os.getpid).result()
        sleeping = pool.submit(time.sleep, 120)
        raise RuntimeError("stop")
    assert time.monotonic() - started < 60
    assert sleeping.done()
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)


def test_idle_workers_end_with_the_main_process(tmp_path):
    """An idle worker waits on a queue whose ends it holds itself, under a fork server that
    outlives the main process: only its own watch on the main process can end it."""
    script = ("import os, sys, time\n"
              "from postlab.runs.executors import make_executor\n"
              "pool = make_executor('processes', workers=1, threads=1, sink=lambda e: None)\n"
              "print(pool.submit(os.getpid).result(), flush=True)\n"
              "time.sleep(120)\n")
    main = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    worker = int(main.stdout.readline())
    main.send_signal(signal.SIGKILL)
    main.communicate(timeout=60)
    deadline = time.monotonic() + 20
    while _running(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(worker)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an ended worker may wait for its orphaned parent's reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_configuring_torch_turns_on_deterministic_kernels_without_the_compiler() -> None:
    """The switch every process makes before a task: deterministic kernels on, and the
    compiler's modules (about 0.7 s to import) left unloaded."""
    import subprocess
    import sys

    script = ("import sys, torch; from postlab.runs.executors import configure_torch; "
              "configure_torch(1); print(torch.are_deterministic_algorithms_enabled(), "
              "'torch._inductor' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["True", "False"]
