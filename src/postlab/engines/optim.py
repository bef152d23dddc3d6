"""Adam for CPU training, written out so that training never imports torch's compiler stack.

Every ``torch.optim`` optimizer imports ``torch._dynamo`` on first use (its parameter groups,
``zero_grad`` and ``step`` are wrapped for ``torch.compile``). On the 2-core development
machine that import took 4.8 s of CPU and about 70 MiB on 2026-12-04 (1.6 s on a quicker
day), against 3.6-5.2 s for importing torch itself: paid by the command's main process and by
the worker server before the first task could start, for a plan whose whole reference run
takes 13.7-38 s there. For CPU tensors ``torch.optim.Adam`` takes its single-tensor path (its
multi-tensor and fused kernels are for accelerators), and :class:`Adam` is that path's
arithmetic, op for op, for the settings postlab trains with (no weight decay, no AMSGrad),
so the updates are the same bits: ``tests/engines/test_optim.py`` checks them against
``torch.optim.Adam``, and the conformance tests check whole runs against the reference, which
uses ``torch.optim.Adam``. Off the CPU, :func:`adam_for` leaves the work to
``torch.optim.Adam`` and its kernels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch

#: torch.optim.Adam's defaults, which postlab's plans do not change.
BETAS = (0.9, 0.999)
EPS = 1e-8


class Optimizer(Protocol):
    """What the engines ask of an optimizer."""

    def zero_grad(self) -> None: ...

    def step(self) -> None: ...


class Adam:
    """Adam over CPU tensors with ``torch.optim.Adam``'s single-tensor arithmetic.

    A tensor's moments are created at its first step with a gradient; a tensor whose
    gradient is None is skipped, its step count untouched, as torch does.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float) -> None:
        self.params = list(params)
        self.lr = float(lr)
        # per tensor: [steps taken, first moment, second moment]
        self._state: list[list | None] = [None] * len(self.params)

    def zero_grad(self) -> None:
        """Drop the gradients (``torch.optim``'s default ``set_to_none=True``)."""
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = BETAS
        for i, param in enumerate(self.params):
            grad = param.grad
            if grad is None:
                continue
            state = self._state[i]
            if state is None:
                state = self._state[i] = [
                    0, torch.zeros_like(param, memory_format=torch.preserve_format),
                    torch.zeros_like(param, memory_format=torch.preserve_format)]
            state[0] += 1
            # torch counts steps in a float32 tensor and reads it back as a Python float;
            # exact for any count a run reaches (below 2**24)
            step = float(state[0])
            exp_avg, exp_avg_sq = state[1], state[2]
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            step_size = self.lr / bias_correction1
            bias_correction2_sqrt = bias_correction2 ** 0.5
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(EPS)
            param.addcdiv_(exp_avg, denom, value=-step_size)


def adam_for(params: Iterable[torch.Tensor], lr: float) -> Optimizer:
    """:class:`Adam` where every tensor is on the CPU, ``torch.optim.Adam`` elsewhere."""
    params = list(params)
    if all(p.device.type == "cpu" for p in params):
        return Adam(params, lr)
    return torch.optim.Adam(params, lr=lr)
