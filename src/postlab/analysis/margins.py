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


#: For the GPT-2 example plan (``examples/transformer-gpt2.json``: two-digit sums, the strict
#: arm), 32 or more seeds per engine. Fixed on 2026-12-02 after two pilot comparisons (the
#: exact engine on seeds 1-32, the ensemble on seeds 1-64) had shown the spread, and before the
#: comparison on fresh seeds that the README reports.
GPT2_EXAMPLE_EQUIVALENCE: dict[str, Margin] = EQUIVALENCE | {
    "strict_success": Margin(0.10, "strict success is near 0.8 on this plan and spreads over "
                                   "seeds about four times as widely as on the teaching plan "
                                   "(an occasional seed collapses below 0.3), so +-0.03 would "
                                   "take some 300 seeds per engine; 0.10, an eighth of the "
                                   "success itself and 12 of the 120 held-out questions, still "
                                   "rules out a difference that would change whether the "
                                   "transformer learns the task"),
    "coverage": Margin(0.10, "coverage is near 0.9 on this plan; 0.10 is 12 of its 120 "
                             "held-out questions"),
}

#: The suite's smaller version of the GPT-2 check: 8 seeds per engine of a shortened GPT-2
#: example plan (fewer SFT and RL steps).
CI_GPT2_EXAMPLE_EQUIVALENCE: dict[str, Margin] = {
    "strict_success": Margin(0.20, "8 seeds per engine give an interval twice as wide as 32 "
                                   "do, so the benchmark's 0.10 doubles"),
    "coverage": Margin(0.20, "as strict success: twice the benchmark's for a quarter of the "
                             "seeds"),
    "hacking_gap": Margin(0.03, "the benchmark's: the strict arm's gap stays near zero on "
                                "every seed"),
    "final_kl": Margin(math.log(2.0), "a ratio of 2, the step of a kl_beta sweep, for a "
                                      "quantity this spread over 8 seeds"),
}

#: Each set of margins by the name the benchmark's ``--margins`` takes.
SETS: dict[str, dict[str, Margin]] = {
    "teaching": EQUIVALENCE,
    "ci": CI_EQUIVALENCE,
    "gpt2-example": GPT2_EXAMPLE_EQUIVALENCE,
    "ci-gpt2-example": CI_GPT2_EXAMPLE_EQUIVALENCE,
}


def values(margins: dict[str, Margin]) -> dict[str, float]:
    """The margins' values by metric, as the tests of :mod:`.equivalence` take them."""
    return {name: margin.value for name, margin in margins.items()}
