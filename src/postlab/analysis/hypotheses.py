"""Preregistered hypotheses: named metrics, and the rule that decides each one.

A hypothesis compares one metric between two places of the same run, paired by seed: an arm
against SFT or against another arm (same split), or one split against another (same stage). Each
seed gives one difference ``d = value(A) - value(B)``. The hypothesis claims the difference goes
one way by more than a margin: ``increase`` means d > margin, ``decrease`` means d < -margin.

The decision rule, fixed before training:

* a one-sided t bound on the mean difference, at the level Holm's step-down procedure gives
  the hypothesis among the plan's (family-wise error ``alpha``), with the variance of seeds
  and questions both (:func:`postlab.analysis.intervals.crossed_spread`: the seeds x
  questions table of paired per-question differences, or two tables for split against
  split) and its Satterthwaite degrees of freedom;
* **confirmed** when the bound clears the margin on the claimed side, **refuted** when the
  opposite bound shows the difference short of the margin (the data rule out the effect the
  hypothesis needs), **inconclusive** otherwise.

Holm's order uses the one-sided p-values of the confirmation tests (H0: the difference is not
beyond the margin). A rule that could never decide is refused when the plan is checked: a
margin the metric cannot exceed (differences of rates lie in [-1, 1]), or fewer than two seeds
(no spread, so no interval). Identical per-seed differences do not decide with certainty: the
questions still vary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postlab.analysis.intervals import Spread, crossed_spread, paired_difference, seed_spread
from postlab.plan.hypotheses import METRICS, Analysis
from postlab.plan.margins import default

if TYPE_CHECKING:
    from postlab.plan.schema import Hypotheses, Hypothesis, PlanModel

#: Family-wise error rate when a plan states none.
DEFAULT_ALPHA = default("hypotheses.alpha")


# --- the decision rule ----------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Verdict:
    """A hypothesis decided: the numbers behind it and the outcome."""

    id: str
    statement: str
    metric: str
    comparison: str  # what was subtracted from what, in words
    per_seed: tuple[float, ...]  # the paired differences A - B
    mean: float
    se: float  # of the mean difference, seeds and questions
    df: float | None  # Satterthwaite degrees of freedom; None: the normal's (binomial only)
    level: float  # the one-sided error level Holm gave this hypothesis
    bound: float  # the one-sided confidence bound on the claimed side
    opposite: float  # the bound on the other side
    margin: float
    direction: str
    p_value: float
    outcome: str  # "confirmed", "refuted" or "inconclusive"
    #: "registered" (fixed with a time before training), "plan" (fixed in the plan's hash, no
    #: time) or "exploratory" (given to the report afterwards); ``postlab.plan.registration``
    standing: str = "plan"


def _t_sf(value: float, df: float) -> float:
    from scipy.stats import t

    return float(t.sf(value, df))


def _t_quantile(level: float, df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(1 - level, df))


def decide(hypotheses: Sequence[Hypothesis],
           differences: Sequence[Spread | Sequence[float]],
           alpha: float = DEFAULT_ALPHA) -> list[Verdict]:
    """Decide every hypothesis from its paired difference, with Holm's step-down levels
    across all of them. ``hypotheses`` are plan entries (id, statement, direction, margin);
    ``differences[i]`` belongs to ``hypotheses[i]``: a :class:`Spread` (seeds and
    questions), or bare per-seed differences, read by Student t over the seeds alone."""
    stats = []
    for hypothesis, found in zip(hypotheses, differences, strict=True):
        spread = found if isinstance(found, Spread) else seed_spread(list(found))
        n = len(spread.per_seed)
        if n < 2:
            raise ValueError(f"hypothesis {hypothesis.id}: {n} seed(s); a rule over seeds "
                             "needs at least two")
        sign = 1.0 if hypothesis.direction == "increase" else -1.0
        # In the claimed direction: the claim is  sign * d > margin.
        claimed = [sign * v for v in spread.per_seed]
        mean, se, df = sign * spread.mean, spread.se, spread.df
        excess = mean - hypothesis.margin
        # No spread at all (bare per-seed values only): the difference is taken as known.
        p = _t_sf(excess / se, df) if se > 0 else float(excess <= 0)
        stats.append((sign, claimed, mean, se, df, p))
    # Holm: the i-th smallest p-value is tested at alpha / (m - i); once one fails, the rest
    # keep the level of the first that failed (they cannot be confirmed).
    m = len(stats)
    order = sorted(range(m), key=lambda i: (stats[i][5], i))
    levels = [0.0] * m
    stopped = None
    for rank, index in enumerate(order):
        level = alpha / (m - rank)
        if stopped is not None:
            level = stopped
        elif stats[index][5] > level:
            stopped = level
        levels[index] = level
    verdicts = []
    for i, (hypothesis, (sign, claimed, mean, se, df, p)) in enumerate(
            zip(hypotheses, stats, strict=True)):
        half = _t_quantile(levels[i], df) * se
        bound, opposite = mean - half, mean + half  # in the claimed direction
        margin = hypothesis.margin
        if bound > margin:
            outcome = "confirmed"
        elif opposite < margin:
            outcome = "refuted"
        else:
            outcome = "inconclusive"
        verdicts.append(Verdict(
            id=hypothesis.id, statement=hypothesis.statement,
            metric=hypothesis.metric,
            comparison=describe_comparison(hypothesis),
            per_seed=tuple(sign * v for v in claimed), mean=sign * mean, se=se,
            df=None if df == float("inf") else df,
            level=levels[i],
            bound=sign * bound, opposite=sign * opposite, margin=margin,
            direction=hypothesis.direction, p_value=p, outcome=outcome))
    return verdicts


def paired_differences(analysis: Analysis, hypothesis: Hypothesis) -> tuple[float, ...]:
    """value(A) - value(B) per seed, for a hypothesis of a plan whose run ``analysis`` holds."""
    return paired_spread(analysis, hypothesis).per_seed


def paired_spread(analysis: Analysis, hypothesis: Hypothesis) -> Spread:
    """The hypothesis's difference A - B: per seed as the report computes its values, its
    variance from the seeds x questions tables (one of paired per-question differences on
    one split, two for split against split); Student t over seeds where the analysis holds
    no counts."""
    spec = METRICS[hypothesis.metric]
    decoding = hypothesis.decoding or "sampled"
    contract, k = hypothesis.contract, hypothesis.k
    compare = hypothesis.compare
    stage, split = compare.stage, compare.split
    other_stage = compare.versus_stage or stage
    other_split = compare.versus_split or split
    a = spec.values(analysis, stage, split, decoding, contract, k)
    b = spec.values(analysis, other_stage, other_split, decoding, contract, k)
    differences = tuple(x - y for x, y in zip(a, b, strict=True))
    cell_decoding, metric = spec.cells(analysis, decoding, contract, k)
    first = analysis.cells(stage, split, cell_decoding, metric)
    second = analysis.cells(other_stage, other_split, cell_decoding, metric)
    if first is None or second is None:
        return seed_spread(differences)
    if split == other_split:
        found = paired_difference(first, second)
    else:
        found = crossed_spread([(1.0, first[0]), (-1.0, second[0])], [first[1], second[1]])
    return Spread(per_seed=differences, mean=sum(differences) / len(differences), se=found.se,
                  df=found.df, draws=found.draws)


def verdicts_for(analysis: Analysis, section: Hypotheses, standing: str = "plan"
                 ) -> list[Verdict]:
    """Every hypothesis of a hypotheses ``section`` (one family: Holm runs within it)
    decided on the run ``analysis`` describes."""
    tests = section.tests
    differences = [paired_spread(analysis, hypothesis) for hypothesis in tests]
    return [dataclasses.replace(verdict, standing=standing)
            for verdict in decide(tests, differences, section.alpha)]


def families(plan: PlanModel, registration: dict[str, Any] | None = None,
             exploratory: dict[str, Any] | None = None) -> list[tuple[Hypotheses, str]]:
    """The hypotheses a report decides, each family with its standing: the registered ones
    (a checked registration's, which are the plan's own where the plan has some), else the
    plan's own; then those given afterwards, a family of their own so that looking later
    cannot change a registered hypothesis's Holm level."""
    from postlab.plan.schema import Hypotheses

    found = []
    if registration is not None:
        found.append((Hypotheses.model_validate(registration["hypotheses"]), "registered"))
    elif plan.hypotheses:
        found.append((plan.hypotheses, "plan"))
    if exploratory is not None:
        found.append((Hypotheses.model_validate(exploratory), "exploratory"))
    return found


def describe_comparison(hypothesis: Hypothesis) -> str:
    """``strict − initial on test``, ``test − train for strict``: what was subtracted."""
    compare = hypothesis.compare
    if compare.versus_stage:
        return f"{compare.stage} − {compare.versus_stage} on {compare.split}"
    return f"{compare.split} − {compare.versus_split} for {compare.stage}"
