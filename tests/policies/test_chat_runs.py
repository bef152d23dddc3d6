"""A GGUF chat model trained end to end: LoRA RL arms from the pretrained weights (no SFT),
its baseline measured by ``postlab eval`` equal to the run's starting stage, verified,
reproduced bit for bit and resumed after ``kill -9`` identically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gguf")
pytest.importorskip("reasoning_gym")

from recordfiles import read_record
from test_chat_models import chat_draft, tiny_gguf, write  # noqa: F401

from postlab.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def chat_run(tiny_gguf, tmp_path_factory) -> Path:  # noqa: F811
    folder = tmp_path_factory.mktemp("chat-run")
    plan = write(folder / "plan.json", chat_draft(tiny_gguf))
    assert main(["run", "--plan", str(plan), "--out-dir", str(folder / "run"), "--quiet",
                 "--workers", "2"]) == 0
    return folder


def test_the_baseline_is_the_runs_starting_stage(chat_run, capsys):
    """``postlab eval`` builds and evaluates each seed's model as the run does: with no SFT
    its answers are the run's ``initial`` stage, row for row."""
    out = chat_run / "baseline"
    assert main(["eval", "--plan", str(chat_run / "plan.json"), "--out-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "the starting model, before any training; 2 seeds" in printed
    assert "test split (3 questions)" in printed and "rg-final" in printed
    kept = json.loads((out / "evaluation.json").read_text())
    record = read_record(chat_run / "run")
    for entry, run in zip(kept["seeds"], record["runs"], strict=True):
        assert entry["seed"] == run["seed"]
        assert entry["evaluation"] == run["evaluations"]["initial"]
    assert (out / "plan.json").read_bytes() == (chat_run / "plan.json").read_bytes()
    test = [f for f in kept["figures"] if f["split"] == "test" and f["contract"] == "rg-final"]
    assert [f["metric"] for f in test] == ["greedy", "sampled", "coverage", "pass@1", "pass@2"]
    assert all(f["low"] is not None and f["low"] <= f["mean"] <= f["high"] for f in test)
    # an existing folder is refused before anything is evaluated
    assert main(["eval", "--plan", str(chat_run / "plan.json"), "--out-dir", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_chat_run_trains_adapters_verifies_and_reports(chat_run, capsys):
    run = chat_run / "run"
    assert main(["verify", str(run)]) == 0
    assert "PASS  model file: tiny.gguf has the plan's sha256" in capsys.readouterr().out
    record = read_record(run)
    assert [sorted(r["evaluations"]) for r in record["runs"]] == [
        ["anywhere", "final", "initial"]] * 2
    assert all(r["sft_loss"] == [] for r in record["runs"])
    # the arms' checkpoints hold adapters on the pretrained weights, named by digest
    import torch

    payload = torch.load(run / "seed-5-final.pt", weights_only=True)
    assert payload["base"]["stage"] == "untrained"
    assert all("lora_" in name for name in payload["state_dict"])
    assert main(["report", str(run), "--format", "table"]) == 0
    assert "rg-final" in capsys.readouterr().out
    # with no SFT, the first stage is the starting model, in words and in the layout
    assert main(["report", str(run), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "Before training, answers" in out and "relative to the starting model" in out
    assert " 5 start " in out and "SFT" not in out
    # ... and only for that run: the bundled teaching run read next still says SFT
    assert main(["report", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "After SFT, answers" in out and "11 SFT " in out


def test_a_chat_run_reproduces_bit_for_bit(chat_run, capsys):
    assert main(["reproduce", str(chat_run / "run"), "--out-dir",
                 str(chat_run / "again"), "--quiet"]) == 0
    assert "the same" in capsys.readouterr().out


def test_a_chat_run_killed_after_its_first_seed_resumes_identically(tiny_gguf,  # noqa: F811
                                                                    tmp_path):
    from interrupted import killed_and_resumed_equals_whole

    plan = write(tmp_path / "plan.json", chat_draft(tiny_gguf, seeds=[5, 6, 7]))
    killed_and_resumed_equals_whole(plan, tmp_path, seeds=3)
