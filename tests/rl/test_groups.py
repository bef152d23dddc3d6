import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postlab.rl.groups import contrast_probability, expected_groups_until_contrast, group_advantages


def test_answer_3_expected_groups():
    assert contrast_probability(0.01, 8) == pytest.approx(0.077255, abs=5e-7)
    assert expected_groups_until_contrast(0.01, 8) == pytest.approx(12.94, abs=0.005)


def test_contrast_by_hand():
    assert contrast_probability(0.5, 2) == pytest.approx(0.5)
    assert contrast_probability(0.5, 8) == pytest.approx(1 - 2 / 256)
    assert contrast_probability(0.0, 8) == 0
    assert expected_groups_until_contrast(1.0, 8) == math.inf


def test_answer_2_advantages():
    assert group_advantages([1, 1, 1, 1, 0, 0, 0, 0]) == pytest.approx([1] * 4 + [-1] * 4)
    assert group_advantages([0] * 8) == [0.0] * 8
    assert group_advantages([1] * 8) == [0.0] * 8


def test_advantages_by_hand_uneven():
    # rewards 1,0,0,0: mean 0.25, population std sqrt(3)/4
    std = math.sqrt(3) / 4
    assert group_advantages([1, 0, 0, 0]) == pytest.approx(
        [0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std])


@given(st.lists(st.sampled_from([0, 1]), min_size=2, max_size=16))
def test_advantages_sum_to_zero(rewards):
    assert sum(group_advantages(rewards)) == pytest.approx(0, abs=1e-6)
