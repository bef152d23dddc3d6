"""Completions of 256 tokens: cached decoding, per-sequence EOS, masks after it, memory that
grows linearly with length, and an RL step over such completions."""

from __future__ import annotations

import pytest
import torch

from postlab.engines.rollout import generate
from postlab.engines.train import reinforce
from postlab.plan.frozen import teaching_plan
from postlab.plan.schema import Plan
from postlab.plan.validation import validate_plan
from postlab.policies import build_policy
from postlab.policies.decoding import decode_loop

LONG = 256


def _plan(architecture: str = "gpt2") -> Plan:
    plan = teaching_plan()
    plan.update(max_new_tokens=LONG, rl_steps=1, prompts_per_step=2, group_size=2,
                updates_per_rollout=1, policy={
                    "kind": "transformer", "architecture": architecture, "layers": 1,
                    "heads": 2, "width": 16, "intermediate": 32 if architecture == "llama"
                    else None, "max_positions": 4 + LONG})
    if architecture == "gpt2":
        del plan["policy"]["intermediate"]
    assert validate_plan(plan) == []
    return Plan.of(plan)


def _never_ending(plan: Plan):
    """The plan's policy with EOS masked out of its outputs, so every answer runs the whole
    budget."""
    torch.manual_seed(0)
    policy = build_policy(plan)
    policy.allowed[policy.tokenizer.eos_id] = False
    return policy


@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_a_256_token_completion_decodes_through_the_cache_as_the_whole_prefix_reads(
        architecture: str) -> None:
    plan = _plan(architecture)
    policy = _never_ending(plan)
    pairs = [[1, 2], [3, 4], [5, 6]]
    tokens, mask = generate(policy, pairs, LONG, 1.0, torch.Generator().manual_seed(1))
    assert tokens.shape == (3, LONG) and bool(mask.all())
    # every sampled token was chosen from the logits the whole prefix gives: greedy decoding
    # through the cache equals greedy re-reading of the prefix, position by position
    greedy, _ = generate(policy, pairs, LONG, 1.0, None, greedy=True)
    with torch.no_grad():
        full = policy(torch.cat([policy.prompts(pairs), greedy[:, :-1]], dim=1))
    reread = full[:, policy.prompts(pairs).shape[1] - 1:].argmax(-1)
    assert torch.equal(reread, greedy)


def test_each_sequence_ends_at_its_own_eos_and_is_masked_after_it() -> None:
    plan = _plan()
    policy = _never_ending(plan)
    eos, pad = policy.tokenizer.eos_id, policy.tokenizer.pad_id
    ends = torch.tensor([10, 255, 100])  # the position each sequence emits EOS at
    prompts = policy.prompts([[1, 2], [3, 4], [5, 6]])
    logits, cache = policy.start(prompts)

    def choose(logits: torch.Tensor, position: int) -> torch.Tensor:
        picked = logits.argmax(-1)
        return torch.where(ends == position, torch.full_like(picked, eos), picked)

    tokens, mask = decode_loop(logits, cache, lambda t, c: policy.advance(t[:, None], c),
                               choose, LONG, eos, pad)
    assert tokens.shape == (3, LONG)
    for row, end in enumerate(ends.tolist()):
        assert tokens[row, end] == eos and bool(mask[row, :end + 1].all())
        assert not mask[row, end + 1:].any() and bool((tokens[row, end + 1:] == pad).all())


def test_the_cache_grows_linearly_with_the_completion() -> None:
    policy = _never_ending(_plan())
    logits, cache = policy.start(policy.prompts([[1, 2], [3, 4]]))
    sizes = {}
    for step in range(1, LONG):
        logits, cache = policy.advance(logits.argmax(-1)[:, None], cache)
        if step in (63, 127, 255):
            sizes[step] = sum(k.numel() + v.numel() for k, v in cache[0])
    per_position = sizes[63] / (4 + 63)
    assert sizes[127] == per_position * (4 + 127) and sizes[255] == per_position * (4 + 255)


def test_an_rl_step_trains_on_256_token_completions() -> None:
    plan = _plan()
    policy = _never_ending(plan)
    reference = build_policy(plan)
    reference.load_state_dict(policy.state_dict())
    model, history, compute = reinforce(policy, reference.requires_grad_(False), plan, 11,
                                        "strict")
    [step] = history
    assert all(len(row[2]) == LONG and not row[3] for row in step["rows"])
    assert compute["tokens_generated"] == 4 * LONG
    [update] = step["updates"]
    assert update["kl"] == pytest.approx(0, abs=1e-6)  # the policy was the reference
    assert update["entropy"] > 0 and update["gradient_norm_before_clip"] >= 0
    assert all(torch.isfinite(p).all() for p in model.parameters())
