"""Each registered policy loss against a float64 loop written from its paper, alone and for
stacked members, plus values worked by hand.

The loops (``tests/lossloops.py``) are the definitions (PPO's clip; GSPO's sequence ratio;
CISPO's clipped, stopped importance weight; SAPO's gate), evaluated token by token in Python
floats; the gradient of each loss is checked against the loop's by finite differences.
"""

from __future__ import annotations

import math

import pytest
import torch
from lossloops import LOOPS, STOPPED

from postlab.rl.algorithms import POLICY_LOSSES, algorithm
from postlab.rl.objective import PolicySettings

MEMBERS, SEQUENCES, LENGTH = 3, 6, 5

#: Each member's (clip_low, clip_high, tau_pos, tau_neg).
SETTINGS = [(0.2, 0.2, 1.0, 1.05), (0.1, 0.3, 0.5, 2.0), (0.3, 0.28, 3.0, 1.0)]


def _batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    logp = -torch.rand(MEMBERS, SEQUENCES, LENGTH, generator=generator, dtype=torch.float64) * 3
    old = logp + 0.4 * torch.randn(logp.shape, generator=generator, dtype=torch.float64)
    lengths = torch.randint(1, LENGTH + 1, (MEMBERS, SEQUENCES), generator=generator)
    mask = torch.arange(LENGTH)[None, None, :] < lengths[..., None]
    advantage = torch.randn(MEMBERS, SEQUENCES, generator=generator, dtype=torch.float64)
    advantage[:, 0] = 0.0  # a zero advantage takes SAPO's negative temperature
    return logp, old, mask, advantage


def _definition(name: str):
    if name not in LOOPS:
        pytest.fail(f"policy loss {name!r} is registered but has no loop written from its "
                    "source in tests/lossloops.py; add one")
    return LOOPS[name]


def _loop_loss(name: str, logp, old, mask, advantage, setting, frozen=None) -> float:
    """The token-mean of minus the gains, in Python floats (``frozen``: CISPO's weights)."""
    total, count = 0.0, 0
    for s in range(logp.shape[0]):
        n = int(mask[s].sum())
        now = [float(v) for v in logp[s, :n]]
        before = [float(v) for v in old[s, :n]]
        if frozen is not None:  # log pi moves, the weight stays at the sampled ratio's
            before = [v - f for v, f in zip(now, frozen[s][:n], strict=True)]
        gains, _, _ = _definition(name)(now, before, float(advantage[s]), *setting)
        total -= sum(gains)
        count += n
    return total / count


def _torch_terms(name: str, logp, old, mask, advantage, settings: PolicySettings):
    fn = algorithm(advantage="group-std", loss_reduction="token-mean", kl="none",
                   policy_loss=name).policy
    surrogate = fn(logp, old, advantage, mask, settings)
    # the token-mean the loops take (reductions are tested on their own, test_algorithms)
    loss = (-surrogate.gain * mask).sum((-2, -1)) / mask.sum((-2, -1))
    return surrogate, loss


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_each_loss_is_its_definition_for_each_member(name):
    logp, old, mask, advantage = _batch()
    stacked_settings = PolicySettings(
        *(torch.tensor([s[i] for s in SETTINGS], dtype=torch.float64) for i in range(4)))
    surrogate, loss = _torch_terms(name, logp, old, mask, advantage, stacked_settings)
    assert loss.shape == (MEMBERS,)
    for m, setting in enumerate(SETTINGS):
        want = _loop_loss(name, logp[m], old[m], mask[m], advantage[m], setting)
        assert float(loss[m]) == pytest.approx(want, rel=1e-12, abs=1e-12)
        for s in range(SEQUENCES):
            n = int(mask[m, s].sum())
            _, outside, _ = _definition(name)([float(v) for v in logp[m, s, :n]],
                                           [float(v) for v in old[m, s, :n]],
                                           float(advantage[m, s]), *setting)
            assert surrogate.outside[m, s, :n].tolist() == outside
        # one model alone: the same bits as its slice of the stack
        lone, lone_loss = _torch_terms(name, logp[m], old[m], mask[m], advantage[m],
                                       PolicySettings(*setting))
        assert torch.equal(lone.gain, surrogate.gain[m])
        assert torch.equal(lone_loss, loss[m])


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_each_loss_has_its_definitions_gradient(name):
    logp, old, mask, advantage = _batch(1)
    m, setting = 1, SETTINGS[1]
    point = logp[m].clone().requires_grad_(True)
    _, loss = _torch_terms(name, point, old[m], mask[m], advantage[m],
                           PolicySettings(*setting))
    loss.backward()
    frozen = None
    if name in STOPPED:  # the weight is the sampled ratio's, a constant to the gradient
        frozen = (logp[m] - old[m]).tolist()
    step = 1e-6
    for s in range(SEQUENCES):
        for t in range(int(mask[m, s].sum())):
            up, down = logp[m].clone(), logp[m].clone()
            up[s, t] += step
            down[s, t] -= step
            numeric = (_loop_loss(name, up, old[m], mask[m], advantage[m], setting, frozen)
                       - _loop_loss(name, down, old[m], mask[m], advantage[m], setting,
                                    frozen)) / (2 * step)
            assert float(point.grad[s, t]) == pytest.approx(numeric, rel=1e-5, abs=1e-7), (
                name, s, t)
    assert float(point.grad[~mask[m]].abs().sum()) == 0.0  # padding learns nothing


def test_on_policy_every_loss_gives_the_policy_gradient():
    """At ratio 1 (the first update of a rollout) PPO's clip, GSPO and CISPO all give
    A x grad log pi, and SAPO's gate has slope 1 there, so it does too."""
    logp, _, mask, advantage = _batch(2)
    grads = {}
    for name in POLICY_LOSSES.names():
        point = logp[0].clone().requires_grad_(True)
        _, loss = _torch_terms(name, point, point.detach(), mask[0], advantage[0],
                               PolicySettings(0.2, 0.2))
        loss.backward()
        grads[name] = point.grad
    for name, grad in grads.items():
        assert torch.allclose(grad, grads["ppo-clip"], rtol=1e-12, atol=1e-15), name


def test_losses_by_hand():
    """Small cases worked on paper."""
    symmetric = PolicySettings(0.2, 0.2)

    def terms(name, logp, old, a, settings=symmetric):
        logp = torch.tensor([logp], dtype=torch.float64)
        mask = torch.ones_like(logp, dtype=torch.bool)
        fn = algorithm(advantage="group-std", loss_reduction="token-mean", kl="none",
                       policy_loss=name).policy
        found = fn(logp, torch.tensor([old], dtype=torch.float64),
                   torch.tensor([a], dtype=torch.float64), mask, settings)
        return found.gain[0], found.outside[0]

    half, double = math.log(0.5), math.log(2.0)
    # GSPO: token ratios 2 and 1/2 average to s = 1 in log space: nothing is clipped, while
    # PPO's token clip cuts both tokens (2 > 1.2 above with A > 0; 0.5 < 0.8 below)
    gain, outside = terms("gspo", [double, half], [0.0, 0.0], 1.0)
    assert gain.tolist() == pytest.approx([1.0, 1.0]) and not outside.any()
    gain, outside = terms("ppo-clip", [double, half], [0.0, 0.0], 1.0)
    assert gain.tolist() == pytest.approx([1.2, 0.5]) and outside.all()
    # CISPO: the weight is clipped to 1.2, times A = -1, times log pi = log 2
    gain, outside = terms("cispo", [double], [0.0], -1.0)
    assert gain.tolist() == pytest.approx([-1.2 * double]) and outside.all()
    # SAPO at ratio 1: the gate is sigmoid(0) x 4/tau = 2/tau, here tau = 1.05 (A < 0)
    gain, _ = terms("sapo", [0.0], [0.0], -1.0, PolicySettings(0.2, 0.2, 1.0, 1.05))
    assert gain.tolist() == pytest.approx([-2 / 1.05])


def test_a_plan_naming_an_unknown_loss_is_told_the_known_ones():
    from postlab.plan.frozen import teaching_plan
    from postlab.plan.validation import validate_plan

    (field, message), = validate_plan(teaching_plan() | {"policy_loss": "gpso"})
    assert field == "policy_loss" and "did you mean gspo?" in message
    assert "known: ppo-clip, gspo, cispo, sapo" in message
    (field, message), = validate_plan(teaching_plan() | {"policy_loss": "sapo",
                                                        "sapo_tau_neg": 0.0})
    assert field == "sapo_tau_neg" and "greater than 0" in message
