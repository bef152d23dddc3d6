"""Rows from decoded tokens: the emitted ids, EOS stripped, whatever the mask's shape."""

from __future__ import annotations

import random

import torch
from plans import typed

from postlab.engines.rollout import to_rows
from postlab.policies import build_policy


def _by_hand(model, pairs, tokens, mask):
    """A plain loop over positions, written apart from to_rows."""
    rows = []
    vocab, eos = model.tokenizer.vocab, model.tokenizer.eos_id
    for pair, seq, valid in zip(pairs, tokens.tolist(), mask.tolist(), strict=True):
        ids = []
        for token, use in zip(seq, valid, strict=True):
            if use:
                ids.append(token)
        ended = len(ids) > 0 and ids[-1] == eos
        text = "".join(vocab[i] for i in (ids[:-1] if ended else ids))
        rows.append([pair[0], pair[1], text, ended])
    return rows


def test_rows_are_the_emitted_tokens_for_prefix_and_other_masks():
    model = build_policy(typed())
    eos = model.tokenizer.eos_id
    rng = random.Random(5)
    pairs = [[rng.randrange(10), rng.randrange(10)] for _ in range(40)]
    tokens = torch.tensor([[rng.randrange(14) for _ in range(6)] for _ in pairs])
    tokens[3, 2] = eos
    lengths = torch.tensor([rng.randrange(7) for _ in pairs])
    lengths[3] = 3  # ends with its EOS
    prefix = torch.arange(6) < lengths[:, None]
    rows = to_rows(model, pairs, tokens, prefix)
    assert rows == _by_hand(model, pairs, tokens, prefix)
    vocab = model.tokenizer.vocab
    assert rows[3] == [*pairs[3], vocab[tokens[3, 0]] + vocab[tokens[3, 1]], True]
    # a mask with holes (not what a decode makes) is read position by position
    holes = torch.tensor([[rng.random() < 0.5 for _ in range(6)] for _ in pairs])
    holes[0] = torch.tensor([True, False, True, False, True, False])
    assert to_rows(model, pairs, tokens, holes) == _by_hand(model, pairs, tokens, holes)
    # nothing emitted: empty text, not terminated
    none = torch.zeros_like(prefix)
    assert all(row[2:] == ["", False] for row in to_rows(model, pairs, tokens, none))
