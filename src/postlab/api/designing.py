"""Planning a study from a pilot run: ``postlab design RUN --effect D``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from postlab.errors import UserError

#: Below this many questions the planner warns that its plan is rough (the power check found
#: the power achieved within 5 points of the planned in 4 of 12 regimes of 19 questions, 9 of
#: 14 of 100 and 11 of 15 of 1,000).
FEW_QUESTIONS = 100

if TYPE_CHECKING:
    from postlab.analysis.design import Components
    from postlab.analysis.results import Analysis
    from postlab.plan.schema import Plan


@dataclass(frozen=True, kw_only=True)
class PlannedMetric:
    """One metric the study will test: what it compares, the pilot's estimate and variance
    components, and the seeds needed at each number of samples per question."""

    name: str
    comparison: str
    pilot_mean: float
    pilot_se: float
    components: Components
    #: samples per question -> seeds needed (None: no number of seeds detects the effect)
    seeds: dict[int, int | None]
    #: samples per question -> the estimated wall time on one worker of a run of that many
    #: seeds (None where none is needed or the estimate has no wall time)
    seconds: dict[int, float | None]
    #: why some of it could not be planned, if so
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Design:
    effect: float
    power: float
    alpha: float
    pilot_seeds: int
    samples: int
    metrics: tuple[PlannedMetric, ...]

    def lines(self) -> list[str]:
        """The design as text, a metric at a time."""
        lines = [f"Seeds needed to detect a held-out difference of {self.effect:g} with power "
                 f"{self.power:g} at two-sided alpha {self.alpha:g} (from a pilot of "
                 f"{self.pilot_seeds} seeds, {self.samples} samples per question; one worker):"]
        for metric in self.metrics:
            parts = metric.components
            lines.append(f"- {metric.name} ({metric.comparison}): pilot "
                         f"{metric.pilot_mean:+.4f} (se {metric.pilot_se:.4f}); spread of seeds "
                         f"{math.sqrt(parts.seed):.4f}, of questions "
                         f"{math.sqrt(parts.question):.4f}, of cells "
                         f"{math.sqrt(parts.residual(parts.samples)):.4f}")
            for samples, seeds in metric.seeds.items():
                if seeds is None:
                    lines.append(f"    {samples} samples per question: no number of seeds")
                    continue
                cost = metric.seconds.get(samples)
                priced = "" if cost is None else f", about {_duration(cost)}"
                lines.append(f"    {samples} samples per question: {seeds} seeds{priced}")
            if metric.note:
                lines.append(f"    ({metric.note})")
        questions = min(metric.components.questions for metric in self.metrics)
        if questions < FEW_QUESTIONS:
            lines.append(f"With {questions} held-out questions the pilot's question variance "
                         f"rests on {questions - 1} degrees of freedom, and the power achieved "
                         "can be far from the power planned (the planner's check: "
                         "docs/benchmarks/interval-coverage.md); plan with a margin.")
        return lines


def design(run: str | Path | None, *, effect: float, power: float = 0.8,
           alpha: float = 0.05, price: bool = True) -> Design:
    """The seeds (and samples per question) a study of the pilot ``run``'s plan needs to
    detect a held-out difference ``effect`` with probability ``power`` at two-sided level
    ``alpha``, for each registered metric (the plan's hypotheses; without any, each arm's
    change in sampled success from SFT, and from the control arm where the plan names one),
    each priced by the cost estimate (``price``)."""
    from postlab.analysis.design import MIN_SEEDS
    from postlab.api.reading import analyse, require_report_extra
    from postlab.records.opened import open_run

    if not 0 < abs(effect) <= 1:
        raise UserError(f"--effect {effect}: a difference of rates lies in (0, 1] in size")
    if not 0.5 < power < 1:
        raise UserError(f"--power {power}: between 0.5 and 1 (exclusive)")
    if not 0 < alpha < 0.5:
        raise UserError(f"--alpha {alpha}: between 0 and 0.5 (exclusive)")
    require_report_extra()
    opened = open_run(None if run is None else Path(run))
    plan = opened.plan.model
    if "test" not in plan.split:
        raise UserError(f"{opened.source}: its plan has no test split to plan a study on")
    analysis = analyse(opened, "test")
    if len(analysis.seeds) < MIN_SEEDS:
        raise UserError(f"{opened.source}: {len(analysis.seeds)} completed seeds; a pilot "
                        f"needs at least {MIN_SEEDS} to estimate the seeds' spread")
    compared = _comparisons(analysis, plan)
    if not compared:
        raise UserError(f"{opened.source}: the plan has no arm to compare with SFT and no "
                        "hypotheses: nothing to plan")
    pricing = _Pricing(plan) if price else None
    metrics = tuple(_planned(analysis, plan, entry, effect, power, alpha, pricing)
                    for entry in compared)
    return Design(effect=effect, power=power, alpha=alpha, pilot_seeds=len(analysis.seeds),
                  samples=plan.eval_samples, metrics=metrics)


@dataclass(frozen=True)
class _Compared:
    name: str
    comparison: str
    stage: str
    versus: str
    split: str
    decoding: str
    metric: str  # the cells' metric key
    rate: bool  # a rate of samples: its binomial part shrinks with more samples
    #: a registered hypothesis's margin and one-sided Holm level; None: the report's
    #: two-sided interval against zero
    margin: float | None = None
    level: float | None = None


def _comparisons(analysis: Analysis, plan: Plan) -> list[_Compared]:
    """The hypotheses' comparisons (those of one split), else the report's headline ones."""
    from postlab.analysis.hypotheses import describe_comparison
    from postlab.plan.hypotheses import METRICS

    found = []
    if plan.hypotheses is not None:
        tests = plan.hypotheses.tests
        # Holm's first (strictest) level: a plan that clears it clears every later one
        level = plan.hypotheses.alpha / len(tests)
        for test in tests:
            compare = test.compare
            if compare.versus_split not in (None, compare.split):
                continue  # split against split: planned only on one split's table
            decoding, metric = METRICS[test.metric].cells(
                analysis, test.decoding or "sampled", test.contract, test.k)
            found.append(_Compared(test.id, describe_comparison(test), compare.stage,
                                   compare.versus_stage or compare.stage, compare.split,
                                   decoding, metric,
                                   decoding == "sampled" and metric.endswith("_rate"),
                                   margin=test.margin, level=level))
        if not found:
            raise UserError("every hypothesis of the plan compares one split with another; "
                            "the planner plans one split's table")
        return found
    rate = f"{analysis.contracts[0]}_rate"
    for stage in analysis.stages:
        for versus in ("initial", analysis.control):
            if versus is None or stage in ("initial", versus) or versus not in analysis.stages:
                continue
            found.append(_Compared(f"{stage} vs {versus}", f"{stage} − {versus} on test",
                                   stage, versus, "test", "sampled", rate, True))
    return found


def _planned(analysis: Analysis, plan: Plan, entry: _Compared, effect: float, power: float,
             alpha: float, pricing: _Pricing | None) -> PlannedMetric:
    from postlab.analysis.design import Criterion, components, seeds_needed, within_variance
    from postlab.analysis.intervals import paired_difference

    first = analysis.cells(entry.stage, entry.split, entry.decoding, entry.metric)
    second = analysis.cells(entry.versus, entry.split, entry.decoding, entry.metric)
    if first is None or second is None:
        raise UserError(f"{entry.name}: the pilot holds no per-question counts for "
                        f"{entry.metric}")
    (a, k), (b, _) = first, second
    if a.shape[1] < 2:
        raise UserError(f"{entry.name}: the {entry.split} split has {a.shape[1]} question; "
                        "a pilot's question variance needs at least two")
    within = (within_variance(a, k) + within_variance(b, k)) if entry.rate else None
    found = components(a - b, k, within, arms=(a, b))
    pilot = paired_difference((a, k), (b, k))
    test = (Criterion(alpha=alpha) if entry.margin is None
            else Criterion(alpha=entry.level or alpha, one_sided=True, margin=entry.margin))
    if entry.rate and k > 1:  # the plan's samples per question, and fewer or more
        options = sorted({k, 2 * k, 4 * k, *((k // 2,) if k >= 4 else ())})
        seeds = {n: seeds_needed(found, effect, power=power, test=test, samples=n)
                 for n in options}
    else:  # greedy answers, coverage, pass@k: at the plan's samples per question only
        seeds = {plan.eval_samples: seeds_needed(found, effect, power=power, test=test)}
    seconds = {n: None if (s is None or pricing is None) else pricing.seconds(s, n)
               for n, s in seeds.items()}
    note = "" if all(s is not None for s in seeds.values()) else (
        "no number of seeds: the effect does not exceed the margin, or the questions' own "
        "spread, which more seeds do not shrink, is larger than it allows: plan more "
        "questions, or a larger effect")
    if entry.margin is not None:
        note = "; ".join(part for part in (
            f"planned as registered: the one-sided bound at Holm's first level "
            f"{test.alpha:.4g} clearing the margin {entry.margin:g}", note) if part)
    return PlannedMetric(name=entry.name, comparison=entry.comparison,
                         pilot_mean=pilot.mean, pilot_se=pilot.se, components=found,
                         seeds=seeds, seconds=seconds, note=note)


class _Pricing:
    """The cost estimate of the plan at other seeds and samples, calibrated once."""

    def __init__(self, plan: Plan) -> None:
        from postlab.runs.timing import calibrate

        self.plan = plan
        self.calibration = calibrate(plan)

    def seconds(self, seeds: int, samples: int) -> float | None:
        from postlab.runs.counts import estimate_counts
        from postlab.runs.pricing import priced

        variant = self.plan.replace(seeds=list(range(1, seeds + 1)), eval_samples=samples)
        found = priced(estimate_counts(variant), variant, self.calibration).seconds
        return None if found is None or math.isnan(found) else found


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
