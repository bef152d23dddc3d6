"""Decoding: sample or take the argmax, one character at a time, and turn tokens into rows.

Decoding is incremental: the policy's cache after the prompt (the GRU's state) is carried
forward and only the new character is fed at each step, instead of re-reading the whole prefix.
On CPU float32 with torch 2.13 this gives the same bits as re-reading (a conformance test
checks it), at a fraction of the work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from postlab.policies import Policy
from postlab.policies.decoding import decode_loop, forward_context, sampler

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


@torch.no_grad()
def generate(model: Policy, pairs: Sequence[Sequence[int]], max_new_tokens: int,
             temperature: float, generator: torch.Generator | None,
             greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Answers to the task's prompts for ``pairs``: tokens (batch, steps) and the mask of
    positions emitted while still active (see :func:`~postlab.policies.decoding.decode_loop`)."""
    return generate_after(model, model.prompts(pairs), max_new_tokens, temperature, generator,
                          greedy)


@torch.no_grad()
def generate_after(model: Policy, prompts: torch.Tensor, max_new_tokens: int,
                   temperature: float, generator: torch.Generator | None,
                   greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Answers after prompt token rows (batch, prompt length), incrementally decoded."""
    tokenizer = model.tokenizer
    with forward_context(model):
        logits, cache = model.start(prompts)
    cache = model.reserve(cache, max_new_tokens)

    def advance(chosen: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
        with forward_context(model):
            logits, cache = model.advance(chosen[:, None], cache)
        return logits.float(), cache

    # sampling in float32 (a no-op for a float32 forward pass)
    return decode_loop(logits.float(), cache, advance, sampler(temperature, generator, greedy),
                       max_new_tokens, tokenizer.eos_id, tokenizer.pad_id)


def to_rows(model: Policy, pairs: Sequence[Sequence[int]], tokens: torch.Tensor,
            mask: torch.Tensor) -> list[list[Any]]:
    """One row ``[a, b, visible text, emitted EOS]`` per sequence."""
    rows = []
    tokenizer = model.tokenizer
    eos = tokenizer.eos_id
    lengths = mask.sum(dim=-1)
    positions = torch.arange(mask.shape[-1], device=mask.device)
    if torch.equal(mask, positions < lengths[:, None]):
        # A decode's mask is a prefix of each row (a sequence stays ended), so its ids are
        # the first ``length`` tokens: slicing instead of filtering position by position
        # was 3% of a teaching arm's profile.
        kept = [seq[:length] for seq, length in zip(tokens.tolist(), lengths.tolist(),
                                                     strict=True)]
    else:
        kept = [[tok for tok, use in zip(seq, valid, strict=True) if use]
                for seq, valid in zip(tokens.tolist(), mask.tolist(), strict=True)]
    for pair, ids in zip(pairs, kept, strict=True):
        terminated = bool(ids) and ids[-1] == eos
        visible = ids[:-1] if terminated else ids
        rows.append([pair[0], pair[1], tokenizer.decode(visible), terminated])
    return rows


@torch.no_grad()
def evaluate_model(model: Policy, plan: Plan, seed: int) -> dict[str, Any]:
    """Greedy and sampled rows for every split; one generator per split, seeded
    ``seed + 4000 + split_index`` and shared by both decodings in that order. Evaluation
    runs in evaluation mode (no adapter dropout), and leaves the model so."""
    model.eval()
    result = {}
    answers = _answers(model, plan)
    for split_index, (split, pairs) in enumerate(plan.split.items()):
        generator = torch.Generator(model.device).manual_seed(seed + 4000 + split_index)
        repeated = [pair for pair in pairs for _ in range(plan.eval_samples)]
        result[split] = {"greedy": answers(pairs, generator, True),
                         "sampled": answers(repeated, generator, False)}
    return result


def _answers(model: Policy, plan: Plan) -> Any:
    """(pairs, generator, greedy) -> rows: one answer each, or with an agent section, one
    episode each (``postlab.engines.episodes``)."""
    if plan.agent is not None:
        from postlab.engines.episodes import generate_episodes
        from postlab.tasks.registry import task_for

        task = task_for(plan)
        return lambda pairs, generator, greedy: generate_episodes(
            model, task, pairs, plan.max_new_tokens, plan.temperature, generator,
            greedy).rows

    def rows(pairs: Sequence[Sequence[int]], generator: torch.Generator,
             greedy: bool) -> list[list[Any]]:
        tokens, mask = generate(model, pairs, plan.max_new_tokens, plan.temperature,
                                generator, greedy=greedy)
        return to_rows(model, pairs, tokens, mask)

    return rows
