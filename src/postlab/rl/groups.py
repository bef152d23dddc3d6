"""The learning signal a group of sampled answers can carry.

Group-normalised advantages are zero when every answer in a group got the same reward, so the
probability that a group is mixed decides how much of each RL batch teaches anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: Added to the group's standard deviation so a constant group divides by a non-zero number.
STD_EPSILON = 1e-8


def contrast_probability(p: float, group_size: int = 8) -> float:
    """P(a group of ``group_size`` independent answers holds both rewards), success rate p."""
    return 1 - p**group_size - (1 - p) ** group_size


def expected_groups_until_contrast(p: float, group_size: int = 8) -> float:
    """Mean number of groups drawn until the first mixed one (geometric waiting time).

    Assumes one question with a fixed success probability and independent groups (answer 3).
    """
    q = contrast_probability(p, group_size)
    if q <= 0:
        return math.inf
    return 1 / q


def group_advantages(rewards: Sequence[float], epsilon: float = STD_EPSILON) -> list[float]:
    """(r - mean) / (population std + epsilon) within one group; all zeros for a constant group."""
    n = len(rewards)
    if n == 0:
        raise ValueError("a group needs at least one reward")
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
    return [(r - mean) / (std + epsilon) for r in rewards]
