"""The one token-by-token decoding loop, shared by rollouts, evaluation, both engines and the
sequence-KL computation.

A caller gives the logits after the prompt, how to advance (feed the chosen tokens, get the
next logits and cache: a policy's ``advance``, or a stacked net's ``run``) and how to choose
a token from logits (argmax, torch's multinomial with a generator, or a counter draw). The
loop owns what every caller must do alike: a sequence is active until it emits EOS, later
positions hold pad and are masked, and decoding stops once every sequence has ended, since a
random stream that draws per step depends on when it stops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

#: (logits [..., V], position) -> the chosen token ids [...]
Choose = Callable[[torch.Tensor, int], torch.Tensor]
#: (chosen token ids [...], cache) -> (next logits [..., V], cache)
Advance = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]


def forward_context(model: Any) -> contextlib.AbstractContextManager[Any]:
    """The policy's forward-pass context (its autocast); a stand-in model without one runs
    as it is."""
    autocast = getattr(model, "autocast", None)
    return contextlib.nullcontext() if autocast is None else autocast()


def decode_loop(logits: torch.Tensor, cache: Any, advance: Advance, choose: Choose,
                max_new_tokens: int, eos: int, pad: int,
                full_width: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and the mask of positions emitted while active, both ``[..., steps]``.

    ``logits`` are those after the prompt, one row per sequence (any leading shape).
    ``full_width`` pads the result to ``max_new_tokens`` columns (pad, unmasked), so its shape
    never depends on when the last sequence ended (the ensemble's members share a batch);
    otherwise it is as wide as the longest sequence decoded.
    """
    active = torch.ones(logits.shape[:-1], dtype=torch.bool, device=logits.device)
    tokens, masks = [], []
    for position in range(max_new_tokens):
        chosen = torch.where(active, choose(logits, position), pad)
        tokens.append(chosen)
        masks.append(active)
        active = active & (chosen != eos)
        if not active.any() or position == max_new_tokens - 1:
            break
        logits, cache = advance(chosen, cache)
    if full_width:
        missing = max_new_tokens - len(tokens)
        tokens += [torch.full_like(tokens[0], pad)] * missing
        masks += [torch.zeros_like(masks[0])] * missing
    return torch.stack(tokens, dim=-1), torch.stack(masks, dim=-1)


def sampler(temperature: float, generator: torch.Generator | None,
            greedy: bool = False) -> Choose:
    """Choose by argmax, or by torch's multinomial over softmax(logits / temperature) with
    ``generator`` (one draw per row per step, in row order)."""
    def choose(logits: torch.Tensor, position: int) -> torch.Tensor:
        if temperature != 1.0:  # x / 1.0 == x exactly, so skipping it keeps the bits
            logits = logits / temperature
        if greedy:
            return logits.argmax(-1)
        return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)

    return choose
