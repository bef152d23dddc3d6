"""``rg-final``: a chat model's sentence is graded by the last number it writes, with EOS; a
section's ``answer_format: final-number`` makes it the reference rule and demonstrates the
bare answer."""

from __future__ import annotations

import pytest

pytest.importorskip("reasoning_gym")

from postlab.plan.frozen import teaching_plan
from postlab.plan.schema import Plan
from postlab.tasks import gym
from postlab.tasks.contracts import CONTRACTS

SECTION = {"dataset": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                              "max_digits": 2},
           "seed": 7, "sizes": {"train": 6}}


def _item(answer: str) -> gym.GymItem:
    first = gym.generate_items(SECTION)[0]
    return gym.GymItem(first.source, 0, "q", answer, first.entry, first.scorer)


@pytest.mark.parametrize("text, terminated, answer, paid", [
    ("58 + 26 = 84.", True, "84", 1),
    ("The final answer to the given arithmetic problem is 84", True, "84", 1),
    ("84 or maybe 85", True, "84", 0),          # the last number decides
    ("84", False, "84", 0),                     # no EOS, no pay
    ("The answer is 1,000.", True, "1000", 1),  # thousands separators
    ("2 - 8 = -6", True, "-6", 1),
    ("It is 0.50", True, "0.5", 1),             # equal by value
    ("no number here", True, "84", 0),
    ("", True, "84", 0),
])
def test_the_last_number_written_is_judged(text, terminated, answer, paid):
    assert CONTRACTS["rg-final"]([0, 0], text, terminated, _item(answer)) == paid


def test_the_gameable_contract_pays_what_the_final_number_refuses():
    item = _item("84")
    hedge = "Maybe 84, maybe 85"
    assert CONTRACTS["rg-substring"]([0, 0], hedge, False, item) == 1
    assert CONTRACTS["rg-final"]([0, 0], hedge, True, item) == 0


def test_final_number_is_the_reference_rule_and_demonstrates_the_bare_answer():
    items = gym.generate_items(SECTION)
    tagged = gym.GymTask(SECTION, items)
    plain = gym.GymTask(SECTION | {"answer_format": "final-number"}, items)
    assert tagged.contracts[0] == "rg-strict" and plain.contracts[0] == "rg-final"
    assert plain.demonstration([0, 0]) == items[0].answer
    assert tagged.demonstration([0, 0]) == f"<answer>{items[0].answer}</answer>"
    assert plain.longest_answer == max(len(item.answer) for item in items)


def test_final_number_needs_plain_number_answers():
    spelled = {"dataset": "spell_backward", "seed": 1, "sizes": {"train": 3},
               "answer_format": "final-number"}
    items = gym.generate_items(spelled)
    pinned = spelled | {"version": gym.library_version(), "items_sha256": gym.items_sha256(items)}
    plan = Plan.of(teaching_plan() | {"task": "reasoning_gym", "reasoning_gym": pinned,
                                      "split": gym.split_keys(spelled["sizes"])})
    problems = gym.GymTask(pinned, items).plan_problems(plan)
    assert problems[0][0] == "reasoning_gym.answer_format"
    assert "needs plain-number answers" in problems[0][1]
    numbers = SECTION | {"answer_format": "final-number"}
    items = gym.generate_items(numbers)
    pinned = numbers | {"version": gym.library_version(), "items_sha256": gym.items_sha256(items)}
    plan = Plan.of(teaching_plan() | {"task": "reasoning_gym", "reasoning_gym": pinned,
                                      "split": gym.split_keys(numbers["sizes"])})
    assert gym.GymTask(pinned, items).plan_problems(plan) == []
