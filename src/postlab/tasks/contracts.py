"""Reward contracts: pure checkers ``(pair, text, terminated) -> 0 or 1``.

``text`` is what the policy emitted before EOS (EOS itself excluded) and ``terminated`` says
whether EOS was emitted within the token budget. ``expected`` is the task's answer for the
pair; it defaults to a+b, the teaching task. A contract is the verifiable rule that RL
optimises, so its exact semantics are part of the frozen plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from postlab.registry import Registry

Contract = Callable[..., int]

CONTRACTS: Registry[Contract] = Registry("reward contract")

_DIGITS = frozenset("0123456789")


@CONTRACTS.register("strict")
def strict(pair: Sequence[int], text: str, terminated: bool, expected: int | None = None) -> int:
    """Terminated, non-empty, ASCII digits only, and the integer value equals the answer.

    Leading zeros are accepted ("007" for 3+4): the rule checks the value, not the spelling.
    """
    if not terminated or not text or not set(text) <= _DIGITS:
        return 0
    return int(int(text) == (sum(pair) if expected is None else expected))


@CONTRACTS.register("substring")
def substring(pair: Sequence[int], text: str, terminated: bool,
              expected: int | None = None) -> int:
    """The decimal answer appears anywhere in the text, terminated or not.

    Deliberately gameable: "1010" passes for 5+5, so a policy can be paid for hedging.
    """
    return int(str(sum(pair) if expected is None else expected) in text)


@CONTRACTS.register("exact")
def exact(pair: Sequence[int], text: str, terminated: bool, expected: int | None = None) -> int:
    """Terminated and the text is exactly the answer's decimal form: strict without leading
    zeros (answer 10)."""
    return int(terminated and text == str(sum(pair) if expected is None else expected))


def score(name: str, pair: Sequence[int], text: str, terminated: bool,
          expected: int | None = None) -> int:
    """Score one output under a registered contract (KeyError lists the known names)."""
    return CONTRACTS[name](pair, text, terminated, expected)
