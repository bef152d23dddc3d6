"""Byte-level BPE tokenizers trained on a plan's questions: deterministic bytes, kept in the
run folder, checked by verify, read by the GRU and by transformers built from a configuration."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from recordfiles import read_record

from postlab.cli import main
from postlab.plan.frozen import complete_draft, plan_bytes
from postlab.plan.schema import Plan
from postlab.plan.validation import validate_plan
from postlab.policies import build_policy
from postlab.policies.tokenizers import (
    TOKENIZER_FILE,
    BPETokenizer,
    allowed_tokens,
    plan_tokenizer,
    trained_bytes,
)
from postlab.tasks.registry import task_for

DRAFT = {
    "version": 1, "date": "2026-12-02", "task": "reasoning_gym",
    "reasoning_gym": {"dataset": "chain_sum", "config": {"min_terms": 2, "max_terms": 2,
                                                         "min_digits": 1, "max_digits": 2},
                      "seed": 7, "sizes": {"train": 40, "test": 8}},
    "tokenizer": {"kind": "bpe", "vocab_size": 300},
    "seeds": [5], "eos": "~", "pad": "_", "embedding": 8, "hidden": 16, "threads": 1,
    "sft_steps": 6, "sft_batch": 4, "sft_lr": 0.003, "rl_steps": 2, "prompts_per_step": 2,
    "group_size": 2, "updates_per_rollout": 1, "rl_lr": 0.0005, "clip": 0.2,
    "kl_beta": 0.03, "max_new_tokens": 22, "temperature": 1.0, "eval_samples": 2,
    "gradient_clip": 1.0, "arms": ["rg-strict"], "loss_reduction": "token-mean",
    "advantage": "group-std", "kl": "exact", "selection": "fixed last checkpoint",
    "rewards": {"rg-strict": "tagged, right"},
}


@pytest.fixture(scope="module")
def plan() -> dict:
    return complete_draft(json.loads(json.dumps(DRAFT)))


def test_the_same_plan_trains_the_same_tokenizer_bytes_in_another_process(plan, tmp_path):
    path = tmp_path / "plan.json"
    path.write_bytes(plan_bytes(plan))
    script = ("import json, sys, hashlib; from postlab.plan.schema import Plan; "
              "from postlab.policies.tokenizers import trained_bytes; "
              "print(hashlib.sha256(trained_bytes(Plan.of(json.load(open(sys.argv[1])))))"
              ".hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", script, str(path)], check=True,
                              capture_output=True, text=True).stdout.strip() for _ in range(2)}
    assert digests == {hashlib.sha256(trained_bytes(Plan.of(plan))).hexdigest()}


def test_the_tokenizer_round_trips_and_merges(plan) -> None:
    plan = Plan.of(plan)
    tokenizer = plan_tokenizer(plan)
    assert isinstance(tokenizer, BPETokenizer)
    assert (tokenizer.pad_id, tokenizer.eos_id) == (0, 1)
    assert 258 < tokenizer.vocab_size <= 300
    task = task_for(plan)
    for key in plan.split["test"]:
        for text in (task.prompt(key), task.demonstration(key)):
            assert tokenizer.decode(tokenizer.encode(text)) == text
    prompt = task.prompt(plan.split["train"][0])
    assert len(tokenizer.encode(prompt)) < len(prompt)  # merges learned from the questions


def test_only_tokens_of_answer_characters_and_eos_may_be_written(plan) -> None:
    plan = Plan.of(plan)
    tokenizer = plan_tokenizer(plan)
    task = task_for(plan)
    allowed = allowed_tokens(tokenizer, task.answer_characters)
    assert allowed[tokenizer.eos_id] and not allowed[tokenizer.pad_id]
    texts = {tokenizer.decode([i]) for i, ok in enumerate(allowed) if ok and i != 1}
    assert all(set(text) <= set(task.answer_characters) for text in texts)
    assert "answer" in texts and "State" not in texts and " " not in "".join(texts)


@pytest.mark.parametrize("kind", ["gru", "gpt2"])
def test_policies_read_and_write_with_the_trained_tokenizer(plan, kind) -> None:
    chosen = dict(plan)
    if kind == "gpt2":
        chosen["policy"] = {"kind": "transformer", "architecture": "gpt2", "layers": 1,
                            "heads": 2, "width": 16, "max_positions": 128}
        assert validate_plan(chosen) == []
    plan = Plan.of(plan)
    torch.manual_seed(0)
    policy = build_policy(Plan.of(chosen))
    size = plan_tokenizer(plan).vocab_size
    assert int(policy.allowed.shape[0]) == size
    keys = plan.split["test"]
    prompts = policy.prompts(keys)
    assert prompts.shape[1] == max(len(policy.tokenizer.encode(task_for(plan).prompt(k)))
                                   for keys in plan.split.values() for k in keys)
    with torch.no_grad():
        logits = policy(prompts)
    assert logits.shape == (len(keys), prompts.shape[1], size)


def test_a_pretrained_policy_cannot_take_a_trained_tokenizer(plan) -> None:
    other = {**plan, "policy": {"kind": "pretrained", "path": "x", "sha256": "0" * 64}}
    assert ("tokenizer", "a pretrained policy reads with its own tokenizer") in \
        validate_plan(other)


def test_the_ensemble_engine_refuses_a_trained_tokenizer(plan) -> None:
    from postlab.engines.ensemble.task import problems

    assert any("trained tokenizer" in problem for problem in problems(Plan.of(plan)))


@pytest.fixture(scope="module")
def trained(plan, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bpe")
    path = folder / "plan.json"
    path.write_bytes(plan_bytes(plan))
    assert main(["run", "--plan", str(path), "--out-dir", str(folder / "run"), "--quiet",
                 "--workers", "1"]) == 0
    return folder / "run"


@pytest.mark.slow
def test_a_bpe_run_keeps_its_tokenizer_and_verify_catches_an_edit(trained, tmp_path,
                                                                  capsys) -> None:
    import shutil

    kept = (trained / TOKENIZER_FILE).read_bytes()
    record = read_record(trained)
    assert record["tokenizer_sha256"] == hashlib.sha256(kept).hexdigest()
    fingerprint = (trained / "fingerprint.txt").read_text().split()[0]
    assert main(["verify", str(trained), "--expect", fingerprint]) == 0
    out = capsys.readouterr().out
    assert "PASS  tokenizer: tokenizer.json is the one the plan trains" in out
    edited = tmp_path / "edited"
    shutil.copytree(trained, edited)
    data = json.loads(kept)
    data["model"]["merges"] = data["model"]["merges"][:-1]
    (edited / TOKENIZER_FILE).write_text(json.dumps(data))
    assert main(["verify", str(edited)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  tokenizer: tokenizer.json has sha256" in out and "changed after the run" in out
    (edited / TOKENIZER_FILE).unlink()
    assert main(["verify", str(edited)]) == 1
    assert "tokenizer.json is missing" in capsys.readouterr().out


@pytest.mark.slow
def test_a_bpe_run_reproduces(trained, tmp_path, capsys) -> None:
    assert main(["reproduce", str(trained), "--out-dir", str(tmp_path / "again"),
                 "--workers", "1"]) == 0
    assert "identical" in capsys.readouterr().out
    assert (tmp_path / "again" / TOKENIZER_FILE).read_bytes() == \
        (trained / TOKENIZER_FILE).read_bytes()


def test_byte_tokens_of_a_character_outside_ascii_may_be_written() -> None:
    from postlab.policies.tokenizers import _train

    serialised = _train(("an angle of 30°", "<answer>30°</answer>"), 258, "~", "_")
    tokenizer = BPETokenizer(serialised, "~", "_")
    allowed = allowed_tokens(tokenizer, "<answer>/30°")
    degree = "°".encode()
    byte_tokens = [i for i in range(tokenizer.vocab_size) if tokenizer.token_bytes(i) in
                   (degree[:1], degree[1:])]
    assert len(byte_tokens) == 2 and all(allowed[i] for i in byte_tokens)
    assert tokenizer.decode(tokenizer.encode("30°")) == "30°"
    other = [i for i in range(tokenizer.vocab_size) if tokenizer.token_bytes(i) == b"\xc3"]
    assert other and not allowed[other[0]]  # the first byte of another character


def test_the_cost_estimate_times_a_bpe_that_learnt_fewer_tokens_than_allowed(plan) -> None:
    """The plan allows more tokens than these questions give merges for; the calibration's
    random tokens must be ids the built model has (they were the plan's bound once)."""
    from postlab.runs.timing import calibrate

    roomy = Plan.of({**plan, "tokenizer": {"kind": "bpe", "vocab_size": 4096},
                     "policy": {"kind": "transformer", "architecture": "gpt2", "layers": 1,
                                "heads": 2, "width": 16, "max_positions": 128}})
    assert plan_tokenizer(roomy).vocab_size < 4096
    calibration = calibrate(roomy)
    assert calibration is not None
