"""Many character GRUs as one computation: every weight stacked on a leading member axis.

Member ``m``'s slice of each tensor is exactly the ``state_dict`` of a
:class:`~postlab.policies.gru.CharGRU`, so members are built from, and saved as, ordinary
checkpoints. The forward pass is the GRU's own equations written with batched matrix
products over members; each member's numbers depend on its own slice alone (one member's
product never mixes with another's), which is what lets a member train the same bits alone
or in company on one kind of machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from postlab.policies.gru import MASKED_LOGIT

#: The CharGRU parameters, in its state_dict's order; ``allowed`` is a shared buffer.
PARAMETERS = ("embed.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0",
              "rnn.bias_hh_l0", "head.weight", "head.bias")


def stack(states: Sequence[Mapping[str, torch.Tensor]], device: str | torch.device = "cpu"
          ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Member state_dicts -> stacked parameters (each [members, ...]) and the mask of
    characters a member may emit (the same for all)."""
    params = {name: torch.stack([s[name] for s in states]).to(device).contiguous()
              for name in PARAMETERS}
    allowed = states[0]["allowed"].to(device)
    return params, allowed


def unstack(params: Mapping[str, torch.Tensor], allowed: torch.Tensor,
            member: int) -> dict[str, torch.Tensor]:
    """One member's state_dict, loadable into a CharGRU."""
    state: dict[str, Any] = {name: params[name][member].detach().cpu().clone()
                             for name in PARAMETERS}
    state["allowed"] = allowed.detach().cpu().clone()
    return state


class _Sigmoid(torch.autograd.Function):
    """1 / (1 + exp(-x)) from exp and exactly rounded arithmetic: torch's fused sigmoid takes
    another code path for the last elements of a tensor, so a member's bits would depend on
    how many others share the tensor. The gradient is y (1 - y) from the output, as torch's
    own: differentiating the formula would give 0 * inf = NaN below x = -88."""

    #: it runs inside ``torch.vmap`` too (the transformer members' activations)
    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return 1 / (1 + torch.exp(-x))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * (y * (1 - y))


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    return _Sigmoid.apply(x)


def _cell(params: Mapping[str, torch.Tensor], projected: torch.Tensor,
          hidden: torch.Tensor) -> torch.Tensor:
    """One GRU step for every member and sequence: ``projected`` is the input's projection
    plus its bias [members, batch, 3H]; ``hidden`` is [members, batch, H]."""
    recurrent = torch.baddbmm(params["rnn.bias_hh_l0"][:, None, :], hidden,
                              params["rnn.weight_hh_l0"].transpose(1, 2))
    size = hidden.shape[-1]
    # split, not sliced: a slice's gradient is a zero tensor of the whole width with the
    # slice copied in, then added up; a split's is one concatenation (same values, a
    # fraction of the memory traffic)
    input_gates, input_new = projected.split([2 * size, size], dim=-1)
    recurrent_gates, recurrent_new = recurrent.split([2 * size, size], dim=-1)
    # the reset and update gates in one pass over their 2H columns
    reset, update = sigmoid(input_gates + recurrent_gates).split(size, dim=-1)
    new = torch.tanh(input_new + reset * recurrent_new)
    return new + update * (hidden - new)  # (1 - z) n + z h, in three operations


def _project(params: Mapping[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Embeddings of ``tokens`` [members, batch, time] projected for the GRU's three gates:
    [members, batch, time, 3H]."""
    members, batch, time = tokens.shape
    rows = torch.arange(members, device=tokens.device)[:, None, None]
    embedded = params["embed.weight"][rows, tokens]  # [members, batch, time, E]
    flat = embedded.reshape(members, batch * time, -1)
    projected = torch.baddbmm(params["rnn.bias_ih_l0"][:, None, :], flat,
                              params["rnn.weight_ih_l0"].transpose(1, 2))
    return projected.reshape(members, batch, time, -1)


def logits_of(params: Mapping[str, torch.Tensor], allowed: torch.Tensor,
              hidden: torch.Tensor) -> torch.Tensor:
    """Next-character logits from GRU outputs [members, batch, (time,) H]; characters a
    member may not emit get the GRU's masked logit."""
    shape = hidden.shape
    flat = hidden.reshape(shape[0], -1, shape[-1])
    out = torch.baddbmm(params["head.bias"][:, None, :], flat,
                        params["head.weight"].transpose(1, 2))
    return out.reshape(*shape[:-1], -1).masked_fill(~allowed, MASKED_LOGIT)


def forward(params: Mapping[str, torch.Tensor], allowed: torch.Tensor,
            tokens: torch.Tensor) -> torch.Tensor:
    """Logits at every position: tokens [members, batch, time] -> [members, batch, time, V]."""
    logits, _ = run(params, allowed, tokens, None)
    return logits


def run(params: Mapping[str, torch.Tensor], allowed: torch.Tensor, tokens: torch.Tensor,
        hidden: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Read ``tokens`` after state ``hidden`` (None: zeros); logits at every position and the
    final state, the GRU's cache."""
    members, batch = tokens.shape[:2]
    size = params["rnn.weight_hh_l0"].shape[-1]
    projected = _project(params, tokens)
    if hidden is None:
        hidden = projected.new_zeros(members, batch, size)
    outputs = []
    # unbound, not indexed: each index's gradient would be a zero tensor of all positions
    for step_input in projected.unbind(dim=2):
        hidden = _cell(params, step_input, hidden)
        outputs.append(hidden)
    return logits_of(params, allowed, torch.stack(outputs, dim=2)), hidden
