"""Transformer policies: cached decoding equals re-reading the prefix, a seed fixes the weights,
tiny GPT-2 and Llama plans run through every command, and a local pretrained folder is loaded
only when its hash is the plan's. Everything is built here; nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from plans import SMALL, typed, write_plan, write_pretrained
from recordfiles import read_record

from postlab.cli import main
from postlab.engines.rollout import generate
from postlab.plan.frozen import teaching_plan
from postlab.plan.validation import validate_plan
from postlab.policies import POLICIES, build_policy
from postlab.policies.pretrained import folder_sha256

GPT2 = {"kind": "transformer", "architecture": "gpt2", "layers": 2, "heads": 2, "width": 32,
        "max_positions": 16}
LLAMA = {"kind": "transformer", "architecture": "llama", "layers": 2, "heads": 2, "width": 32,
         "intermediate": 64, "max_positions": 16}
TINY = {**SMALL, "seeds": [3], "sft_steps": 8, "rl_steps": 2}


def _plan(policy: dict[str, Any]) -> dict[str, Any]:
    return teaching_plan() | TINY | {"policy": policy}


@pytest.mark.parametrize("policy", [GPT2, LLAMA], ids=["gpt2", "llama"])
def test_cached_decoding_equals_rereading_the_prefix(policy):
    """The KV cache gives the same tokens; logits agree to float32 rounding (the cached
    matrix products have other shapes, so they are not bit-equal)."""
    plan = typed(_plan(policy))
    torch.manual_seed(5)
    model = build_policy(plan)
    pairs = plan.split["train"][:24]
    tokens, mask = generate(model, pairs, 6, 1.0, torch.Generator().manual_seed(9))

    class Rereading:
        """The same model, decoding by reading the whole prefix at every step."""

        def __init__(self) -> None:
            self.tokenizer, self.device, self.prompts = model.tokenizer, model.device, model.prompts

        def start(self, prompt_tokens):
            return model(prompt_tokens)[:, -1], prompt_tokens

        def advance(self, new, prefix):
            prefix = torch.cat([prefix, new], dim=1)
            return model(prefix)[:, -1], prefix

        def reserve(self, prefix, positions):
            return prefix  # nothing to hold in place: the prefix is read whole

    again, again_mask = generate(Rereading(), pairs, 6, 1.0,
                                 torch.Generator().manual_seed(9))
    assert torch.equal(tokens, again) and torch.equal(mask, again_mask)
    worst = 0.0
    with torch.no_grad():
        prefix = model.prompts(pairs)
        logits, cache = model.start(prefix)
        for column in tokens.T:
            full = model(prefix)[:, -1]
            worst = max(worst, (logits - full).abs().max().item())
            logits, cache = model.advance(column[:, None], cache)
            prefix = torch.cat([prefix, column[:, None]], dim=1)
    assert worst < 1e-5


@pytest.mark.parametrize("policy", [GPT2, LLAMA], ids=["gpt2", "llama"])
def test_a_seed_gives_the_same_initial_weights(policy):
    plan = typed(_plan(policy))
    states = []
    for seed in (11, 11, 12):
        torch.manual_seed(seed)
        states.append(build_policy(plan).state_dict())
    assert list(states[0]) == list(states[1])
    assert all(torch.equal(a, b) for a, b in zip(states[0].values(), states[1].values(),
                                                 strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(states[0].values(), states[2].values(),
                                                     strict=True))


@pytest.mark.parametrize("policy", [GPT2, LLAMA], ids=["gpt2", "llama"])
def test_the_planned_size_is_the_built_size(policy):
    plan = typed(_plan(policy))
    parameters, _ = POLICIES["transformer"].size(plan)
    assert parameters == build_policy(plan).parameter_count()


def _run_every_command(tmp_path: Path, capsys, plan: Path) -> dict[str, Any]:
    """run with one and two workers (same rows), verify, reproduce, report as JSON."""
    one, two = tmp_path / "one", tmp_path / "two"
    for out, workers in ((one, "1"), (two, "2")):
        assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", workers,
                     "--quiet"]) == 0
    assert (one / "summary.json").read_bytes() == (two / "summary.json").read_bytes()
    capsys.readouterr()
    assert main(["verify", str(one)]) == 0
    assert "VERIFIED" in capsys.readouterr().out
    assert main(["reproduce", str(one), "--out-dir", str(tmp_path / "again"), "--workers", "1",
                 "--quiet"]) == 0
    assert "identical: " in capsys.readouterr().out
    assert main(["report", str(one), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)
    return read_record(one)


@pytest.mark.slow
@pytest.mark.parametrize("policy", [GPT2, LLAMA], ids=["gpt2", "llama"])
def test_a_tiny_transformer_plan_runs_verifies_and_reproduces(policy, tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", **TINY, policy=policy)
    record = _run_every_command(tmp_path, capsys, plan)
    assert (record["device"], record["dtype"]) == ("cpu", "float32")
    assert record["parameters"] == POLICIES["transformer"].size(typed(_plan(policy)))[0]


@pytest.mark.parametrize(("change", "field"), [
    ({"architecture": "bert"}, "policy.architecture"),
    ({"layers": 0}, "policy.layers"),
    ({"depth": 2}, "policy.depth"),
    ({"max_positions": 8}, "policy.max_positions"),
])
def test_a_bad_transformer_section_names_its_field(change, field, tmp_path, capsys):
    data = _plan(GPT2 | change)
    assert any(path == field for path, _ in validate_plan(data)), validate_plan(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    assert main(["plan", "check", str(path)]) == 2
    assert f": {field}: " in capsys.readouterr().err


def test_llama_needs_its_intermediate_size_and_heads_divide_width():
    assert validate_plan(_plan({**LLAMA, "intermediate": None})) != []
    assert validate_plan(_plan({**GPT2, "heads": 3})) != []
    assert validate_plan(_plan({**GPT2, "intermediate": 64})) != []


# --- pretrained ------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_pretrained_folder_trains_and_a_changed_one_is_refused(tmp_path, capsys):
    folder = tmp_path / "model"
    digest = write_pretrained(folder)
    policy = {"kind": "pretrained", "path": str(folder), "sha256": digest}
    plan = write_plan(tmp_path / "plan.json", **TINY, policy=policy)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    assert "VERIFIED" in capsys.readouterr().out

    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "again"),
                 "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "folder hash is" in err and digest in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "again" / "record.json").exists()


def test_a_pretrained_section_is_validated():
    assert [path for path, _ in validate_plan(
        _plan({"kind": "pretrained", "path": "m", "sha256": "xyz"}))] == ["policy.sha256"]
    [(path, message)] = validate_plan(_plan({"kind": "pretrained", "sha256": "0" * 64}))
    assert path == "policy" and "name a folder (path) or a GGUF file (gguf)" in message


def test_the_folder_hash_covers_names_and_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"1")
    first = folder_sha256(tmp_path)
    (tmp_path / "a" / "x").rename(tmp_path / "a" / "y")
    second = folder_sha256(tmp_path)
    (tmp_path / "a" / "y").write_bytes(b"2")
    assert len({first, second, folder_sha256(tmp_path)}) == 3
