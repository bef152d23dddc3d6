"""Devices and precision: --device is recorded, CUDA where there is none is refused in one line
with nothing written, a record made on CUDA is not reproduced here, and a bf16 plan runs,
verifies and reproduces bit for bit on CPU. CUDA itself cannot run on a machine without it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from plans import SMALL, write_plan
from recordfiles import inline_record, read_record, write_record

from postlab.cli import main
from postlab.errors import UserError
from postlab.machine import numerics
from postlab.plan.frozen import teaching_plan
from postlab.plan.validation import validate_plan
from postlab.records.models import Record

TINY = {**SMALL, "seeds": [3], "sft_steps": 8, "rl_steps": 2}
GPT2 = {"kind": "transformer", "architecture": "gpt2", "layers": 1, "heads": 2, "width": 16,
        "max_positions": 16}
CUDA = {"device_name": "Some GPU", "capability": "9.0", "cuda_version": "12.8",
        "cudnn_version": "91002", "cublas_workspace_config": ":4096:8",
        "cudnn_deterministic": True, "cudnn_benchmark": False, "tf32_matmul": False,
        "tf32_cudnn": False}

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason="checks what a machine without CUDA does")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("devices")
    plan = write_plan(folder / "plan.json", **TINY)
    out = folder / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--device", "auto"]) == 0
    return out


def test_auto_picks_cpu_here_says_so_and_records_it(cpu_run, capsys, tmp_path):
    record = read_record(cpu_run)
    assert record["device"] == "cpu" and record["numerics"]["device"] == "cpu"
    assert "cuda" not in record["numerics"]
    plan = write_plan(tmp_path / "plan.json", **TINY)
    assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "r"), "--workers",
                 "1", "--device", "auto", "--allow-large"]) == 0
    assert "device: cpu (auto: torch finds no CUDA device here)" in capsys.readouterr().out


def test_cuda_without_cuda_is_one_line_exit_2_and_nothing_written(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", **TINY)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device cuda" in err and "no CUDA device" in err
    assert not out.exists()


def test_reproducing_a_cuda_record_here_refuses_before_training(cpu_run, tmp_path, capsys):
    folder = tmp_path / "made-on-cuda"
    folder.mkdir()
    (folder / "plan.json").write_bytes((cpu_run / "plan.json").read_bytes())
    record = read_record(cpu_run)
    record["device"] = "cuda"
    record["numerics"] |= {"device": "cuda", "cuda": CUDA}
    write_record(folder, record)
    out = tmp_path / "again"
    assert main(["reproduce", str(folder), "--out-dir", str(out), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cuda (Some GPU)" in err and "--device cpu" in err
    assert not out.exists()


def test_cuda_with_several_workers_is_refused(tmp_path, monkeypatch, capsys):
    from postlab.machine import device

    monkeypatch.setattr(device, "cuda_available", lambda: True)
    plan = write_plan(tmp_path / "plan.json", **TINY)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--device", "cuda",
                 "--workers", "2"]) == 2
    assert "one process" in capsys.readouterr().err and not out.exists()


def test_typed_record_accepts_cuda_settings_and_refuses_unknown_ones(cpu_run):
    record = inline_record(read_record(cpu_run))
    record["device"] = "cuda"
    record["numerics"] |= {"device": "cuda", "dtype": "bfloat16", "cuda": dict(CUDA)}
    Record.of(record, "r")
    record["numerics"]["cuda"]["fast_mode"] = True
    with pytest.raises(UserError, match="unknown field 'fast_mode'"):
        Record.of(record, "r")
    del record["numerics"]["cuda"]
    with pytest.raises(UserError, match="without its 'cuda' settings"):
        Record.of(record, "r")
    record["numerics"]["device"] = "tpu"
    with pytest.raises(UserError, match="tpu"):
        Record.of(record, "r")


def test_cuda_differences_are_named_one_by_one():
    here = torch.cuda.is_available()
    base = (numerics.describe(1, None, device="cuda", dtype="float32") if here
            else {"device": "cuda", "cuda": dict(CUDA)})
    other = {**base, "cuda": {**base["cuda"], "device_name": "Other GPU", "tf32_matmul": True}}
    deciding, _ = numerics.differences(base, other)
    assert "GPU Some GPU then, Other GPU now" in deciding
    assert "TF32 matmul False then, True now" in deciding


def test_precision_is_validated_and_absent_from_the_teaching_plan():
    assert "precision" not in teaching_plan()
    assert validate_plan(teaching_plan() | {"precision": "bf16"}) == []
    assert validate_plan(teaching_plan() | {"precision": "float32"}) == []
    assert [p for p, _ in validate_plan(teaching_plan() | {"precision": "fp8"})] == ["precision"]


@pytest.mark.parametrize("policy", [None, GPT2], ids=["gru", "gpt2"])
def test_bf16_plan_runs_verifies_and_reproduces(policy, tmp_path, capsys):
    changes = {**TINY, "precision": "bf16"} | ({"policy": policy} if policy else {})
    plan = write_plan(tmp_path / "plan.json", **changes)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet", "--device", "cpu"]) == 0
    record = read_record(out)
    assert record["dtype"] == "float32" and record["numerics"]["dtype"] == "bfloat16"
    assert record["device"] == "cpu"
    assert main(["verify", str(out)]) == 0
    assert main(["reproduce", str(out), "--out-dir", str(tmp_path / "again"), "--workers", "1",
                 "--quiet"]) == 0
    assert "device: cpu (the record's)" in capsys.readouterr().out


def test_a_gradient_checkpointing_plan_runs_verifies_and_gives_the_same_rows(tmp_path,
                                                                              capsys):
    """The option is the plan's (hashed with it, named in the overview); the rows of every
    stage are those of the same plan without it."""
    from plans import rows

    from postlab.records.opened import open_run
    from postlab.records.record import load_record
    from postlab.render.overview import overview_rows

    found = {}
    for checkpointing in (False, True):
        plan = write_plan(tmp_path / f"plan-{checkpointing}.json",
                          **{**TINY, "policy": GPT2, "gradient_checkpointing": checkpointing})
        out = tmp_path / f"run-{checkpointing}"
        assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                     "--quiet"]) == 0
        found[checkpointing] = rows(load_record(out / "record.json"))
    out = tmp_path / "run-True"
    assert main(["verify", str(out)]) == 0
    opened = open_run(out)
    for lang, words in (("en", "gradient checkpointing"), ("zh", "梯度检查点")):
        facts = dict(overview_rows(opened.plan.model, opened.record, None, lang))
        assert any(words in value for value in facts.values())
    assert found[True] == found[False]
