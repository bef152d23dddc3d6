"""Comparing plan versions: each version's held-out results, and its difference from the base

version paired by seed.

Versions of a sweep train the same seeds, so seed ``s`` of version B and seed ``s`` of the base
start from the same split of random streams; the difference within each seed removes the
seed-to-seed noise that two independent means would carry. Only seeds both versions trained
are paired; a version sharing none with the base gets no difference.

Intervals, 95%, as every report computes them (:mod:`postlab.analysis.intervals`): a
version's value is its own report's, over seeds and questions; a difference from the base is
paired by seed and, where both versions asked the same questions, by question (one seeds x
questions table of per-cell differences; two tables where the splits differ). Analyses
without their per-question counts fall back to Student t over the per-seed differences. With
one seed (or one pair) no interval is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from postlab.analysis.intervals import (
    CROSSED_METHOD,
    Interval,
    crossed_spread,
    interval,
    rate_interval,
)
from postlab.analysis.results import Analysis

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

SCHEMA = "postlab.analysis.versions/1"
DIFFERENCE_METHOD = ("paired by seed (and by question where both versions asked the same): "
                     f"{CROSSED_METHOD}; Student t over the per-seed differences where a "
                     "version's counts are not at hand")


@dataclass(frozen=True, kw_only=True)
class VersionInput:
    """One version to compare: its name, the keys it changes from the base, its analysis,
    and its plan (for the number of questions behind each rate)."""

    name: str
    changes: dict[str, Any]
    analysis: Analysis
    plan: Plan


@dataclass(frozen=True, kw_only=True)
class VersionValue:
    version: str
    seeds: tuple[int, ...]
    value: Interval
    difference: Interval | None  # from the base, paired by seed; None for the base itself
    paired_seeds: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class MetricComparison:
    """One held-out metric across versions: (stage, split, decoding, metric)."""

    stage: str
    split: str
    decoding: str
    metric: str
    is_rate: bool
    values: tuple[VersionValue, ...]


@dataclass(frozen=True, kw_only=True)
class Comparison:
    schema: str
    base: str
    versions: tuple[str, ...]
    changes: dict[str, dict[str, Any]]
    #: the plan key every non-base version changes, and each version's value of it, when the
    #: versions differ in exactly one key (what figures put on the x axis)
    swept: tuple[str, dict[str, Any]] | None
    rate_method: str
    difference_method: str
    metrics: tuple[MetricComparison, ...]
    #: each version's own preregistered hypotheses, decided on its own seeds (versions whose
    #: plans have none are absent)
    verdicts: dict[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)


def _trials(plan: Plan, split: str, decoding: str, metric: str) -> int:
    questions = len(plan.split[split])
    if decoding == "sampled" and metric != "coverage":
        return questions * plan.eval_samples
    return questions


def _swept(inputs: Sequence[VersionInput]) -> tuple[str, dict[str, Any]] | None:
    keys = {key for item in inputs[1:] for key in item.changes}
    if len(keys) != 1 or any(len(item.changes) != 1 for item in inputs[1:]):
        return None
    key = next(iter(keys))
    return key, {item.name: item.changes.get(key, item.plan.data().get(key)) for item in inputs}


def compare(inputs: Sequence[VersionInput], held_out: Sequence[str] = ("dev", "test")
            ) -> Comparison:
    """Every held-out outcome (and hacking gap) of every version, the first being the base."""
    if len(inputs) < 2:
        raise ValueError("a comparison needs at least two versions")
    base = inputs[0]
    keys: list[tuple[str, str, str, str]] = []
    for outcome in base.analysis.outcomes:
        key = (outcome.stage, outcome.split, outcome.decoding, outcome.metric)
        if outcome.split in held_out and key not in keys:
            keys.append(key)
    for gap in base.analysis.hacking_gaps:
        if gap.split in held_out:
            keys.append((gap.stage, gap.split, "sampled", "hacking_gap"))
    metrics = []
    for stage, split, decoding, metric in keys:
        per_version = {item.name: _per_seed(item, stage, split, decoding, metric)
                       for item in inputs}
        if any(values is None for values in per_version.values()):
            continue  # a stage or split some version lacks: not comparable
        base_values = per_version[base.name]
        assert base_values is not None
        rate = metric != "hacking_gap"
        rows = []
        for item in inputs:
            values = per_version[item.name]
            assert values is not None
            seeds = tuple(values)
            series = [values[s] for s in seeds]
            value = _own_interval(item, stage, split, decoding, metric)
            if value is None:  # an analysis without its counts
                value = (rate_interval(series, _trials(item.plan, split, decoding, metric))
                         if rate else interval(series))
            difference, paired = None, ()
            if item is not base:
                paired = tuple(s for s in seeds if s in base_values)
                if paired:
                    difference = _difference(item, base, paired, stage, split, decoding,
                                             metric,
                                             [values[s] - base_values[s] for s in paired])
            rows.append(VersionValue(version=item.name, seeds=seeds, value=value,
                                     difference=difference, paired_seeds=paired))
        metrics.append(MetricComparison(stage=stage, split=split, decoding=decoding,
                                        metric=metric, is_rate=rate, values=tuple(rows)))
    return Comparison(schema=SCHEMA, base=base.name,
                      versions=tuple(item.name for item in inputs),
                      changes={item.name: dict(item.changes) for item in inputs},
                      swept=_swept(inputs), rate_method=CROSSED_METHOD,
                      difference_method=DIFFERENCE_METHOD, metrics=tuple(metrics),
                      verdicts={item.name: item.analysis.verdicts for item in inputs
                                if item.analysis.verdicts})


def _own_interval(item: VersionInput, stage: str, split: str, decoding: str,
                  metric: str) -> Interval | None:
    """The interval the version's own report gives the metric, where its counts are kept."""
    analysis = item.analysis
    if analysis.cells(stage, split, decoding, metric) is None:
        return None
    if metric == "hacking_gap":
        return next(g.gap for g in analysis.hacking_gaps if (g.stage, g.split) == (stage, split))
    return analysis.outcome(stage, split, decoding, metric).value


def _difference(item: VersionInput, base: VersionInput, paired: Sequence[int], stage: str,
                split: str, decoding: str, metric: str, per_seed: Sequence[float]) -> Interval:
    """A version's difference from the base on its paired seeds, over seeds and questions."""
    mine = item.analysis.cells(stage, split, decoding, metric)
    theirs = base.analysis.cells(stage, split, decoding, metric)
    if mine is None or theirs is None:
        return interval(per_seed)
    rows = {seed: index for index, seed in enumerate(item.analysis.seeds)}
    base_rows = {seed: index for index, seed in enumerate(base.analysis.seeds)}
    table = mine[0][np.array([rows[s] for s in paired])]
    base_table = theirs[0][np.array([base_rows[s] for s in paired])]
    if item.analysis.questions.get(split) == base.analysis.questions.get(split):
        # both versions' answers are their own draws: both floor the difference
        found = crossed_spread([(1.0, table - base_table)], mine[1],
                               floor_from=[(table, mine[1]), (base_table, theirs[1])])
    else:
        found = crossed_spread([(1.0, table), (-1.0, base_table)], [mine[1], theirs[1]])
    return dataclasses.replace(found, per_seed=tuple(per_seed),
                               mean=sum(per_seed) / len(per_seed)).interval()


def _per_seed(item: VersionInput, stage: str, split: str, decoding: str,
              metric: str) -> dict[int, float] | None:
    """{seed: value} of one metric of one version, or None if it has no such metric."""
    analysis = item.analysis
    if metric == "hacking_gap":
        found = [g.gap for g in analysis.hacking_gaps if (g.stage, g.split) == (stage, split)]
    else:
        found = [o.value for o in analysis.outcomes
                 if (o.stage, o.split, o.decoding, o.metric) == (stage, split, decoding, metric)]
    if not found:
        return None
    return dict(zip(analysis.seeds, found[0].per_seed, strict=True))
