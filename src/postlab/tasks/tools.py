"""Tools an agent may call inside an episode: small environments behind one protocol.

An episode (issue-level design: a policy writes until it emits a call or its answer, the
environment runs the call and appends the tool's output, a budget ends it) needs three things
from a tool, and only these, so that any tool plugs in the same way and its outputs can be
recorded and re-run by ``verify``:

* ``reset(question)`` at the start of each episode (a tool may keep state, such as a budget);
* ``step(argument)`` for each call: an :class:`Observation` (the text the episode appends,
  whether the tool refuses further calls, whether the input was an error);
* the characters its outputs and its arguments are written in (``output_characters``,
  ``argument_characters``): a character tokenizer must hold every character a tool may
  answer with, and the policy may write its arguments;
* a ``name`` (the call's tag, ``<calc>...</calc>``) and a ``version`` (recorded with every
  output, so a changed tool cannot pass for the one that made a record).

A tool never raises on what the policy wrote: a bad input is the tool's error output
(:func:`run_tool` turns an exception of a tool into one as well), because the policy wrote
it and the episode goes on. Tools are registered factories (:data:`TOOLS`), each built with
its budget.

The same shape as the reset/step environments of the RL tooling this field uses, kept to
what postlab's episodes need: no reward inside the tool (contracts judge episodes), no
asynchronous calls (a tool here is pure arithmetic or a lookup).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from postlab.registry import Registry
from postlab.tasks.contracts import Answer, score
from postlab.tasks.rows import Row

#: The longest argument a tool reads; a longer one is an error output (bounds the work a
#: policy can ask for, e.g. a product of many long numbers).
MOST_ARGUMENT = 64
#: The longest output a tool may append; a longer one becomes the error output (a product of
#: long numbers can be longer than any episode's budget).
MOST_OUTPUT = 24
#: What the episode reads when a tool refuses an input or fails: one word from a fixed
#: alphabet (a character tokenizer must encode every output), the reason kept beside it.
ERROR = "error"


@dataclass(frozen=True)
class Observation:
    """A tool's reply to one call: ``text`` is appended to the episode; ``exhausted`` says
    the tool takes no further calls this episode; ``error`` marks a refused input, whose
    text is :data:`ERROR` and whose reason is ``detail`` (for people; the policy reads only
    the text)."""

    text: str
    exhausted: bool = False
    error: bool = False
    detail: str = ""


def refused(reason: str, exhausted: bool = False) -> Observation:
    """The error output, with why."""
    return Observation(text=ERROR, exhausted=exhausted, error=True, detail=reason)


@dataclass(frozen=True)
class Question:
    """What a tool may know of the episode's question: its key, the task's answer function
    and the task's reference contract (the checker reads both; the calculator nothing)."""

    pair: tuple[int, int]
    answer: Answer = sum
    rule: str = "strict"


class Tool(Protocol):
    name: str
    version: str
    output_characters: str
    argument_characters: str

    def reset(self, question: Question) -> None: ...

    def step(self, argument: str) -> Observation: ...


#: Tool name -> a factory taking the tool's call budget (None: only the episode's).
TOOLS: Registry[Callable[[int | None], Tool]] = Registry("tool")


def tool_for(name: str, budget: int | None = None) -> Tool:
    """A fresh tool of that name (KeyError with "did you mean" for an unknown one)."""
    if name not in TOOLS:
        close = difflib.get_close_matches(name, TOOLS.names(), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise KeyError(f"unknown tool {name!r}{hint}; known: {', '.join(TOOLS.names())}")
    return TOOLS[name](budget)


def run_tool(tool: Tool, argument: str) -> Observation:
    """One call: the tool's reply, or its exception as its error output (a tool is code a
    user may register; an exception of it must not end the run, and is recorded)."""
    try:
        reply = tool.step(argument)
    except Exception as failure:  # the tool's failure is its output, never a crash
        return refused(f"{type(failure).__name__}: {failure}")
    if len(reply.text) > MOST_OUTPUT or not set(reply.text) <= set(tool.output_characters):
        return refused(f"the output {reply.text[:MOST_OUTPUT]!r} is longer than "
                       f"{MOST_OUTPUT} characters or leaves the tool's alphabet",
                       reply.exhausted)
    return reply


@dataclass(frozen=True)
class Call:
    """A tool call found at the end of a turn: ``<name>argument</name>``."""

    tool: str
    argument: str


def find_call(text: str, names: Sequence[str]) -> Call | None:
    """The call a turn ends with (whitespace after it allowed), among the tools ``names``,
    or None (the turn is an answer). Only a complete call at the end counts: a policy that
    opens a tag and never closes it has answered with that text. The argument runs from the
    last opening tag before the closing one (linear in the text's length)."""
    end = text.rstrip()
    for name in names:
        opening, closing = f"<{name}>", f"</{name}>"
        if end.endswith(closing):
            start = end.rfind(opening, 0, len(end) - len(closing))
            if start >= 0:
                return Call(tool=name, argument=end[start + len(opening):-len(closing)])
    return None


# --- the calculator: integer arithmetic by a small parser, never Python's eval --------------

class _Parser:
    """Recursive descent over ``expression := term (('+'|'-') term)*``, ``term := factor
    ('*' factor)*``, ``factor := ('-'|'+') factor | digits | '(' expression ')'``: the
    arithmetic postlab's tasks ask (sums, products, multi-digit operands), integers only.
    Whitespace may stand between tokens, never inside a number ("1 2" is an error, not 12);
    positions in errors count the text as written."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def parse(self) -> int:
        if not self.text.strip():
            raise ValueError("empty expression")
        value = self._expression()
        if self._peek():
            raise ValueError(f"unexpected {self.text[self.at]!r} at {self.at}")
        return value

    def _peek(self) -> str:
        """The next token's first character ("" at the end), past any whitespace."""
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1
        return self.text[self.at] if self.at < len(self.text) else ""

    def _expression(self) -> int:
        value = self._term()
        while self._peek() in ("+", "-"):
            sign = self._peek()
            self.at += 1
            value = value + self._term() if sign == "+" else value - self._term()
        return value

    def _term(self) -> int:
        value = self._factor()
        while self._peek() == "*":
            self.at += 1
            value *= self._factor()
        return value

    def _factor(self) -> int:
        character = self._peek()
        if character in ("-", "+"):
            self.at += 1
            return -self._factor() if character == "-" else self._factor()
        if character == "(":
            self.at += 1
            value = self._expression()
            if self._peek() != ")":
                raise ValueError(f"missing ')' at {self.at}")
            self.at += 1
            return value
        start = self.at
        while self.at < len(self.text) and self.text[self.at] in "0123456789":
            self.at += 1
        if start == self.at:
            shown = repr(character) if character else "the end"
            raise ValueError(f"expected a number at {start}, found {shown}")
        return int(self.text[start:self.at])


def evaluate(expression: str) -> int:
    """The integer value of ``expression`` (ValueError naming what is wrong)."""
    if len(expression) > MOST_ARGUMENT:
        raise ValueError(f"longer than {MOST_ARGUMENT} characters")
    return _Parser(expression).parse()


class Calculator:
    """Integer arithmetic (+, -, *, parentheses): the value, or an error output."""

    name = "calc"
    version = "1"
    output_characters = "-0123456789" + ERROR
    argument_characters = "0123456789+-*()"

    def __init__(self, budget: int | None = None) -> None:
        self.budget = budget
        self.used = 0

    def reset(self, question: Question) -> None:
        self.used = 0

    def step(self, argument: str) -> Observation:
        if self.budget is not None and self.used >= self.budget:
            return refused("no calls left", exhausted=True)
        self.used += 1
        exhausted = self.budget is not None and self.used >= self.budget
        try:
            return Observation(text=str(evaluate(argument)), exhausted=exhausted)
        except ValueError as problem:
            return refused(str(problem), exhausted)


class Checker:
    """Says whether a candidate answer is right (the strict contract's rule), within its
    own budget of checks: the shortcut agents learn is to query it until something passes,
    and the budget is what limits that."""

    name = "check"
    version = "1"
    output_characters = "right" + "wrong" + ERROR
    argument_characters = ""  # the task's own answer characters

    def __init__(self, budget: int | None = None) -> None:
        self.budget = budget
        self.used = 0
        self.question: Question | None = None

    def reset(self, question: Question) -> None:
        self.used, self.question = 0, question

    def step(self, argument: str) -> Observation:
        if self.question is None:
            raise RuntimeError("the checker was called before reset")
        if self.budget is not None and self.used >= self.budget:
            return refused("no checks left", exhausted=True)
        self.used += 1
        exhausted = self.budget is not None and self.used >= self.budget
        if len(argument) > MOST_ARGUMENT:
            return refused(f"longer than {MOST_ARGUMENT} characters", exhausted)
        a, b = self.question.pair
        row = Row(a, b, argument.strip(), True)
        right = score(row, self.question.rule, self.question.answer) >= 1
        return Observation(text="right" if right else "wrong", exhausted=exhausted)


TOOLS.register("calc")(Calculator)
TOOLS.register("check")(Checker)
