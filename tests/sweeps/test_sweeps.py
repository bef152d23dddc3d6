"""Sweeps: every version's run folder equals ``postlab run`` of its plan, with the local pool
and through a real Ray cluster (a head started here on the loopback address); a Ray worker
killed mid-task is replaced and the sweep still comes out identical; a killed sweep resumes."""

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
from raycluster import free_port, start_head, stop_head

from postlab.cli import main
from postlab.records.record import load_record

pytestmark = pytest.mark.slow

SEEDS = [3, 4]
GRID = {"kl_beta": [0.0, 0.03, 0.1]}  # 0.03 is the base plan's: that point is the base
VERSIONS = ["base", "kl_beta=0.0", "kl_beta=0.1"]


def _sweep_file(folder: Path, seeds=SEEDS, **plan) -> Path:
    write_plan(folder / "base.json", **(SMALL | plan))
    path = folder / "sweep.json"
    path.write_text(json.dumps({"base": "base.json", "seeds": seeds, "grid": GRID}))
    return path


def _postlab(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "postlab", *args], capture_output=True,
                          text=True, timeout=timeout)


def _same_runs(one: Path, two: Path, names=VERSIONS) -> None:
    """Same rows, summaries, plans and checkpoints; both records read back as postlab reads
    them (typed and range-checked)."""
    for name in names:
        a = load_record(one / name / "record.json")
        b = load_record(two / name / "record.json")
        assert rows(a) == rows(b), name
        summary = (two / name / "summary.json").read_bytes()
        assert (one / name / "summary.json").read_bytes() == summary, name
        assert (one / name / "plan.json").read_bytes() == (two / name / "plan.json").read_bytes()
        for checkpoint in sorted(p.name for p in (one / name).glob("*.pt")):
            want = (two / name / checkpoint).read_bytes()
            assert (one / name / checkpoint).read_bytes() == want, (name, checkpoint)
        assert not list((two / name).glob(".*.partial"))


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    spec = _sweep_file(folder)
    out = folder / "local"
    assert main(["sweep", str(spec), "--out-dir", str(out), "--workers", "2", "--quiet"]) == 0
    return spec, out


def test_each_version_equals_postlab_run_of_its_plan(local_sweep, tmp_path, capsys):
    _, out = local_sweep
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*VERSIONS, "sweep.json", "versions.json"])
    index = json.loads((out / "versions.json").read_text())
    assert [v["name"] for v in index["versions"]] == VERSIONS
    base = json.loads((out / "base" / "plan.json").read_text())
    assert base["seeds"] == SEEDS
    for name in VERSIONS[1:]:
        plan = json.loads((out / name / "plan.json").read_text())
        assert plan["parent"]["sha256"] == index["base_sha256"]
        assert plan["parent"]["changes"] == ["kl_beta"]
    for name in VERSIONS:
        alone = tmp_path / name
        assert main(["run", "--plan", str(out / name / "plan.json"), "--out-dir", str(alone),
                     "--workers", "1", "--quiet"]) == 0
        _same_runs(out, tmp_path, [name])
        capsys.readouterr()
        assert main(["verify", str(out / name)]) == 0
        assert "VERIFIED" in capsys.readouterr().out


def test_the_report_of_a_sweep_is_its_comparison(local_sweep, capsys):
    _, out = local_sweep
    assert main(["report", str(out), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert main(["compare", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == report
    assert report["versions"] == VERSIONS
    assert main(["report", str(out), "--contract", "exact"]) == 2
    assert "its report is 'postlab compare'" in capsys.readouterr().err


def test_a_bad_sweep_is_refused_before_anything_is_written(tmp_path, capsys):
    write_plan(tmp_path / "base.json", **SMALL)
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps({"base": "base.json", "seeds": SEEDS,
                                "grid": {"kl_beta": [0.0, -1.0]}}))
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out-dir", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "kl_beta" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert main(["sweep", "--out-dir", str(out), "--resume"]) == 2
    assert "no complete sweep folder" in capsys.readouterr().err


def test_an_existing_folder_is_never_reused(local_sweep, capsys):
    spec, out = local_sweep
    assert main(["sweep", str(spec), "--out-dir", str(out), "--quiet"]) == 2
    assert "already exists" in capsys.readouterr().err


#: Tasks long enough to be caught running.
SLOW = {"sft_steps": 150, "rl_steps": 30}


def test_a_killed_sweep_resumes_to_the_same_bits(tmp_path):
    spec = _sweep_file(tmp_path, **SLOW)
    whole = tmp_path / "whole"
    assert main(["sweep", str(spec), "--out-dir", str(whole), "--workers", "2", "--quiet"]) == 0
    out = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "postlab", "sweep", str(spec),
                                "--out-dir", str(out), "--workers", "2", "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "base" / "record.json").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert not (out / VERSIONS[-1] / "summary.json").exists()
    done = _postlab("sweep", "--out-dir", str(out), "--resume", "--workers", "2", "--quiet")
    assert done.returncode == 0, done.stderr
    _same_runs(whole, out)


# --- a real Ray cluster ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_head():
    """A Ray head on the loopback address for this module, stopped afterwards (only it)."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'postlab[ray]')")
    address, temp = start_head(cpus=2)
    try:
        yield address
    finally:
        stop_head(temp, address)


def test_a_sweep_through_ray_equals_the_local_one(local_sweep, ray_head, tmp_path):
    spec, local = local_sweep
    out = tmp_path / "ray"
    done = _postlab("sweep", str(spec), "--out-dir", str(out), "--executor", "ray",
                    "--address", ray_head, "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    _same_runs(local, out)


def _ray_task_pids() -> list[int]:
    """Ray worker processes running one of postlab's tasks (Ray titles them by function)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if command.startswith(b"ray::_ray_task"):
            pids.append(int(entry.name))
    return pids


def test_a_killed_ray_worker_is_replaced_and_the_sweep_is_identical(ray_head, tmp_path):
    spec = _sweep_file(tmp_path, **SLOW)
    local = tmp_path / "local"
    assert main(["sweep", str(spec), "--out-dir", str(local), "--workers", "2",
                 "--quiet"]) == 0
    out = tmp_path / "ray"
    process = subprocess.Popen([sys.executable, "-m", "postlab", "sweep", str(spec),
                                "--out-dir", str(out), "--executor", "ray", "--address",
                                ray_head, "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    killed = None
    while killed is None:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        pids = _ray_task_pids()
        if pids:
            time.sleep(0.3)  # well inside the task
            if pids[0] in _ray_task_pids():
                os.kill(pids[0], signal.SIGKILL)
                killed = pids[0]
        time.sleep(0.02)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    _same_runs(local, out)


def test_a_failing_task_fails_its_seed_and_the_rest_of_the_sweep_goes_on(tmp_path, capsys,
                                                                         monkeypatch):
    """One worker runs tasks in this process, so training can be made to fail here: every RL
    arm of the kl_beta=0.1 version stops with a non-finite loss."""
    from postlab.engines import exact
    from postlab.errors import NonFiniteError

    real = exact.reinforce

    def failing(initial, reference, plan, seed, contract, hook=None, **kwargs):
        if plan.kl_beta == 0.1:
            raise NonFiniteError(f"non-finite RL loss (nan) at seed {seed}")
        return real(initial, reference, plan, seed, contract, hook, **kwargs)

    spec = _sweep_file(tmp_path)
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(exact, "reinforce", failing)
        assert main(["sweep", str(spec), "--out-dir", str(out), "--workers", "1"]) == 1
    captured = capsys.readouterr()
    assert "failed: kl_beta=0.1 seed 3" in captured.out and "0 failed" in captured.out
    assert "kl_beta=0.1" in captured.err and "--resume" in captured.err
    assert (out / "base" / "summary.json").exists()
    assert (out / "kl_beta=0.0" / "summary.json").exists()
    assert not (out / "kl_beta=0.1" / "summary.json").exists()
    assert main(["compare", str(out), "--format", "json"]) == 0  # the finished versions
    captured = capsys.readouterr()
    assert json.loads(captured.out)["versions"] == ["base", "kl_beta=0.0"]
    assert "kl_beta=0.1: no completed seed yet; left out" in captured.err

    assert main(["sweep", "--out-dir", str(out), "--resume", "--workers", "1", "--quiet"]) == 0
    alone = tmp_path / "alone"
    assert main(["run", "--plan", str(out / "kl_beta=0.1" / "plan.json"), "--out-dir",
                 str(alone), "--workers", "1", "--quiet"]) == 0
    want = (out / "kl_beta=0.1" / "summary.json").read_bytes()
    assert (alone / "summary.json").read_bytes() == want


def test_an_unreachable_ray_cluster_is_one_line_and_writes_nothing(tmp_path, capsys):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'postlab[ray]')")
    spec = _sweep_file(tmp_path)
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out-dir", str(out), "--executor", "ray",
                 "--address", f"127.0.0.1:{free_port()}", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no Ray cluster answers there" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_the_example_sweep_runs_and_compares(tmp_path, capsys):
    """examples/sweeps/kl-beta.json, as the README runs it: three kl_beta values (0.03, the
    base's, is the base version) on the shortened teaching plan, two seeds each."""
    example = Path(__file__).resolve().parents[2] / "examples" / "sweeps" / "kl-beta.json"
    out = tmp_path / "kl"
    assert main(["sweep", str(example), "--out-dir", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", str(out), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["versions"] == VERSIONS and data["base"] == "base"
    assert data["swept"][1] == {"base": 0.03, "kl_beta=0.0": 0.0, "kl_beta=0.1": 0.1}
    for metric in data["metrics"]:
        for value in metric["values"][1:]:  # every version paired with the base by seed
            assert value["paired_seeds"] == [1, 2] and value["difference"] is not None


def test_a_resumed_sweep_checks_every_version_before_touching_any(local_sweep, tmp_path,
                                                                  capsys):
    """A link in the last version's folder is refused in one line before the first version's
    leftovers are removed or anything is written."""
    _, out = local_sweep
    copy = tmp_path / "sweep"
    shutil.copytree(out, copy)
    (copy / VERSIONS[0] / ".record.json.partial").write_bytes(b"{}")
    last = copy / VERSIONS[-1]
    outside = tmp_path / "seed-4-initial.pt"
    shutil.move(last / "seed-4-initial.pt", outside)
    (last / "seed-4-initial.pt").symlink_to(outside)
    before = {str(p): (p.is_symlink(), p.lstat().st_size, p.lstat().st_mtime_ns)
              for p in sorted(copy.rglob("*"))}
    capsys.readouterr()
    assert main(["sweep", "--resume", "--out-dir", str(copy), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seed-4-initial.pt: a symbolic link" in err, err
    assert {str(p): (p.is_symlink(), p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in sorted(copy.rglob("*"))} == before
