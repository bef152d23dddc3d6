"""Reward contracts on token tensors, for many members' answers at once.

Scoring rows one by one in Python would cost more than the whole batched forward pass, so the
contracts that have a tensor form register it in :data:`TENSOR_CONTRACTS`; it must accept
exactly what the contract's own function accepts (a test checks both on every answer of
a run and on random token strings). A contract without one is scored row by row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from postlab.registry import Registry


@dataclass(frozen=True)
class Answers:
    """Decoded answers as tensors: ``digits`` [..., T] holds each visible character's digit
    value (-1 for a non-digit), ``visible`` [..., T] marks the characters before EOS, and
    ``terminated`` [...] says whether EOS was emitted. ``expected`` [..., W] is the task's
    answer as digits, right-aligned and padded on the left with -1; ``expected_length`` its
    number of digits."""

    digits: torch.Tensor
    visible: torch.Tensor
    terminated: torch.Tensor
    expected: torch.Tensor
    expected_length: torch.Tensor


TensorContract = Callable[[Answers], torch.Tensor]
TENSOR_CONTRACTS: Registry[TensorContract] = Registry("tensor contract")


def _length(answers: Answers) -> torch.Tensor:
    return answers.visible.sum(-1)


def _ends_with_expected(answers: Answers) -> torch.Tensor:
    """The visible digits end with the expected digits (visible characters come first, so the
    last visible position is length - 1)."""
    length = _length(answers)
    width = answers.expected.shape[-1]
    time = answers.digits.shape[-1]
    ok = length >= answers.expected_length
    for back in range(width):  # compare the answer's digit `back` places from its end
        want = answers.expected[..., width - 1 - back]
        position = (length - 1 - back).clamp(min=0, max=time - 1)
        have = answers.digits.gather(-1, position[..., None]).squeeze(-1)
        ok &= (want < 0) | (have == want)
    return ok


@TENSOR_CONTRACTS.register("strict")
def strict(answers: Answers) -> torch.Tensor:
    """Terminated, non-empty, digits only, value equal: the expected digits at the end and
    only zeros before them."""
    length = _length(answers)
    all_digits = ((answers.digits >= 0) | ~answers.visible).all(-1)
    positions = torch.arange(answers.digits.shape[-1], device=length.device)
    leading = positions < (length - answers.expected_length)[..., None]
    zeros_before = ((answers.digits == 0) | ~leading).all(-1)
    return (answers.terminated & (length >= 1) & all_digits & _ends_with_expected(answers)
            & zeros_before)


@TENSOR_CONTRACTS.register("format")
def well_formed(answers: Answers) -> torch.Tensor:
    """Terminated, non-empty and digits only, whatever the value (a control)."""
    return (answers.terminated & (_length(answers) >= 1)
            & ((answers.digits >= 0) | ~answers.visible).all(-1))


@TENSOR_CONTRACTS.register("exact")
def exact(answers: Answers) -> torch.Tensor:
    """Terminated and exactly the expected digits."""
    return (answers.terminated & (_length(answers) == answers.expected_length)
            & ((answers.digits >= 0) | ~answers.visible).all(-1)
            & _ends_with_expected(answers))


@TENSOR_CONTRACTS.register("substring")
def substring(answers: Answers) -> torch.Tensor:
    """The expected digits appear somewhere among the visible characters."""
    time = answers.digits.shape[-1]
    width = answers.expected.shape[-1]
    length = _length(answers)
    found = torch.zeros_like(answers.terminated)
    for start in range(time):
        ok = start + answers.expected_length <= length
        for offset in range(width):
            # the expected digit `offset` places into the answer's own digits
            index = width - answers.expected_length + offset
            within = offset < answers.expected_length
            want = answers.expected.gather(-1, index.clamp(max=width - 1)[..., None]).squeeze(-1)
            where = min(start + offset, time - 1)
            ok &= ~within | ((start + offset < time) & (answers.digits[..., where] == want))
        found |= ok
    return found
