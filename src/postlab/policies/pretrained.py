"""The ``pretrained`` policy kind: a causal LM and its tokenizer loaded from a local folder
(``save_pretrained``) or a GGUF file, never from a hub; the plan records the folder's content
hash or the file's digest and a run refuses one that differs.

Kept apart from ``policies.transformer`` (the kind built from a configuration, and the causal
LM wrapper both kinds share) because everything here is about finding, checking and loading
files someone else made.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from postlab.errors import UserError
from postlab.policies.base import POLICIES, PolicyKind, section_fields
from postlab.policies.gguf import (
    ChatTokenizer,
    GGUFSource,
    checked_file,
    gguf_config,
    loaded_copy,
    require_gguf,
)
from postlab.policies.transformer import (
    ATTENTION,
    CausalLMPolicy,
    checkpointing_problem,
    meta_targets,
    require_transformers,
    with_prompt_width,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from postlab.policies.base import PolicyPlan


class PretrainedPolicy(CausalLMPolicy):
    kind = "pretrained"


def folder_sha256(folder: Path) -> str:
    """SHA-256 over every file's relative path and bytes, in sorted path order."""
    digest = hashlib.sha256()
    files = sorted((p for p in folder.rglob("*") if p.is_file()),
                   key=lambda p: p.relative_to(folder).as_posix())
    for path in files:
        name = path.relative_to(folder).as_posix().encode()
        data = path.read_bytes()
        digest.update(len(name).to_bytes(8, "big") + name + len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


class PretrainedFields(BaseModel):
    """A local folder written by ``save_pretrained`` (model and tokenizer), or a GGUF file
    (model, tokenizer and chat template), and its digest."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    path: str | None = Field(None, min_length=1, description=(
        "folder of the model and its tokenizer (absolute, or relative to the working folder)"))
    gguf: GGUFSource | None = Field(None, description=(
        "or a GGUF file: {package, file} of an installed package that ships it, or {path}"))
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description=(
        "a folder: the hash over every file's relative path and bytes, sorted; a GGUF: the "
        "file's sha256. A run refuses a model that differs"))
    system: str | None = Field(None, max_length=4000, description=(
        "GGUF only: the system message of every prompt (absent: the chat template's own)"))

    @model_validator(mode="after")
    def _one_source(self) -> PretrainedFields:
        if (self.path is None) == (self.gguf is None):
            raise ValueError("name a folder (path) or a GGUF file (gguf), not both")
        if self.system is not None and self.gguf is None:
            raise ValueError("system is for a GGUF chat model")
        return self


def pretrained_fields(plan: PolicyPlan) -> PretrainedFields:
    return PretrainedFields.model_validate(section_fields(plan.policy))


def gguf_file(plan: PolicyPlan) -> Path | None:
    """The plan's GGUF file, checked by digest; None for a folder plan."""
    fields = pretrained_fields(plan)
    if fields.gguf is None:
        return None
    return checked_file(fields.gguf.locate(), fields.sha256)


class HFTokenizer:
    """The folder's tokenizer seen through postlab's interface.

    Supported: tokenizers whose tokens are literal pieces of text (e.g. a ``WordLevel``
    vocabulary of characters), so decoding joins tokens without separators or markers.
    """

    def __init__(self, inner: PreTrainedTokenizerBase, eos: str, pad: str) -> None:
        self.inner = inner
        self.eos_id = self._single(eos)
        self.pad_id = self._single(pad)
        self.vocab_size = len(inner)

    def _single(self, character: str) -> int:
        ids = self.encode(character)
        if len(ids) != 1 or self.decode(ids) != character:
            raise UserError(f"the pretrained tokenizer does not encode {character!r} as one "
                            "token of that text; it needs one token per character of the "
                            "plan's vocab")
        return ids[0]

    def encode(self, text: str) -> list[int]:
        return list(self.inner(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.inner.convert_ids_to_tokens(list(ids)))


def checked_folder(plan: PolicyPlan) -> Path:
    """The plan's folder, refused in one line unless its hash is the plan's."""
    fields = pretrained_fields(plan)
    assert fields.path is not None
    folder = Path(fields.path)
    if not folder.is_dir():
        raise UserError(f"policy.path {fields.path}: not a folder")
    actual = folder_sha256(folder)
    if actual != fields.sha256:
        raise UserError(f"policy.path {fields.path}: folder hash is {actual}, the plan "
                        f"records {fields.sha256}; the model or tokenizer changed")
    return folder


def build_chat(plan: PolicyPlan) -> PretrainedPolicy:
    """A GGUF chat model: its weights dequantised to float32, its own tokenizer, prompts
    rendered through its chat template, any token but the special ones emitted, and the
    prompts' left padding hidden from attention."""
    from postlab.tasks.registry import task_for

    fields = pretrained_fields(plan)
    assert fields.gguf is not None
    require_gguf()
    loaded = loaded_copy(fields.gguf.locate(), fields.sha256)
    eos = loaded.model.config.eos_token_id
    if not isinstance(eos, int):
        raise UserError("policy.gguf: the model names no single end-of-turn token")
    tokenizer = ChatTokenizer(loaded.tokenizer, eos)
    task = task_for(plan)
    system = fields.system

    def prompt(key: Sequence[int]) -> str:
        return tokenizer.render(task.prompt(key).strip(), system)

    policy = PretrainedPolicy(loaded.model, tokenizer, plan.vocab, plan.eos, prompt,
                              allowed_ids=tokenizer.allowed())
    policy.hide_padding = True
    policy.prompt_width = chat_prompt_width(plan, policy)
    return policy


def chat_prompt_width(plan: PolicyPlan, policy: CausalLMPolicy) -> int:
    """The longest rendered prompt of the plan's questions, in the model's tokens."""
    return max(len(policy.tokenizer.encode(policy.prompt_text(key)))
               for keys in plan.split.values() for key in keys)


def build_pretrained(plan: PolicyPlan) -> PretrainedPolicy:
    """Refuses a folder or file whose hash differs from the plan's before loading anything."""
    if pretrained_fields(plan).gguf is not None:
        return build_chat(plan)
    require_transformers()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from postlab.tasks.registry import task_for

    folder = checked_folder(plan)
    inner = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tokenizer = HFTokenizer(inner, plan.eos, plan.pad)
    for character in plan.vocab:
        tokenizer._single(character)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True,
                                                 attn_implementation=ATTENTION)
    if model.config.vocab_size < tokenizer.vocab_size:
        raise UserError(f"policy.path {folder}: the model's vocabulary "
                        f"({model.config.vocab_size}) is smaller than its tokenizer's "
                        f"({tokenizer.vocab_size})")
    task = task_for(plan)
    return with_prompt_width(PretrainedPolicy(model, tokenizer, plan.vocab, plan.eos,
                                       task.prompt, task.answer_characters), plan)


def pretrained_config(plan: PolicyPlan) -> Any:
    """The configuration of a pretrained plan's model (folder or GGUF), its weights unread."""
    path = gguf_file(plan)
    if path is not None:
        return gguf_config(path, pretrained_fields(plan).sha256)
    require_transformers()
    from transformers import AutoConfig

    folder = checked_folder(plan)
    try:
        return AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UserError(f"policy.path {folder}: no model configuration: {exc}") from None


def pretrained_size(plan: PolicyPlan) -> tuple[int, int]:
    """Parameters of the folder's configuration, counted on the meta device (no weights read,
    no random numbers drawn); about one multiply-add per parameter and token."""
    config = pretrained_config(plan)
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model: nn.Module = AutoModelForCausalLM.from_config(config)
    parameters = sum(p.numel() for p in model.parameters())
    return parameters, parameters


POLICIES.register("pretrained")(PolicyKind(
    build=build_pretrained, fields=PretrainedFields, size=pretrained_size,
    summary="a causal LM and its tokenizer loaded from a local folder or a GGUF file (never "
            "a hub) whose digest the plan records (needs the transformers extra, or the model "
            "extra for GGUF); fields path or gguf, sha256, system",
    adapter_targets=lambda plan: meta_targets(pretrained_config(plan)),
    checkpointing=lambda plan: checkpointing_problem(pretrained_config(plan))))
