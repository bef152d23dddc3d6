"""Transformer policies: causal language models from the ``transformers`` library.

Two kinds are registered when :mod:`postlab.policies` is imported (so worker processes, which
import postlab afresh, know them), but ``transformers`` itself is imported only when one is
built or sized, so the core runs without that optional extra:

* ``transformer``: a GPT-2 or Llama model built from a configuration over the task's character
  vocabulary and randomly initialised from torch's global generator (the engine seeds it), so a
  seed gives the same weights.
* ``pretrained``: a model and its tokenizer loaded from a local folder, never from a hub; the
  plan records the folder's content hash and a run refuses a folder that differs.

Both mask every character but the answer characters and EOS, like the GRU, and keep the network
in evaluation mode: dropout would make the logits of a rollout differ from those of the update
that scores it, and would draw from the global generator.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from postlab.errors import UserError
from postlab.policies.base import (
    POLICIES,
    Policy,
    PolicyKind,
    Tokenizer,
    plan_prompt_width,
    section_fields,
)
from postlab.policies.compact import (
    COMPACT_FORWARDS,
    compact_forward_for,
    continuation_logits,
    leading_padding,
    start_logits,
)
from postlab.policies.gguf import (
    ChatTokenizer,
    GGUFSource,
    checked_file,
    gguf_config,
    loaded_copy,
    require_gguf,
)
from postlab.policies.gru import ANSWER_CHARACTERS, MASKED_LOGIT
from postlab.policies.lora import LoraSection, adapter_targets, attach, set_dropout
from postlab.policies.tokenizers import (
    allowed_tokens,
    longest_in_tokens,
    plan_tokenizer,
    vocab_size,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from postlab.policies.base import PolicyPlan

#: Eager attention is plain matrix arithmetic on every device; fused kernels chosen at run time
#: could change the bits between machines.
ATTENTION = "eager"


def require_transformers() -> None:
    """One line telling how to install the extra, instead of an ImportError traceback."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UserError("this plan's policy needs the transformers extra: "
                        "pip install 'postlab[transformers]'") from None


class CausalLMPolicy(Policy):
    """A ``transformers`` causal LM whose past key/values are the decoding cache."""

    def __init__(self, model: PreTrainedModel, tokenizer: Tokenizer, vocab: str, eos: str,
                 prompt: Callable[[Sequence[int]], str],
                 answer_characters: str = ANSWER_CHARACTERS,
                 allowed_ids: Sequence[bool] | None = None) -> None:
        """``allowed_ids``: per token, may the policy emit it (a trained tokenizer's rule);
        None: the token of each answer character of ``vocab``, and EOS."""
        super().__init__()
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.prompt_text = prompt
        width = model.config.vocab_size
        allowed = torch.zeros(width, dtype=torch.bool)
        if allowed_ids is not None:
            allowed[:len(allowed_ids)] = torch.tensor(list(allowed_ids))
        else:
            for character in vocab:
                if character in answer_characters or character == eos:
                    allowed[tokenizer.encode(character)[0]] = True
        self.register_buffer("allowed", allowed)
        #: The registered compact forward for this configuration, or None for the library's.
        self.compact = compact_forward_for(model)

    def train(self, mode: bool = True) -> CausalLMPolicy:
        """Training flags stay on this wrapper: the network itself never runs dropout (its
        adapters' dropout, if the plan asks for one, follows ``mode``)."""
        nn.Module.train(self, mode)
        self.model.eval()
        if self.adapters is not None:
            set_dropout(self.model, mode)
        return self

    def attach_adapters(self, section: LoraSection) -> None:
        """Inject adapters into the network itself; the compact forward calls the projection
        modules they wrap, so it keeps running (``policies.lora``)."""
        attach(self.model, section)
        self.adapters = section
        self.train(self.training)

    def logits(self, raw: torch.Tensor) -> torch.Tensor:
        return raw.masked_fill(~self.allowed, MASKED_LOGIT)

    #: Whether left padding is hidden: a chat model's prompt must compute what it would
    #: alone, as it was trained (see ``compact.padded_view``). Off for models postlab trains
    #: from the start, which learn to ignore padding they attend to (and keep their bits).
    hide_padding: bool = False

    def _pad(self) -> int | None:
        return self.tokenizer.pad_id if self.hide_padding else None

    def _library_inputs(self, tokens: torch.Tensor, starts: torch.Tensor | None,
                        past: int) -> dict[str, torch.Tensor]:
        """The library's attention mask (and, hiding padding, position ids) for ``tokens``
        after ``past`` cached positions.

        Without hidden padding the mask hides nothing: sequences are right-padded, and causal
        attention already keeps every real position from seeing the padding after it (stated
        so the library does not warn that the padding might be unmasked)."""
        total = past + tokens.shape[1]
        if starts is None:
            return {"attention_mask": torch.ones(tokens.shape[0], total, dtype=torch.long,
                                                 device=tokens.device)}
        keys = torch.arange(total, device=tokens.device)
        mask = (keys[None, :] >= starts[:, None]).long()
        positions = (keys[None, past:] - starts[:, None]).clamp(min=0)
        return {"attention_mask": mask, "position_ids": positions}

    def _starts(self, prompts: torch.Tensor) -> torch.Tensor | None:
        pad = self._pad()
        return None if pad is None else leading_padding(prompts, pad)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits at every position of ``tokens`` (batch, time) -> (batch, time, vocab)."""
        starts = self._starts(tokens)
        if self.compact is not None:
            return self.logits(COMPACT_FORWARDS[self.compact].run(self.model, tokens, None,
                                                                  starts=starts)[0])
        out = self.model(input_ids=tokens, **self._library_inputs(tokens, starts, 0),
                         use_cache=False)
        return self.logits(out.logits)

    def continuation(self, prompts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """With a compact forward, the completions of one prompt read it once."""
        if self.compact is None:
            return super().continuation(prompts, tokens)
        return self.logits(continuation_logits(COMPACT_FORWARDS[self.compact], self.model,
                                               prompts, tokens, self._pad()))

    def start(self, prompt_tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """The cache also carries where each prompt's text starts when padding is hidden."""
        starts = self._starts(prompt_tokens)
        if self.compact is None:
            logits, cache = self._library_step(prompt_tokens, None, starts)
        else:
            logits, cache = start_logits(COMPACT_FORWARDS[self.compact], self.model,
                                         prompt_tokens, self._pad())
            logits = self.logits(logits)
        return logits, (cache, starts)

    def advance(self, tokens: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
        """The cache is the compact forward's keys/values, or the library's past key/values
        (extended in place and returned), with the prompts' starts."""
        inner, starts = cache
        if self.compact is None:
            logits, inner = self._library_step(tokens, inner, starts)
            return logits, (inner, starts)
        logits, inner = COMPACT_FORWARDS[self.compact].run(self.model, tokens, inner,
                                                           starts=starts)
        return self.logits(logits[:, -1]), (inner, starts)

    def _library_step(self, tokens: torch.Tensor, cache: Any,
                      starts: torch.Tensor | None) -> tuple[torch.Tensor, Any]:
        past = 0 if cache is None else cache.get_seq_length()
        out = self.model(input_ids=tokens, **self._library_inputs(tokens, starts, past),
                         past_key_values=cache, use_cache=True)
        return self.logits(out.logits[:, -1]), out.past_key_values


LM = TypeVar("LM", bound=CausalLMPolicy)


class TransformerPolicy(CausalLMPolicy):
    kind = "transformer"


class PretrainedPolicy(CausalLMPolicy):
    kind = "pretrained"


# --- kind "transformer": built from a configuration -----------------------------------------

class TransformerFields(BaseModel):
    """A small causal LM over the plan's characters; vocab, eos and pad come from the plan."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    architecture: Literal["gpt2", "llama"] = Field(description="model family")
    layers: int = Field(ge=1, le=64, description="transformer blocks")
    heads: int = Field(ge=1, le=64, description="attention heads; must divide width")
    width: int = Field(ge=8, le=8192, description="hidden size")
    intermediate: int | None = Field(None, ge=8, le=32768, description=(
        "MLP size (llama only; gpt2 uses 4 x width)"))
    max_positions: int = Field(ge=8, le=8192, description=(
        "longest sequence; must cover the prompt plus max_new_tokens"))

    @model_validator(mode="after")
    def _consistent(self) -> TransformerFields:
        if self.width % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide width ({self.width})")
        if self.architecture == "llama" and self.intermediate is None:
            raise ValueError("llama needs intermediate")
        if self.architecture == "gpt2" and self.intermediate is not None:
            raise ValueError("intermediate is for llama only; gpt2 uses 4 x width")
        return self


def transformer_fields(plan: PolicyPlan) -> TransformerFields:
    return TransformerFields.model_validate(section_fields(plan.policy))


def config_for(plan: PolicyPlan) -> Any:
    """The ``transformers`` configuration the plan describes, dropout off."""
    require_transformers()
    from transformers import GPT2Config, LlamaConfig

    fields, tokenizer = transformer_fields(plan), plan_tokenizer(plan)
    common = {"vocab_size": tokenizer.vocab_size, "pad_token_id": tokenizer.pad_id,
              "eos_token_id": tokenizer.eos_id, "bos_token_id": tokenizer.eos_id}
    if fields.architecture == "gpt2":
        config = GPT2Config(n_layer=fields.layers, n_head=fields.heads, n_embd=fields.width,
                            n_positions=fields.max_positions, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, **common)
    else:
        config = LlamaConfig(num_hidden_layers=fields.layers, num_attention_heads=fields.heads,
                             num_key_value_heads=fields.heads, hidden_size=fields.width,
                             intermediate_size=fields.intermediate,
                             max_position_embeddings=fields.max_positions,
                             attention_dropout=0.0, tie_word_embeddings=False, **common)
    config._attn_implementation = ATTENTION
    return config


def _with_task(policy: LM, plan: PolicyPlan) -> LM:
    """The policy with its prompts padded to the plan's longest."""
    policy.prompt_width = plan_prompt_width(plan, policy.tokenizer)
    return policy


def build_transformer(plan: PolicyPlan) -> TransformerPolicy:
    """Initialised by the model's own init from torch's global generator (seeded by the
    engine), so the same seed gives the same weights."""
    config = config_for(plan)  # first: one line, not an ImportError, without the extra
    from transformers import AutoModelForCausalLM

    from postlab.tasks.registry import task_for

    model = AutoModelForCausalLM.from_config(config)
    tokenizer = plan_tokenizer(plan)
    task = task_for(plan)
    return _with_task(TransformerPolicy(model, tokenizer, plan.vocab, plan.eos,
                                        task.prompt, task.answer_characters,
                                        allowed_tokens(tokenizer, task.answer_characters)),
                      plan)


def transformer_size(plan: PolicyPlan) -> tuple[int, int]:
    """Parameters counted from the plan; multiply-adds of one token at the longest position."""
    fields, vocab = transformer_fields(plan), vocab_size(plan)
    w, n, positions = fields.width, fields.layers, fields.max_positions
    if fields.architecture == "gpt2":
        # blocks: two layer norms, qkv and output projections, a 4x MLP, all with biases;
        # the head shares the token embedding
        parameters = vocab * w + positions * w + n * (12 * w * w + 13 * w) + 2 * w
        block = 12 * w * w
    else:
        i = fields.intermediate or 0
        # blocks: q, k, v, o without biases, a gated MLP, two RMS norms; an untied head
        parameters = 2 * vocab * w + n * (4 * w * w + 3 * w * i + 2 * w) + w
        block = 4 * w * w + 3 * w * i
    return parameters, n * (block + 2 * positions * w) + vocab * w


def transformer_problems(plan: PolicyPlan) -> list[tuple[str, str]]:
    """Positions must hold the longest sequence a run reads."""
    needed = longest_in_tokens(plan)[0] + plan.max_new_tokens
    positions = transformer_fields(plan).max_positions
    if positions < needed:
        return [("policy.max_positions", f"{positions} is fewer than the prompt plus "
                                         f"max_new_tokens ({needed})")]
    return []


def _meta_targets(config: Any) -> dict[str, str]:
    """The adapter targets of a configuration's model, built on the meta device (no weights,
    no random numbers drawn)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model: nn.Module = AutoModelForCausalLM.from_config(config)
    return adapter_targets(model)


def transformer_targets(plan: PolicyPlan) -> dict[str, str]:
    return _meta_targets(config_for(plan))


POLICIES.register("transformer")(PolicyKind(
    build=build_transformer, fields=TransformerFields, size=transformer_size,
    summary="a GPT-2 or Llama causal LM built from its configuration over the plan's "
            "characters (needs the transformers extra); fields architecture, layers, heads, "
            "width, intermediate (llama), max_positions",
    plan_problems=transformer_problems, adapter_targets=transformer_targets))


# --- kind "pretrained": loaded from a local folder ------------------------------------------

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
    return _with_task(PretrainedPolicy(model, tokenizer, plan.vocab, plan.eos,
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
    adapter_targets=lambda plan: _meta_targets(pretrained_config(plan))))
