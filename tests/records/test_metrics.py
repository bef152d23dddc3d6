import pytest

from postlab.records.metrics import coverage, evaluate, metrics, summarize

ROWS = [
    [1, 2, "3", True],      # strict + substring
    [1, 2, "33", True],     # substring only
    [1, 2, "3", False],     # substring only, truncated
    [4, 5, "09", True],     # strict (leading zero) + substring
]


def test_metrics_by_hand():
    m = metrics(ROWS)
    assert m == {"n": 4, "strict": 2, "substring": 4, "strict_rate": 0.5,
                 "substring_rate": 1.0, "mean_tokens": (2 + 3 + 1 + 3) / 4, "truncated": 1}


def test_coverage_counts_questions_with_a_success():
    rows = [[1, 2, "3", True], [1, 2, "4", True], [4, 5, "1", True], [4, 5, "2", True]]
    assert coverage(rows, 2) == 1
    assert evaluate(rows, 2)["covered"] == 1 and evaluate(rows, 2)["questions"] == 2


def test_groups_must_hold_one_question():
    with pytest.raises(ValueError, match="mixes"):
        coverage([[1, 2, "3", True], [2, 1, "3", True]], 2)
    with pytest.raises(ValueError, match="groups of 3"):
        coverage(ROWS, 3)


def test_summarize_shape_and_order():
    from conftest import tiny_record

    from postlab.records.models import Record

    summary = summarize(Record.of(tiny_record("0" * 64)), 2)
    assert [(e["seed"], e["stage"]) for e in summary] == [(7, "initial"), (7, "strict")]
    sampled = summary[0]["test"]["sampled"]
    assert list(sampled) == ["n", "strict", "substring", "strict_rate", "substring_rate",
                             "mean_tokens", "truncated", "covered", "questions"]
    # initial sampled: "3","03" for 1+2 (both strict); "999999" (truncated) and "19" for 4+5,
    # neither strict, both holding "9" as a substring
    assert sampled["strict"] == 2 and sampled["substring"] == 4
    assert sampled["truncated"] == 1 and sampled["covered"] == 1
