import pytest
from hypothesis import given
from hypothesis import strategies as st

from postlab.rl.losses import clipped_term, token_coefficients


def test_answer_5_clipped_term():
    assert clipped_term(1.3, 1.0, 0.2) == pytest.approx(1.2)
    assert clipped_term(1.3, -1.0, 0.2) == pytest.approx(-1.3)
    assert clipped_term(0.7, -1.0, 0.2) == pytest.approx(-0.8)
    assert clipped_term(0.7, 1.0, 0.2) == pytest.approx(0.7)


@given(st.floats(0.81, 1.19), st.floats(-5, 5))
def test_clipped_term_inside_range_is_plain(ratio, advantage):
    assert clipped_term(ratio, advantage, 0.2) == pytest.approx(ratio * advantage)


def test_answer_4_coefficients():
    seq = token_coefficients([4, 16], "seq-mean-token-mean", per_sequence_units=True)
    tok = token_coefficients([4, 16], "token-mean", per_sequence_units=True)
    assert seq[0] == [0.25] * 4 and seq[1] == [1 / 16] * 16
    assert tok[0] == [pytest.approx(0.1)] * 4 and tok[1] == [pytest.approx(0.1)] * 16


def test_raw_coefficients_sum_to_one_for_means():
    for reduction in ("token-mean", "seq-mean-token-mean"):
        weights = token_coefficients([3, 5, 1], reduction)
        assert sum(map(sum, weights)) == pytest.approx(1)
    const = token_coefficients([3, 5, 1], "constant-normaliser", max_tokens=6)
    assert const[0][0] == pytest.approx(1 / 18)
    assert sum(map(sum, const)) == pytest.approx(9 / 18)


def test_bad_lengths_and_names():
    with pytest.raises(ValueError):
        token_coefficients([], "token-mean")
    with pytest.raises(ValueError):
        token_coefficients([3, 7], "constant-normaliser", max_tokens=6)
    with pytest.raises(KeyError, match="known"):
        token_coefficients([3], "sum")
