"""The policy interface: a kind registered here runs through every command, checkpoints say
what kind they hold, and the GRU's incremental decoding equals re-reading the prefix."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import torch
from plans import SMALL, typed, write_plan
from recordfiles import read_record
from toypolicy import Bigram, BigramFields

from postlab.cli import main
from postlab.engines.rollout import generate
from postlab.plan.frozen import teaching_plan
from postlab.plan.validation import validate_plan
from postlab.policies import (
    POLICIES,
    PolicyKind,
    build_policy,
    policy_kind,
)
from postlab.policies.checkpoint import (
    CheckpointError,
    checkpoint_bytes,
    load_checkpoint,
    publish_checkpoint,
)
from postlab.policies.gru import CharGRU
from postlab.tasks.registry import task_for

# Registered in this test process only: worker processes would not see it, so every run here
# uses --workers 1 (in-process). The registry refuses a second registration of a name.
if "bigram" not in POLICIES:
    POLICIES.register("bigram")(PolicyKind(
        build=Bigram, fields=BigramFields,
        size=lambda plan: (len(plan.vocab) ** 2, len(plan.vocab)),
        summary="a test's lookup table indexed by the previous token"))

BIGRAM = {**SMALL, "seeds": [3], "policy": {"kind": "bigram"}}


def test_a_registered_kind_runs_verifies_and_reports(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", **BIGRAM)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet"]) == 0
    record = read_record(out)
    assert record["parameters"] == 14 * 14
    assert (record["device"], record["dtype"]) == ("cpu", "float32")
    payload = load_checkpoint(out / "seed-3-strict.pt", None, kind="bigram")
    assert payload["kind"] == "bigram" and list(payload["state_dict"]) == ["table", "allowed"]
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    assert "VERIFIED" in capsys.readouterr().out
    assert main(["report", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)
    page = tmp_path / "report.html"
    assert main(["report", str(out), "--html", str(page)]) == 0
    assert page.read_text().startswith("<!")


def test_the_policy_section_is_validated_by_its_kind():
    plan = teaching_plan()
    assert validate_plan(plan | {"policy": {"kind": "bigram"}}) == []
    assert validate_plan(plan | {"policy": {"kind": "gru"}}) == []
    extra = [("policy.width", "Extra inputs are not permitted")]
    assert validate_plan(plan | {"policy": {"kind": "bigram", "width": 3}}) == extra
    (path, message), = validate_plan(plan | {"policy": {"kind": "mamba"}})
    assert path == "policy.kind" and "unknown policy kind 'mamba'" in message
    assert policy_kind(typed(plan)) == "gru" and isinstance(build_policy(typed(plan)), CharGRU)


def test_the_gru_through_the_interface_keeps_its_initial_weights():
    """Same seed, same weights, names and order as constructing the GRU directly."""
    plan = typed()
    torch.manual_seed(11)
    direct = CharGRU(plan.vocab, plan.eos, plan.pad, plan.embedding, plan.hidden)
    torch.manual_seed(11)
    built = build_policy(plan)
    assert list(built.state_dict()) == ["allowed", "embed.weight", "rnn.weight_ih_l0",
                                        "rnn.weight_hh_l0", "rnn.bias_ih_l0", "rnn.bias_hh_l0",
                                        "head.weight", "head.bias"]
    assert all(torch.equal(a, b) for a, b in zip(direct.state_dict().values(),
                                                 built.state_dict().values(), strict=True))
    assert (built.kind, built.device, built.dtype) == ("gru", torch.device("cpu"),
                                                      torch.float32)


def _gru_checkpoint(tmp_path, payload: dict[str, Any]) -> tuple[Any, str]:
    path = tmp_path / "model.pt"
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return path, publish_checkpoint(path, buffer.getvalue())


def test_a_checkpoint_of_another_kind_is_refused(tmp_path):
    plan = typed()
    model = build_policy(plan)
    path = tmp_path / "model.pt"
    digest = publish_checkpoint(path, checkpoint_bytes(plan.data(), model.state_dict(),
                                                       "bigram"))
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path, digest, kind=policy_kind(plan))
    assert "holds a 'bigram' policy, the plan's policy is 'gru'" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_reference_checkpoint_without_kind_loads_as_gru(tmp_path):
    plan = typed()
    model = build_policy(plan)
    # The reference's layout: plan and weights, no kind.
    path, digest = _gru_checkpoint(tmp_path, {"plan": plan.data(),
                                              "state_dict": model.state_dict()})
    payload = load_checkpoint(path, digest, kind="gru")
    assert "kind" not in payload
    restored = build_policy(plan)
    restored.load_state_dict(payload["state_dict"])
    with pytest.raises(CheckpointError, match="holds a 'gru' policy"):
        load_checkpoint(path, digest, kind="bigram")


def test_incremental_decoding_equals_rereading_the_prefix():
    """The GRU's cache only saves work: every step's logits, and so the sampled tokens, are
    bit-equal to reading the whole prefix again with ``forward``."""
    plan = typed()
    torch.manual_seed(5)
    model = build_policy(plan)
    pairs = plan.split["train"][:24]
    tokens, mask = generate(model, pairs, 6, 1.0, torch.Generator().manual_seed(9))

    class Rereading(CharGRU):
        def start(self, prompt_tokens):
            return self(prompt_tokens)[:, -1], prompt_tokens

        def advance(self, new, prefix):
            prefix = torch.cat([prefix, new], dim=1)
            return self(prefix)[:, -1], prefix

    slow = Rereading(plan.vocab, plan.eos, plan.pad, plan.embedding,
                     plan.hidden, prompt=task_for(plan).prompt)
    slow.load_state_dict(model.state_dict())
    again, again_mask = generate(slow, pairs, 6, 1.0, torch.Generator().manual_seed(9))
    assert torch.equal(tokens, again) and torch.equal(mask, again_mask)
    with torch.no_grad():
        logits, state = model.start(model.prompts(pairs))
        prefix = model.prompts(pairs)
        for column in tokens.T:
            assert torch.equal(logits, model(prefix)[:, -1])
            logits, state = model.advance(column[:, None], state)
            prefix = torch.cat([prefix, column[:, None]], dim=1)
