"""Comparing plan versions: each version's held-out results, and its difference from the base
version paired by seed.

Versions of a sweep train the same seeds, so seed ``s`` of version B and seed ``s`` of the base
start from the same split of random streams; the difference within each seed removes the
seed-to-seed noise that two independent means would carry. Only seeds both versions trained
are paired; a version sharing none with the base gets no difference.

Intervals, 95%, with the seed as the unit, as every report computes them
(:mod:`postlab.analysis.intervals`): a version's rate Student t over seeds with a binomial floor,
cut to [0, 1]; a paired difference (and the hacking gap, a difference itself) Student t over the
per-seed differences. With one seed (or one pair) no interval is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from postlab.analysis.aggregate import Analysis
from postlab.analysis.intervals import RATE_METHOD, Interval, interval, rate_interval

SCHEMA = "postlab.analysis.versions/1"
DIFFERENCE_METHOD = ("paired by seed: Student t over the per-seed differences from the base "
                     "version, 95% two-sided; no interval with one pair")


@dataclass(frozen=True, kw_only=True)
class VersionInput:
    """One version to compare: its name, the keys it changes from the base, its analysis,
    and its plan (for the number of questions behind each rate)."""

    name: str
    changes: dict[str, Any]
    analysis: Analysis
    plan: dict[str, Any]


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


def _trials(plan: dict[str, Any], split: str, decoding: str, metric: str) -> int:
    questions = len(plan["split"][split])
    if decoding == "sampled" and metric != "coverage":
        return questions * plan["eval_samples"]
    return questions


def _swept(inputs: Sequence[VersionInput]) -> tuple[str, dict[str, Any]] | None:
    keys = {key for item in inputs[1:] for key in item.changes}
    if len(keys) != 1 or any(len(item.changes) != 1 for item in inputs[1:]):
        return None
    key = next(iter(keys))
    return key, {item.name: item.changes.get(key, item.plan.get(key)) for item in inputs}


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
            value = (rate_interval(series, _trials(item.plan, split, decoding, metric))
                     if rate else interval(series))
            difference, paired = None, ()
            if item is not base:
                paired = tuple(s for s in seeds if s in base_values)
                if paired:
                    difference = interval([values[s] - base_values[s] for s in paired])
            rows.append(VersionValue(version=item.name, seeds=seeds, value=value,
                                     difference=difference, paired_seeds=paired))
        metrics.append(MetricComparison(stage=stage, split=split, decoding=decoding,
                                        metric=metric, is_rate=rate, values=tuple(rows)))
    return Comparison(schema=SCHEMA, base=base.name,
                      versions=tuple(item.name for item in inputs),
                      changes={item.name: dict(item.changes) for item in inputs},
                      swept=_swept(inputs), rate_method=RATE_METHOD,
                      difference_method=DIFFERENCE_METHOD, metrics=tuple(metrics),
                      verdicts={item.name: item.analysis.verdicts for item in inputs
                                if item.analysis.verdicts})


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
