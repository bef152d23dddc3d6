"""What a report shows, as the frozen types :func:`~postlab.analysis.aggregate.analyse`
returns: renderers read them and compute nothing, so they live apart from the computation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from postlab.analysis.intervals import Interval
from postlab.analysis.onset import Onset, Rule
from postlab.analysis.passk import pass_at_k
from postlab.tasks.arithmetic import ARITHMETIC_CONTRACTS


@dataclass(frozen=True, kw_only=True)
class Outcome:
    stage: str
    split: str
    decoding: str
    metric: str
    value: Interval
    change_from_sft: Interval | None  # paired by seed; None for the SFT stage itself
    #: the difference from the plan's control arm, paired by seed and question; None without
    #: a control, and for the SFT stage and the control itself
    change_from_control: Interval | None = None


@dataclass(frozen=True, kw_only=True)
class HackingGap:
    """Acceptance under the second contract minus success under the first (substring minus
    strict for arithmetic), of sampled outputs: reward a checker pays for answers that are
    not right."""

    stage: str
    split: str
    gap: Interval


@dataclass(frozen=True, kw_only=True)
class PassAtK:
    stage: str
    split: str
    k: tuple[int, ...]
    per_seed: tuple[tuple[float, ...], ...]
    mean: tuple[float, ...]
    low: tuple[float | None, ...]
    high: tuple[float | None, ...]


@dataclass(frozen=True, kw_only=True)
class Band:
    mean: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Dynamics:
    arm: str
    steps: tuple[int, ...]
    series: dict[str, Band]


@dataclass(frozen=True, kw_only=True)
class TrainingReward:
    """What an RL arm's own rollouts earned late in training: the share of the last tenth of
    its steps' rollouts (at least one step) accepted by the contract it trained on, and by
    the task's reference contract. Set against held-out success, it shows how much of the
    reward carried over to questions training never asked."""

    arm: str
    contract: str
    steps: tuple[int, int]  # first and last step of the window
    reward: Interval
    reference: Interval
    trials: int = 0  # rollouts a seed's share counts (the window's steps x batch)


@dataclass(frozen=True, kw_only=True)
class Compute:
    """What a stage cost, averaged over seeds; ``total`` adds the SFT it started from."""

    stage: str
    pipeline: str
    own: dict[str, float]
    total: dict[str, float]


@dataclass(frozen=True, kw_only=True)
class Analysis:
    schema: str
    plan_sha256: str
    seeds: tuple[int, ...]
    stages: tuple[str, ...]
    arms: tuple[str, ...]
    splits: tuple[str, ...]
    eval_samples: int
    interval_method: str
    band_method: str
    outcomes: tuple[Outcome, ...]
    hacking_gaps: tuple[HackingGap, ...]
    pass_at_k: tuple[PassAtK, ...]
    dynamics: tuple[Dynamics, ...]
    sft_loss: Band
    compute: tuple[Compute, ...] = ()
    #: The contracts reported, the reference rule first; metric and series keys name them.
    #: Not in the JSON form: schema 1 already names them in those keys.
    contracts: tuple[str, ...] = ARITHMETIC_CONTRACTS
    #: Per seed and RL arm trained on a lenient contract: the per-step hacking gap and the
    #: step where the plan's CUSUM rule found its onset (``postlab.analysis.onset``).
    hacking_onsets: tuple[Onset, ...] = ()
    onset_method: str = ""
    #: The rule behind the onsets with what it promises (``postlab.analysis.onset.Rule``);
    #: None for a plan without RL arms.
    onset_rule: Rule | None = None
    #: The plan's preregistered hypotheses, decided (``postlab.analysis.hypotheses``); in the
    #: JSON form only when the plan has some.
    verdicts: tuple[Any, ...] = ()
    #: The run's registration (``postlab.plan.registration``): when it was registered, when
    #: training began, the file's sha256; None for a run without one.
    registration: dict[str, str] | None = None
    #: Per RL arm: the late training reward, to set against held-out success.
    training_rewards: tuple[TrainingReward, ...] = ()
    #: The plan's control arm (``Plan.control``), which outcomes' ``change_from_control``
    #: compare with; None without one.
    control: str | None = None
    #: The policy loss every RL arm of the plan trained with and the settings it read
    #: (``postlab.engines.options.describe_policy_loss``); empty for a plan without RL arms.
    policy_loss: str = ""
    #: Per (stage, split, decoding, contract): seeds x questions accepted counts (of 1 greedy
    #: answer or ``eval_samples`` sampled ones), what every held-out interval is computed
    #: from; and each split's questions, in the tables' order. Not in the JSON form.
    counts: dict[tuple[str, str, str, str], np.ndarray] = dataclasses.field(
        default_factory=dict)
    questions: dict[str, tuple[tuple[int, ...], ...]] = dataclasses.field(default_factory=dict)

    def cells(self, stage: str, split: str, decoding: str, metric: str
              ) -> tuple[np.ndarray, int] | None:
        """The seeds x questions table of one held-out metric's per-question values, and
        how many draws a cell averages; None where the analysis holds no counts for it.
        ``metric`` is an outcome metric (``<contract>_rate``, ``coverage``), ``pass@<k>`` or
        ``hacking_gap``."""
        samples = self.eval_samples
        if metric == "hacking_gap":
            first = self.cells(stage, split, "sampled", f"{self.contracts[0]}_rate")
            second = self.cells(stage, split, "sampled", f"{self.contracts[1]}_rate")
            if first is None or second is None:
                return None
            return second[0] - first[0], samples
        if metric == "coverage" or metric.startswith("pass@"):
            counts = self.counts.get((stage, split, "sampled", self.contracts[0]))
            if counts is None:
                return None
            k = samples if metric == "coverage" else int(metric[len("pass@"):])
            # each question's pass@k from its accepted count, looked up (pass@samples is
            # coverage: 1 where any answer was accepted)
            lookup = np.array([pass_at_k(samples, c, k) for c in range(samples + 1)])
            return lookup[counts], max(1, samples // k)
        if not metric.endswith("_rate"):
            return None
        counts = self.counts.get((stage, split, decoding, metric[:-len("_rate")]))
        if counts is None:
            return None
        per_cell = samples if decoding == "sampled" else 1
        return counts / per_cell, per_cell

    def outcome(self, stage: str, split: str, decoding: str, metric: str) -> Outcome:
        for item in self.outcomes:
            if (item.stage, item.split, item.decoding, item.metric) == (stage, split,
                                                                         decoding, metric):
                return item
        raise KeyError((stage, split, decoding, metric))
