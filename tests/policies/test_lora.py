"""LoRA adapters on transformer policies: the reference is the base network with its adapters
off (bit for bit, no second copy), the compact forward runs the adapters, only adapters train,
checkpoints hold adapters plus the base's digest, and a LoRA run verifies, reproduces and
resumes after kill -9 identically. Models are built from configurations; nothing is
downloaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from plans import SMALL, typed, write_pretrained
from recordfiles import read_record

from postlab.cli import main
from postlab.engines.train import reinforce, sequence_log_dist
from postlab.errors import UserError
from postlab.plan.frozen import plan_bytes, teaching_plan
from postlab.plan.schema import Plan
from postlab.plan.validation import validate_plan
from postlab.policies import build_policy
from postlab.policies.checkpoint import CheckpointError, load_checkpoint
from postlab.policies.lora import AdaptersOff, base_state, lora_section, weights_sha256
from postlab.policies.restore import attach_plan_adapters, policy_from_checkpoint

GPT2 = {"kind": "transformer", "architecture": "gpt2", "layers": 2, "heads": 2, "width": 32,
        "max_positions": 16}
LLAMA = {"kind": "transformer", "architecture": "llama", "layers": 2, "heads": 2, "width": 32,
         "intermediate": 64, "max_positions": 16}
TARGETS = {"gpt2": ["c_attn", "c_proj", "c_fc"],
           "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                     "down_proj", "lm_head"]}


def _plan(policy: dict[str, Any], dropout: float = 0.0, **changes: Any) -> dict[str, Any]:
    lora = {"rank": 4, "alpha": 8, "dropout": dropout,
            "target_modules": TARGETS[policy["architecture"]]}
    return teaching_plan() | SMALL | {"seeds": [3], "sft_steps": 8, "rl_steps": 2,
                                      "policy": policy, "lora": lora} | changes


def _adapted(plan: Plan, seed: int = 3) -> Any:
    """A policy with the plan's adapters, their B matrices moved off zero so they matter."""
    torch.manual_seed(seed)
    policy = build_policy(plan)
    attach_plan_adapters(policy, plan, seed)
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    return policy


def _batch(policy: Any) -> tuple[torch.Tensor, torch.Tensor]:
    prompts = policy.prompts([(1, 2), (3, 4), (1, 2), (5, 0)])
    tokens = torch.tensor([[1, 2, 10], [3, 10, 11], [4, 4, 10], [10, 11, 11]])
    return prompts, tokens


@pytest.mark.parametrize("policy", [GPT2, LLAMA], ids=["gpt2", "llama"])
@pytest.mark.parametrize("compact", [True, False], ids=["compact", "library"])
def test_the_reference_with_adapters_off_is_the_base_model_bit_for_bit(policy, compact):
    plan = typed(_plan(policy))
    torch.manual_seed(3)
    base = build_policy(plan)
    adapted = _adapted(plan)
    if not compact:
        base.compact = adapted.compact = None
    prompts, tokens = _batch(base)
    with torch.no_grad():
        expected = sequence_log_dist(base, prompts, tokens)
        reference = sequence_log_dist(adapted.reference_policy(), prompts, tokens)
        trained = sequence_log_dist(adapted, prompts, tokens)
    assert torch.equal(reference, expected)
    assert not torch.allclose(trained, expected, atol=1e-3)  # the adapters do change it


@pytest.mark.parametrize("policy", [GPT2, LLAMA], ids=["gpt2", "llama"])
def test_the_compact_forward_runs_the_adapters_as_the_library_does(policy):
    plan = typed(_plan(policy))
    adapted = _adapted(plan)
    assert adapted.compact is not None
    prompts, tokens = _batch(adapted)
    with torch.no_grad():
        compact = adapted.continuation(prompts, tokens)
        adapted.compact = None
        library = adapted.continuation(prompts, tokens)
    torch.testing.assert_close(compact, library, rtol=1e-5, atol=1e-5)


def test_the_reference_holds_no_weights_of_its_own():
    plan = typed(_plan(GPT2))
    policy = _adapted(plan)
    reference = policy.reference_policy()
    assert isinstance(reference, AdaptersOff) and reference.policy is policy
    assert not isinstance(reference, torch.nn.Module)
    assert all(p.requires_grad == ("lora_" in n) for n, p in policy.named_parameters())


def test_rl_trains_only_the_adapters_and_the_base_stays_bit_for_bit():
    plan = typed(_plan(GPT2, rl_steps=3))
    torch.manual_seed(3)
    policy = build_policy(plan)
    start = {k: v.clone() for k, v in policy.state_dict().items()}
    attach_plan_adapters(policy, plan, 3)
    adapters = {k: v.clone() for k, v in policy.checkpoint_state().items()}
    model, history, _ = reinforce(policy, policy.reference_policy(), plan, 3, "strict")
    assert model is policy
    first = history[0]["updates"][0]
    assert first["kl"] == pytest.approx(0, abs=1e-9)  # B starts at zero: policy = reference
    after = base_state(model.state_dict())
    assert after.keys() == start.keys()
    assert all(torch.equal(after[k], start[k]) for k in start)
    changed = model.checkpoint_state()
    assert set(changed) == set(adapters)
    assert any(not torch.equal(changed[k], adapters[k]) for k in adapters)


def test_adapter_dropout_acts_only_in_gradient_steps():
    plan = typed(_plan(GPT2, dropout=0.5))
    policy = _adapted(plan)
    prompts, tokens = _batch(policy)
    with torch.no_grad():
        quiet = [policy.continuation(prompts, tokens) for _ in range(2)]
        policy.train()
        noisy = [policy.continuation(prompts, tokens) for _ in range(2)]
        policy.eval()
    assert torch.equal(*quiet)
    assert not torch.equal(*noisy) and not torch.equal(noisy[0], quiet[0])
    assert not policy.model.training  # the network itself never runs dropout


def test_a_lora_section_is_checked_against_the_policy_and_its_layers():
    plan = _plan(GPT2)
    assert validate_plan(plan) == []
    gru = {k: v for k, v in plan.items() if k != "policy"}
    assert validate_plan(gru) == [("lora", "the gru policy takes no adapters (policies that do: "
                                           "transformer, pretrained)")]
    wrong = {**plan, "lora": {**plan["lora"], "target_modules": ["c_atn"]}}
    [(field, message)] = validate_plan(wrong)
    assert field == "lora.target_modules" and "did you mean c_attn?" in message
    tied = {**plan, "lora": {**plan["lora"], "target_modules": ["lm_head"]}}
    assert "not a linear layer" in validate_plan(tied)[0][1]  # tied to the embedding
    one = {**_plan(LLAMA), "lora": {**plan["lora"], "target_modules": ["q_proj"]}}
    assert validate_plan(one) == []
    sft_only = {**plan, "arms": [{"name": "more", "pipeline": "sft-only", "sft_steps": 4}]}
    assert validate_plan(sft_only) == [("lora", "no arm trains with RL, and only RL arms "
                                                "train adapters")]
    for bad in ({"rank": 0}, {"dropout": 1.0}, {"target_modules": []},
                {"target_modules": ["c_fc", "c_fc"]}, {"extra": 1}):
        assert validate_plan({**plan, "lora": {**plan["lora"], **bad}}), bad


def test_a_missing_peft_is_named_with_its_extra(without_module) -> None:
    from postlab.policies import lora

    without_module("peft")
    with pytest.raises(UserError, match=r"pip install 'postlab\[lora\]'"):
        lora.require_peft()


def test_the_weights_digest_sees_names_values_and_dtypes():
    state = {"a": torch.zeros(2), "b": torch.ones(3)}
    digest = weights_sha256(state)
    assert weights_sha256(dict(reversed(state.items()))) == digest
    assert weights_sha256({"a": torch.zeros(2), "c": torch.ones(3)}) != digest
    assert weights_sha256({"a": torch.zeros(2), "b": torch.tensor([1.0, 1.0, 1.5])}) != digest
    assert weights_sha256({"a": torch.zeros(2, dtype=torch.float64), "b": torch.ones(3)}) \
        != digest


# --- a run end to end ----------------------------------------------------------------------

RUN = {"seeds": [3], "sft_steps": 30, "rl_steps": 3,
       "arms": ["strict", {"name": "scratch", "pipeline": "rl-only", "contract": "substring"}]}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lora")
    (folder / "plan.json").write_bytes(plan_bytes(_plan(GPT2, dropout=0.1) | RUN))
    assert main(["run", "--plan", str(folder / "plan.json"), "--out-dir", str(folder / "run"),
                 "--quiet", "--workers", "1"]) == 0
    return folder


@pytest.mark.slow
def test_a_lora_run_keeps_adapters_with_their_base_and_verifies(trained, tmp_path, capsys):
    import shutil

    run = trained / "run"
    record = read_record(run)
    checkpoints = record["runs"][0]["checkpoints"]
    initial = load_checkpoint(run / checkpoints["initial"]["file"],
                              checkpoints["initial"]["sha256"])
    assert "base" not in initial  # SFT trains every weight
    for arm, stage in (("strict", "initial"), ("scratch", "untrained")):
        payload = load_checkpoint(run / checkpoints[arm]["file"], checkpoints[arm]["sha256"])
        assert payload["base"]["stage"] == stage
        assert set(payload["state_dict"]) and all("lora_" in k for k in payload["state_dict"])
    strict = load_checkpoint(run / checkpoints["strict"]["file"], None)
    assert strict["base"]["weights_sha256"] == weights_sha256(initial["state_dict"])
    assert main(["verify", str(run)]) == 0
    assert main(["reproduce", str(run), "--out-dir", str(trained / "again"),
                 "--workers", "1"]) == 0
    assert "identical" in capsys.readouterr().out
    assert main(["samples", str(run), "--limit", "2"]) == 0

    # an adapter edited after the run
    edited = tmp_path / "edited"
    shutil.copytree(run, edited)
    path = edited / checkpoints["strict"]["file"]
    payload = torch.load(path, weights_only=True)
    name = next(k for k in payload["state_dict"] if "lora_B" in k)
    payload["state_dict"][name] = payload["state_dict"][name] + 0.01
    path.unlink()
    torch.save(payload, path)
    capsys.readouterr()
    assert main(["verify", str(edited)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  checkpoint hashes" in out and "seed-3-strict.pt" in out


@pytest.mark.slow
def test_adapters_on_another_base_are_refused(trained):
    run = trained / "run"
    plan = Plan.of(json.loads((run / "plan.json").read_text()))
    record = read_record(run)
    checkpoints = record["runs"][0]["checkpoints"]
    payload = load_checkpoint(run / checkpoints["strict"]["file"], checkpoints["strict"]["sha256"])
    restored = policy_from_checkpoint(plan, payload, 3, run, checkpoints)
    assert restored.adapters == lora_section(plan)
    # the RL-only arm's adapters read as if trained on the SFT weights
    wrong = {**payload, "base": {**payload["base"], "stage": "untrained"}}
    with pytest.raises(CheckpointError, match="not those the adapters were trained on"):
        policy_from_checkpoint(plan, wrong, 3, run, checkpoints)
    with pytest.raises(CheckpointError, match="no checkpoint in the record"):
        policy_from_checkpoint(plan, {**payload, "base": {**payload["base"], "stage": "x"}},
                               3, run, checkpoints)


@pytest.mark.slow
def test_a_lora_run_killed_after_its_first_seed_resumes_identically(tmp_path) -> None:
    from interrupted import killed_and_resumed_equals_whole

    path = tmp_path / "plan.json"
    path.write_bytes(plan_bytes(_plan(GPT2, dropout=0.1) | RUN | {"seeds": [3, 4, 5],
                                                                  "rl_steps": 6}))
    killed_and_resumed_equals_whole(path, tmp_path, seeds=3)


def test_the_ensemble_engine_refuses_lora() -> None:
    from postlab.engines.ensemble.task import problems

    assert any(problem.startswith("lora") for problem in problems(typed(_plan(GPT2))))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_reports_say_that_rl_trained_adapters(lang) -> None:
    from postlab.records.models import Record
    from postlab.render.overview import OVERVIEW_WORDS, _policy

    header = {"plan_sha256": "0" * 64, "runs": []}
    policy = _policy(typed(_plan(GPT2)), Record.of(header | {"parameters": 1}),
                     OVERVIEW_WORDS[lang])
    assert "LoRA" in policy and "c_attn, c_proj, c_fc" in policy and "alpha 8" in policy
    assert "LoRA" not in _policy(typed(_plan(GPT2), lora=None), Record.of(header),
                                 OVERVIEW_WORDS[lang])


@pytest.mark.slow
def test_a_pretrained_folder_takes_adapters_and_its_run_verifies(tmp_path, capsys) -> None:
    folder = tmp_path / "model"
    policy = {"kind": "pretrained", "path": str(folder), "sha256": write_pretrained(folder)}
    plan = teaching_plan() | SMALL | {"seeds": [3], "sft_steps": 8, "rl_steps": 2,
                                      "policy": policy,
                                      "lora": {"rank": 2, "alpha": 4, "dropout": 0.0,
                                               "target_modules": ["c_attn"]}}
    assert validate_plan(plan) == []
    wrong = {**plan, "lora": {**plan["lora"], "target_modules": ["q_proj"]}}
    assert "its linear layers: c_attn, c_fc, c_proj" in validate_plan(wrong)[0][1]
    (tmp_path / "plan.json").write_bytes(plan_bytes(plan))
    run = tmp_path / "run"
    assert main(["run", "--plan", str(tmp_path / "plan.json"), "--out-dir", str(run),
                 "--quiet", "--workers", "1"]) == 0
    assert main(["verify", str(run)]) == 0
    record = read_record(run)
    info = record["runs"][0]["checkpoints"]["strict"]
    payload = load_checkpoint(run / info["file"], info["sha256"])
    assert {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in payload["state_dict"]} \
        == {"c_attn"}


def test_gradient_checkpointing_needs_blocks_postlab_runs():
    plan = {k: v for k, v in _plan(GPT2).items() if k != "lora"}
    assert validate_plan(plan | {"gradient_checkpointing": True}) == []
    gru = {k: v for k, v in plan.items() if k != "policy"}
    assert validate_plan(gru | {"gradient_checkpointing": True}) == [(
        "gradient_checkpointing", "the gru policy has no blocks to checkpoint (policies "
                                  "that do: transformer, pretrained)")]
    assert validate_plan(gru | {"gradient_checkpointing": False}) == []
    [(field, _)] = validate_plan(plan | {"gradient_checkpointing": "yes"})
    assert field == "gradient_checkpointing"
