"""The task registry and the surface every task presents to the rest of postlab.

A task names its questions by a *key* of two integers: the operand pair ``(a, b)`` of an
arithmetic task, or ``(dataset, item)`` of a task whose questions are generated items (a
reasoning-gym dataset). Rows keep only the key (on disk ``[a, b, text, terminated]``, as the
reference writes them), so every consumer asks the plan's task for the prompt, the answer that
contracts compare with, and the SFT demonstration.

Kinds are registered lazily: listing the names imports nothing, and a task whose library is an
optional extra (reasoning-gym) is imported only by a plan that names it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from postlab.registry import Registry

Key = Sequence[int]


class TaskPlan(Protocol):
    """What a task reads of a plan. The plan's typed model (``postlab.plan.schema.PlanModel``)
    has these fields; naming them here keeps tasks below the plan layer."""

    task: str
    split: dict[str, list[list[int]]]
    operand_digits: int | None
    #: the reasoning_gym section (a pydantic model), or None
    reasoning_gym: Any
    #: the agent section (tools and budgets: the task asked as episodes), or None
    agent: Any


class Task(Protocol):
    """What engines, contracts, reports and plan checks need of a task."""

    name: str
    #: ``contracts[0]`` is the reference rule ("correct", coverage, pass@k); a second one's
    #: excess acceptance over it is the reward hacking gap.
    contracts: tuple[str, ...]
    #: what the task's answers are, so that a plan cannot train on a contract that reads
    #: another kind of answer: "integer" (arithmetic) or "item" (generated items)
    answer_kind: str
    #: characters a policy may emit besides EOS; the rest of its vocabulary is masked
    answer_characters: str
    #: characters every question and demonstration uses: the vocabulary must hold them
    required_characters: str
    #: the longest demonstration, in characters (the token budget must hold it and EOS)
    longest_answer: int
    #: the longest prompt, in characters; shorter ones are left-padded to it
    longest_prompt: int
    #: operands run over 0..operand_limit-1 (a per-pair grid can be drawn); None when the
    #: questions are not operand pairs
    operand_limit: int | None

    def prompt(self, key: Key) -> str: ...

    def answer(self, key: Key) -> Any:
        """What contracts compare an output with (an integer, or the generated item)."""

    def answer_value(self, key: Key) -> int | str:
        """The reference answer as tables, samples and exports show it (an integer, or the
        item's answer text)."""

    def demonstration(self, key: Key) -> str:
        """The SFT target for the question, before EOS."""

    def difficulty(self, key: Key) -> tuple[float, ...]:
        """How hard the question is, compared as a tuple (larger: harder), for choosing SFT
        demonstrations by difficulty (:mod:`postlab.tasks.selection`)."""

    def plan_problems(self, plan: TaskPlan) -> list[tuple[str, str]]:
        """Problems of the plan's split and task fields, as (field path, message)."""


TASKS: Registry[Callable[[TaskPlan], Task]] = Registry("task")
for _name in ("single_digit_addition", "multi_digit_addition", "single_digit_multiplication"):
    TASKS.register_lazy(_name, f"postlab.tasks.arithmetic:{_name}")
TASKS.register_lazy("reasoning_gym", "postlab.tasks.gym:reasoning_gym")


def task_for(plan: TaskPlan) -> Task:
    """The plan's task; with an ``agent`` section, asked as episodes with tools."""
    task = TASKS[plan.task](plan)
    if getattr(plan, "agent", None) is not None:
        from postlab.tasks.agent import episode_task

        return episode_task(task, plan)  # type: ignore[return-value]
    return task  # type: ignore[return-value]


def answer_function(plan: TaskPlan) -> Callable[[Key], Any]:
    return task_for(plan).answer
