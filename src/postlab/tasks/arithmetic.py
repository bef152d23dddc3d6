"""Arithmetic tasks: what a question looks like, its verifiable answer, and its operand pairs.

A task turns an operand pair (a, b) into a prompt and an integer answer. Rows keep only the
pair, so every consumer (contracts, metrics, reports) asks the plan's task for the answer.
Held-out splits are made of unordered pairs, so both orders of a pair fall in one split; that
needs a commutative operation, which every task here is.

A task also names the reward contracts its answers are judged by (:attr:`Task.contracts`):
every metric, table, figure and progress line reports those, plus any other contract the
plan's arms train on. The registry and the surface every task shares are in
:mod:`postlab.tasks.registry`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from postlab.tasks.registry import TaskPlan

DIGITS = "0123456789"

#: The arithmetic tasks' contracts: the strict rule first (it decides "correct", coverage and
#: pass@k), then the gameable one whose excess acceptance is the reward hacking gap.
ARITHMETIC_CONTRACTS: tuple[str, ...] = ("strict", "substring")


@dataclass(frozen=True)
class Task:
    """An arithmetic task and the contracts that judge it.

    ``contracts[0]`` is the reference rule: "correct", coverage and pass@k use it. When there
    is a second, the reward hacking gap is its acceptance minus the first's.
    """

    name: str
    symbol: str
    combine: Callable[[int, int], int]
    operand_digits: int
    contracts: tuple[str, ...] = ARITHMETIC_CONTRACTS
    answer_kind = "integer"
    answer_characters = DIGITS

    def answer(self, pair: Sequence[int]) -> int:
        return self.combine(pair[0], pair[1])

    def answer_value(self, pair: Sequence[int]) -> int:
        return self.answer(pair)

    def demonstration(self, pair: Sequence[int]) -> str:
        """The answer's decimal form, as SFT teaches it (EOS follows)."""
        return str(self.answer(pair))

    def expression(self, pair: Sequence[int]) -> str:
        """The question as the calculator reads it (operands unpadded): ``3+4``."""
        return f"{pair[0]}{self.symbol}{pair[1]}"

    def difficulty(self, pair: Sequence[int]) -> tuple[float, ...]:
        """Carries, then the answer's digits: 7+8 (one carry, two digits) is harder than 2+3,
        and 45+55 (two carries) harder than 45+51 (none). A product counts its digits only
        (carries of long multiplication are not what a one-step table lookup meets)."""
        a, b = pair
        digits = len(str(self.answer(pair)))
        if self.symbol != "+":
            return (0.0, float(digits))
        carries, carry = 0, 0
        while a or b:
            carry = 1 if a % 10 + b % 10 + carry >= 10 else 0
            carries += carry
            a, b = a // 10, b // 10
        return (float(carries), float(digits))

    def prompt(self, pair: Sequence[int]) -> str:
        """Operands zero-padded to a fixed width, so every prompt has the same length."""
        width = self.operand_digits
        return f"{pair[0]:0{width}d}{self.symbol}{pair[1]:0{width}d}="

    @property
    def operand_limit(self) -> int:
        return 10 ** self.operand_digits

    def unordered_pairs(self) -> list[tuple[int, int]]:
        n = self.operand_limit
        return [(a, b) for a in range(n) for b in range(a, n)]

    @property
    def longest_answer(self) -> int:
        top = self.operand_limit - 1
        return len(str(self.combine(top, top)))

    @property
    def longest_prompt(self) -> int:
        return len(self.prompt((0, 0)))

    @property
    def required_characters(self) -> str:
        return DIGITS + self.symbol + "="

    def plan_problems(self, plan: TaskPlan) -> list[tuple[str, str]]:
        """Operands in range, and no unordered pair in two splits (answer 6)."""
        problems: list[tuple[str, str]] = []
        if plan.operand_digits is not None and self.name != "multi_digit_addition":
            problems.append(("operand_digits", "only multi_digit_addition has operand_digits"))
        if plan.reasoning_gym is not None:
            problems.append(("reasoning_gym", f"only the reasoning_gym task takes this "
                                              f"section, not {self.name}"))
        owner: dict[tuple[int, int], str] = {}
        for name, pairs in plan.split.items():
            for index, pair in enumerate(pairs):
                if not all(0 <= v < self.operand_limit for v in pair):
                    problems.append((f"split.{name}.{index}", f"{pair} has an operand outside "
                                                              f"0..{self.operand_limit - 1}"))
                    continue
                key = (min(pair), max(pair))
                if owner.setdefault(key, name) != name:
                    problems.append((f"split.{name}.{index}",
                                     f"the unordered pair {list(key)} is also in split "
                                     f"{owner[key]!r}"))
        return problems


def single_digit_addition(plan: TaskPlan) -> Task:
    """a+b= for digits a, b: the teaching task."""
    return Task("single_digit_addition", "+", operator.add, 1)


def multi_digit_addition(plan: TaskPlan) -> Task:
    """a+b= for ``operand_digits``-digit operands (zero-padded), with carries."""
    return Task("multi_digit_addition", "+", operator.add, plan.operand_digits or 2)


def single_digit_multiplication(plan: TaskPlan) -> Task:
    """a*b= for digits a, b: answers up to two digits, a different rule on the same operands."""
    return Task("single_digit_multiplication", "*", operator.mul, 1)
