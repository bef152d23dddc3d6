"""postlab's CPU Adam against torch.optim.Adam, bit for bit, and what it saves importing."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from postlab.engines.optim import Adam, adam_for


def _tensors(seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shapes = [(7,), (3, 5), (2, 4, 6), (1,)]
    return [torch.randn(s, generator=generator).requires_grad_(True) for s in shapes]


@pytest.mark.parametrize("lr", [1e-3, 3e-2, 0.5])
def test_updates_equal_torchs_adam_bit_for_bit(lr: float) -> None:
    ours, theirs = _tensors(0), _tensors(0)
    mine, torchs = Adam(ours, lr), torch.optim.Adam(theirs, lr=lr)
    generator = torch.Generator().manual_seed(1)
    for step in range(60):
        mine.zero_grad()
        torchs.zero_grad()
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            # the last tensor skips every third step: no gradient, no step of its own
            if i == len(ours) - 1 and step % 3 == 2:
                continue
            # gradients of every size, tiny ones included, where eps matters
            grad = torch.randn(a.shape, generator=generator) * 10.0 ** (step % 7 - 5)
            a.grad, b.grad = grad.clone(), grad.clone()
        mine.step()
        torchs.step()
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a, b), f"step {step + 1}"
    assert mine._state[-1][0] == 40  # 60 steps, every third skipped


def test_a_step_matches_adams_formula_by_hand() -> None:
    """One step from zero moments moves each weight by lr * g / (|g| + eps), about lr."""
    weight = torch.tensor([1.0, -2.0, 0.0], requires_grad=True)
    optimizer = Adam([weight], 0.1)
    weight.grad = torch.tensor([0.5, -4.0, 0.0])
    optimizer.step()
    # first moment 0.1 g, bias-corrected g; second 0.001 g^2, bias-corrected g^2
    expected = [1.0 - 0.1 * 0.5 / (0.5 + 1e-8), -2.0 + 0.1 * 4.0 / (4.0 + 1e-8), 0.0]
    assert weight.tolist() == pytest.approx(expected, rel=1e-6, abs=1e-7)
    # a second, equal gradient: both moments stay at g and g^2 once corrected
    weight.grad = torch.tensor([0.5, -4.0, 0.0])
    optimizer.step()
    assert weight.tolist() == pytest.approx([0.8, -1.8, 0.0], rel=1e-5)


def test_zero_grad_drops_gradients() -> None:
    weight = torch.ones(2, requires_grad=True)
    weight.grad = torch.ones(2)
    Adam([weight], 0.1).zero_grad()
    assert weight.grad is None


def test_cpu_tensors_get_postlabs_adam() -> None:
    assert isinstance(adam_for([torch.ones(2, requires_grad=True)], 0.1), Adam)


def test_training_does_not_import_torchs_compiler_stack() -> None:
    """The reason the optimizer is written out: an SFT and an RL step of the teaching GRU in
    a fresh process leave torch._dynamo unimported."""
    program = """
import sys
from postlab.engines.train import reinforce, supervised
from postlab.plan.frozen import teaching_plan
from postlab.plan.schema import Plan
from postlab.policies.base import build_policy
plan = Plan.of(teaching_plan())
model = build_policy(plan)
supervised(model, plan, 11, steps=2)
reinforce(model, model.reference_policy(), plan.replace(rl_steps=1), 11, "strict")
print("torch._dynamo" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False", done.stderr
