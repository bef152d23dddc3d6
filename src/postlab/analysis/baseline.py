"""A model's held-out results without training: what every study of a pretrained model starts
from (``postlab eval``).

Per held-out split and contract: greedy success, sampled success, coverage (questions with an
accepted sample) and pass@k, each the mean of a seeds x questions table with its 95%
interval. With two or more seeds the interval is the crossed one every report uses (seeds
differ only in their sampling draws here, so the seeds' part is small); with one seed it is
over questions alone (:func:`~postlab.analysis.intervals.question_spread`), which is what
bounds a fixed model's rate on the task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from postlab.analysis.intervals import Interval, crossed_spread, question_spread
from postlab.analysis.passk import pass_at_k
from postlab.records.metrics import question_groups
from postlab.tasks.contracts import PARTIAL_CREDIT, score


def ks_for(samples: int) -> list[int]:
    """The ks a baseline reports: powers of two below the samples, and the samples."""
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k < samples]
    return [*ks, samples]


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One number of a baseline: its split, contract, metric and interval."""

    split: str
    contract: str
    metric: str  # "greedy", "sampled", "coverage" or "pass@K"
    value: Interval

    def as_json(self) -> dict[str, Any]:
        return {"split": self.split, "contract": self.contract, "metric": self.metric,
                "mean": self.value.mean, "low": self.value.low, "high": self.value.high}


def _interval(table: np.ndarray, trials: int) -> Interval:
    """A rate from a seeds x questions table: crossed with two or more seeds, else over
    questions."""
    if table.shape[0] >= 2:
        return crossed_spread([(1.0, table)], trials).interval(rate=True)
    spread = question_spread(table[0].tolist(), trials)
    interval = spread.interval(rate=True)
    return Interval(per_seed=(spread.mean,), mean=interval.mean, low=interval.low,
                    high=interval.high)


def baseline_figures(evaluations: Sequence[Mapping[str, Any]], splits: Sequence[str],
                     contracts: Sequence[str], samples: int,
                     answer: Callable[[Sequence[int]], Any]) -> list[Figure]:
    """Figures of one evaluation per seed (``evaluate_model``'s split -> greedy and sampled
    rows), for ``splits``, under each contract (partial credit counted as it is paid)."""
    figures = []
    for split in splits:
        for contract in contracts:
            greedy = np.array([[score(row, contract, answer) for row in
                                _typed(evaluation[split]["greedy"])]
                               for evaluation in evaluations], dtype=np.float64)
            accepted = np.array([[sum(score(row, contract, answer) for row in group)
                                  for group in question_groups(evaluation[split]["sampled"],
                                                               samples)]
                                 for evaluation in evaluations], dtype=np.float64)
            figures.append(Figure(split=split, contract=contract, metric="greedy",
                                  value=_interval(greedy, 1)))
            figures.append(Figure(split=split, contract=contract, metric="sampled",
                                  value=_interval(accepted / samples, samples)))
            if contract in PARTIAL_CREDIT:
                continue  # coverage and pass@k count accepted answers, not partial credit
            figures.append(Figure(split=split, contract=contract, metric="coverage",
                                  value=_interval((accepted > 0).astype(np.float64), 1)))
            for k in ks_for(samples):
                table = np.array([[pass_at_k(samples, int(c), k) for c in seed]
                                  for seed in accepted], dtype=np.float64)
                figures.append(Figure(split=split, contract=contract, metric=f"pass@{k}",
                                      value=_interval(table, 1)))
    return figures


def _typed(rows: Sequence[Sequence[Any]]) -> list[Any]:
    from postlab.tasks.rows import Row

    return [Row.of(row) for row in rows]
