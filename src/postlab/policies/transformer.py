"""Transformer policies: causal language models from the ``transformers`` library.

Two kinds are registered when :mod:`postlab.policies` is imported, so worker processes (which
import postlab afresh) know them: ``transformer`` here, ``pretrained`` in :mod:`.pretrained` on
this module's shared policy class. ``transformers`` itself is imported only when one is built
or sized, so the core runs without that optional extra:

* ``transformer``: a GPT-2 or Llama model built from a configuration over the task's character
  vocabulary and randomly initialised from torch's global generator (the engine seeds it), so a
  seed gives the same weights.
* ``pretrained``: a model and its tokenizer loaded from a local folder, never from a hub; the
  plan records the folder's content hash and a run refuses a folder that differs
  (:mod:`postlab.policies.pretrained`, which builds on the causal LM wrapper here).

Both mask every character but the answer characters and EOS, like the GRU, and keep the network
in evaluation mode: dropout would make the logits of a rollout differ from those of the update
that scores it, and would draw from the global generator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    CHECKPOINTED_OPS,
    COMPACT_FORWARDS,
    LIBRARY_OPS,
    Ops,
    StaticKeyValues,
    compact_forward_for,
    compact_forward_of,
    continuation_logits,
    leading_padding,
    start_logits,
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
    from transformers import PreTrainedModel

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

    @property
    def ops(self) -> Ops:
        """The compact forward's operations: every block checkpointed under the plan's
        ``gradient_checkpointing``."""
        return CHECKPOINTED_OPS if self.gradient_checkpointing else LIBRARY_OPS

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
            return self.logits(COMPACT_FORWARDS[self.compact].run(
                self.model, tokens, None, self.ops, starts=starts)[0])
        out = self.model(input_ids=tokens, **self._library_inputs(tokens, starts, 0),
                         use_cache=False)
        return self.logits(out.logits)

    def continuation(self, prompts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """With a compact forward, the completions of one prompt read it once."""
        if self.compact is None:
            return super().continuation(prompts, tokens)
        return self.logits(continuation_logits(COMPACT_FORWARDS[self.compact], self.model,
                                               prompts, tokens, self._pad(), self.ops))

    def start(self, prompt_tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """The cache also carries where each prompt's text starts when padding is hidden."""
        starts = self._starts(prompt_tokens)
        if self.compact is None:
            logits, cache = self._library_step(prompt_tokens, None, starts)
        else:
            logits, cache = start_logits(COMPACT_FORWARDS[self.compact], self.model,
                                         prompt_tokens, self._pad(), self.ops)
            logits = self.logits(logits)
        return logits, (cache, starts)

    def reserve(self, cache: Any, positions: int) -> Any:
        """The compact forward's keys and values moved into buffers that hold ``positions``
        more tokens (:class:`~postlab.policies.compact.StaticKeyValues`): decoding then
        writes each token's keys in place instead of concatenating the cache anew. The
        library's own cache is left as it is."""
        inner, starts = cache
        if self.compact is None:
            return cache
        return StaticKeyValues(inner, positions), starts

    def advance(self, tokens: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
        """The cache is the compact forward's keys/values, or the library's past key/values
        (extended in place and returned), with the prompts' starts."""
        inner, starts = cache
        if self.compact is None:
            logits, inner = self._library_step(tokens, inner, starts)
            return logits, (inner, starts)
        logits, inner = COMPACT_FORWARDS[self.compact].run(self.model, tokens, inner,
                                                           self.ops, starts=starts)
        return self.logits(logits[:, -1]), (inner, starts)

    def _library_step(self, tokens: torch.Tensor, cache: Any,
                      starts: torch.Tensor | None) -> tuple[torch.Tensor, Any]:
        past = 0 if cache is None else cache.get_seq_length()
        out = self.model(input_ids=tokens, **self._library_inputs(tokens, starts, past),
                         past_key_values=cache, use_cache=True)
        return self.logits(out.logits[:, -1]), out.past_key_values


LM = TypeVar("LM", bound=CausalLMPolicy)


def checkpointing_problem(config: Any) -> str | None:
    """Why a model of this configuration cannot checkpoint its blocks, or None: postlab
    checkpoints the blocks of its own compact forward, and the library's forward runs
    whole."""
    if compact_forward_of(config) is not None:
        return None
    return (f"postlab checkpoints the blocks of its own forward pass, which does not "
            f"implement this {getattr(config, 'model_type', 'unknown')} model (it does: "
            f"{', '.join(COMPACT_FORWARDS.names())})")


class TransformerPolicy(CausalLMPolicy):
    kind = "transformer"



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


def with_prompt_width(policy: LM, plan: PolicyPlan) -> LM:
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
    return with_prompt_width(TransformerPolicy(model, tokenizer, plan.vocab, plan.eos,
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
    """Positions must hold the longest sequence a run reads (an agent's whole episode)."""
    if getattr(plan, "agent", None) is not None:
        from postlab.tasks.agent import episode_tokens

        what, after = "an episode at its longest", episode_tokens(plan)
    else:
        what, after = "max_new_tokens", plan.max_new_tokens
    needed = longest_in_tokens(plan)[0] + after
    positions = transformer_fields(plan).max_positions
    if positions < needed:
        return [("policy.max_positions", f"{positions} is fewer than the prompt plus "
                                         f"{what} ({needed})")]
    return []


def meta_targets(config: Any) -> dict[str, str]:
    """The adapter targets of a configuration's model, built on the meta device (no weights,
    no random numbers drawn)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model: nn.Module = AutoModelForCausalLM.from_config(config)
    return adapter_targets(model)


def transformer_targets(plan: PolicyPlan) -> dict[str, str]:
    return meta_targets(config_for(plan))


POLICIES.register("transformer")(PolicyKind(
    build=build_transformer, fields=TransformerFields, size=transformer_size,
    summary="a GPT-2 or Llama causal LM built from its configuration over the plan's "
            "characters (needs the transformers extra); fields architecture, layers, heads, "
            "width, intermediate (llama), max_positions",
    plan_problems=transformer_problems, adapter_targets=transformer_targets,
    checkpointing=lambda plan: checkpointing_problem(config_for(plan))))
