"""Counter-based random numbers: every draw is a pure function of its key.

A member's draw at (seed, stream, step, index) is a hash of those four numbers, not the next
value of a generator shared with others. So a member draws the same numbers whether it trains
alone or beside 7 or 10,000 others, in any order, on any device: there is no generator state
for the company to advance. The hash is a chain of 32-bit integer mixers (multiply, xor-shift)
computed on int64 tensors kept below 2**49 at every step, so no product overflows and CPU and
GPU give the same bits.

Streams name what a draw is for; ``index`` numbers the draws within one step (a batch
position times the number of draws each position makes, plus which draw).
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF

#: What a draw is for. Each stream's numbers are independent of every other's.
SFT_BATCH = 1
RL_PROMPTS = 2
ROLLOUT = 3
EVALUATION = 4  # + the split's index
SFT_ONLY_BATCH = 64  # an sft-only arm's extra batches
RANDOM_REWARD = 65  # the random contract's payments (both engines draw them from here)


def _mulmod32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """(x * constant) mod 2**32 for x < 2**32, in two 16-bit halves of the constant so every
    intermediate product stays below 2**49."""
    low = x * (constant & 0xFFFF)
    high = ((x * (constant >> 16)) & 0xFFFF) << 16
    return (low + high) & MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer mixer: every output bit depends on every input bit."""
    x = x ^ (x >> 16)
    x = _mulmod32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mulmod32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _absorb(state: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Fold one 32-bit word into the hash state (the golden-ratio constant keeps a zero
    word from leaving the state unchanged)."""
    return mix32(state ^ ((value + 0x9E3779B9) & MASK32))


#: Starting words of the two lanes of the hash state (digits of pi).
LANES = (0x243F6A88, 0x85A308D3)


def key_words(seed: torch.Tensor, stream: int, step: int | torch.Tensor,
              index: torch.Tensor) -> torch.Tensor:
    """32-bit hashes of (seed, stream, step, index), broadcast over the arguments' shapes.

    ``seed`` is int64 in [0, 2**62]; ``step`` and ``index`` are non-negative and below 2**62.
    The key is folded into two independent 32-bit lanes, a 64-bit state, so two different
    seeds share their draws only if both lanes collide (a 32-bit state alone lets some pairs
    of 62-bit seeds coincide on every stream); the output mixes both lanes.
    """
    seed = torch.as_tensor(seed, dtype=torch.int64)
    index = torch.as_tensor(index, dtype=torch.int64, device=seed.device)
    step = torch.as_tensor(step, dtype=torch.int64, device=seed.device)
    words = (seed & MASK32, seed >> 32, torch.as_tensor(stream, device=seed.device),
             step & MASK32, step >> 32, index & MASK32, index >> 32)
    lanes = []
    for start in LANES:
        state = torch.full((), start, dtype=torch.int64, device=seed.device)
        for value in words:
            state = _absorb(state, value)
        lanes.append(state)
    return _absorb(lanes[0], mix32(lanes[1]))


def uniform(seed: torch.Tensor, stream: int, step: int | torch.Tensor,
            index: torch.Tensor) -> torch.Tensor:
    """Uniform float32 draws strictly inside (0, 1), 23 random bits each: (k + 1/2) / 2**23
    is exact in float32 for every k, so no draw rounds to 0 or 1."""
    bits = key_words(seed, stream, step, index) >> 9
    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 23))


def integers(seed: torch.Tensor, stream: int, step: int | torch.Tensor, index: torch.Tensor,
             high: int) -> torch.Tensor:
    """Integers uniform in [0, high) (high at most 2**24), by scaling a 24-bit draw down."""
    if not 1 <= high <= 1 << 24:
        raise ValueError(f"high must be in 1..2**24, got {high}")
    bits = key_words(seed, stream, step, index) >> 8
    return (bits * high) >> 24
