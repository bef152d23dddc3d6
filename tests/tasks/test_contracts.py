import pytest
from hypothesis import given
from hypothesis import strategies as st

from postlab.tasks.contracts import CONTRACTS, exact, score, strict, substring
from postlab.tasks.rows import Row


@pytest.mark.parametrize(("pair", "text", "terminated", "expected"), [
    ((5, 5), "10", True, 1),
    ((5, 5), "010", True, 1),       # leading zeros allowed
    ((5, 5), "10", False, 0),       # must terminate
    ((0, 0), "", True, 0),          # must be non-empty
    ((0, 0), "0", True, 1),
    ((5, 5), "1010", True, 0),
    ((1, 2), "3 ", True, 0),
    ((1, 2), "+3", True, 0),
    ((1, 2), "٣", True, 0),         # a non-ASCII digit is not a digit here
])
def test_strict(pair, text, terminated, expected):
    assert strict(pair, text, terminated) == expected


@pytest.mark.parametrize(("pair", "text", "terminated", "expected"), [
    ((5, 5), "1010", True, 1),
    ((0, 1), "1", False, 1),        # even unterminated
    ((9, 9), "1", True, 0),
    ((9, 9), "x18x", False, 1),
])
def test_substring(pair, text, terminated, expected):
    assert substring(pair, text, terminated) == expected


@pytest.mark.parametrize(("pair", "text", "terminated", "expected"), [
    ((3, 4), "7", True, 1), ((3, 4), "007", True, 0), ((3, 4), "7", False, 0),
])
def test_exact(pair, text, terminated, expected):
    assert exact(pair, text, terminated) == expected


def test_unknown_contract_lists_known_ones():
    known = ("episode-anywhere, episode-strict, exact, format, per-call, random, rg-final, "
             "rg-score, rg-strict, rg-substring, strict, substring")
    with pytest.raises(KeyError, match=known):
        score(Row(1, 1, "2", True), "lenient")


def test_registry_refuses_duplicates():
    with pytest.raises(ValueError, match="already registered"):
        CONTRACTS.register("strict")(strict)


texts = st.text(alphabet="0123456789+=~_", max_size=6)
pairs = st.tuples(st.integers(0, 9), st.integers(0, 9))


@given(pairs, texts, st.booleans())
def test_exact_implies_strict_implies_substring(pair, text, terminated):
    assert exact(pair, text, terminated) <= strict(pair, text, terminated)
    if strict(pair, text, terminated) and text.lstrip("0") != "":
        # strict accepts digits whose value is the sum; then the sum's digits occur unless
        # the value was written with leading zeros only around it (still a substring).
        assert substring(pair, text, terminated) == 1


def test_a_kept_score_is_the_contracts_own_and_follows_its_registration():
    # scores are kept per (contract function, answer, row): a row scored again is the same
    # number, another answer function is scored afresh, and a contract registered again
    # under a name is asked anew, never answered from the one before
    row = Row(2, 3, "5", True)
    assert score(row, "strict") == 1
    assert score(row, "strict", answer=lambda pair: pair[0] * pair[1]) == 0
    assert score(row, "strict") == 1
    calls = []

    def counting(pair, text, terminated, expected=None):
        calls.append(text)
        return 0.5

    with CONTRACTS.registered("half", counting):
        assert [score(row, "half") for _ in range(3)] == [0.5, 0.5, 0.5]
        assert calls == ["5"]  # scored once, then kept
    with CONTRACTS.registered("half", lambda pair, text, terminated, expected=None: 0.25):
        assert score(row, "half") == 0.25
