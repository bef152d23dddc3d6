"""The policy: a character GRU that reads "a+b=" and writes the answer one character at a time.

Parameter names (``embed``, ``rnn``, ``head``, buffer ``allowed``) and construction order are
fixed: the same global seed must give the same initial weights as the reference, and
checkpoints from either implementation load into the other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

#: Characters the policy may emit; the rest of the vocabulary is masked out of its output.
ANSWER_CHARACTERS = "0123456789"
MASKED_LOGIT = -1e9


class CharGRU(nn.Module):
    """Embedding -> one GRU layer -> linear head, with disallowed characters masked."""

    def __init__(self, vocab: str, eos: str, pad: str, embedding: int, hidden: int,
                 prompt: Callable[[Sequence[int]], str] | None = None) -> None:
        super().__init__()
        self.prompt_text = prompt or (lambda pair: f"{pair[0]}+{pair[1]}=")
        self.vocab = vocab
        self.index = {c: i for i, c in enumerate(vocab)}
        self.eos = vocab.index(eos)
        self.pad = vocab.index(pad)
        self.embed = nn.Embedding(len(vocab), embedding)
        self.rnn = nn.GRU(embedding, hidden, batch_first=True)
        self.head = nn.Linear(hidden, len(vocab))
        allowed = [c in ANSWER_CHARACTERS or c == eos for c in vocab]
        self.register_buffer("allowed", torch.tensor(allowed))

    @classmethod
    def from_plan(cls, plan: dict) -> CharGRU:
        from postlab.tasks.arithmetic import task_for

        return cls(plan["vocab"], plan["eos"], plan["pad"], plan["embedding"], plan["hidden"],
                   prompt=task_for(plan).prompt)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden).masked_fill(~self.allowed, MASKED_LOGIT)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits at every position of ``tokens`` (batch, time) -> (batch, time, vocab)."""
        hidden, _ = self.rnn(self.embed(tokens))
        return self.logits(hidden)

    def step(self, tokens: torch.Tensor,
             state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance the GRU over ``tokens`` (batch, time) from ``state``; return the last
        position's output (batch, hidden) and the new state, for incremental decoding."""
        output, state = self.rnn(self.embed(tokens), state)
        return output[:, -1], state

    def encode(self, text: str) -> list[int]:
        return [self.index[c] for c in text]

    def prompts(self, pairs: Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.tensor([self.encode(self.prompt_text(pair)) for pair in pairs])

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())
