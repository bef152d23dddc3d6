"""The numeric environment: recorded, pinned before torch loads, and reproduced across CPUs.

The suite itself runs pinned to the portable path (conftest). Tests that need another path,
or an unpinned process, start a new Python process with the setting in its environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import recomputes_bundled_bits
from plans import SMALL, write_plan
from recordfiles import read_record, write_record

from postlab.cli import main
from postlab.errors import UserError
from postlab.machine import numerics
from postlab.plan.frozen import load_plan, teaching_plan
from postlab.runs.orchestration import RunOptions, run_plan

SUPPORTED = numerics.supported_paths() or []
BUNDLED_SEEDS = teaching_plan()["seeds"]


def _postlab(*args: str, env: dict[str, str] | None = None,
             timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """Run postlab in a new process: torch loads there under that process's environment."""
    base = {k: v for k, v in os.environ.items() if k not in numerics.PIN_VARIABLES}
    return subprocess.run([sys.executable, "-m", "postlab", *args], env=base | (env or {}),
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("numerics")
    plan = write_plan(folder / "plan.json", **SMALL)
    out = folder / "run"
    run_plan(load_plan(plan), plan.read_bytes(), RunOptions(out_dir=out, workers=1))
    return out


def _edit(folder, change):
    record = read_record(folder)
    change(record)
    write_record(folder, record)
    (folder / "fingerprint.txt").unlink(missing_ok=True)


def test_the_record_names_what_decides_the_bits(small_run):
    import torch

    record = read_record(small_run)
    entry = record["numerics"]
    assert entry["code_path"] == numerics.portable_path()
    assert entry["pinned"] == numerics.CODE_PATHS[entry["code_path"]].environment
    assert entry["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert entry["cpu_model"] == numerics.cpu_model() and entry["cpu_model"]
    blas, version = numerics._blas()
    assert entry["blas"] == f"{blas} {version}".strip() and blas != "unknown"
    if blas == "mkl":
        assert entry["blas_code_path"] == numerics.CODE_PATHS[entry["code_path"]].environment[
            "MKL_CBWR"]
    assert entry["threads"] == 1 and entry["deterministic"] is True
    assert entry["device"] == "cpu" and entry["dtype"] == "float32"
    assert entry["cpu_supports"] == SUPPORTED


def test_unknown_and_impossible_paths_are_user_errors():
    with pytest.raises(UserError, match="unknown; choose one of portable, native, default"):
        numerics.resolve_choice("avx9000")
    foreign = next(p.name for p in numerics.CODE_PATHS.values()
                   if p.architecture != numerics.machine())
    assert "CPUs and this machine is" in numerics.cannot_run(foreign)
    with pytest.raises(UserError, match=f"CPU code path {foreign} cannot run here"):
        numerics.pin(foreign)


def test_a_path_cannot_change_once_torch_is_loaded():
    import torch  # noqa: F401  (loaded: this process already runs the portable path)

    other = next(name for name in SUPPORTED if name != numerics.portable_path())
    with pytest.raises(UserError, match="must be chosen before torch loads"):
        numerics.pin(other)
    assert numerics.pin(numerics.portable_path())  # the path in force is accepted


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_commands_pin_the_path_before_torch_loads(command, tmp_path):
    """In a new process without pins, a command asked for a path other than the machine's
    own gets past the pin to its own input checks (a sweep once imported torch, with its
    progress display, before pinning: every AVX-512 machine refused every sweep)."""
    if "default" not in SUPPORTED:
        pytest.skip("this CPU does not run the default path")
    bad = tmp_path / "bad.json"
    bad.write_text('{"grid": {"no_such_field": [1, 2]}}' if command == "sweep" else "{}")
    which = ["--plan", str(bad)] if command == "run" else [str(bad)]
    done = _postlab(command, *which, "--out-dir", str(tmp_path / "out"), "--cpu-path",
                    "default", timeout=120)
    assert done.returncode == 2, done.stderr
    assert "before torch loads" not in done.stderr and str(bad) in done.stderr, done.stderr


def test_cpu_flags_decide_what_a_machine_runs(monkeypatch):
    monkeypatch.setattr(numerics, "machine", lambda: "x86_64")
    monkeypatch.setattr(numerics, "cpu_flags", lambda: frozenset({"sse2", "avx", "fma"}))
    assert numerics.supported_paths() == ["default"]
    assert numerics.portable_path() == "default"  # no AVX2: the plain path, said in the record
    assert numerics.cannot_run("avx2") == "this CPU lacks avx2"
    monkeypatch.setattr(numerics, "cpu_flags", lambda: frozenset(
        {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}))
    assert numerics.supported_paths() == ["default", "avx2", "avx512"]
    assert numerics.portable_path() == "avx2"


def test_differences_are_named_precisely():
    then = {"cpu_capability": "AVX512", "blas": "mkl 2024.2", "blas_code_path": "auto",
            "onednn_isa": "auto", "threads": 1, "deterministic": True, "device": "cpu",
            "dtype": "float32", "cpu_model": "A", "machine": "x86_64"}
    now = then | {"cpu_capability": "AVX2", "blas_code_path": "AVX2", "cpu_model": "B"}
    deciding, other = numerics.differences(then, now)
    assert deciding == ["torch CPU capability AVX512 then, AVX2 now",
                        "BLAS code path (MKL_CBWR) auto then, AVX2 now"]
    assert other == ["CPU model A then, B now"]


def test_verify_names_each_difference_that_decides_the_bits(small_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(small_run, run)

    def change(record):  # as if made on the same path by a build with another BLAS, elsewhere
        record["numerics"]["blas"] = "openblas 0.3.27"
        record["numerics"]["cpu_model"] = "Another CPU"

    _edit(run, change)
    assert main(["verify", str(run)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("WARN  environment"))
    now = read_record(small_run)["numerics"]
    assert f"BLAS openblas 0.3.27 then, {now['blas']} now" in line
    assert f"also CPU model Another CPU then, {now['cpu_model']} now" in line


def test_verify_refuses_a_record_whose_kernels_are_not_its_paths(small_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    _edit(run, lambda record: record["numerics"].update(cpu_capability="AVX512"))
    assert main(["verify", str(run)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if "provenance:" in x)
    assert line.startswith("FAIL") and "kernels, the record says AVX512" in line


def test_reproduce_refuses_a_path_this_machine_cannot_run(small_run, tmp_path, capsys):
    foreign = next(p.name for p in numerics.CODE_PATHS.values()
                   if p.architecture != numerics.machine())
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    _edit(run, lambda record: record["numerics"].update(code_path=foreign))
    out_dir = tmp_path / "again"
    assert main(["reproduce", str(run), "--out-dir", str(out_dir), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"the record was made on CPU code path {foreign}" in err
    assert f"this machine can run {', '.join(SUPPORTED)}" in err
    assert not out_dir.exists()  # refused before training anything


@recomputes_bundled_bits
@pytest.mark.slow
@pytest.mark.parametrize("ambient", SUPPORTED)
def test_bundled_run_reproduces_whatever_path_the_machine_would_pick(ambient, tmp_path):
    """Force each path this CPU supports as the process's own setting: reproduce pins the
    bundled record's recorded path over it and gets every bit back. Each setting spot-checks
    one seed, another for each (the whole run is reproduced in test_conformance)."""
    env = dict(numerics.CODE_PATHS[ambient].environment)
    seed = BUNDLED_SEEDS[SUPPORTED.index(ambient) % len(BUNDLED_SEEDS)]
    done = _postlab("reproduce", "--out-dir", str(tmp_path / "again"), "--quiet",
                    "--seed", str(seed), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("code path: avx2 (") and "(the record's, pinned)" in lines[0]
    assert lines[1].startswith(f"seeds {seed} (1 of the record's {len(BUNDLED_SEEDS)};")
    assert lines[-1].startswith("identical:")


@pytest.mark.slow
@pytest.mark.parametrize("path", SUPPORTED)
def test_each_path_is_recorded_and_reproduced(path, tmp_path):
    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"seeds": [3], "rl_steps": 3}))
    run = tmp_path / "run"
    done = _postlab("run", "--plan", str(plan), "--out-dir", str(run), "--workers", "2",
                    "--cpu-path", path)
    assert done.returncode == 0, done.stderr
    record = read_record(run)
    assert record["numerics"]["code_path"] == path
    assert record["numerics"]["cpu_capability"] == numerics.CODE_PATHS[path].capability
    # Another ambient setting in the reproducing process does not matter: the record's wins.
    ambient = next(p for p in SUPPORTED if p != path)
    again = _postlab("reproduce", str(run), "--out-dir", str(tmp_path / "again"), "--quiet",
                     env=dict(numerics.CODE_PATHS[ambient].environment))
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1].startswith("identical:")


@pytest.mark.slow
def test_a_native_run_records_and_reproduces_its_settings(tmp_path):
    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"seeds": [3], "rl_steps": 3}))
    run = tmp_path / "run"
    done = _postlab("run", "--plan", str(plan), "--out-dir", str(run), "--workers", "1",
                    "--cpu-path", "native", "--quiet")
    assert done.returncode == 0, done.stderr
    entry = read_record(run)["numerics"]
    assert entry["code_path"] == "native" and entry["pinned"] == {}
    assert entry["blas_code_path"] == "auto"
    again = _postlab("reproduce", str(run), "--out-dir", str(tmp_path / "again"), "--quiet")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "the record's native settings" in again.stdout
    assert again.stdout.splitlines()[-1].startswith("identical:")


def test_reproduce_across_paths_explains_the_difference(small_run, tmp_path):
    """Choosing another path on purpose trains, and the difference is explained in one line."""
    other = next((p for p in SUPPORTED if p != numerics.portable_path()), None)
    if other is None:
        pytest.skip("this machine runs a single code path")
    done = _postlab("reproduce", str(small_run), "--out-dir", str(tmp_path / "again"),
                    "--quiet", "--cpu-path", other)
    assert done.returncode in (0, 1), done.stderr
    assert "(chosen with --cpu-path)" in done.stdout.splitlines()[0]
    if done.returncode == 1:
        assert "what decides the bits differs: torch CPU capability" in done.stdout


def test_resume_refuses_a_run_started_with_other_numerics(small_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    (run / "summary.json").unlink()

    def change(record):
        record["runs"].pop()  # the second seed is still to train
        record["numerics"]["cpu_capability"] = "AVX512"

    _edit(run, change)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["run", "--out-dir", str(run), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "torch CPU capability AVX512 then" in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
