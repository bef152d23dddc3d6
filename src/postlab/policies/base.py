"""The policy interface the engine, checkpoints and verification use, and the registry of kinds.

A policy is an ``nn.Module`` that holds its tokenizer, turns a task's operand pairs into prompt
tokens, scores whole sequences (training) and decodes incrementally through an opaque cache
(rollouts). The engine never looks inside a policy, so a new kind is a registry entry, not a
branch: ``POLICIES`` maps a kind name to how it is built from a plan, how its plan section is
validated and how big it is before anything is built (for the cost estimate).
"""

from __future__ import annotations

import contextlib
import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, ClassVar, Protocol

import torch
from pydantic import BaseModel, ValidationError
from torch import nn

from postlab.registry import Registry
from postlab.tasks.registry import TaskPlan


class PolicyPlan(TaskPlan, Protocol):
    """What policies read of a plan. The plan's typed model (``postlab.plan.schema.PlanModel``)
    has these fields; naming them here keeps policies below the plan layer."""

    vocab: str
    eos: str
    pad: str
    embedding: int
    hidden: int
    max_new_tokens: int
    precision: str | None
    gradient_checkpointing: bool | None
    #: the ``policy`` section (a pydantic model: ``kind`` and the kind's fields), or None
    policy: Any
    #: the ``tokenizer`` section (a pydantic model), or None
    tokenizer: Any
    lora: Any


#: The kind a plan without a ``policy`` section means, and a checkpoint without ``kind`` holds.
DEFAULT_KIND = "gru"


class Tokenizer(Protocol):
    """Text <-> token ids; the ids index the policy's output distribution."""

    eos_id: int
    pad_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class CharTokenizer:
    """One token per character of ``vocab``: the teaching lab's tokenizer, shared by kinds."""

    def __init__(self, vocab: str, eos: str, pad: str) -> None:
        self.vocab = vocab
        self.index = {c: i for i, c in enumerate(vocab)}
        self.eos_id = vocab.index(eos)
        self.pad_id = vocab.index(pad)
        self.vocab_size = len(vocab)

    def encode(self, text: str) -> list[int]:
        return [self.index[c] for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join([self.vocab[i] for i in ids])


class Policy(nn.Module, ABC):
    """What the engine needs of a model; parameters and buffers are the kind's own.

    ``start``/``advance`` must give the same next-token logits as ``forward`` over the whole
    prefix (the cache only saves work), and sampling reads nothing else, so rollouts depend on
    the weights and the generator alone.
    """

    #: The registry name of this policy's kind; checkpoints record it.
    kind: ClassVar[str]
    tokenizer: Tokenizer
    #: The plan's ``precision``: "bf16" runs forward passes under autocast, weights stay float32.
    precision: str = "float32"
    #: The plan's ``gradient_checkpointing``: a kind that runs blocks recomputes each in the
    #: backward pass (:func:`postlab.policies.compact.checkpointed`); others never read it.
    gradient_checkpointing: bool = False
    #: The task's prompt text for a question key.
    prompt_text: Callable[[Sequence[int]], str]
    #: Tokens every prompt is left-padded to (the longest prompt of the plan's questions), so
    #: a question's tokens never depend on the others in its batch; None: no padding.
    prompt_width: int | None = None

    def prompts(self, pairs: Sequence[Sequence[int]]) -> torch.Tensor:
        """Prompt tokens (batch, time) of the task's questions for ``pairs``.

        Each question's padded tokens are kept once made (per prompt width): an RL step reads
        its prompts twice, evaluation reads each question again for every stage, and making
        them afresh (prompt text, encoding, padding) was 6% of a teaching arm's time."""
        known = self.__dict__.setdefault("_prompt_rows", {})
        width, pad_id = self.prompt_width, self.tokenizer.pad_id
        rows = []
        for pair in pairs:
            key = (width, *pair)
            row = known.get(key)
            if row is None:
                row = known[key] = pad_prompt(self.tokenizer.encode(self.prompt_text(pair)),
                                              width, pad_id)
            rows.append(row)
        return torch.tensor(rows, device=self.device)

    @abstractmethod
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits at every position: (batch, time) -> (batch, time, vocab)."""

    def continuation(self, prompts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (batch, len(tokens), vocab) for each of ``tokens`` given its prompt and the
        tokens before it: what training scores. A kind may compute it faster (sharing the
        prompts of a group, say) as long as the values are those of ``forward``."""
        return self(torch.cat([prompts, tokens[:, :-1]], dim=1))[:, prompts.shape[1] - 1:]

    @abstractmethod
    def start(self, prompt_tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Read the prompts (batch, time); return next-token logits (batch, vocab) and a cache."""

    @abstractmethod
    def advance(self, tokens: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
        """Read ``tokens`` (batch, time) after ``cache``; return next logits and a new cache."""

    def reserve(self, cache: Any, positions: int) -> Any:
        """``cache`` (from :meth:`start`) made ready for ``positions`` more tokens, where a
        kind can hold them in place (a transformer's static KV cache); the same cache where
        there is nothing to gain (a GRU's state does not grow)."""
        return cache

    def repeat_cache(self, cache: Any, times: int) -> Any | None:
        """``cache`` with each sequence's entry repeated ``times`` times in a row (as
        ``repeat_interleave`` over its sequences), so that many continuations of each prefix
        are read one token further; None where a kind does not offer it, and callers then read
        whole prefixes with ``forward``."""
        return None

    @property
    def device(self) -> torch.device:
        """Where the policy's tensors live; the engine makes its tensors there."""
        first = next(chain(self.parameters(), self.buffers()), None)
        return torch.device("cpu") if first is None else first.device

    @property
    def dtype(self) -> torch.dtype:
        """The floating-point type of the weights."""
        for tensor in self.parameters():
            if tensor.is_floating_point():
                return tensor.dtype
        return torch.get_default_dtype()

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context the engine runs forward passes in: bfloat16 autocast on the policy's
        device for a bf16 plan (parameters and optimizer stay float32), else nothing."""
        if self.precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    @property
    def compute_dtype(self) -> str:
        """The dtype forward passes compute in, as records name it."""
        return "bfloat16" if self.precision == "bf16" else str(self.dtype).removeprefix("torch.")

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    #: The plan's ``lora`` section once adapters are attached (:meth:`attach_adapters`).
    adapters: Any = None

    def trainable(self) -> list[nn.Parameter]:
        """The parameters an optimiser updates: all of them, or only the adapters."""
        return [p for p in self.parameters() if p.requires_grad]

    def attach_adapters(self, section: Any) -> None:
        """Add LoRA adapters (a ``policies.lora.LoraSection``) and freeze the rest; a kind
        whose ``PolicyKind.adapter_targets`` is None takes none (plans are checked first)."""
        raise NotImplementedError(f"the {self.kind} policy takes no adapters")

    def reference_policy(self) -> Any:
        """The KL reference for RL from these weights: a frozen copy, or with adapters, this
        network with them switched off (no second copy of the base)."""
        if self.adapters is not None:
            from postlab.policies.lora import AdaptersOff

            return AdaptersOff(self)
        return copy.deepcopy(self).requires_grad_(False)

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """What a checkpoint of this policy holds: every weight, or only the adapters (the
        base weights are named by digest, see ``policies.restore``)."""
        state = self.state_dict()
        if self.adapters is None:
            return state
        from postlab.policies.lora import adapter_state

        return adapter_state(state)

    def train(self, mode: bool = True) -> Policy:
        """Gradient steps run in training mode: only adapter dropout reads it (the networks
        themselves never run dropout, so rollouts and updates see the same logits)."""
        super().train(mode)
        if self.adapters is not None:
            from postlab.policies.lora import set_dropout

            set_dropout(self, mode)
        return self


def pad_prompt(row: Sequence[int], width: int | None, pad_id: int) -> list[int]:
    """A prompt's tokens left-padded with ``pad_id`` to ``width`` (None: as they are; a batch
    of them must then be equally long).

    Left, so that every answer starts right after its question; a recurrent policy reads the
    padding first, a transformer attends to it, and both learn to ignore it. Padding to the
    plan's longest prompt rather than the batch's keeps each question's tokens the same in any
    company (evaluation and RL batches differ)."""
    if width is None:
        return list(row)
    if len(row) > width:
        raise ValueError(f"a prompt is longer than the prompt width {width}")
    return [pad_id] * (width - len(row)) + list(row)


def plan_prompt_width(plan: PolicyPlan, tokenizer: Tokenizer) -> int:
    """The longest prompt of the plan's questions, in the tokenizer's tokens."""
    from postlab.tasks.registry import task_for

    task = task_for(plan)
    return max(len(tokenizer.encode(task.prompt(key)))
               for keys in plan.split.values() for key in keys)


@dataclass(frozen=True)
class PolicyKind:
    """A registered kind: how to build it from a plan, check its plan section, size it."""

    build: Callable[[PolicyPlan], Policy]
    #: validates the plan's ``policy`` section less ``kind`` (pydantic; unknown fields refused)
    fields: type[BaseModel]
    #: (parameters, multiply-adds per token) from the plan alone, for the cost estimate, which
    #: must refuse an absurd plan before building anything
    size: Callable[[PolicyPlan], tuple[int, int]]
    summary: str
    #: problems that need the rest of the plan, as (field path, message); run after ``fields``
    #: accepted the section
    plan_problems: Callable[[PolicyPlan], list[tuple[str, str]]] | None = None
    #: the names the plan's ``lora.target_modules`` may use, with their layer kind (see
    #: ``policies.lora.adapter_targets``); None: this kind takes no adapters
    adapter_targets: Callable[[PolicyPlan], dict[str, str]] | None = None
    #: whether the plan's ``gradient_checkpointing`` can apply: None for a model of this kind,
    #: else why not; absent: this kind has no blocks to checkpoint
    checkpointing: Callable[[PolicyPlan], str | None] | None = None


POLICIES: Registry[PolicyKind] = Registry("policy kind")


def policy_kind(plan: PolicyPlan) -> str:
    """The plan's policy kind; the top-level GRU fields mean ``gru`` when no section names one."""
    section = plan.policy
    return DEFAULT_KIND if section is None else section.kind


def build_policy(plan: PolicyPlan) -> Policy:
    """A fresh policy of the plan's kind, initialised on CPU from torch's global generator
    (so its weights do not depend on the device it is moved to), at the plan's precision."""
    policy = POLICIES[policy_kind(plan)].build(plan)
    policy.precision = plan.precision or "float32"
    policy.gradient_checkpointing = bool(plan.gradient_checkpointing)
    return policy.eval()  # gradient steps switch training mode on (see Policy.train)


def place_policy(policy: Policy, device: str) -> Policy:
    """The policy moved to ``device`` (in place); the engine's tensors follow it there."""
    return policy.to(torch.device(device))


def policy_placement(plan: PolicyPlan) -> tuple[str, str]:
    """(parameter dtype, compute dtype) of the plan's policy, for the record; building it here
    leaves torch's global random state as it was, so the run's own initialisation is
    unchanged."""
    with torch.random.fork_rng(devices=[]):
        policy = build_policy(plan)
    return str(policy.dtype).removeprefix("torch."), policy.compute_dtype


def section_fields(section: Any) -> dict[str, Any]:
    """A plan's ``policy`` section less its kind: the fields the kind's own model reads."""
    return dict(section.model_extra or {})


def section_problems(section: Any) -> list[tuple[str, str]]:
    """Problems of a plan's ``policy`` section as (field path, message)."""
    kind = section.kind
    if kind not in POLICIES:
        return [("policy.kind", f"unknown policy kind {kind!r}; known: "
                                f"{', '.join(POLICIES.names())}")]
    try:
        POLICIES[kind].fields.model_validate(section_fields(section))
    except ValidationError as exc:
        return [(".".join(["policy", *map(str, err["loc"])]), err["msg"])
                for err in exc.errors()]
    return []
