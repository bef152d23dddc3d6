"""The plan's RL settings in the form the shared core (:mod:`postlab.rl.objective`) takes.

Both engines and the cost estimate read them here, so a new option is wired in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from postlab.rl.algorithms import algorithm
from postlab.rl.objective import Algorithm

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


def algorithm_of(plan: Plan) -> Algorithm:
    """The advantage estimator, loss reduction and KL estimator the plan names."""
    return algorithm(advantage=plan.advantage, loss_reduction=plan.loss_reduction,
                     kl=plan.kl)


def clip_range(plan: Plan) -> tuple[float, float]:
    """(clip_low, clip_high): ``clip_high`` absent or null means the symmetric clip."""
    return plan.clip, plan.clip_high or plan.clip
