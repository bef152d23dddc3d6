"""Each algorithm option against hand-computed values, and loops against vectorised code."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from postlab.rl import objective
from postlab.rl.algorithms import ADVANTAGES, KL_ESTIMATORS, REDUCTIONS, resolve
from postlab.rl.groups import group_advantages
from postlab.rl.losses import clipped_term, token_coefficients


def adv(name, rewards):
    return ADVANTAGES[name].fn(torch.tensor(rewards, dtype=torch.float64))


def test_group_std_by_hand():
    out = adv("group-std", [[1, 0, 0, 1]])
    assert out.tolist()[0] == pytest.approx([1, -1, -1, 1], abs=1e-7)


def test_mean_only_by_hand():
    want = [[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0]]
    assert adv("mean-only", [[1, 0, 0, 1], [1, 1, 1, 1]]).tolist() == want


def test_leave_one_out_by_hand():
    out = adv("leave-one-out", [[1, 0, 0, 1]]).tolist()[0]
    assert out == pytest.approx([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3])


def test_group_mean_batch_std_by_hand():
    out = adv("group-mean-batch-std", [[1, 0], [1, 1]]).tolist()
    # centred values 0.5, -0.5, 0, 0: mean 0, population std sqrt(0.5 / 4)
    batch_std = math.sqrt((0.25 + 0.25) / 4)
    assert out[0] == pytest.approx([0.5 / batch_std, -0.5 / batch_std])
    assert out[1] == [0, 0]


@settings(max_examples=50)
@given(st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=4, max_size=4), min_size=1,
                max_size=5))
def test_vectorised_advantages_match_loops(groups):
    vectorised = adv("group-std", groups).tolist()
    for row, expected in zip(vectorised, groups, strict=True):
        assert row == pytest.approx(group_advantages(expected), abs=1e-6)
    loo = adv("leave-one-out", groups).tolist()
    for row, rewards in zip(loo, groups, strict=True):
        loop = [r - (sum(rewards) - r) / (len(rewards) - 1) for r in rewards]
        assert row == pytest.approx(loop)
        assert sum(row) == pytest.approx(0, abs=1e-9)


PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]])
MASK = torch.tensor([[True, True, True, False], [True, False, False, False]])


@pytest.mark.parametrize(("name", "expected"), [
    ("token-mean", (1 + 2 + 3 + 4) / 4),
    ("seq-mean-token-mean", (2 + 4) / 2),
    ("constant-normaliser", (1 + 2 + 3 + 4) / (2 * 4)),
])
def test_reductions_by_hand(name, expected):
    assert REDUCTIONS[name].fn(PER_TOKEN, MASK, 4).item() == pytest.approx(expected)


def test_coefficients_come_from_the_training_reductions():
    per_sequence = [[pytest.approx(1 / 6)] * 3, [pytest.approx(1 / 2)]]
    assert token_coefficients([3, 1], "seq-mean-token-mean") == per_sequence
    constant = [[pytest.approx(1 / 8)] * 3, [pytest.approx(1 / 8)]]
    assert token_coefficients([3, 1], "constant-normaliser", max_tokens=4) == constant


P = torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.6, 0.3]]]).log()
Q = torch.tensor([[[0.25, 0.5, 0.25], [0.2, 0.2, 0.6]]]).log()
TOKENS = torch.tensor([[0, 1]])


def test_exact_kl_matches_torch_distributions():
    ours = KL_ESTIMATORS["exact"].fn(P, Q, TOKENS)
    theirs = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=P),
                                               torch.distributions.Categorical(logits=Q))
    assert torch.allclose(ours, theirs)
    assert KL_ESTIMATORS["exact"].fn(P, P, TOKENS).abs().max() < 1e-7


def test_k1_and_k3_by_hand():
    k1 = KL_ESTIMATORS["k1"].fn(P, Q, TOKENS).tolist()[0]
    assert k1 == pytest.approx([math.log(0.5 / 0.25), math.log(0.6 / 0.2)])
    k3 = KL_ESTIMATORS["k3"].fn(P, Q, TOKENS).tolist()[0]
    ratios = [0.25 / 0.5, 0.2 / 0.6]  # q/p at the sampled tokens
    assert k3 == pytest.approx([r - 1 - math.log(r) for r in ratios])
    assert min(k3) >= 0
    assert KL_ESTIMATORS["none"].fn(P, Q, TOKENS).tolist() == [[0.0, 0.0]]


def test_asymmetric_clipping_by_hand():
    ratio = torch.tensor([[1.25, 1.3, 0.7, 0.7]])
    advantage = torch.tensor([1.0])
    gain = objective.clipped_gain(ratio, advantage, 0.2, 0.28)
    assert gain.tolist()[0] == pytest.approx([1.25, 1.28, 0.7, 0.7])
    negative = objective.clipped_gain(ratio, torch.tensor([-1.0]), 0.2, 0.28)
    assert negative.tolist()[0] == pytest.approx([-1.25, -1.3, -0.8, -0.8])
    assert clipped_term(1.3, 1.0, 0.2, 0.28) == pytest.approx(1.28)
    outside = objective.outside_clip(ratio, 0.2, 0.28).tolist()[0]
    assert outside == [False, True, True, True]
    assert objective.outside_clip(ratio, 0.2, 0.2).tolist()[0] == [True, True, True, True]


def test_teaching_words_resolve_to_entries():
    assert resolve("loss_reduction", teaching_words("loss_reduction")) == "token-mean"
    assert resolve("advantage", teaching_words("advantage")) == "group-std"
    assert resolve("kl", teaching_words("kl")) == "exact"
    with pytest.raises(KeyError, match="known"):
        resolve("kl", "k2")


def teaching_words(field):
    from postlab.plan.frozen import teaching_plan

    return teaching_plan()[field]
