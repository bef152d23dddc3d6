"""Tools for agent episodes: the calculator's arithmetic against values worked by hand and
against a separate evaluator, the checker and its budget, call parsing, and a failing tool
recorded as its output."""

from __future__ import annotations

import random
import re

import pytest

from postlab.tasks.tools import (
    MOST_ARGUMENT,
    MOST_OUTPUT,
    TOOLS,
    Calculator,
    Call,
    Checker,
    Observation,
    Question,
    evaluate,
    find_call,
    run_tool,
    tool_for,
)


@pytest.mark.parametrize(("expression", "value"), [
    ("3+4", 7), ("12*3", 36), ("2+3*4", 14), ("(2+3)*4", 20), ("10-7-2", 1), ("-5+2", -3),
    ("--5", 5), ("2*-3", -6), (" 7 + 8 ", 15), ("007", 7), ("((9))", 9), ("99*99", 9801),
    ("+5", 5), ("\n3 +\t4\n", 7), ("-(2+3)*4", -20)])
def test_the_calculator_by_hand(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(("expression", "says"), [
    ("", "empty"), ("3+", "expected a number at 2, found the end"),
    ("3/4", "unexpected '/' at 1"), ("1 2", "unexpected '2' at 2"), (" 3+", "at 3"),
    ("(3+4", "missing ')'"), ("3+4)", "unexpected ')'"),
    ("__import__('os')", "expected a number at 0"), ("2**3", "expected a number at 2"),
    ("٣+1", "expected a number at 0"), ("1" * (MOST_ARGUMENT + 1), "longer than")])
def test_the_calculator_refuses_what_is_not_its_arithmetic(expression, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        evaluate(expression)
    reply = Calculator().step(expression)
    assert reply.error and reply.text == "error" and says in reply.detail


def _plain(tokens: list[str]) -> int:
    """A separate evaluator: left to right with * before +/-, over a flat token list."""
    products, signs, current = [], [1], int(tokens[0])
    for operator, number in zip(tokens[1::2], tokens[2::2], strict=True):
        if operator == "*":
            current *= int(number)
        else:
            products.append(current)
            signs.append(1 if operator == "+" else -1)
            current = int(number)
    products.append(current)
    return sum(sign * value for sign, value in zip(signs, products, strict=True))


def test_the_calculator_agrees_with_a_plain_evaluator_on_random_expressions():
    rng = random.Random(5)
    for _ in range(2000):
        count = rng.randint(1, 6)
        tokens = [str(rng.randint(0, 999))]
        for _ in range(count - 1):
            tokens += [rng.choice("+-*"), str(rng.randint(0, 999))]
        value = _plain(tokens)
        assert evaluate("".join(tokens)) == value, tokens
        # spaces between tokens, a bracketed whole and its negation read the same value
        assert evaluate(" ".join(tokens)) == value, tokens
        assert evaluate(f"({' '.join(tokens)})") == value
        assert evaluate(f"-({''.join(tokens)})") == -value


def test_the_checker_says_right_or_wrong_within_its_budget():
    checker = tool_for("check", budget=2)
    checker.reset(Question(pair=(3, 4)))
    assert checker.step("8") == Observation(text="wrong")
    assert checker.step(" 7 ") == Observation(text="right", exhausted=True)
    assert checker.step("7") == Observation(text="error", exhausted=True, error=True,
                                            detail="no checks left")
    checker.reset(Question(pair=(3, 4), answer=lambda pair: pair[0] * pair[1]))
    assert checker.step("12").text == "right"  # the task's answer, reset with the question


def test_a_checker_refuses_a_long_argument_as_a_spent_check():
    checker = Checker(budget=1)
    checker.reset(Question(pair=(3, 4)))
    reply = checker.step("7" * (MOST_ARGUMENT + 1))
    assert reply.error and reply.exhausted and "longer than" in reply.detail


def test_a_calculator_budget_counts_its_calls():
    calc = Calculator(budget=1)
    calc.reset(Question(pair=(1, 2)))
    assert calc.step("1+2") == Observation(text="3", exhausted=True)
    assert calc.step("1+2").error
    calc.reset(Question(pair=(1, 2)))
    assert calc.step("2*2").text == "4"
    spent = Calculator(budget=0)
    spent.reset(Question(pair=(1, 2)))
    assert spent.step("1+1") == Observation(text="error", exhausted=True, error=True,
                                            detail="no calls left")


def test_a_call_counts_only_when_complete_at_the_end_of_a_turn():
    names = TOOLS.names()
    assert find_call("let me see <calc>3+4</calc>", names) == Call("calc", "3+4")
    assert find_call("<check>7</check>", names) == Call("check", "7")
    assert find_call("<calc>3+4</calc> so 7", names) is None  # an answer after the call
    assert find_call("<calc>3+4", names) is None  # never closed: an answer
    assert find_call("<calc>3+4</check>", names) is None
    assert find_call("<calc>3+4</calc>", ["check"]) is None  # not a tool of this episode
    assert find_call("so <calc>3+4</calc>\n ", names) == Call("calc", "3+4")  # then whitespace
    assert find_call("<calc>1<calc>2+2</calc>", names) == Call("calc", "2+2")  # last opening
    assert find_call("<calc>\n2*3\n</calc>", names) == Call("calc", "\n2*3\n")
    assert evaluate(find_call("<calc>\n2*3\n</calc>", names).argument) == 6


def test_an_unknown_tool_gets_did_you_mean():
    with pytest.raises(KeyError, match="did you mean calc"):
        tool_for("calk")


def test_a_tool_that_raises_is_recorded_as_its_error_output():
    class Broken:
        name, version = "broken", "0"
        output_characters, argument_characters = "0123456789", "0123456789"

        def reset(self, question):
            pass

        def step(self, argument):
            raise ZeroDivisionError("division by zero")

    reply = run_tool(Broken(), "1/0")
    assert reply == Observation(text="error", error=True,
                                detail="ZeroDivisionError: division by zero")
    with pytest.raises(RuntimeError, match="before reset"):
        Checker().step("7")  # a caller's bug, not the policy's input: raised


def test_an_output_too_long_or_outside_the_tools_alphabet_is_its_error_output():
    """A character tokenizer must encode every output, and an episode's budget hold it."""
    calc = Calculator()
    calc.reset(Question(pair=(1, 2)))
    reply = run_tool(calc, "*".join(["99999"] * 6))  # 30 digits: past MOST_OUTPUT
    assert reply.text == "error" and "longer than" in reply.detail

    class Chatty(Calculator):
        def step(self, argument):
            return Observation(text="seven")

    assert run_tool(Chatty(), "3+4").text == "error"
    assert len(str(99999 ** 4)) <= MOST_OUTPUT < len(str(99999 ** 6))
