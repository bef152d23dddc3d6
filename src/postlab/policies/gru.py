"""The policy: a character GRU that reads "a+b=" and writes the answer one character at a time.

Parameter names (``embed``, ``rnn``, ``head``, buffer ``allowed``) and construction order are
fixed: the same global seed must give the same initial weights as the reference, and
checkpoints from either implementation load into the other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from postlab.policies.base import (
    POLICIES,
    CharTokenizer,
    Policy,
    PolicyKind,
    Tokenizer,
    plan_prompt_width,
)
from postlab.policies.tokenizers import allowed_tokens, plan_tokenizer, vocab_size

if TYPE_CHECKING:
    from postlab.policies.base import PolicyPlan

#: Characters an arithmetic policy may emit (a task names its own); the rest of the vocabulary
#: is masked out of its output.
ANSWER_CHARACTERS = "0123456789"
MASKED_LOGIT = -1e9


class CharGRU(Policy):
    """Embedding -> one GRU layer -> linear head, with disallowed characters masked."""

    kind = "gru"

    def __init__(self, vocab: str, eos: str, pad: str, embedding: int, hidden: int,
                 prompt: Callable[[Sequence[int]], str] | None = None,
                 answer_characters: str = ANSWER_CHARACTERS,
                 tokenizer: Tokenizer | None = None) -> None:
        super().__init__()
        self.prompt_text = prompt or (lambda pair: f"{pair[0]}+{pair[1]}=")
        self.tokenizer = tokenizer or CharTokenizer(vocab, eos, pad)
        # The GRU's own names for its tokenizer's parts, kept for code written against them.
        self.vocab = vocab
        self.eos = self.tokenizer.eos_id
        self.pad = self.tokenizer.pad_id
        size = self.tokenizer.vocab_size
        self.embed = nn.Embedding(size, embedding)
        self.rnn = nn.GRU(embedding, hidden, batch_first=True)
        self.head = nn.Linear(hidden, size)
        allowed = allowed_tokens(self.tokenizer, answer_characters)
        self.register_buffer("allowed", torch.tensor(allowed))

    @classmethod
    def from_plan(cls, plan: PolicyPlan) -> CharGRU:
        from postlab.tasks.registry import task_for

        task = task_for(plan)
        gru = cls(plan.vocab, plan.eos, plan.pad, plan.embedding, plan.hidden,
                  prompt=task.prompt, answer_characters=task.answer_characters,
                  tokenizer=plan_tokenizer(plan))
        gru.prompt_width = plan_prompt_width(plan, gru.tokenizer)
        return gru

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden).masked_fill(~self.allowed, MASKED_LOGIT)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits at every position of ``tokens`` (batch, time) -> (batch, time, vocab)."""
        hidden, _ = self.rnn(self.embed(tokens))
        return self.logits(hidden)

    def start(self, prompt_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The GRU state after the prompts is the cache: decoding then feeds one character a
        step instead of re-reading the prefix, with the same bits on CPU float32."""
        return self.advance(prompt_tokens, None)

    def advance(self, tokens: torch.Tensor,
                cache: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        output, state = self.rnn(self.embed(tokens), cache)
        return self.logits(output[:, -1]), state

    def repeat_cache(self, cache: torch.Tensor, times: int) -> torch.Tensor:
        return cache.repeat_interleave(times, dim=1)  # the state is (layers, batch, hidden)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)


class GRUFields(BaseModel):
    """The GRU takes its fields from the plan's top level (vocab, eos, pad, embedding, hidden),
    so its ``policy`` section names only the kind."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def gru_size(plan: PolicyPlan) -> tuple[int, int]:
    """Parameters, and multiply-adds of one forward step of one sequence."""
    vocab, emb, hid = vocab_size(plan), plan.embedding, plan.hidden
    parameters = vocab * emb + 3 * hid * (emb + hid + 2) + vocab * (hid + 1)
    return parameters, 3 * hid * (emb + hid) + hid * vocab


POLICIES.register("gru")(PolicyKind(
    build=CharGRU.from_plan, fields=GRUFields, size=gru_size,
    summary="the character GRU (embedding, one GRU layer, linear head); the top-level "
            "vocab, eos, pad, embedding and hidden are its fields"))
