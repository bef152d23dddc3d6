"""Shared fixtures: the reference beside the project (skipped when absent) and small records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from postlab.machine import numerics
from postlab.runs.workers import WORKERS_VARIABLE

# The whole suite runs on the portable CPU code path, pinned before torch loads, so records
# made here agree with those of any machine that can run it (and with the bundled run). Tests
# that need another path start a new process with it.
PINNED = numerics.pin(numerics.portable_path())

# The test command installs without compiling bytecode (pip's compile step runs on one core
# over every module of every dependency: about 60 of its 130 seconds on 2 cores). The modules
# the suite imports are compiled on first import and cached, here and in every process a test
# starts, even where the environment asks Python not to write bytecode
# (PYTHONDONTWRITEBYTECODE): there every process would compile torch's modules again, about 9
# CPU-seconds each time.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# pytest-xdist already runs one test per core, so a run's own worker processes would only add
# their server's start (about 4 CPU-seconds a run, measured on 2 cores) and contend for the
# same cores: runs default to one worker, in this process and in every process a test starts.
# Tests of several workers ask for them with --workers.
os.environ.setdefault(WORKERS_VARIABLE, "1")

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"


def reference_dir() -> Path:
    if not (REFERENCE / "run-reference.sh").is_file():
        pytest.skip("the reference (../shared/reference) is not beside this checkout")
    return REFERENCE


def reference_env() -> dict[str, str]:
    """The reference runs on the same pinned code path as postlab, so bits can be compared."""
    return dict(os.environ, PYTHON=sys.executable, **PINNED)


def _bundled_provenance() -> dict:
    provenance = ROOT / "src" / "postlab" / "data" / "teaching-run" / "PROVENANCE.json"
    return json.loads(provenance.read_text())


def _bundled_path() -> str:
    return _bundled_provenance()["code_path"]


#: Tests that recompute the bundled run's bits need a CPU that runs the path it was made on.
needs_bundled_path = pytest.mark.skipif(
    numerics.cannot_run(_bundled_path()) is not None,
    reason=f"this CPU cannot run the bundled run's code path {_bundled_path()}")


def _vendor(text: str) -> str:
    """The CPU maker a model name or /proc/cpuinfo's vendor_id names (Intel, AMD, other)."""
    for maker, marks in (("Intel", ("Intel", "GenuineIntel")), ("AMD", ("AMD", "AuthenticAMD"))):
        if any(mark in text for mark in marks):
            return maker
    return text or "unknown"


def _this_vendor() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return "unknown"
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return _vendor(value.strip())
    return _vendor(numerics.cpu_model())


_BUNDLED_VENDOR = _vendor(_bundled_provenance()["cpu_model"])
#: Tests that train the teaching plan again and compare bits with the bundled run need, besides
#: its code path, a CPU of the same maker: under the same pin (MKL_CBWR=AVX2), MKL's products
#: on an Intel Xeon and on the AMD EPYC that made the bundled run differ in the last bit (SFT
#: losses from step 10 of seed 11; no MKL_CBWR setting gives the AMD bits on the Intel CPU).
#: Conformance with the reference is checked on every machine by running both here.
recomputes_bundled_bits = pytest.mark.skipif(
    numerics.cannot_run(_bundled_path()) is not None or _this_vendor() != _BUNDLED_VENDOR,
    reason=f"the bundled run was made on an {_BUNDLED_VENDOR} CPU on code path "
           f"{_bundled_path()}; this one is {_this_vendor()}, whose MKL gives other bits")


def run_reference(out: Path, plan: Path | None = None) -> Path:
    """Train with the reference implementation into ``out`` and return its record path."""
    ref = reference_dir()
    cmd = ["bash", str(ref / "run-reference.sh"), str(out)] + ([str(plan)] if plan else [])
    subprocess.run(cmd, check=True, env=reference_env(), capture_output=True, text=True)
    return out / "record.json"


def reference_report(plan: Path, record: Path) -> str:
    ref = reference_dir()
    done = subprocess.run(["bash", str(ref / "report-reference.sh"), str(plan), str(record)],
                          check=True, env=reference_env(), capture_output=True, text=True)
    return done.stdout


@pytest.fixture(scope="session", autouse=True)
def shared_verification_memo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pages remember their runs' verifications (postlab.runs.remembered) in one folder that
    every test process of the session shares, never in the user's cache."""
    from postlab.machine.cache import CACHE_VARIABLE

    base = tmp_path_factory.getbasetemp()
    # pytest-xdist gives each worker its own base folder inside one shared by the session
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "memo"
    folder.mkdir(exist_ok=True)
    os.environ[CACHE_VARIABLE] = str(folder)
    return folder


@pytest.fixture(scope="session")
def reference_teaching_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One reference training run of the teaching plan, shared by every test that needs it."""
    reference_dir()
    out = tmp_path_factory.mktemp("reference") / "teaching"
    run_reference(out)
    return out


def tiny_record(plan_sha256: str, eval_samples: int = 2) -> dict:
    """A hand-made record: one seed, two stages, one split with two questions."""
    def split(greedy_texts: list[str], sampled_texts: list[str]) -> dict:
        pairs = [[1, 2], [4, 5]]
        greedy = [[a, b, t, True] for (a, b), t in zip(pairs, greedy_texts, strict=True)]
        sampled = []
        for (a, b), texts in zip(pairs, (sampled_texts[:eval_samples],
                                         sampled_texts[eval_samples:]), strict=True):
            sampled += [[a, b, t, t != "999999"] for t in texts]
        return {"greedy": greedy, "sampled": sampled}

    return {
        "plan_sha256": plan_sha256,
        "runs": [{
            "seed": 7,
            "evaluations": {
                "initial": {"test": split(["3", "8"], ["3", "03", "999999", "19"])},
                "strict": {"test": split(["3", "9"], ["3", "3", "9", "9"])},
            },
        }],
    }


@pytest.fixture(scope="session")
def postlab_teaching_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One postlab training run of the teaching plan (two workers), shared by tests."""
    from postlab.plan.frozen import plan_bytes, teaching_plan, teaching_plan_loaded
    from postlab.runs.orchestration import RunOptions, run_plan

    out = tmp_path_factory.mktemp("postlab") / "teaching"
    run_plan(teaching_plan_loaded(), plan_bytes(teaching_plan()),
             RunOptions(out_dir=out, workers=2))
    return out


@pytest.fixture
def without_module(monkeypatch):
    """``without_module(name)``: from then on in the test, importing ``name`` fails as if the
    package were not installed (for the one-line messages naming an extra)."""
    import builtins

    real = builtins.__import__

    def hide(hidden: str) -> None:
        def refuse(name, *args, **kwargs):
            if name == hidden or name.startswith(hidden + "."):
                raise ImportError(name)
            return real(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", refuse)

    return hide


#: The hypotheses the registered run below fixes before training.
REGISTERED_HYPOTHESES = {"alpha": 0.05, "tests": [{
    "id": "strict-gains", "statement": "RL under strict raises held-out success",
    "metric": "success", "compare": {"stage": "strict", "split": "test",
                                     "versus_stage": "initial"},
    "direction": "increase", "margin": 0.0}]}


@pytest.fixture(scope="session")
def registered_small_run(tmp_path_factory) -> Path:
    """The small plan on two seeds, registered and trained by ``postlab run``: a chunked run
    folder with a chunk per seed, checkpoints, a summary and a registration, which tests of
    damaged folders copy and damage."""
    from plans import SMALL, write_plan

    from postlab.cli import main

    folder = tmp_path_factory.mktemp("folder")
    plan = write_plan(folder / "plan.json", **(SMALL | {"seeds": [3, 4]}))
    hypotheses = folder / "hypotheses.json"
    hypotheses.write_text(json.dumps(REGISTERED_HYPOTHESES))
    registration = folder / "registration.json"
    assert main(["register", "--plan", str(plan), "--hypotheses", str(hypotheses),
                 "--out", str(registration)]) == 0
    out = folder / "run"
    assert main(["run", "--plan", str(plan), "--registration", str(registration),
                 "--out-dir", str(out), "--workers", "1", "--quiet"]) == 0
    header = json.loads((out / "record.json").read_text())
    assert len(header["chunks"]) == 2 and (out / "registration.json").is_file()
    return out
