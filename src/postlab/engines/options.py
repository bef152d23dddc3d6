"""The plan's RL settings in the form the shared core (:mod:`postlab.rl.objective`) takes.

Both engines and the cost estimate read them here, so a new option is wired in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from postlab.rl.algorithms import algorithm
from postlab.rl.objective import SAPO_TEMPERATURES, Algorithm, PolicySettings

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


def algorithm_of(plan: Plan) -> Algorithm:
    """The advantage estimator, loss reduction, KL estimator and policy loss the plan
    names."""
    return algorithm(advantage=plan.advantage, loss_reduction=plan.loss_reduction,
                     kl=plan.kl, policy_loss=plan.policy_loss)


def clip_range(plan: Plan) -> tuple[float, float]:
    """(clip_low, clip_high): ``clip_high`` absent or null means the symmetric clip."""
    return plan.clip, plan.clip_high or plan.clip


def gate_temperatures(plan: Plan) -> tuple[float, float]:
    """(tau for positive advantages, tau for negative ones): SAPO's gate."""
    positive, negative = SAPO_TEMPERATURES
    return (positive if plan.sapo_tau_pos is None else plan.sapo_tau_pos,
            negative if plan.sapo_tau_neg is None else plan.sapo_tau_neg)


def describe_policy_loss(plan: Plan) -> str:
    """The policy loss and the settings it reads, in a few words (reports and the page say
    which loss trained the arms): ``ppo-clip, clip 0.2``, ``sapo, tau 1/1.05``."""
    name = plan.policy_loss
    if name == "sapo":
        positive, negative = gate_temperatures(plan)
        return f"{name}, tau {positive:g}/{negative:g}"
    low, high = clip_range(plan)
    return f"{name}, clip {low:g}" + ("" if high == low else f"/{high:g}")


def policy_settings(plan: Plan) -> PolicySettings:
    """What the plan's policy loss reads, for one model."""
    return PolicySettings(*clip_range(plan), *gate_temperatures(plan))
