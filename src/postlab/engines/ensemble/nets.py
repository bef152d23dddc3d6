"""Policies as stacked members: what the ensemble engine needs of a policy kind.

The engine trains members through a :class:`Net` and never looks inside one, as the exact
engine never looks inside a :class:`~postlab.policies.base.Policy`. A net holds what members
share (tokenizer, answer mask, the model's structure) and computes over a dict of stacked
parameters, each ``[members, ...]``, in which member ``m``'s slices are an ordinary
checkpoint of the kind: members are built from, and saved as, the exact engine's weights.

``NETS`` maps a policy kind to how its net is built:

* ``gru``: the character GRU, written out with batched matrix products (:mod:`.stacked`).
* ``transformer`` and ``pretrained``: a ``transformers`` model with a compact forward pass
  (:mod:`postlab.policies.compact`), mapped over members with ``torch.vmap`` and
  ``torch.func.functional_call``. The few operations whose CPU kernels treat a tensor's last
  elements differently, or whose batching rule mixes members, are replaced by
  :data:`MEMBER_OPS`, so a member's bits do not depend on its company here either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

from postlab.engines.ensemble import stacked
from postlab.errors import UserError
from postlab.policies.base import Policy, Tokenizer, build_policy, policy_kind
from postlab.policies.compact import COMPACT_FORWARDS, KeyValues, Ops, gelu_new
from postlab.policies.gru import MASKED_LOGIT
from postlab.registry import Registry

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

#: Stacked parameters by name, each [members, ...].
Params = dict[str, torch.Tensor]


class Net(Protocol):
    """Many models of one kind as one computation over stacked parameters."""

    kind: str
    tokenizer: Tokenizer
    #: the token ids a member may emit (bool [V]); the others get the masked logit
    allowed: torch.Tensor

    def stack(self, states: Sequence[Mapping[str, torch.Tensor]]) -> Params:
        """Members' state_dicts -> stacked trainable parameters on the net's device."""

    def unstack(self, params: Mapping[str, torch.Tensor], member: int) -> dict[str, torch.Tensor]:
        """One member's full state_dict (buffers included), loadable into the kind's policy."""

    def run(self, params: Mapping[str, torch.Tensor], tokens: torch.Tensor,
            cache: Any) -> tuple[torch.Tensor, Any]:
        """Read ``tokens`` [members, batch, time] after ``cache`` (None: from the start);
        masked logits [members, batch, time, V] and the cache after them."""

    def repeat(self, cache: Any, times: int) -> Any:
        """The cache with each sequence repeated ``times`` times in a row (dim 1)."""


class GRUNet:
    """Character GRUs (:mod:`.stacked`); the cache is the hidden state [members, batch, H]."""

    kind = "gru"

    def __init__(self, template: Policy, device: torch.device) -> None:
        self.tokenizer = template.tokenizer
        self.device = device
        self.allowed = template.state_dict()["allowed"].to(device)

    def stack(self, states: Sequence[Mapping[str, torch.Tensor]]) -> Params:
        params, _ = stacked.stack(states, self.device)
        return params

    def unstack(self, params: Mapping[str, torch.Tensor], member: int) -> dict[str, torch.Tensor]:
        return stacked.unstack(params, self.allowed, member)

    def run(self, params: Mapping[str, torch.Tensor], tokens: torch.Tensor,
            cache: Any) -> tuple[torch.Tensor, Any]:
        return stacked.run(params, self.allowed, tokens, cache)

    def repeat(self, cache: Any, times: int) -> Any:
        return cache.repeat_interleave(times, dim=1)


# --- transformers -----------------------------------------------------------------------------

def _member_gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh-GELU from tanh and arithmetic (torch's fused form has a scalar tail on CPU)."""
    return gelu_new(x)


def _member_silu(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x) with the exp-based sigmoid (torch's fused SiLU has a scalar tail)."""
    return x * stacked.sigmoid(x)


def _member_embedding(ids: torch.Tensor, weight: torch.Tensor,
                      padding_idx: int | None) -> torch.Tensor:
    """Rows of ``weight``; the padding row is read through a detached copy, so it gets no
    gradient in every member (under vmap, ``padding_idx`` protects only the first member's
    row). The values are the weight's own: w * 1 + (w * 0) is w."""
    if padding_idx is None:
        return nn.functional.embedding(ids, weight)
    keep = torch.ones(weight.shape[0], 1, dtype=weight.dtype, device=weight.device)
    keep[padding_idx] = 0
    return nn.functional.embedding(ids, weight * keep + (weight * (1 - keep)).detach())


#: The operations a transformer member runs with: none depends on its company.
MEMBER_OPS = Ops(gelu_tanh=_member_gelu_tanh, embedding=_member_embedding,
                 gelu_new=gelu_new, gated=lambda gate, up: _member_silu(gate) * up)


class _Forward(nn.Module):
    """The policy's network behind its compact forward, for ``functional_call``: parameter
    names are the policy's own state_dict keys."""

    def __init__(self, policy: Policy, compact: str) -> None:
        super().__init__()
        self.model = policy.model
        self.compact = compact

    def forward(self, ids: torch.Tensor, past: KeyValues | None) -> tuple[torch.Tensor,
                                                                           KeyValues]:
        return COMPACT_FORWARDS[self.compact].run(self.model, ids, past, MEMBER_OPS)


class TransformerNet:
    """``transformers`` causal LMs with a compact forward; the cache is the keys and values
    of every layer, each [members, batch, key/value heads, time, head_dim]."""

    def __init__(self, template: Policy, device: torch.device) -> None:
        compact = getattr(template, "compact", None)
        if compact is None:
            raise UserError(f"the ensemble engine cannot train this {template.kind!r} policy: "
                            "its configuration has no compact forward pass (GPT-2 and Llama "
                            "configurations that postlab computes itself); use --engine exact")
        self.kind = template.kind
        self.tokenizer = template.tokenizer
        self.device = device
        template = template.to(device)
        self.forward = _Forward(template, compact)
        self.allowed = template.state_dict()["allowed"]
        # Tied weights (GPT-2's head and token embedding) are one parameter: stacked once,
        # saved under every name the policy's state_dict gives it.
        self.names = [name for name, _ in template.named_parameters()]
        canonical = {id(p): name for name, p in template.named_parameters()}
        self.alias = {name: canonical[id(p)]
                      for name, p in template.named_parameters(remove_duplicate=False)}
        #: every state_dict key in order; buffers (the answer mask, RoPE frequencies, ...)
        #: are the same for every member
        self.layout = {name: None if name in self.alias else value.detach()
                       for name, value in template.state_dict().items()}
        self._step = torch.vmap(self._one)
        self._first = torch.vmap(lambda p, ids: self._one(p, ids, None))

    def _one(self, params: Mapping[str, torch.Tensor], ids: torch.Tensor,
             past: KeyValues | None) -> tuple[torch.Tensor, KeyValues]:
        logits, cache = torch.func.functional_call(self.forward, dict(params), (ids, past))
        return logits.masked_fill(~self.allowed, MASKED_LOGIT), cache

    def stack(self, states: Sequence[Mapping[str, torch.Tensor]]) -> Params:
        return {name: torch.stack([s[name] for s in states]).to(self.device).contiguous()
                for name in self.names}

    def unstack(self, params: Mapping[str, torch.Tensor], member: int) -> dict[str, torch.Tensor]:
        own = {name: params[name][member].detach().cpu().clone() for name in self.names}
        return {name: own[self.alias[name]] if buffer is None else buffer.cpu().clone()
                for name, buffer in self.layout.items()}

    def run(self, params: Mapping[str, torch.Tensor], tokens: torch.Tensor,
            cache: Any) -> tuple[torch.Tensor, Any]:
        if cache is None:
            return self._first(dict(params), tokens)
        return self._step(dict(params), tokens, cache)

    def repeat(self, cache: Any, times: int) -> Any:
        return [(k.repeat_interleave(times, dim=1), v.repeat_interleave(times, dim=1))
                for k, v in cache]


#: How each policy kind's net is built from a template policy of the plan.
NETS: Registry[Callable[[Policy, torch.device], Net]] = Registry("ensemble net")
NETS.register("gru")(GRUNet)
NETS.register("transformer")(TransformerNet)
NETS.register("pretrained")(TransformerNet)


#: The policy kinds that are ``transformers`` models.
TRANSFORMER_KINDS = ("transformer", "pretrained")


def configuration(plan: Plan, check_folder: bool = True) -> Any:
    """The ``transformers`` configuration of a transformer plan's model, without its weights.
    A pretrained folder is refused in one line if its hash differs (unless ``check_folder``
    is off: the caller checked it already) or it holds no configuration ``transformers``
    reads."""
    from postlab.policies.pretrained import checked_folder, pretrained_fields
    from postlab.policies.transformer import config_for, require_transformers

    require_transformers()
    if policy_kind(plan) == "transformer":
        return config_for(plan)
    from transformers import AutoConfig

    folder = checked_folder(plan) if check_folder else Path(pretrained_fields(plan).path or "")
    try:
        return AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"policy.path {folder}: no model configuration transformers can "
                        f"read ({first[:160]})") from None


def configuration_problem(plan: Plan) -> str | None:
    """Why the plan's transformer configuration has no member form, read from the
    configuration alone (no weights); None when it has one, or the policy is no transformer."""
    kind = policy_kind(plan)
    if kind not in TRANSFORMER_KINDS:
        return None
    from postlab.policies.pretrained import pretrained_fields

    if kind == "pretrained" and pretrained_fields(plan).gguf is not None:
        return ("a GGUF chat model (its prompts' left padding is hidden from attention, "
                "which the ensemble's members do not compute; use --engine exact)")
    config = configuration(plan)
    name = getattr(config, "model_type", None)
    if name in COMPACT_FORWARDS and COMPACT_FORWARDS[name].supports(config):
        return None
    return (f"the {kind!r} policy's {name} configuration (the ensemble computes the GPT-2 and "
            "Llama configurations postlab's compact forward covers; use --engine exact)")


def net_for(plan: Plan, device: str | torch.device) -> Net:
    """The plan's policy as an ensemble net on ``device``; building its template leaves
    torch's global random state as it was."""
    kind = policy_kind(plan)
    if kind not in NETS:
        raise UserError(f"the ensemble engine cannot train the {kind!r} policy (it trains "
                        f"{', '.join(NETS.names())}); use --engine exact")
    with torch.random.fork_rng(devices=[]):
        template = build_policy(plan)
    return NETS[kind](template, torch.device(device))
