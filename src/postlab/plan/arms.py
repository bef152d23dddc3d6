"""Arms as pipelines (answer 9): what each arm trains, from which model, under which rule.

A plan's ``arms`` lists strings or objects. A string names a reward contract and means the
teaching pipeline: SFT, then RL from the SFT model under that contract. An object names the
pipeline explicitly, so a plan can compare SFT only, RL only and SFT then RL at matched cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from postlab.plan.schema import ArmSpec, Plan

PIPELINES = {
    "sft-then-rl": "RL from the SFT model, with the SFT model as the KL reference",
    "rl-only": "RL from the initial (untrained) model, with that model as the KL reference",
    "sft-only": "more SFT steps from the SFT model, no RL (a demonstration-only baseline)",
    "sft-selected": "SFT from the untrained weights with as many steps and demonstrations as "
                    "the plan's SFT, chosen by the arm's `selection` rule instead of at random "
                    "(random against by-difficulty selection at matched data and compute)",
}
#: Pipelines that train no RL: their stage is SFT.
SFT_PIPELINES = ("sft-only", "sft-selected")


@dataclass(frozen=True)
class Arm:
    name: str
    pipeline: str
    contract: str | None  # the reward contract RL trains on; None for the SFT pipelines
    sft_steps: int | None  # extra SFT steps of an sft-only arm
    selection: str | None = None  # an sft-selected arm's demonstration rule

    @property
    def is_rl(self) -> bool:
        return self.pipeline not in SFT_PIPELINES

    @property
    def from_untrained(self) -> bool:
        """Whether the arm starts from the untrained weights (not from the SFT model)."""
        return self.pipeline in ("rl-only", "sft-selected")

    def own_sft_steps(self, plan: Plan) -> int:
        """SFT steps the arm trains itself: an sft-only arm's extra ones, an sft-selected
        arm's (the plan's, matched), none for an RL arm."""
        if self.pipeline == "sft-selected":
            return plan.sft_steps
        return self.sft_steps or 0


def parse_arm(entry: str | ArmSpec) -> Arm:
    """A plan's arm: a contract's name (SFT, then RL under it), or an arm object."""
    if isinstance(entry, str):
        return Arm(name=entry, pipeline="sft-then-rl", contract=entry, sft_steps=None)
    return Arm(name=entry.name, pipeline=entry.pipeline, contract=entry.contract,
               sft_steps=entry.sft_steps, selection=entry.selection)


def arm_specs(plan: Plan) -> list[Arm]:
    return [parse_arm(entry) for entry in plan.arms]


def arm_names(plan: Plan) -> list[str]:
    return [arm.name for arm in arm_specs(plan)]


def rl_contracts(plan: Plan) -> dict[str, str]:
    """Stage name -> the contract it was trained on, for RL arms."""
    return {arm.name: arm.contract for arm in arm_specs(plan) if arm.contract is not None}


def plan_contracts(plan: Plan) -> tuple[str, ...]:
    """The contracts a plan's results are reported under: the task's, in its order, then any
    other contract the plan's arms train on, in arm order, except one paid at random (it
    judges no answer: ``postlab.tasks.contracts.DRAWN``)."""
    from postlab.tasks.contracts import DRAWN
    from postlab.tasks.registry import task_for

    names = list(task_for(plan).contracts)
    names += [arm.contract for arm in arm_specs(plan)
              if arm.contract is not None and arm.contract not in DRAWN]
    return tuple(dict.fromkeys(names))
