"""Episodes as text: a scripted policy's turns, tool outputs spliced into the context, and
each budget ending an episode that does not answer."""

from __future__ import annotations

import pytest

from postlab.tasks.episodes import (
    ANSWERED,
    CALL_BUDGET,
    TURN_BUDGET,
    Budgets,
    Episode,
    Turn,
    run_episode,
)
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
    assert outputs == ["wrong", "wrong", "error: no checks left"]
    assert episode.answer == "7" and episode.calls == 3
    assert shown[-1].endswith("<check>7</check><out>error: no checks left</out>")


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


@pytest.mark.parametrize(("turns", "strict", "anywhere"), [
    (["7"], 1.0, 1.0),
    (["8"], 0.0, 0.0),
    (["<calc>3+4</calc>", "8"], 0.0, 1.0),  # gamed through the tool: its output holds 7
    (["<calc>3+4</calc>", "7"], 1.0, 1.0),
    (["<calc>1+1</calc>"] * 6, 0.0, 0.0),  # a budget's end: no answer
    (["17"], 0.0, 1.0),  # the gameable rule pays 7 inside 17, as substring does
])
def test_the_strict_and_the_gameable_episode_contracts(turns, strict, anywhere):
    from postlab.tasks.episodes import EPISODE_CONTRACTS

    episode = _episode(turns)
    assert EPISODE_CONTRACTS["episode-strict"](episode, ROOMY) == strict
    assert EPISODE_CONTRACTS["episode-anywhere"](episode, ROOMY) == anywhere


def test_per_call_pays_each_call_that_ran_without_error():
    from postlab.tasks.episodes import EPISODE_CONTRACTS

    pay = EPISODE_CONTRACTS["per-call"]
    assert pay(_episode(["7"]), ROOMY) == 0.0
    assert pay(_episode(["<calc>1+1</calc>", "<calc>2*2</calc>", "9"]), ROOMY) == 0.5
    assert pay(_episode(["<calc>1/0</calc>", "9"]), ROOMY) == 0.0  # an error output
    assert pay(_episode(["<calc>1</calc>"] * 6), ROOMY) == 1.0  # all four calls ran
    assert pay(_episode(["7"], budgets=Budgets(2, 0)), Budgets(2, 0)) == 0.0
