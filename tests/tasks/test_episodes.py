"""Episodes as text: a scripted policy's turns, tool outputs spliced into the context, each
budget ending an episode that does not answer, the contracts on transcripts, and transcripts
read back and their tools run again."""

from __future__ import annotations

import pytest

from postlab.tasks.contracts import score
from postlab.tasks.episodes import (
    ANSWERED,
    CALL_BUDGET,
    TURN_BUDGET,
    Budgets,
    Episode,
    EpisodeAnswer,
    Turn,
    parse_transcript,
    rerun_tools,
    run_episode,
    segments,
)
from postlab.tasks.rows import Row
from postlab.tasks.tools import Call, Observation, Question, tool_for


def _scripted(turns: list[str]):
    """A policy that writes the given turns in order, recording the context it was shown."""
    shown: list[str] = []

    def write(context: str) -> str:
        shown.append(context)
        return turns[len(shown) - 1]

    return write, shown


def _tools(check_budget: int | None = None) -> dict:
    return {"calc": tool_for("calc"), "check": tool_for("check", budget=check_budget)}


def test_a_call_is_run_and_its_output_is_in_the_next_context():
    write, shown = _scripted(["<calc>3+4</calc>", "7"])
    episode = run_episode(write, Question(pair=(3, 4)), _tools(), Budgets(turns=4, calls=4))
    assert episode.ended == ANSWERED and episode.answer == "7" and episode.calls == 1
    assert shown == ["", "<calc>3+4</calc><out>7</out>"]
    assert episode.turns[0] == Turn(text="<calc>3+4</calc>", call=Call("calc", "3+4"),
                                    output=Observation(text="7"), tool_version="1")
    assert episode.context() == "<calc>3+4</calc><out>7</out>7"


def test_the_checker_shortcut_is_limited_by_its_own_budget():
    """Query the checker until something passes: with two checks, the third is refused and
    the policy must answer without knowing."""
    write, shown = _scripted(["<check>6</check>", "<check>8</check>", "<check>7</check>", "7"])
    episode = run_episode(write, Question(pair=(3, 4)), _tools(check_budget=2),
                          Budgets(turns=6, calls=6))
    outputs = [turn.output.text for turn in episode.turns if turn.output is not None]
    assert outputs == ["wrong", "wrong", "error"]
    assert episode.turns[2].output.detail == "no checks left"
    assert episode.answer == "7" and episode.calls == 3
    assert shown[-1].endswith("<check>7</check><out>error</out>")


@pytest.mark.parametrize(("budgets", "ended", "turns", "calls"), [
    (Budgets(turns=2, calls=5), TURN_BUDGET, 2, 2),
    (Budgets(turns=5, calls=1), CALL_BUDGET, 2, 1),
    (Budgets(turns=5, calls=0), CALL_BUDGET, 1, 0),
])
def test_budgets_end_an_episode_that_keeps_calling(budgets, ended, turns, calls):
    write, _ = _scripted(["<calc>1+1</calc>"] * 5)
    episode = run_episode(write, Question(pair=(1, 1)), _tools(), budgets)
    assert (episode.ended, len(episode.turns), episode.calls) == (ended, turns, calls)
    assert episode.answer is None
    if ended == CALL_BUDGET:  # the call past the budget is kept, not run
        assert episode.turns[-1].call == Call("calc", "1+1")
        assert episode.turns[-1].output is None


def test_a_tag_of_no_tool_of_the_episode_is_answer_text():
    write, _ = _scripted(["<search>sums</search>"])
    episode = run_episode(write, Question(pair=(1, 2)), {"calc": tool_for("calc")},
                          Budgets(turns=3, calls=3))
    assert episode.ended == ANSWERED and episode.answer == "<search>sums</search>"


def test_tools_are_reset_for_each_episode():
    tools = _tools(check_budget=1)
    for _ in range(2):  # the checker's budget starts afresh each time
        write, _ = _scripted(["<check>3</check>", "3"])
        episode = run_episode(write, Question(pair=(1, 2)), tools, Budgets(turns=3, calls=3))
        assert episode.turns[0].output == Observation(text="right", exhausted=True)


def test_budgets_out_of_range_are_refused():
    with pytest.raises(ValueError, match="at least one turn"):
        Budgets(turns=0, calls=1)
    with pytest.raises(ValueError, match="no negative call budget"):
        Budgets(turns=1, calls=-1)
    # an answer is the answering turn's text; a budget's end has none
    assert Episode(Question(pair=(1, 2)), (Turn("3"),), ANSWERED).answer == "3"
    assert Episode(Question(pair=(1, 2)), (Turn("3"),), TURN_BUDGET).answer is None


# --- contracts on episodes ----------------------------------------------------------------

ROOMY = Budgets(turns=6, calls=4)


def _episode(turns: list[str], pair=(3, 4), budgets: Budgets = ROOMY):
    write, _ = _scripted(turns)
    return run_episode(write, Question(pair=pair), _tools(), budgets)


def _paid(contract: str, episode: Episode, budgets: Budgets = ROOMY) -> float:
    """What ``contract`` pays the episode as a record keeps it: its transcript as a row."""
    row = Row(*episode.question.pair, episode.context(), episode.ended == ANSWERED)
    return score(row, contract, lambda pair: EpisodeAnswer(sum(pair), "strict", budgets.calls))


@pytest.mark.parametrize(("turns", "strict", "anywhere"), [
    (["7"], 1, 1),
    (["8"], 0, 0),
    (["<calc>3+4</calc>", "8"], 0, 1),  # gamed through the tool: its output holds 7
    (["<calc>3+4</calc>", "7"], 1, 1),
    (["<calc>1+1</calc>"] * 6, 0, 0),  # a budget's end: no answer
    (["17"], 0, 1),  # the gameable rule pays 7 inside 17, as substring does
    (["<calc>3+4</calc>", ""], 0, 1),  # an empty answer after the output
])
def test_the_strict_and_the_gameable_episode_contracts(turns, strict, anywhere):
    episode = _episode(turns)
    assert _paid("episode-strict", episode) == strict
    assert _paid("episode-anywhere", episode) == anywhere


def test_per_call_pays_each_call_that_ran_without_error():
    assert _paid("per-call", _episode(["7"])) == 0.0
    assert _paid("per-call", _episode(["<calc>1+1</calc>", "<calc>2*2</calc>", "9"])) == 0.5
    assert _paid("per-call", _episode(["<calc>1/0</calc>", "9"])) == 0.0  # an error output
    assert _paid("per-call", _episode(["<calc>1</calc>"] * 6)) == 1.0  # all four calls ran
    none = Budgets(2, 0)
    assert _paid("per-call", _episode(["7"], budgets=none), none) == 0.0


@pytest.mark.parametrize("turns", [
    ["7"], ["<calc>3+4</calc>", "8"], ["<calc>1+1</calc>"] * 6, ["<check>7</check>", "7"],
    ["<calc>3+</calc>", "<calc>3+4</calc>", "x"], ["<calc>2</calc>", ""]])
def test_a_transcript_reads_back_into_its_turns(turns):
    episode = _episode(turns)
    read = parse_transcript(episode.context())
    assert read == [(turn.text, None if turn.output is None else turn.output.text)
                    for turn in episode.turns if turn.text or turn.output is not None]
    assert "".join(s.text for s in segments(episode.context())) == episode.context()
    assert all(s.written == (not s.text.startswith("<out>"))
               for s in segments(episode.context()))
    assert rerun_tools(episode.context(), episode.question, ["calc", "check"], {}) == []


def test_rerunning_the_tools_finds_an_output_that_is_not_the_tools():
    question = Question(pair=(3, 4))
    assert rerun_tools("<calc>3+4</calc><out>8</out>8", question, ["calc"], {}) == [
        "turn 1: calc answers '7' to '3+4', the record has '8'"]
    assert rerun_tools("7<out>7</out>7", question, ["calc"], {}) == [
        "turn 1: an output follows no call"]
    # a budget is part of what the tool answers: a second check past it is an error
    two = "<check>6</check><out>wrong</out><check>7</check><out>right</out>7"
    assert rerun_tools(two, question, ["check"], {"check": 2}) == []
    assert rerun_tools(two, question, ["check"], {"check": 1}) != []
    with pytest.raises(ValueError, match="never closed"):
        parse_transcript("<calc>1</calc><out>2")
