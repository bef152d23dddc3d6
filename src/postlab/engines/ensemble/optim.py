"""Per-member gradient clipping over stacked parameters.

``torch.nn.utils.clip_grad_norm_`` takes one norm over every tensor it is given, which over
stacked members would mix them; here each member's norm is taken over its own slices only and
each member is scaled by its own factor, as ``clip_grad_norm_`` scales a lone model (the same
formula: scale = min(1, max_norm / (norm + 1e-6))). The optimizer itself is the exact
engine's Adam (:func:`postlab.engines.ensemble.engine.optimizer_for`), whose update is
elementwise.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from postlab.rl.objective import broadcast_members

#: Added to the norm before dividing, as torch's clip_grad_norm_ does.
CLIP_EPS = 1e-6


def clip_per_member(params: Mapping[str, torch.Tensor], max_norm: torch.Tensor) -> torch.Tensor:
    """Scale each member's gradients so their joint L2 norm is at most ``max_norm[m]``;
    returns the norms before clipping [members]."""
    squares = None
    for tensor in params.values():
        grad = tensor.grad
        assert grad is not None
        part = (grad * grad).reshape(grad.shape[0], -1).sum(-1)
        squares = part if squares is None else squares + part
    assert squares is not None
    norms = squares.sqrt()
    scale = (max_norm / (norms + CLIP_EPS)).clamp(max=1.0)
    for tensor in params.values():
        assert tensor.grad is not None
        tensor.grad.mul_(broadcast_members(scale, tensor.grad))
    return norms
