"""Are two engines' results the same in distribution? Equivalence tests over seeds.

The ensemble engine draws its random numbers from counters, the exact engine from torch's
generators, so their bits differ; what must agree is the distribution of what a run measures.
A difference test cannot show that (failing to find a difference is not evidence of none), so
each metric gets a two one-sided tests procedure (TOST, Schuirmann 1987): the engines are
declared equivalent on a metric when the 90% interval of the difference of their means over
seeds lies inside (-margin, +margin), a test at level 0.05. Margins are fixed before
looking, each with its reason, in :mod:`postlab.plan.margins` (:data:`MARGINS` for the
benchmark's 32 or more seeds per engine, wider :data:`CI_MARGINS` for the test suite's 8 paired
seeds), and stated wherever results are shown.

Two designs. **Independent seeds** (each engine its own seeds): a Welch interval of the
difference of means. **Paired seeds** (both engines train the same seeds): the engines then
start from the same initial weights, and a Student t interval over the per-seed differences
removes the spread that the initial weights cause in both engines alike. Both estimate the
same difference of means; pairing narrows the interval only as far as a seed's outcomes in the
two engines are correlated (on the GPT-2 example plan they are nearly not: r = 0.15 for held-out
success over 32 seeds, so there pairing gains little).

Metrics, per RL arm, from each seed's record (held-out split, sampled answers):
``strict_success`` (the reference contract's rate), ``coverage``, ``hacking_gap`` (second
contract's acceptance minus the first's) and ``final_kl`` (mean KL to the reference over the
last tenth of the RL steps, compared as log KL so its margin is a ratio).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from postlab.analysis.intervals import interval, t_quantile
from postlab.plan import margins
from postlab.plan.arms import plan_contracts, rl_contracts
from postlab.records.metrics import evaluate
from postlab.tasks.registry import answer_function

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.records.models import Record

#: Equivalence margins, on each metric's scale (final_kl: on log KL), with their reasons in
#: :mod:`postlab.plan.margins`.
MARGINS = margins.values(margins.EQUIVALENCE)
#: Margins for the CI-sized check (8 seeds trained by both engines, paired).
CI_MARGINS = margins.values(margins.CI_EQUIVALENCE)
LEVEL = margins.default("equivalence.level")  # each one-sided test; the interval: 1 - 2 LEVEL


@dataclass(frozen=True, kw_only=True)
class Equivalence:
    """One metric of one arm: both engines' per-seed values, the difference of means with
    its 90% interval (Welch, or over per-seed differences when ``paired``), the margin, and
    whether the interval lies inside it."""

    metric: str
    arm: str
    first: tuple[float, ...]
    second: tuple[float, ...]
    difference: float
    low: float
    high: float
    margin: float
    equivalent: bool
    paired: bool = False


def welch_interval(first: Sequence[float], second: Sequence[float],
                   confidence: float = 1 - 2 * LEVEL) -> tuple[float, float, float]:
    """Difference of means (second minus first) and its Welch t interval; needs two values
    in each group."""
    n1, n2 = len(first), len(second)
    if n1 < 2 or n2 < 2:
        raise ValueError("an equivalence test needs at least two seeds per engine")
    m1, m2 = sum(first) / n1, sum(second) / n2
    v1 = sum((x - m1) ** 2 for x in first) / (n1 - 1)
    v2 = sum((x - m2) ** 2 for x in second) / (n2 - 1)
    a, b = v1 / n1, v2 / n2
    difference = m2 - m1
    if a + b == 0:
        return difference, difference, difference
    df = (a + b) ** 2 / (a * a / (n1 - 1) + b * b / (n2 - 1))
    half = t_quantile(confidence, df) * math.sqrt(a + b)
    return difference, difference - half, difference + half


def paired_interval(first: Sequence[float], second: Sequence[float],
                    confidence: float = 1 - 2 * LEVEL) -> tuple[float, float, float]:
    """Mean of the per-seed differences (second minus first, value i of each from the same
    seed) and its Student t interval; needs two seeds. Differences that are all equal give an
    interval of zero width: two engines that agree on every seed."""
    if len(first) != len(second):
        raise ValueError("a paired test needs the same seeds in both engines")
    if len(first) < 2:
        raise ValueError("an equivalence test needs at least two seeds per engine")
    found = interval([b - a for a, b in zip(first, second, strict=True)], confidence)
    assert found.low is not None and found.high is not None
    return found.mean, found.low, found.high


def tost(metric: str, arm: str, first: Sequence[float], second: Sequence[float],
         margin: float, paired: bool = False) -> Equivalence:
    """Both one-sided tests at :data:`LEVEL`: equivalent when the whole 90% interval of the
    difference lies inside the margin."""
    difference, low, high = (paired_interval if paired else welch_interval)(first, second)
    return Equivalence(metric=metric, arm=arm, first=tuple(first), second=tuple(second),
                       difference=difference, low=low, high=high, margin=margin,
                       equivalent=-margin < low and high < margin, paired=paired)


def seed_metrics(record: Record, plan: Plan, split: str = "test"
                 ) -> dict[tuple[str, str], list[float]]:
    """(metric, arm) -> one value per seed of the record, in the record's order of runs."""
    contracts = plan_contracts(plan)
    answer = answer_function(plan)
    samples = plan.eval_samples
    values: dict[tuple[str, str], list[float]] = {}
    for run in record.runs:
        for arm in rl_contracts(plan):
            result = evaluate(run.evaluations[arm][split].sampled, samples, answer,
                              contracts)
            found = {"strict_success": result[f"{contracts[0]}_rate"],
                     "coverage": result["covered"] / result["questions"]}
            if len(contracts) > 1:
                found["hacking_gap"] = (result[f"{contracts[1]}_rate"]
                                        - result[f"{contracts[0]}_rate"])
            history = run.arms[arm]
            late = history[-max(1, len(history) // 10):]
            kl = [sum(u.kl for u in step.updates) / len(step.updates) for step in late]
            found["final_kl"] = math.log(max(sum(kl) / len(kl), 1e-12))
            for metric, value in found.items():
                values.setdefault((metric, arm), []).append(value)
    return values


def compare_engines(first: Record, second: Record, plan: Plan,
                    margins: dict[str, float] = MARGINS, paired: bool = False
                    ) -> list[Equivalence]:
    """Every metric of every RL arm: the first record's seeds against the second's; with
    ``paired``, both records must hold the same seeds, matched seed by seed."""
    a, b = seed_metrics(first, plan), seed_metrics(second, plan)
    if paired:
        seeds, others = first.seed_order(), second.seed_order()
        if sorted(seeds) != sorted(others):
            raise ValueError("a paired comparison needs the same seeds in both records")
        at = {seed: index for index, seed in enumerate(others)}
        b = {key: [values[at[seed]] for seed in seeds] for key, values in b.items()}
    return [tost(metric, arm, a[(metric, arm)], b[(metric, arm)], margins[metric], paired)
            for metric, arm in a if metric in margins]
