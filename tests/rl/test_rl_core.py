"""The RL core shared by both engines: one model, stacked members, and a plain loop agree."""

from __future__ import annotations

import math

import pytest
import torch

from postlab.rl import objective
from postlab.rl.algorithms import ADVANTAGES, KL_ESTIMATORS, REDUCTIONS, algorithm

MEMBERS, SEQUENCES, LENGTH, VOCAB = 3, 6, 5, 7


def _batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    log_dist = torch.randn(MEMBERS, SEQUENCES, LENGTH, VOCAB, generator=generator)
    log_dist = log_dist.log_softmax(-1)
    ref = (log_dist + 0.3 * torch.randn(log_dist.shape, generator=generator)).log_softmax(-1)
    tokens = torch.randint(0, VOCAB, (MEMBERS, SEQUENCES, LENGTH), generator=generator)
    lengths = torch.randint(1, LENGTH + 1, (MEMBERS, SEQUENCES), generator=generator)
    mask = torch.arange(LENGTH)[None, None, :] < lengths[..., None]
    old = objective.token_log_probs(log_dist, tokens) + 0.2 * torch.randn(
        MEMBERS, SEQUENCES, LENGTH, generator=generator)
    advantage = torch.randn(MEMBERS, SEQUENCES, generator=generator)
    return log_dist, ref, tokens, mask, old, advantage


def _plain_loss(log_dist, ref, tokens, mask, old, advantage, clip_low, clip_high, beta):
    """GRPO's token-mean loss with the exact KL, written as loops over Python floats."""
    total, count = 0.0, 0
    for s in range(tokens.shape[0]):
        for t in range(tokens.shape[1]):
            if not mask[s, t]:
                continue
            token = int(tokens[s, t])
            ratio = math.exp(float(log_dist[s, t, token]) - float(old[s, t]))
            a = float(advantage[s])
            clipped = min(max(ratio, 1 - clip_low), 1 + clip_high)
            gain = min(ratio * a, clipped * a)
            kl = sum(math.exp(float(log_dist[s, t, v]))
                     * (float(log_dist[s, t, v]) - float(ref[s, t, v]))
                     for v in range(log_dist.shape[-1]))
            total += -gain + beta * kl
            count += 1
    return total / count


def test_policy_loss_is_the_plain_loop_for_each_member():
    log_dist, ref, tokens, mask, old, advantage = _batch()
    settings = [(0.2, 0.2, 0.03), (0.1, 0.3, 0.0), (0.3, 0.28, 0.5)]
    low = torch.tensor([s[0] for s in settings], dtype=torch.float64)
    high = torch.tensor([s[1] for s in settings], dtype=torch.float64)
    beta = torch.tensor([s[2] for s in settings])
    rule = algorithm(advantage="group-std", loss_reduction="token-mean", kl="exact")
    stacked = objective.policy_loss(log_dist, ref, tokens, mask, advantage, old, algorithm=rule,
                                    settings=objective.PolicySettings(low, high), kl_beta=beta,
                                    max_tokens=LENGTH)
    assert stacked.loss.shape == (MEMBERS,)
    for m, (clip_low, clip_high, kl_beta) in enumerate(settings):
        want = _plain_loss(log_dist[m], ref[m], tokens[m], mask[m], old[m], advantage[m],
                           clip_low, clip_high, kl_beta)
        assert float(stacked.loss[m]) == pytest.approx(want, rel=1e-5, abs=1e-6)
        lone = objective.policy_loss(log_dist[m], ref[m], tokens[m], mask[m], advantage[m],
                                     old[m], algorithm=rule,
                                     settings=objective.PolicySettings(clip_low, clip_high),
                                     kl_beta=kl_beta, max_tokens=LENGTH)
        # elementwise terms are the same bits alone and stacked; sums agree to rounding
        assert torch.equal(lone.outside, stacked.outside[m])
        assert torch.equal(lone.kl, stacked.kl[m])
        assert float(lone.loss) == pytest.approx(float(stacked.loss[m]), rel=1e-6)
        lone_stats = objective.update_statistics(lone, mask[m])
        stats = objective.update_statistics(stacked, mask)
        for key, value in lone_stats.items():
            assert value.shape == ()
            assert float(value) == pytest.approx(float(stats[key][m]), rel=1e-6, abs=1e-9), key


def test_per_member_clip_range_is_a_lone_model_s_float_bound():
    """The bound a float32 ratio is clamped to is the same bits for a Python float and for a
    member's setting, including settings whose float32 rounding differs from double's."""
    ratio = torch.linspace(0.5, 1.5, 10001)
    advantage = torch.tensor([1.0, -1.0])
    for low, high in [(0.2, 0.28), (0.1, 0.1), (0.3, 0.2), (1 / 3, 0.7)]:
        rows = ratio.expand(2, -1)
        lone = objective.clipped_gain(rows, advantage, low, high)
        members = objective.clipped_gain(
            rows.expand(4, 2, -1), advantage.expand(4, 2),
            torch.tensor([low] * 4, dtype=torch.float64),
            torch.tensor([high] * 4, dtype=torch.float64))
        assert all(torch.equal(members[m], lone) for m in range(4))
        outside = objective.outside_clip(ratio, low, high)
        stacked = objective.outside_clip(ratio.expand(2, -1),
                                         torch.tensor([low, low], dtype=torch.float64),
                                         torch.tensor([high, high], dtype=torch.float64))
        assert torch.equal(stacked[0], outside) and torch.equal(stacked[1], outside)


@pytest.mark.parametrize("name", ADVANTAGES.names())
def test_every_advantage_takes_a_member_dimension(name):
    generator = torch.Generator().manual_seed(1)
    rewards = (torch.rand(MEMBERS, 4, 8, generator=generator) > 0.5).float()
    rewards[1] = rewards[1] * 0.5  # a member with another reward scale
    fn = ADVANTAGES[name].fn
    stacked = fn(rewards)
    for m in range(MEMBERS):
        assert torch.allclose(stacked[m], fn(rewards[m]), rtol=1e-6, atol=1e-7), name


@pytest.mark.parametrize("name", REDUCTIONS.names())
def test_every_reduction_takes_a_member_dimension(name):
    _, _, _, mask, old, _ = _batch(2)
    fn = REDUCTIONS[name].fn
    stacked = fn(old, mask, LENGTH)
    assert stacked.shape == (MEMBERS,)
    for m in range(MEMBERS):
        assert float(stacked[m]) == pytest.approx(float(fn(old[m], mask[m], LENGTH)),
                                                  rel=1e-6), name


@pytest.mark.parametrize("name", KL_ESTIMATORS.names())
def test_every_kl_estimator_takes_a_member_dimension(name):
    log_dist, ref, tokens, _, _, _ = _batch(3)
    fn = KL_ESTIMATORS[name].fn
    stacked = fn(log_dist, ref, tokens)
    assert stacked.shape == tokens.shape
    for m in range(MEMBERS):
        assert torch.equal(stacked[m], fn(log_dist[m], ref[m], tokens[m])), name


def test_group_std_and_masked_mean_per_member():
    rewards = torch.tensor([[1.0, 0, 1, 1, 0, 0], [1.0, 1, 1, 0, 0, 0]])
    std = objective.group_reward_std(rewards, 3)
    assert std.shape == (2, 2, 1)
    assert torch.equal(std[1].flatten(), torch.zeros(2))
    assert torch.equal(std[0], objective.group_reward_std(rewards[0], 3))
    values = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[1.0, 1.0], [1.0, 9.0]]])
    mask = torch.tensor([[[True, False], [True, True]], [[True, True], [False, False]]])
    assert objective.masked_mean(values, mask).tolist() == [8 / 3, 1.0]
    assert objective.masked_mean(values[0], mask[0]).dtype == torch.float64
