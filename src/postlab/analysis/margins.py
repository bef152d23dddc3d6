"""Every equivalence margin, each with the reason it has the size it has, in one place.

Two engines are declared equivalent on a metric when the 90% interval of the difference of
their means over seeds lies inside (-margin, +margin) (:mod:`.equivalence`). A margin is fixed
before the comparison is run, so it is written here, read by the code, the benchmark and the
tests, and cited by the README; changing one is a change a reviewer sees in this file's history.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Margin:
    """A margin on a metric's own scale, and the one-sentence reason for its size."""

    value: float
    why: str


#: For the benchmark's 32 or more seeds per engine.
EQUIVALENCE: dict[str, Margin] = {
    "strict_success": Margin(0.03, "held-out strict success is near 0.04 on the teaching "
                                   "plan, so a difference as large as the quantity itself is "
                                   "ruled out, not subtler ones"),
    "coverage": Margin(0.10, "coverage counts held-out questions (19 in the teaching plan), so "
                             "0.10 is two questions"),
    "hacking_gap": Margin(0.03, "the substring arm's held-out gap is near 0.025 on the teaching "
                                "plan: a difference as large as the gap itself is ruled out"),
    "final_kl": Margin(math.log(1.5), "KL spans orders of magnitude across seeds and kl_beta, "
                                      "so it is compared as log KL; a ratio of 1.5 is under "
                                      "the 2x steps of a kl_beta sweep"),
}

#: For the test suite's CI-sized check with 16 seeds per engine: wider where 16 seeds need it.
CI_EQUIVALENCE: dict[str, Margin] = {
    "strict_success": Margin(0.04, "16 seeds per engine give an interval about 1.4 times as "
                                   "wide as 32 do, so the margin grows by a third"),
    "coverage": Margin(0.12, "as strict success, wider for 16 seeds; still under three "
                             "held-out questions"),
    "hacking_gap": Margin(0.03, "the benchmark's: the gap's spread over seeds is small enough "
                                "for 16 seeds to resolve it"),
    "final_kl": Margin(math.log(2.0), "a ratio of 2, the step of a kl_beta sweep, for a "
                                      "quantity this spread over 16 seeds"),
}


def values(margins: dict[str, Margin]) -> dict[str, float]:
    """The margins' values by metric, as the tests of :mod:`.equivalence` take them."""
    return {name: margin.value for name, margin in margins.items()}
