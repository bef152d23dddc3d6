"""Per-member gradient clipping and Adam over stacked parameters.

Each member's gradient norm is taken over its own slices only, and each member steps with
its own learning rate, so a member's update is what a lone model's would be: what
``torch.nn.utils.clip_grad_norm_`` then ``torch.optim.Adam`` (default betas, eps, no weight
decay) compute, written so the member axis is never reduced over.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

BETAS = (0.9, 0.999)
EPS = 1e-8
#: Added to the norm before dividing, as torch's clip_grad_norm_ does.
CLIP_EPS = 1e-6


def _expand(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-member vector [members] shaped to broadcast against a stacked tensor."""
    return values.reshape(-1, *([1] * (like.dim() - 1)))


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
        tensor.grad.mul_(_expand(scale, tensor.grad))
    return norms


class StackedAdam:
    """Adam over stacked parameters with one learning rate per member."""

    def __init__(self, params: Mapping[str, torch.Tensor], lr: torch.Tensor) -> None:
        self.params = dict(params)
        self.lr = lr
        self.steps = 0
        self.first = {name: torch.zeros_like(p) for name, p in self.params.items()}
        self.second = {name: torch.zeros_like(p) for name, p in self.params.items()}

    def zero_grad(self) -> None:
        for tensor in self.params.values():
            tensor.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        beta1, beta2 = BETAS
        correction1 = 1 - beta1 ** self.steps
        correction2 = 1 - beta2 ** self.steps
        for name, tensor in self.params.items():
            grad = tensor.grad
            assert grad is not None
            first, second = self.first[name], self.second[name]
            first.mul_(beta1).add_(grad, alpha=1 - beta1)
            second.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denominator = (second.sqrt() / correction2 ** 0.5).add_(EPS)
            step_size = _expand(self.lr / correction1, tensor)
            tensor.sub_(step_size * first / denominator)
