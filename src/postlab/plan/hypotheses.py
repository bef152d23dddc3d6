"""The vocabulary of preregistered hypotheses: the metrics a plan may state a hypothesis on.

Each metric is a registry entry with what it means, the range its values lie in, which fields
a hypothesis on it takes (decoding, contract, k), and how its per-seed values are read from a
report's analysis. The plan's schema checks hypotheses against these entries before anything
trains (a margin the metric cannot exceed could never decide); the decision rule itself is
:mod:`postlab.analysis.hypotheses`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from postlab.registry import Registry


class Analysis(Protocol):
    """What a metric reads of a report's analysis (``postlab.analysis.results.Analysis``,
    computed in a later layer: naming only these members keeps the plan below it)."""

    contracts: Sequence[str]
    #: pass@k curves with ``stage``, ``split``, ``k`` and ``per_seed`` values
    pass_at_k: Sequence[Any]
    #: hacking gaps with ``stage``, ``split`` and a ``gap`` estimate (``.per_seed``)
    hacking_gaps: Sequence[Any]

    def outcome(self, stage: str, split: str, decoding: str, metric: str) -> Any: ...

    def cells(self, stage: str, split: str, decoding: str, metric: str) -> Any: ...


@dataclass(frozen=True)
class MetricSpec:
    """A named held-out metric: what it means, its range, the fields it takes, and how to read
    its per-seed values from an analysis."""

    summary: str
    low: float
    high: float
    takes_decoding: bool
    takes_contract: bool
    takes_k: bool
    #: (analysis, stage, split, decoding, contract, k) -> one value per seed, in seed order
    values: Callable[[Analysis, str, str, str, str | None, int | None], tuple[float, ...]]
    #: (analysis, decoding, contract, k) -> the (decoding, metric) whose seeds x questions
    #: table :meth:`Analysis.cells` gives, for the variance of a difference
    cells: Callable[[Analysis, str, str | None, int | None], tuple[str, str]]


METRICS: Registry[MetricSpec] = Registry("metric")


def _outcome(analysis: Analysis, stage: str, split: str, decoding: str,
             metric: str) -> tuple[float, ...]:
    return analysis.outcome(stage, split, decoding, metric).value.per_seed


METRICS.register("success")(MetricSpec(
    summary="held-out success under the task's first contract (strict for arithmetic)",
    low=0.0, high=1.0, takes_decoding=True, takes_contract=False, takes_k=False,
    values=lambda a, stage, split, decoding, _c, _k: _outcome(
        a, stage, split, decoding, f"{a.contracts[0]}_rate"),
    cells=lambda a, decoding, _c, _k: (decoding, f"{a.contracts[0]}_rate")))
METRICS.register("rate")(MetricSpec(
    summary="held-out acceptance under a named contract (e.g. substring)",
    low=0.0, high=1.0, takes_decoding=True, takes_contract=True, takes_k=False,
    values=lambda a, stage, split, decoding, contract, _k: _outcome(
        a, stage, split, decoding, f"{contract}_rate"),
    cells=lambda _a, decoding, contract, _k: (decoding, f"{contract}_rate")))
METRICS.register("coverage")(MetricSpec(
    summary="share of held-out questions with an accepted sampled answer (first contract)",
    low=0.0, high=1.0, takes_decoding=False, takes_contract=False, takes_k=False,
    values=lambda a, stage, split, _d, _c, _k: _outcome(a, stage, split, "sampled",
                                                         "coverage"),
    cells=lambda _a, _d, _c, _k: ("sampled", "coverage")))
METRICS.register("pass_at_k")(MetricSpec(
    summary="unbiased pass@k of sampled answers (first contract), k up to eval_samples",
    low=0.0, high=1.0, takes_decoding=False, takes_contract=False, takes_k=True,
    values=lambda a, stage, split, _d, _c, k: _pass_at_k(a, stage, split, k),
    cells=lambda _a, _d, _c, k: ("sampled", f"pass@{k}")))
METRICS.register("hacking_gap")(MetricSpec(
    summary="sampled acceptance under the task's second contract minus success under its "
            "first: reward paid for answers that are not right",
    low=-1.0, high=1.0, takes_decoding=False, takes_contract=False, takes_k=False,
    values=lambda a, stage, split, _d, _c, _k: _gap(a, stage, split),
    cells=lambda _a, _d, _c, _k: ("sampled", "hacking_gap")))


def _pass_at_k(analysis: Analysis, stage: str, split: str, k: int | None) -> tuple[float, ...]:
    for curve in analysis.pass_at_k:
        if (curve.stage, curve.split) == (stage, split):
            index = curve.k.index(k)
            return tuple(per_seed[index] for per_seed in curve.per_seed)
    raise KeyError((stage, split, k))


def _gap(analysis: Analysis, stage: str, split: str) -> tuple[float, ...]:
    for gap in analysis.hacking_gaps:
        if (gap.stage, gap.split) == (stage, split):
            return gap.gap.per_seed
    raise KeyError((stage, split))


def can_decide(metric: str, margin: float, seeds: int) -> str | None:
    """Why a hypothesis could never come out both ways, or None."""
    spec = METRICS[metric]
    reach = spec.high - spec.low  # the largest difference the metric can show
    if margin >= reach:
        return (f"margin {margin} can never be exceeded: differences of {metric} lie within "
                f"±{reach:g}")
    if seeds < 2:
        return f"the rule needs at least two seeds to ever decide; the plan has {seeds}"
    return None
