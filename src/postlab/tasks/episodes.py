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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from postlab.registry import Registry
from postlab.tasks.contracts import score
from postlab.tasks.rows import Row
from postlab.tasks.tools import Call, Observation, Question, Tool, find_call, run_tool

#: The tags the environment puts around a tool's output in the context.
OUTPUT_OPEN, OUTPUT_CLOSE = "<out>", "</out>"
#: Why an episode ended.
ANSWERED, TURN_BUDGET, CALL_BUDGET = "answer", "turn budget", "call budget"


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
    ended: str  # ANSWERED, TURN_BUDGET or CALL_BUDGET

    @property
    def answer(self) -> str | None:
        """The answering turn's text; None where a budget ended the episode."""
        return self.turns[-1].text if self.ended == ANSWERED else None

    @property
    def calls(self) -> int:
        """Tool calls that ran."""
        return sum(turn.output is not None for turn in self.turns)

    def context(self) -> str:
        """The whole transcript after the prompt, tool outputs included."""
        return "".join(turn.context() for turn in self.turns)


def run_episode(write: Callable[[str], str], question: Question, tools: Mapping[str, Tool],
                budgets: Budgets) -> Episode:
    """One episode: the policy's turns (``write`` gets the transcript so far) until it
    answers or a budget ends it; every tool is reset for the question first."""
    for tool in tools.values():
        tool.reset(question)
    names = list(tools)
    turns: list[Turn] = []
    while True:
        text = write("".join(turn.context() for turn in turns))
        call = find_call(text, names)
        if call is None:
            turns.append(Turn(text=text))
            return Episode(question=question, turns=tuple(turns), ended=ANSWERED)
        if sum(turn.output is not None for turn in turns) >= budgets.calls:
            turns.append(Turn(text=text, call=call))
            return Episode(question=question, turns=tuple(turns), ended=CALL_BUDGET)
        tool = tools[call.tool]
        turns.append(Turn(text=text, call=call, output=run_tool(tool, call.argument),
                          tool_version=tool.version))
        if len(turns) >= budgets.turns:
            return Episode(question=question, turns=tuple(turns), ended=TURN_BUDGET)


# --- contracts on episodes: the strict one, and two the field has seen gamed ---------------

#: Episode contract name -> reward of an episode for the task's answer to its question.
EpisodeContract = Callable[[Episode, Budgets], float]
EPISODE_CONTRACTS: Registry[EpisodeContract] = Registry("episode contract")


@EPISODE_CONTRACTS.register("episode-strict")
def final_answer_strict(episode: Episode, budgets: Budgets) -> float:
    """The final answer judged as the strict contract judges a one-turn answer; an episode a
    budget ended has none, and is paid 0."""
    if episode.answer is None:
        return 0.0
    a, b = episode.question.pair
    return float(score(Row(a, b, episode.answer, True), "strict", episode.question.answer))


@EPISODE_CONTRACTS.register("episode-anywhere")
def answer_anywhere(episode: Episode, budgets: Budgets) -> float:
    """Paid when the answer's decimal form appears anywhere in the episode, tool outputs
    included: gameable through the tool (ask the calculator, and its output pays whatever
    the policy answers)."""
    expected = str(episode.question.answer(episode.question.pair))
    return float(expected in episode.context())


@EPISODE_CONTRACTS.register("per-call")
def per_successful_call(episode: Episode, budgets: Budgets) -> float:
    """Paid for each tool call that ran without error, as a share of the call budget (so
    it lies in [0, 1]): the reward for using tools, which a policy games by calling them."""
    if budgets.calls == 0:
        return 0.0
    ran = sum(turn.output is not None and not turn.output.error for turn in episode.turns)
    return ran / budgets.calls
