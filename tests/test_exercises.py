"""Every number in answers.md that arithmetic can show, computed by the library."""

import pytest

from postlab.analysis.exercises import EXERCISES
from postlab.cli import main


def test_answer_1():
    v = EXERCISES[1]().values
    assert v["1010"] == {"strict": 0, "substring": 1}
    assert v["1"] == {"strict": 0, "substring": 1}


def test_answer_2():
    v = EXERCISES[2]().values
    assert v["mixed"] == pytest.approx([1, 1, 1, 1, -1, -1, -1, -1])
    assert v["constant"] == [0] * 8


def test_answer_3():
    v = EXERCISES[3]().values
    assert v["contrast"] == pytest.approx(0.077255, abs=5e-7)
    assert round(v["groups"], 2) == 12.94


def test_answer_4():
    v = EXERCISES[4]().values
    assert v["seq-mean-token-mean"] == [pytest.approx(1 / 4), pytest.approx(1 / 16)]
    assert v["token-mean"] == [pytest.approx(1 / 10), pytest.approx(1 / 10)]


def test_answer_5():
    v = EXERCISES[5]().values
    assert v[1.0] == pytest.approx(1.2) and v[-1.0] == pytest.approx(-1.3)


def test_answer_6():
    v = EXERCISES[6]().values
    assert set(v["overlaps"].values()) == {0}
    assert sum(v["sizes"].values()) == 100


def test_answer_7():
    v = EXERCISES[7]().values
    assert v["before"] == {"correct": 2, "accuracy": 0.25, "covered": 2}
    assert v["after"] == {"correct": 4, "accuracy": 0.5, "covered": 1}


def test_answer_10():
    v = EXERCISES[10]().values
    assert v["007"] == {"strict": 1, "exact": 0}
    assert v["7"] == {"strict": 1, "exact": 1}


def test_exercises_command(capsys):
    assert main(["exercises"]) == 0
    out = capsys.readouterr().out
    assert "12.94" in out and "1/16" in out and "-1.3" in out
    assert main(["exercises", "8"]) == 0
    assert "argument" in capsys.readouterr().out
    assert main(["exercises", "11"]) == 2
