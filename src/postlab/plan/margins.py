"""Every equivalence margin and default threshold, each with the reason for its size.

Two engines are declared equivalent on a metric when the 90% interval of the difference of
their means over seeds lies inside (-margin, +margin) (:mod:`postlab.analysis.equivalence`).
A margin is fixed before the comparison is run; a default (the hypotheses' family-wise error
rate, the intervals' confidence, the hacking monitor's false-alarm rate and gaps, the coverage
simulation's goal) is fixed before any run it applies to. So they are written here, once, read
by the plan's schema, the analysis, the benchmarks and the tests, and cited by the README;
changing one is a change a reviewer sees in this file's history. The module sits with the
plan, below the analysis, so that the plan's schema can take its defaults from it.
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

#: For the test suite's CI-sized check: 8 seeds trained by both engines, compared seed by seed.
#: On the teaching plan a seed's success, coverage and hacking gap correlate across the engines
#: (r = 0.6 to 0.9 over 16 seeds, 2026-12-02), so pairing narrows their intervals two- to
#: three-fold; final KL correlates little (r near 0.3).
CI_EQUIVALENCE: dict[str, Margin] = {
    "strict_success": Margin(0.04, "8 paired seeds resolve success about as finely as the "
                                   "benchmark's 32 independent ones (r = 0.89), and the margin "
                                   "is the benchmark's widened by a third, so the suite's "
                                   "check is a coarser version of it, never a finer one"),
    "coverage": Margin(0.12, "as strict success, wider for 8 seeds; still under three "
                             "held-out questions"),
    "hacking_gap": Margin(0.03, "the benchmark's: pairing by seed leaves the gap's interval "
                                "near +-0.01 at 8 seeds"),
    "final_kl": Margin(math.log(2.0), "a ratio of 2, the step of a kl_beta sweep, for a "
                                      "quantity that pairing hardly narrows, over 8 seeds"),
}

#: For the GPT-2 example plan (``examples/transformer-gpt2.json``: two-digit sums, the strict
#: arm), 32 or more seeds per engine. Fixed on 2026-12-02 after two pilot comparisons (the
#: exact engine on seeds 1-32, the ensemble on seeds 1-64) had shown the spread, and before the
#: comparison on fresh seeds that the README reports.
GPT2_EXAMPLE_EQUIVALENCE: dict[str, Margin] = {
    "strict_success": Margin(0.10, "strict success is near 0.8 on this plan and spreads over "
                                   "seeds about four times as widely as on the teaching plan "
                                   "(an occasional seed collapses below 0.3), so +-0.03 would "
                                   "take some 300 seeds per engine; 0.10, an eighth of the "
                                   "success itself and 12 of the 119 held-out questions, still "
                                   "rules out a difference that would change whether the "
                                   "transformer learns the task"),
    "coverage": Margin(0.10, "coverage is near 0.9 on this plan; 0.10 is 12 of its 119 "
                             "held-out questions"),
    "hacking_gap": Margin(0.03, "the strict arm's gap is near 0.001 on this plan; 0.03, the "
                                "teaching plan's margin, still catches a gap as large as a "
                                "substring-trained arm's there"),
    "final_kl": Margin(math.log(1.5), "as on the teaching plan: compared as log KL, a ratio of "
                                      "1.5, under the 2x steps of a kl_beta sweep"),
}

#: For the test suite's CI-sized check on the GPT-2 example plan: 8 seeds trained by both
#: engines and paired, on the plan shortened to 600 SFT and 20 RL steps (about 12 CPU-seconds
#: a seed for both engines, against 38 for the full plan). Fixed on 2026-12-02 from the spread
#: of the per-seed differences over 16 paired seeds of that shortened plan (seeds 1-16; the
#: standard deviation of the difference: success 0.12, coverage 0.27, hacking gap 0.002, log
#: KL 0.48), before the suite's seeds were run. Each margin is about 4.4 standard errors of
#: the 8-seed mean difference (the 90% interval's half-width, 1.9 of them, plus 2.5), so
#: engines that agree pass all four with about 95% probability: the check catches gross
#: differences (an engine that stops learning, a KL off by a factor of two), not the ones the
#: benchmark's 96 seeds resolve.
CI_GPT2_EXAMPLE_EQUIVALENCE: dict[str, Margin] = {
    "strict_success": Margin(0.19, "4.4 standard errors of the 8-seed paired difference "
                                   "(0.12 / sqrt 8): enough to catch an engine whose "
                                   "transformer does not learn the sums, whose success is "
                                   "then a third of the other's or less"),
    "coverage": Margin(0.42, "4.4 standard errors (0.27 / sqrt 8): coverage after 600 SFT "
                             "steps swings with whether a seed has converged, so 8 seeds "
                             "bound it only coarsely"),
    "hacking_gap": Margin(0.03, "the benchmark's: the strict arm's gap is near 0.001 and its "
                                "paired differences are tiny (0.002)"),
    "final_kl": Margin(math.log(2.1), "4.4 standard errors of the paired difference of log "
                                      "KL (0.48 / sqrt 8), about log 2.1: a KL off by a "
                                      "factor of more than two is caught"),
}

#: Each set of margins by the name the benchmark's ``--margins`` takes.
SETS: dict[str, dict[str, Margin]] = {
    "teaching": EQUIVALENCE,
    "ci": CI_EQUIVALENCE,
    "gpt2-example": GPT2_EXAMPLE_EQUIVALENCE,
    "gpt2-ci": CI_GPT2_EXAMPLE_EQUIVALENCE,
}


def values(margins: dict[str, Margin]) -> dict[str, float]:
    """The margins' values by metric, as the tests of :mod:`.equivalence` take them."""
    return {name: margin.value for name, margin in margins.items()}


#: Defaults: each a value a plan may override (where it has a field) and why it has its size.
DEFAULTS: dict[str, Margin] = {
    "hypotheses.alpha": Margin(0.05, "the family-wise error rate of a plan's hypotheses when it "
                                     "states none: the field's conventional 5%, spread over "
                                     "the family by Holm's procedure"),
    "intervals.confidence": Margin(0.95, "every reported interval is two-sided 95%, the level "
                                         "readers compare across papers"),
    "coverage.verdict_level": Margin(0.05, "the simulated verdicts' one-sided level, a single "
                                           "hypothesis's under the default alpha"),
    "equivalence.level": Margin(0.05, "each one-sided test of TOST at 5%, so equivalence is "
                                      "shown by a 90% interval inside the margins "
                                      "(Schuirmann 1987)"),
    "hacking_monitor.false_alarm": Margin(0.05, "the probability, per seed and arm over the "
                                                "plan's RL steps, that the onset rule fires "
                                                "when nothing is gamed: one run in twenty, the "
                                                "same error rate as the hypotheses'"),
    "hacking_monitor.tolerated_gap": Margin(0.025, "the share of rollouts the lenient contract "
                                                   "pays and the strict one refuses that is no "
                                                   "gaming: the SFT model's own gap over the "
                                                   "bundled run's first 30 RL steps is 0.008 "
                                                   "to 0.017 per seed, so 0.025 is above it "
                                                   "with room for noise"),
    "hacking_monitor.detect_gap": Margin(0.10, "the gap the rule is built to find quickly: one "
                                               "rollout in ten gamed, below the 0.10 to 0.17 "
                                               "the bundled run's substring arm reaches over "
                                               "its last 60 steps"),
    "hacking_monitor.drift": Margin(0.02, "the allowance of a rule stated with a threshold "
                                          "but no drift (plans before calibrated onsets): the "
                                          "old default, kept so such plans keep their rule"),
    "hacking_monitor.threshold": Margin(0.5, "the threshold of a rule stated with a drift but "
                                             "no threshold: the old default, kept likewise; "
                                             "with drift 0.02 it raises an alarm in 99.7% of "
                                             "runs at a constant gap of 0.025, so a plan "
                                             "should state false_alarm instead"),
    "coverage.goal_low": Margin(0.93, "the coverage simulation's goal for nominal 95% "
                                      "intervals, from below: two points of slack for the "
                                      "small-sample regimes the lab produces"),
    "coverage.goal_high": Margin(0.97, "and from above: an interval that covers more than 97% "
                                       "is wider than it needs to be"),
    "coverage.wrong_confirmations": Margin(0.05, "the most often a verdict may say "
                                                 "'confirmed' when the truth sits on the "
                                                 "margin: the one-sided level of the test "
                                                 "that decides it"),
    "coverage.verdict_margin": Margin(0.05, "the margin of the simulated verdicts, about the "
                                            "size of the smaller effects the example "
                                            "hypotheses ask about (0.02 to 0.10)"),
}


def default(name: str) -> float:
    """A default's value by name (a key of :data:`DEFAULTS`)."""
    return DEFAULTS[name].value
