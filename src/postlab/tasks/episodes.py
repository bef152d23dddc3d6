"""An agent's episode as text: turns of the policy's writing, tool calls and tool outputs.

The policy writes a turn (``write(context) -> text``: it stops after a closing tool tag or
at its answer's end); a turn that ends with a call to one of the episode's tools
(:func:`~postlab.tasks.tools.find_call`) is run and the tool's output appended to the
context inside ``<out>...</out>``; a turn without a call is the answer. Budgets end an
episode that never answers: at most ``turns`` turns and ``calls`` tool calls.

Everything a turn did is kept (:class:`Turn`: the policy's text, the call, the tool's
output and version), so a record can hold an episode whole and a verifier can run its tools
again and compare. The policy's own text and the tools' outputs stay apart, which is what
lets training mask the tool's tokens out of the loss (the policy never chose them).

:class:`EpisodeRun` is the one place the rules live (when a turn ends, what a budget does):
the text-level :func:`run_episode` and the engine's token-level rollout
(``postlab.engines.episodes``) both drive it. A record keeps an episode as its transcript
(the row's text: the turns with the outputs spliced in); :func:`parse_transcript` reads the
turns back, which is unambiguous because a policy may not write the output tag (the plan is
refused otherwise), and :func:`rerun_tools` runs the calls again for ``verify``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from postlab.tasks.contracts import CONTRACTS
from postlab.tasks.tools import (
    ERROR,
    Call,
    Observation,
    Question,
    Tool,
    find_call,
    run_tool,
    tool_for,
)

#: The tags the environment puts around a tool's output in the context.
OUTPUT_OPEN, OUTPUT_CLOSE = "<out>", "</out>"
#: Why an episode ended: an answer (EOS), a budget, or a turn that ran out of tokens.
ANSWERED, TURN_BUDGET, CALL_BUDGET, LENGTH = "answer", "turn budget", "call budget", "length"


@dataclass(frozen=True)
class Budgets:
    """The most turns and tool calls one episode may take."""

    turns: int
    calls: int

    def __post_init__(self) -> None:
        if self.turns < 1 or self.calls < 0:
            raise ValueError(f"an episode needs at least one turn and no negative call "
                             f"budget, got turns={self.turns}, calls={self.calls}")


@dataclass(frozen=True)
class Turn:
    """One turn: what the policy wrote, and if it ended with a call, the call, the tool's
    reply and the tool's version (None for the answering turn, or a call past the budget)."""

    text: str
    call: Call | None = None
    output: Observation | None = None
    tool_version: str | None = None

    def context(self) -> str:
        """The turn as the policy reads it afterwards: its text, then the tool's output."""
        if self.output is None:
            return self.text
        return f"{self.text}{OUTPUT_OPEN}{self.output.text}{OUTPUT_CLOSE}"


@dataclass(frozen=True)
class Episode:
    question: Question
    turns: tuple[Turn, ...]
    ended: str  # ANSWERED, TURN_BUDGET, CALL_BUDGET or LENGTH

    @property
    def answer(self) -> str | None:
        """The answering turn's text; None where a budget ended the episode."""
        return self.turns[-1].text if self.ended == ANSWERED else None

    @property
    def calls(self) -> int:
        """Tool calls that ran."""
        return sum(turn.output is not None for turn in self.turns)

    def context(self) -> str:
        """The whole transcript after the prompt, tool outputs included: a row's text."""
        return "".join(turn.context() for turn in self.turns)


class EpisodeRun:
    """One episode in progress: the engine tells it where each turn ended, it runs the call
    and says what the environment appends, and when the episode is over."""

    def __init__(self, question: Question, tools: Mapping[str, Tool],
                 budgets: Budgets) -> None:
        for tool in tools.values():
            tool.reset(question)
        self.question, self.tools, self.budgets = question, tools, budgets
        self.names = list(tools)
        self.turns: list[Turn] = []
        self.ended: str | None = None

    def call_in(self, text: str) -> Call | None:
        """The call ``text`` ends with, if any: where the engine ends a turn."""
        return find_call(text, self.names)

    def end_turn(self, text: str, eos: bool) -> str | None:
        """The turn ``text`` is over (EOS, a complete call, or its token budget spent):
        the output block the environment appends after it, or None. Sets ``ended`` when
        the episode is over (the block, if any, is still appended)."""
        if self.ended is not None:
            raise RuntimeError("the episode has ended")
        call = None if eos else self.call_in(text)
        if call is None:
            self.turns.append(Turn(text=text))
            self.ended = ANSWERED if eos else LENGTH
            return None
        if sum(turn.output is not None for turn in self.turns) >= self.budgets.calls:
            self.turns.append(Turn(text=text, call=call))
            self.ended = CALL_BUDGET
            return None
        tool = self.tools[call.tool]
        turn = Turn(text=text, call=call, output=run_tool(tool, call.argument),
                    tool_version=tool.version)
        self.turns.append(turn)
        if len(self.turns) >= self.budgets.turns:
            self.ended = TURN_BUDGET
        return turn.context()[len(text):]

    def episode(self) -> Episode:
        assert self.ended is not None, "the episode is still running"
        return Episode(question=self.question, turns=tuple(self.turns), ended=self.ended)


def run_episode(write: Callable[[str], str], question: Question, tools: Mapping[str, Tool],
                budgets: Budgets) -> Episode:
    """One episode at the text level: the policy's turns (``write`` gets the transcript so
    far; a turn without a call is its answer) until it answers or a budget ends it."""
    run = EpisodeRun(question, tools, budgets)
    while run.ended is None:
        text = write("".join(turn.context() for turn in run.turns))
        run.end_turn(text, eos=run.call_in(text) is None)
    return run.episode()


# --- transcripts: an episode as a record keeps it ------------------------------------------

@dataclass(frozen=True)
class Segment:
    """A stretch of a transcript: the policy's own text (``written``) or a tool's output
    block (what the environment appended, tags included)."""

    text: str
    written: bool


def parse_transcript(text: str) -> list[tuple[str, str | None]]:
    """A transcript's turns as (the policy's text, the tool's output or None), in order. A
    transcript that ends right after an output has no text after it: no last empty turn is
    made up (ValueError for an output block never closed, which no episode writes)."""
    turns: list[tuple[str, str | None]] = []
    rest = text
    while True:
        opening = rest.find(OUTPUT_OPEN)
        if opening < 0:
            break
        closing = rest.find(OUTPUT_CLOSE, opening)
        if closing < 0:
            raise ValueError("a tool output block is never closed")
        turns.append((rest[:opening], rest[opening + len(OUTPUT_OPEN):closing]))
        rest = rest[closing + len(OUTPUT_CLOSE):]
    if rest or not turns:
        turns.append((rest, None))
    return turns


def segments(text: str) -> list[Segment]:
    """A transcript cut into the policy's text and the tool output blocks."""
    pieces = []
    for written, output in parse_transcript(text):
        if written:
            pieces.append(Segment(written, True))
        if output is not None:
            pieces.append(Segment(f"{OUTPUT_OPEN}{output}{OUTPUT_CLOSE}", False))
    return pieces


def final_text(text: str, terminated: bool) -> str | None:
    """The answer an episode ended with: the text after the last output, when the policy
    emitted EOS there; None where the episode ended otherwise."""
    if not terminated:
        return None
    written, output = parse_transcript(text)[-1]
    return written if output is None else ""


def rerun_tools(text: str, question: Question, tools: Sequence[str],
                budgets: Mapping[str, int | None]) -> list[str]:
    """Run a transcript's calls again with fresh tools (each with its budget): the
    differences between the recorded outputs and the tools' ones now, one line each (empty:
    every output is what the tool gives)."""
    fresh = {name: tool_for(name, budgets.get(name)) for name in tools}
    for tool in fresh.values():
        tool.reset(question)
    problems = []
    for index, (written, output) in enumerate(parse_transcript(text)):
        if output is None:
            continue
        call = find_call(written, list(fresh))
        if call is None:
            problems.append(f"turn {index + 1}: an output follows no call")
            continue
        again = run_tool(fresh[call.tool], call.argument).text
        if again != output:
            problems.append(f"turn {index + 1}: {call.tool} answers {again!r} to "
                            f"{call.argument!r}, the record has {output!r}")
    return problems


# --- contracts on episodes: the strict one, and two the field has seen gamed ---------------

@dataclass(frozen=True)
class EpisodeAnswer:
    """What an episode's contracts compare with: the task's own answer (``value``), the
    contract that judges a final answer (``rule``) and the call budget (per-call pays a
    share of it)."""

    value: Any
    rule: str
    calls: int

    def __str__(self) -> str:
        return str(self.value)


def final_answer_strict(pair: Sequence[int], text: str, terminated: bool,
                        expected: EpisodeAnswer) -> float:  # the rule's own type (0/1: int)
    """The final answer judged by the task's reference rule (``strict`` for arithmetic), as
    a one-turn answer is; an episode a budget or a turn's length ended has none: 0."""
    final = final_text(text, terminated)
    if final is None:
        return 0
    return CONTRACTS[expected.rule](pair, final, True, expected.value)


def answer_anywhere(pair: Sequence[int], text: str, terminated: bool,
                    expected: EpisodeAnswer) -> float:
    """Paid when the answer appears anywhere in the episode, tool outputs included:
    gameable through the tool (ask the calculator, and its output pays whatever the policy
    answers)."""
    return int(str(expected.value) in text)


def per_successful_call(pair: Sequence[int], text: str, terminated: bool,
                        expected: EpisodeAnswer) -> float:
    """Paid for each tool call that ran without error, as a share of the call budget (so
    it lies in [0, 1]): the reward for using tools, which a policy games by calling them."""
    if expected.calls == 0:
        return 0.0
    ran = sum(output is not None and output != ERROR
              for _, output in parse_transcript(text))
    return ran / expected.calls
