"""A task asked as an agent's episode: the plan's task, with tools the policy may call.

A plan's ``agent`` section (tools, turn and call budgets, each tool's own budget) turns any
task into episodes (:func:`episode_task`, which :func:`postlab.tasks.registry.task_for`
applies): the prompt is the task's; the policy may call the tools over several turns; a
row's text is the whole transcript, tool outputs spliced in (``postlab.tasks.episodes``).
Its contracts judge transcripts: ``episode-strict`` (the final answer, by the task's own
reference rule), ``episode-anywhere`` (the answer anywhere, tool outputs included: gameable
through the tool) and ``per-call`` (successful calls, as a share of the call budget).

SFT demonstrates one call of the first listed tool, its real output, then the task's own
demonstration: ``<calc>3+4</calc><out>7</out>7`` for the calculator on 3+4. The tool's
output is masked out of the SFT loss (:meth:`EpisodeTask.demonstration_parts`), as it is
out of every RL term: the policy never writes it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from postlab.tasks.episodes import (
    OUTPUT_CLOSE,
    OUTPUT_OPEN,
    Budgets,
    EpisodeAnswer,
    EpisodeRun,
)
from postlab.tasks.tools import TOOLS, Question, Tool, tool_for

#: Letters the policy must not be able to write all of: with them it could forge the
#: environment's output tag, and a transcript could no longer be read back unambiguously.
FORGING = frozenset("out")


@dataclass(frozen=True)
class EpisodeTask:
    """The plan's task (``inner``) asked as episodes with ``tools`` under ``budgets``."""

    inner: Any  # compared: answers are cached by the task that gave them
    tools: tuple[str, ...]
    budgets: Budgets
    tool_budgets: tuple[tuple[str, int], ...] = ()
    keys: tuple[tuple[int, ...], ...] = field(default=(), compare=False)
    answer_kind = "episode"
    contracts: tuple[str, ...] = ("episode-strict", "episode-anywhere")

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def operand_limit(self) -> int | None:
        return self.inner.operand_limit

    @property
    def longest_prompt(self) -> int:
        return int(self.inner.longest_prompt)

    def prompt(self, key: Sequence[int]) -> str:
        return str(self.inner.prompt(key))

    def answer(self, key: Sequence[int]) -> EpisodeAnswer:
        return EpisodeAnswer(self.inner.answer(key), self.inner.contracts[0],
                             self.budgets.calls)

    def answer_value(self, key: Sequence[int]) -> Any:
        return self.inner.answer_value(key)

    def difficulty(self, key: Sequence[int]) -> tuple[float, ...]:
        return tuple(self.inner.difficulty(key))

    # --- tools ------------------------------------------------------------------------------

    def question(self, key: Sequence[int]) -> Question:
        """What the tools know of the question: its key, the task's answer and rule."""
        return Question(pair=(key[0], key[1]), answer=self.inner.answer,
                        rule=self.inner.contracts[0])

    def fresh_tools(self) -> dict[str, Tool]:
        """New tools for one episode, each with its own budget."""
        budgets = dict(self.tool_budgets)
        return {name: tool_for(name, budgets.get(name)) for name in self.tools}

    def start(self, key: Sequence[int]) -> EpisodeRun:
        """An episode of the question ``key``, its tools reset."""
        return EpisodeRun(self.question(key), self.fresh_tools(), self.budgets)

    def call_argument(self, key: Sequence[int], tool: str) -> str:
        """What a demonstration asks ``tool``: the question's expression of the calculator,
        the task's own demonstrated answer of the checker."""
        if tool == "check":
            return str(self.inner.demonstration(key))
        expression = getattr(self.inner, "expression", None)
        written = expression(key) if expression is not None else None
        if written is None:
            raise ValueError(f"the {self.name} task writes no expression for the {tool} tool")
        return str(written)

    # --- demonstrations ---------------------------------------------------------------------

    def demonstration_parts(self, key: Sequence[int]) -> list[tuple[str, bool]]:
        """The demonstrated episode as (text, written by the policy): one call of the first
        tool, the output the tool really gives, then the task's demonstration. A tool that
        refuses the call is a plan problem (:meth:`demonstration_problem`)."""
        tool = self.tools[0]
        call = f"<{tool}>{self.call_argument(key, tool)}</{tool}>"
        run = self.start(key)
        block = run.end_turn(call, eos=False)
        parts = [(call, True)]
        if block is not None:
            parts.append((block, False))
        parts.append((str(self.inner.demonstration(key)), True))
        return parts

    def demonstration(self, key: Sequence[int]) -> str:
        return "".join(text for text, _ in self.demonstration_parts(key))

    def demonstration_problem(self, key: Sequence[int]) -> str | None:
        """Why the question's demonstration is not a well-formed episode, or None."""
        tool = self.tools[0]
        try:
            argument = self.call_argument(key, tool)
        except ValueError as problem:
            return str(problem)
        run = self.start(key)
        block = run.end_turn(f"<{tool}>{argument}</{tool}>", eos=False)
        turn = run.turns[-1]
        if block is None or turn.output is None:
            return f"its call of {tool} does not run (the budgets allow no call)"
        if turn.output.error:
            return (f"its call {tool}({argument!r}) is refused by the tool: "
                    f"{turn.output.detail}")
        return None

    @functools.cached_property
    def answer_characters(self) -> str:
        """What the policy may write: the task's answers, every listed tool's tags and
        argument alphabet, and every character its demonstrations write."""
        written = set(self.inner.answer_characters)
        for name in self.tools:
            written |= set(f"<{name}></{name}>") | set(TOOLS[name](None).argument_characters)
        for key in self.keys:
            if self.demonstration_problem(key) is None:
                written |= {c for text, mine in self.demonstration_parts(key) if mine
                            for c in text}
        return "".join(sorted(written))

    @functools.cached_property
    def required_characters(self) -> str:
        """The task's, what the policy may write, and every tool's outputs (in their tags)."""
        needed = set(self.inner.required_characters) | set(self.answer_characters)
        needed |= set(OUTPUT_OPEN + OUTPUT_CLOSE)
        for name in self.tools:
            needed |= set(TOOLS[name](None).output_characters)
        return "".join(sorted(needed))

    @functools.cached_property
    def longest_answer(self) -> int:
        """The longest turn a demonstration writes, in characters."""
        return max((len(text) for key in self.keys if self.demonstration_problem(key) is None
                    for text, mine in self.demonstration_parts(key) if mine),
                   default=int(self.inner.longest_answer))

    def plan_problems(self, plan: Any) -> list[tuple[str, str]]:
        """The task's own problems, then: the policy cannot write the output tag, and every
        training question's demonstration is a well-formed episode."""
        problems = list(self.inner.plan_problems(plan))
        if problems:
            return problems
        if set(self.answer_characters) >= FORGING:
            return [("agent.tools", "the policy could write the tool output tag "
                                    f"{OUTPUT_OPEN}: its answers or tools use the letters "
                                    "o, u and t")]
        for index, key in enumerate(plan.split.get("train", [])):
            problem = self.demonstration_problem(key)
            if problem is not None:
                return [(f"split.train.{index}", f"the demonstration of {list(key)}: "
                                                 f"{problem}")]
        return []


def episode_task(inner: Any, plan: Any) -> EpisodeTask:
    """``inner`` asked as episodes under the plan's ``agent`` section."""
    section = plan.agent
    return EpisodeTask(
        inner=inner, tools=tuple(section.tools), budgets=Budgets(section.turns, section.calls),
        tool_budgets=tuple(sorted((section.tool_budgets or {}).items())),
        keys=tuple(tuple(key) for keys in plan.split.values() for key in keys))


def episode_tokens(plan: Any) -> int:
    """The most tokens one episode may hold after its prompt: every turn's token budget,
    and each call's output block at its longest (what a transformer's positions must
    hold)."""
    from postlab.tasks.tools import MOST_OUTPUT

    section = plan.agent
    block = len(OUTPUT_OPEN) + MOST_OUTPUT + len(OUTPUT_CLOSE)  # characters bound tokens
    return section.turns * plan.max_new_tokens + section.calls * block
