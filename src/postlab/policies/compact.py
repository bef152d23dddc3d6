"""Compact forward passes for GPT-2 and Llama, over a ``transformers`` model's own parameters.

Why: at the sizes postlab trains on a CPU, one call of a ``transformers`` model spends more time
in Python (building masks and cache objects, dispatching through module hooks) than in
arithmetic. The functions here do the arithmetic of the library's eager attention path with
plain tensor operations, reading the very parameters the module holds (and calling the layers
that carry LoRA adapters, which add their term), so checkpoints,
``save_pretrained`` folders and optimisers see an ordinary ``transformers`` model. They agree
with the library's forward pass to float32 rounding (tests compare logits and gradients).

They also let training share work across a group: the completions of one prompt read that
prompt once (:func:`continuation_logits`), which a forward over whole sequences cannot express.

A configuration outside what a forward implements (another architecture, a GPT-2 with scaled
attention per layer, ...) gets ``None`` from :func:`compact_forward_for` and runs through the
library's own forward instead.

Attention is explicit matrix products and a softmax, never a fused kernel chosen at run time, so
the bits do not depend on which kernels a machine offers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from postlab.registry import Registry

#: One (keys, values) pair per layer, each (batch, kv_heads, time, head_dim).
KeyValues = list[tuple[torch.Tensor, torch.Tensor]]
#: What one transformer block returns: its output and the keys and values it cached.
Block = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class CompactForward:
    """A forward pass for one architecture family.

    ``run(model, ids, past, ops=LIBRARY_OPS, starts=None)`` reads ``ids`` (batch, time) after
    the cached ``past`` (or from position 0) and returns logits (batch, time, vocab) and the
    keys/values of past and ids. ``starts`` (batch,), when given, is where each sequence's
    real tokens begin: the left padding before it is hidden from every later token and
    positions count from it (:func:`padded_view`). ``supports(config)`` says whether it
    computes exactly what the library would.
    """

    supports: Callable[[Any], bool]
    run: Callable[..., tuple[torch.Tensor, KeyValues]]


@dataclass(frozen=True)
class Ops:
    """The operations a forward takes from outside plain arithmetic: the library's by default.

    The ensemble engine swaps in its own (:mod:`postlab.engines.ensemble.nets`): on CPU,
    torch's fused SiLU and tanh-GELU take a scalar path for the last elements of a tensor, and
    the embedding's ``padding_idx`` under ``torch.vmap`` spares only the first member's row,
    so with the library's operations one member's numbers would depend on its company.
    """

    gelu_tanh: Callable[[torch.Tensor], torch.Tensor]
    #: (ids, weight, padding_idx or None): rows of ``weight``; no gradient reaches the
    #: padding row
    embedding: Callable[[torch.Tensor, torch.Tensor, int | None], torch.Tensor]
    #: the library's written-out ``gelu_new`` (:func:`gelu_new`), or a form of it with the
    #: same bits forward and backward
    gelu_new: Callable[[torch.Tensor], torch.Tensor]
    #: Llama's gated MLP unit silu(gate) * up, from the gate's and the up projection's outputs
    gated: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    #: how one transformer block runs, ``block(layer, x)`` for ``layer(x) -> (x, keys,
    #: values)``: a plain call, or :func:`checkpointed` (the plan's gradient checkpointing)
    block: Callable[[Callable[[torch.Tensor], Block], torch.Tensor], Block] = (
        lambda layer, x: layer(x))


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """The library's ``gelu_new``, written out as it writes it (same operations, same bits)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                       * (x + 0.044715 * torch.pow(x, 3.0))))


class _Recomputed(torch.autograd.Function):
    """``function(*inputs)`` that keeps only its inputs for the backward pass and runs the
    same operations again there: its values and gradients are the plain call's bit for bit
    (the same operations, and the same backward graph, run on the same values), while the
    intermediate tensors autograd would keep are never held.

    Why: element-wise chains keep one tensor per step. ``gelu_new``'s intermediates (tanh's
    output, ``0.5 * x``, ``1 + tanh``, each as large as the MLP's hidden layer) were 450 of
    the 1,113 MiB of activations a GPT-2 124M update kept for backward, and Llama's
    ``silu(gate)`` is a third tensor beside the gate and up projections
    (``bench/bench_trl.py --breakdown``, 2026-12-07). Recomputing them is element-wise
    work, a few per cent of the MLP's matrix products."""

    @staticmethod
    def forward(ctx: Any, function: Callable[..., torch.Tensor],
                *inputs: torch.Tensor) -> torch.Tensor:
        ctx.function = function
        # the backward pass runs outside the forward's autocast: it is entered again there,
        # so an op autocast runs in float32 (pow, on CUDA) is recomputed in float32 too
        ctx.autocast = [(device, torch.get_autocast_dtype(device))
                        for device in AUTOCAST_DEVICES if torch.is_autocast_enabled(device)]
        ctx.save_for_backward(*inputs)
        return function(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        inputs = ctx.saved_tensors
        wanted = ctx.needs_input_grad[1:]
        with torch.enable_grad(), contextlib.ExitStack() as autocasts:
            for device in AUTOCAST_DEVICES:  # as the forward pass had them, on or off
                dtype = dict(ctx.autocast).get(device)
                autocasts.enter_context(torch.autocast(device, dtype=dtype,
                                                       enabled=dtype is not None))
            again = [x.detach().requires_grad_(want) for x, want in zip(inputs, wanted,
                                                                        strict=True)]
            found = iter(torch.autograd.grad(
                ctx.function(*again), [x for x in again if x.requires_grad], grad))
        return (None, *(next(found) if want else None for want in wanted))


#: The devices whose autocast state a recomputation restores.
AUTOCAST_DEVICES = ("cpu", "cuda")


def recomputed(function: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
    """``function(*inputs)``, recomputed in the backward pass where a gradient is wanted
    (:class:`_Recomputed`); a plain call otherwise."""
    if torch.is_grad_enabled() and any(x.requires_grad for x in inputs):
        return _Recomputed.apply(function, *inputs)
    return function(*inputs)


def silu_gate(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Llama's gated unit, as the library computes it: silu(gate) * up."""
    return F.silu(gate) * up


def checkpointed(layer: Callable[[torch.Tensor], Block], x: torch.Tensor) -> Block:
    """``layer(x)`` under activation checkpointing (Chen et al. 2016, arXiv:1604.06174) where
    a gradient is wanted: the block keeps only its input for the backward pass and runs again
    there, so an update holds one block's activations at a time instead of every block's,
    for one more forward pass of the policy. torch's non-reentrant checkpoint reruns the same
    operations on the same values and restores the forward's autocast, so the gradients are
    the plain call's bit for bit (``tests/policies/test_compact_forward.py`` trains both
    ways). A plain call under no-grad (decoding, the reference)."""
    if not torch.is_grad_enabled():
        return layer(x)
    return checkpoint(layer, x, use_reentrant=False)


LIBRARY_OPS = Ops(gelu_tanh=lambda x: F.gelu(x, approximate="tanh"),
                  embedding=lambda ids, weight, pad: F.embedding(ids, weight, padding_idx=pad),
                  gelu_new=lambda x: recomputed(gelu_new, x),
                  gated=lambda gate, up: recomputed(silu_gate, gate, up))
#: The library's operations with every block checkpointed (a plan's
#: ``gradient_checkpointing``).
CHECKPOINTED_OPS = dataclasses.replace(LIBRARY_OPS, block=checkpointed)


COMPACT_FORWARDS: Registry[CompactForward] = Registry("compact forward")


def compact_forward_for(model: Any) -> str | None:
    """The registered compact forward that computes this model's forward pass, if any."""
    return compact_forward_of(model.config)


def compact_forward_of(config: Any) -> str | None:
    """The registered compact forward for a model of this configuration, if any."""
    model_type = getattr(config, "model_type", None)
    if model_type in COMPACT_FORWARDS and COMPACT_FORWARDS[model_type].supports(config):
        return model_type
    return None


# --- shared pieces --------------------------------------------------------------------------

def _visible(queries: int, past: int, device: torch.device) -> torch.Tensor:
    """(queries, past + queries) booleans: every cached key, and causal among the new ones."""
    rows = torch.arange(queries, device=device)[:, None]
    cols = torch.arange(past + queries, device=device)[None, :]
    return cols <= rows + past


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor,
            scale: float) -> torch.Tensor:
    """softmax(q k^T * scale, hidden keys masked) v, the softmax in float32 as the library's
    eager path does; q (b, h, t, d), k and v (b, h, s, d) -> (b, t, h * d)."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~visible, float("-inf"))
    weights = scores.softmax(-1, dtype=torch.float32).to(v.dtype)
    out = torch.matmul(weights, v)
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


def leading_padding(ids: torch.Tensor, pad: int) -> torch.Tensor:
    """(batch,) the number of ``pad`` tokens each row starts with: where its text begins."""
    real = ids != pad
    return torch.where(real.any(1), real.int().argmax(1), ids.shape[1])


def padded_view(queries: int, past: int, starts: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """What left padding changes: (positions (batch, queries), visible (batch, 1, queries,
    past + queries)).

    A real token sees the real tokens up to itself and sits at its distance from the first
    one, so a padded prompt computes what it would alone, as a library's attention mask and
    position ids make it. A padding token sees only itself (a row with nothing visible would
    give NaN, and a NaN value times a zero weight is still NaN); its outputs are never read.
    """
    device = starts.device
    absolute = torch.arange(past, past + queries, device=device)
    keys = torch.arange(past + queries, device=device)
    positions = (absolute[None, :] - starts[:, None]).clamp(min=0)
    causal = keys[None, :] <= absolute[:, None]
    real_key = keys[None, None, :] >= starts[:, None, None]
    itself = keys[None, :] == absolute[:, None]
    visible = (causal[None] & real_key) | itself[None]
    return positions, visible[:, None]


class StaticKeyValues:
    """Keys and values held in buffers sized once for a decode's longest sequence: each
    step writes its keys in place and attention reads the filled prefix, instead of
    concatenating every layer's whole cache into a new tensor at every token (which copied
    the cache once per token and left the allocator a new size each time).

    A forward given one extends it in place and returns it (:func:`_extend`, ``finish``)."""

    def __init__(self, past: KeyValues, more: int) -> None:
        """``past``'s keys and values, with room for ``more`` positions after them."""
        self.length = past[0][0].shape[2]
        capacity = self.length + more
        self.buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
        for k, v in past:
            keys = k.new_empty(*k.shape[:2], capacity, k.shape[3])
            values = v.new_empty(*v.shape[:2], capacity, v.shape[3])
            keys[:, :, :self.length] = k
            values[:, :, :self.length] = v
            self.buffers.append((keys, values))

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``layer``'s new keys and values after the filled prefix; the whole prefix."""
        keys, values = self.buffers[layer]
        end = self.length + k.shape[2]
        if end > keys.shape[2]:
            raise ValueError(f"position {end} is past the cache's capacity {keys.shape[2]}")
        keys[:, :, self.length:end] = k
        values[:, :, self.length:end] = v
        return keys[:, :, :end], values[:, :, :end]

    def finish(self, time: int) -> StaticKeyValues:
        """Every layer has written ``time`` new positions."""
        self.length += time
        return self


def _extend(past: KeyValues | StaticKeyValues | None, layer: int, k: torch.Tensor,
            v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if past is None:
        return k, v
    if isinstance(past, StaticKeyValues):
        return past.write(layer, k, v)
    old_k, old_v = past[layer]
    return torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)


def _past_length(past: KeyValues | StaticKeyValues | None) -> int:
    if isinstance(past, StaticKeyValues):
        return past.length
    return 0 if past is None else past[0][0].shape[2]


def _finished(past: KeyValues | StaticKeyValues | None, cache: KeyValues,
              time: int) -> KeyValues | StaticKeyValues:
    """The cache a forward returns: its own list, or the static cache it extended."""
    return past.finish(time) if isinstance(past, StaticKeyValues) else cache


# --- GPT-2 ----------------------------------------------------------------------------------

def _gpt2_supports(config: Any) -> bool:
    return (config.activation_function in GPT2_ACTIVATIONS
            and config.scale_attn_weights and not config.scale_attn_by_inverse_layer_idx
            and not config.reorder_and_upcast_attn and not config.add_cross_attention
            and not getattr(config, "pruned_heads", None))


#: GPT-2 activations by configuration name: the tanh approximation of GELU, two ways.
GPT2_ACTIVATIONS: dict[str, Callable[[torch.Tensor, Ops], torch.Tensor]] = {
    "gelu_new": lambda x, ops: ops.gelu_new(x),
    "gelu_pytorch_tanh": lambda x, ops: ops.gelu_tanh(x),
}


def _adapted(layer: Any) -> bool:
    """Whether a ``peft`` adapter wraps ``layer``: then the forward calls it, so the
    adapter's term is added (or, with adapters disabled, the wrapped layer alone runs)."""
    return hasattr(layer, "base_layer")


def _conv1d(layer: Any, x: torch.Tensor) -> torch.Tensor:
    """GPT-2's ``Conv1D``: x W + b with W stored (in, out)."""
    if _adapted(layer):
        return layer(x)
    flat = torch.addmm(layer.bias, x.reshape(-1, x.shape[-1]), layer.weight)
    return flat.view(*x.shape[:-1], -1)


def _gpt2_run(model: Any, ids: torch.Tensor, past: KeyValues | None,
              ops: Ops = LIBRARY_OPS, starts: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, KeyValues]:
    body, config = model.transformer, model.config
    batch, time = ids.shape
    start = _past_length(past)
    heads = config.n_head
    head_dim = config.n_embd // heads
    scale = 1.0 / math.sqrt(head_dim)
    if start + time > config.n_positions:
        raise ValueError(f"positions up to {start + time} exceed the model's "
                         f"n_positions ({config.n_positions})")
    activation = GPT2_ACTIVATIONS[config.activation_function]
    if starts is None:
        visible = _visible(time, start, ids.device)
        placed = body.wpe.weight[start:start + time]
    else:
        positions, visible = padded_view(time, start, starts)
        placed = body.wpe.weight[positions]
    x = ops.embedding(ids, body.wte.weight, None) + placed
    cache: KeyValues = []
    for index, block in enumerate(body.h):

        def layer(x: torch.Tensor, index: int = index, block: Any = block) -> Block:
            h = F.layer_norm(x, x.shape[-1:], block.ln_1.weight, block.ln_1.bias,
                             block.ln_1.eps)
            qkv = _conv1d(block.attn.c_attn, h).view(batch, time, 3, heads, head_dim)
            q, k, v = (part.transpose(1, 2) for part in qkv.unbind(2))
            k, v = _extend(past, index, k, v)
            x = x + _conv1d(block.attn.c_proj, _attend(q, k, v, visible, scale))
            h = F.layer_norm(x, x.shape[-1:], block.ln_2.weight, block.ln_2.bias,
                             block.ln_2.eps)
            hidden = activation(_conv1d(block.mlp.c_fc, h), ops)
            return x + _conv1d(block.mlp.c_proj, hidden), k, v

        x, k, v = ops.block(layer, x)
        cache.append((k, v))
    x = F.layer_norm(x, x.shape[-1:], body.ln_f.weight, body.ln_f.bias, body.ln_f.eps)
    head = model.lm_head
    return (head(x) if _adapted(head) else F.linear(x, head.weight)), _finished(past, cache,
                                                                               time)


COMPACT_FORWARDS.register("gpt2")(CompactForward(supports=_gpt2_supports, run=_gpt2_run))


# --- Llama ----------------------------------------------------------------------------------

#: RoPE types whose frequencies depend on the sequence length seen so far: reading a prompt
#: and its completions in separate calls could then differ from reading them at once.
LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")


def _llama_supports(config: Any) -> bool:
    scaling = getattr(config, "rope_scaling", None) or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    return (config.hidden_act == "silu" and getattr(config, "pretraining_tp", 1) == 1
            and rope_type not in LENGTH_DEPENDENT_ROPE)


def _rms_norm(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """The library's RMSNorm: normalised in float32, scaled in the input's dtype."""
    wide = x.to(torch.float32)
    wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * wide.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def _llama_run(model: Any, ids: torch.Tensor, past: KeyValues | None,
               ops: Ops = LIBRARY_OPS, starts: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, KeyValues]:
    body, config = model.model, model.config
    batch, time = ids.shape
    start = _past_length(past)
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    if starts is None:
        visible = _visible(time, start, ids.device)
        positions = torch.arange(start, start + time, device=ids.device)[None]
    else:
        positions, visible = padded_view(time, start, starts)
    # The padding row gets no gradient, as in the library's embedding module.
    x = ops.embedding(ids, body.embed_tokens.weight, body.embed_tokens.padding_idx)
    # The model's own rotary module, so every RoPE variant it supports comes out the same.
    cos, sin = body.rotary_emb(x, positions)
    cos, sin = cos[:, None], sin[:, None]
    cache: KeyValues = []
    repeat = heads // kv_heads
    for index, decoder in enumerate(body.layers):

        def layer(x: torch.Tensor, index: int = index, decoder: Any = decoder) -> Block:
            attention = decoder.self_attn
            h = _rms_norm(decoder.input_layernorm, x)
            q = attention.q_proj(h).view(batch, time, heads, head_dim).transpose(1, 2)
            k = attention.k_proj(h).view(batch, time, kv_heads, head_dim).transpose(1, 2)
            v = attention.v_proj(h).view(batch, time, kv_heads, head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            k, v = _extend(past, index, k, v)
            keys = k.repeat_interleave(repeat, dim=1) if repeat > 1 else k
            values = v.repeat_interleave(repeat, dim=1) if repeat > 1 else v
            x = x + attention.o_proj(_attend(q, keys, values, visible, attention.scaling))
            h = _rms_norm(decoder.post_attention_layernorm, x)
            mlp = decoder.mlp
            return x + mlp.down_proj(ops.gated(mlp.gate_proj(h), mlp.up_proj(h))), k, v

        x, k, v = ops.block(layer, x)
        cache.append((k, v))
    return model.lm_head(_rms_norm(body.norm, x)), _finished(past, cache, time)


COMPACT_FORWARDS.register("llama")(CompactForward(supports=_llama_supports, run=_llama_run))


# --- prefix sharing -------------------------------------------------------------------------

def _expand(cache: KeyValues, index: torch.Tensor) -> KeyValues:
    return [(k[index], v[index]) for k, v in cache]


def _starts(ids: torch.Tensor, pad: int | None) -> dict[str, torch.Tensor]:
    """``run``'s keyword for hidden left padding (none when ``pad`` is None)."""
    return {} if pad is None else {"starts": leading_padding(ids, pad)}


def start_logits(forward: CompactForward, model: Any, prompts: torch.Tensor,
                 pad: int | None = None, ops: Ops = LIBRARY_OPS
                 ) -> tuple[torch.Tensor, KeyValues]:
    """Next-token logits after each prompt and the cache, reading each distinct prompt once;
    with ``pad``, each prompt's leading ``pad`` tokens are hidden (:func:`padded_view`)."""
    unique, inverse = torch.unique(prompts, dim=0, return_inverse=True)
    if unique.shape[0] == prompts.shape[0]:
        logits, cache = forward.run(model, prompts, None, ops, **_starts(prompts, pad))
        return logits[:, -1], cache
    logits, cache = forward.run(model, unique, None, ops, **_starts(unique, pad))
    return logits[inverse, -1], _expand(cache, inverse)


def continuation_logits(forward: CompactForward, model: Any, prompts: torch.Tensor,
                        tokens: torch.Tensor, pad: int | None = None,
                        ops: Ops = LIBRARY_OPS) -> torch.Tensor:
    """Logits (batch, len(tokens), vocab) for each of ``tokens`` given its prompt and the
    tokens before it. Completions that share a prompt share its keys and values, and
    gradients flow back into that one reading. ``pad`` as for :func:`start_logits`."""
    unique, inverse = torch.unique(prompts, dim=0, return_inverse=True)
    if unique.shape[0] == prompts.shape[0]:
        logits, _ = forward.run(model, torch.cat([prompts, tokens[:, :-1]], dim=1), None,
                                ops, **_starts(prompts, pad))
        return logits[:, prompts.shape[1] - 1:]
    prompt_logits, cache = forward.run(model, unique, None, ops, **_starts(unique, pad))
    first = prompt_logits[inverse, -1:]
    if tokens.shape[1] == 1:
        return first
    rest, _ = forward.run(model, tokens[:, :-1], _expand(cache, inverse), ops,
                          **_starts(prompts, pad))
    return torch.cat([first, rest], dim=1)
