"""A toy policy kind for tests that register one: a lookup table indexed by the previous
token (registered by the tests that use it, not here)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from postlab.plan.schema import Plan
from postlab.policies import CharTokenizer, Policy
from postlab.policies.gru import ANSWER_CHARACTERS, MASKED_LOGIT
from postlab.tasks.registry import task_for


class Bigram(Policy):
    """Next-token logits are a learnable table row chosen by the previous token, masked like
    the GRU's to answer characters and EOS. The cache is nothing: one token is all it reads."""

    kind = "bigram"

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        vocab, eos = plan.vocab, plan.eos
        self.tokenizer = CharTokenizer(vocab, eos, plan.pad)
        self.prompt_text = task_for(plan).prompt
        self.table = nn.Parameter(torch.randn(len(vocab), len(vocab)) * 0.1)
        allowed = [c in ANSWER_CHARACTERS or c == eos for c in vocab]
        self.register_buffer("allowed", torch.tensor(allowed))

    def prompts(self, pairs: Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.tensor([self.tokenizer.encode(self.prompt_text(p)) for p in pairs],
                            device=self.device)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table[tokens].masked_fill(~self.allowed, MASKED_LOGIT)

    def start(self, prompt_tokens: torch.Tensor) -> tuple[torch.Tensor, None]:
        return self.forward(prompt_tokens[:, -1]), None

    def advance(self, tokens: torch.Tensor, cache: None) -> tuple[torch.Tensor, None]:
        return self.forward(tokens[:, -1]), None


class BigramFields(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
