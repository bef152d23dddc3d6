"""Decoding: sample or take the argmax, one character at a time, and turn tokens into rows.

Decoding is incremental: the policy's cache after the prompt (the GRU's state) is carried
forward and only the new character is fed at each step, instead of re-reading the whole prefix.
On CPU float32 with torch 2.13 this gives the same bits as re-reading (a conformance test
checks it), at a fraction of the work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch

from postlab.policies import Policy


def _autocast(model: Policy) -> contextlib.AbstractContextManager[Any]:
    """The policy's forward-pass context; a stand-in model without one runs as it is."""
    autocast = getattr(model, "autocast", None)
    return contextlib.nullcontext() if autocast is None else autocast()


@torch.no_grad()
def generate(model: Policy, pairs: Sequence[Sequence[int]], max_new_tokens: int,
             temperature: float, generator: torch.Generator | None,
             greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Return tokens (batch, steps) and the mask of positions emitted while still active.

    A sequence stops being active after its EOS; later positions hold pad and are masked.
    Stops early once every sequence has ended, as the random stream depends on it.
    """
    tokenizer = model.tokenizer
    with _autocast(model):
        logits, cache = model.start(model.prompts(pairs))
    logits = logits.float()  # sampling in float32 (a no-op for a float32 forward pass)
    active = torch.ones(len(pairs), dtype=torch.bool, device=model.device)
    tokens, masks = [], []
    for position in range(max_new_tokens):
        if temperature != 1.0:  # x / 1.0 == x exactly, so skipping it keeps the bits
            logits = logits / temperature
        if greedy:
            chosen = logits.argmax(-1)
        else:
            chosen = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)
        chosen = torch.where(active, chosen, tokenizer.pad_id)
        tokens.append(chosen)
        masks.append(active)
        active = active & (chosen != tokenizer.eos_id)
        if not active.any() or position == max_new_tokens - 1:
            break
        with _autocast(model):
            logits, cache = model.advance(chosen[:, None], cache)
        logits = logits.float()
    return torch.stack(tokens, dim=1), torch.stack(masks, dim=1)


def to_rows(model: Policy, pairs: Sequence[Sequence[int]], tokens: torch.Tensor,
            mask: torch.Tensor) -> list[list[Any]]:
    """One row ``[a, b, visible text, emitted EOS]`` per sequence."""
    rows = []
    tokenizer = model.tokenizer
    eos = tokenizer.eos_id
    for pair, seq, valid in zip(pairs, tokens.tolist(), mask.tolist(), strict=True):
        ids = [tok for tok, use in zip(seq, valid, strict=True) if use]
        terminated = bool(ids) and ids[-1] == eos
        visible = ids[:-1] if terminated else ids
        rows.append([pair[0], pair[1], tokenizer.decode(visible), terminated])
    return rows


@torch.no_grad()
def evaluate_model(model: Policy, plan: dict[str, Any], seed: int) -> dict[str, Any]:
    """Greedy and sampled rows for every split; one generator per split, seeded
    ``seed + 4000 + split_index`` and shared by both decodings in that order."""
    result = {}
    for split_index, (split, pairs) in enumerate(plan["split"].items()):
        generator = torch.Generator(model.device).manual_seed(seed + 4000 + split_index)
        greedy, mask = generate(model, pairs, plan["max_new_tokens"], plan["temperature"],
                                generator, greedy=True)
        repeated = [pair for pair in pairs for _ in range(plan["eval_samples"])]
        sampled, smask = generate(model, repeated, plan["max_new_tokens"],
                                  plan["temperature"], generator)
        result[split] = {"greedy": to_rows(model, pairs, greedy, mask),
                         "sampled": to_rows(model, repeated, sampled, smask)}
    return result
