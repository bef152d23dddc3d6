"""Everything a report shows, computed once from a record's raw rows.

Renderers (terminal, JSON, Markdown, HTML, figures) take the :class:`Analysis` this module
returns and lay it out; none of them computes a number. Held-out intervals are over seeds and
questions (:mod:`postlab.analysis.intervals`): each comes from the seeds x questions table of
its cells (a question's accepted share, coverage or pass@k; for a change or a gap the paired
difference of two cells), which the analysis keeps as accepted counts, 2 bytes a cell. A
training reward's interval is over seeds (each seed's rollouts are its own).
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from postlab.analysis.facts import SeedFacts, run_facts, table_facts
from postlab.analysis.intervals import (  # noqa: F401 (interval, t_quantile re-exported)
    CONFIDENCE,
    CROSSED_METHOD,
    RATE_METHOD,
    Interval,
    Spread,
    crossed_spread,
    interval,
    rate_interval,
    t_quantile,
)
from postlab.analysis.onset import Onset, Rule, calibrated_rule, cusum, slope, stated_rule
from postlab.plan.arms import arm_names, arm_specs, plan_contracts
from postlab.plan.margins import default
from postlab.records.metrics import (
    STEP_SERIES,
    Answer,
    count_under,
    question_groups,
)
from postlab.tasks.arithmetic import ARITHMETIC_CONTRACTS
from postlab.tasks.registry import answer_function

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

SCHEMA = "postlab.analysis.aggregate/1"
INTERVAL_METHOD = (f"held-out rates, coverage, pass@k, changes from SFT and hacking gaps: "
                   f"{CROSSED_METHOD}; training rewards: {RATE_METHOD}")
BAND_METHOD = "mean over seeds, band from the lowest to the highest seed"
ONSET_METHOD = ("one-sided CUSUM on the per-step gap (the step's rollouts accepted under the "
                "trained contract minus those right under the task's first contract): "
                "S_t = max(0, S_(t-1) + "
                "gap_t - {drift:g}), alarm when S_t > {threshold:g}; onset = first step of the "
                "excursion that raised it; {promise}")
ONSET_CALIBRATED = ("drift and threshold chosen for a false-alarm probability of at most "
                    "{stated:.1%} per seed and arm over {steps} steps of {batch} rollouts at a "
                    "gap of {tolerated:g} (this rule's, exactly: {reached:.2%}); a gap of "
                    "{detect:g} from the first step raises the alarm after {delay:.1f} steps "
                    "on average")
ONSET_STATED = ("drift and threshold stated by the plan; their false-alarm probability per "
                "seed and arm over {steps} steps of {batch} rollouts at a gap of "
                "{tolerated:g}: {reached:.2%}; a gap of {detect:g} from the first step raises "
                "the alarm after {delay:.1f} steps on average")


def monitor_rule(plan: Plan) -> Rule:
    """The plan's hacking-monitor rule with what it promises over its RL steps: calibrated
    for its false-alarm rate (``hacking_monitor.false_alarm``, default in
    ``postlab.plan.margins``), or, where the plan states a drift or a threshold (plans
    written before calibration), that rule, with the old default for the one missing."""
    from postlab.plan.schema import HackingMonitor

    monitor = plan.hacking_monitor or HackingMonitor()
    steps = plan.rl_steps
    batch = plan.prompts_per_step * plan.group_size
    tolerated = monitor.tolerated_gap or default("hacking_monitor.tolerated_gap")
    detect = monitor.detect_gap or default("hacking_monitor.detect_gap")
    if monitor.drift is not None or monitor.threshold is not None:
        drift, threshold = monitor.drift, monitor.threshold
        return stated_rule(default("hacking_monitor.drift") if drift is None else drift,
                           default("hacking_monitor.threshold") if threshold is None
                           else threshold, steps, batch, tolerated, detect)
    rate = monitor.false_alarm or default("hacking_monitor.false_alarm")
    return calibrated_rule(steps, batch, rate, tolerated, detect)


def describe_rule(rule: Rule) -> str:
    """The rule and what it promises, in the words every report form uses."""
    fields = {"steps": rule.steps, "batch": rule.batch, "tolerated": rule.tolerated_gap,
              "detect": rule.detect_gap, "reached": rule.false_alarm, "delay": rule.delay}
    promise = (ONSET_STATED.format(**fields) if rule.stated_false_alarm is None else
               ONSET_CALIBRATED.format(stated=rule.stated_false_alarm, **fields))
    return ONSET_METHOD.format(drift=rule.drift, threshold=rule.threshold, promise=promise)


def outcome_metrics(contracts: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Outcome metrics per decoding: the share of outputs accepted under each contract, and
    for sampled answers the share of questions covered (under the first contract)."""
    rates = tuple(f"{name}_rate" for name in contracts)
    return {"greedy": rates, "sampled": (*rates, "coverage")}


def dynamics_series(contracts: Sequence[str]) -> tuple[str, ...]:
    return (*(f"{name}_reward" for name in contracts), *STEP_SERIES)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    stage: str
    split: str
    decoding: str
    metric: str
    value: Interval
    change_from_sft: Interval | None  # paired by seed; None for the SFT stage itself


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


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one question with c correct among n samples (Chen et al. 2021):
    1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(rows: Sequence[Sequence[Any]], samples: int, k: int,
                   contract: str = ARITHMETIC_CONTRACTS[0], answer: Answer = sum) -> float:
    """pass@k averaged over the questions of an evaluation's sampled rows."""
    return _mean_pass_at_k(_accepted_per_question(rows, samples, contract, answer), samples, k)


def _accepted_per_question(rows: Sequence[Sequence[Any]], samples: int, contract: str,
                           answer: Answer) -> list[int]:
    return [count_under(group, contract, answer) for group in question_groups(rows, samples)]


def _mean_pass_at_k(accepted: Sequence[int], samples: int, k: int) -> float:
    values = [pass_at_k(samples, c, k) for c in accepted]
    return sum(values) / len(values)


def _band(columns: Sequence[Sequence[float]]) -> Band:
    """Per-position mean, min and max over seeds (``columns`` is seeds x positions)."""
    gathered = _Columns()
    for column in columns:
        gathered.add(column)
    return gathered.band()


class _Columns:
    """One series' per-position mean, min and max over seeds, accumulated seed by seed in
    seed order: each mean is the same sum, bit for bit, as adding the position's values in a
    list, and a minimum or maximum is replaced only by a value that compares below or above
    it, as Python's comparisons do (a NaN never). Keeps three values per position, whatever
    the number of seeds (keeping every seed's column took 19 MB per series at 10,000 seeds
    of 240 steps, and the Python loop over them 30 s)."""

    def __init__(self) -> None:
        self.total: np.ndarray | None = None
        self.low: np.ndarray | None = None
        self.high: np.ndarray | None = None
        self.seeds = 0

    def add(self, values: Sequence[float]) -> None:
        column = np.asarray(values, dtype=np.float64)
        if self.total is None or self.low is None or self.high is None:
            self.total, self.low, self.high = (np.zeros(len(column)), column.copy(),
                                               column.copy())
        elif len(column) != len(self.total):
            raise ValueError(f"a seed has {len(column)} positions, another {len(self.total)}")
        with np.errstate(invalid="ignore"):  # inf - inf is NaN, as Python's sum gives
            self.total += column
        self.low = np.where(column < self.low, column, self.low)
        self.high = np.where(column > self.high, column, self.high)
        self.seeds += 1

    def band(self) -> Band:
        if self.total is None or self.low is None or self.high is None:
            return Band(mean=(), low=(), high=())
        return Band(mean=tuple((self.total / self.seeds).tolist()),
                    low=tuple(self.low.tolist()), high=tuple(self.high.tolist()))


@dataclass
class _ArmSeries:
    """What one RL arm contributes to the analysis, gathered seed by seed."""

    steps: tuple[int, ...]
    series: dict[str, _Columns]
    onsets: list[Onset]
    paid: list[float]
    right: list[float]
    window: tuple[int, int]
    trials: int = 0


def record_facts(record: dict[str, Any], plan: Plan,
                 tables: Iterable[Any] | None = None) -> Iterator[SeedFacts]:
    """Every seed's facts in record order, computed columnar a batch of seeds at a time
    (:func:`~postlab.analysis.facts.table_facts`) from ``tables`` (by default the record's
    own, each seed checked first, :func:`~postlab.records.columns.record_tables`; a reader
    passes those its opening checked, :func:`~postlab.records.opened.checked_tables`): the
    path every reader takes."""
    from postlab.records.columns import record_tables

    samples, answer, contracts = plan.eval_samples, answer_function(plan), plan_contracts(plan)
    for batch in record_tables(record, plan) if tables is None else tables:
        yield from table_facts(batch, samples, answer, contracts)


def oracle_facts(record: dict[str, Any], plan: Plan) -> Iterator[SeedFacts]:
    """Every seed's facts from its Python rows, row by row (:func:`~postlab.analysis.facts.
    run_facts`): the plain path the columnar one is tested against."""
    samples, answer, contracts = plan.eval_samples, answer_function(plan), plan_contracts(plan)
    for run in record["runs"]:
        yield run_facts(run, samples, answer, contracts)


def analyse(record: dict[str, Any], plan: Plan, *,
            registration: dict[str, Any] | None = None,
            exploratory: dict[str, Any] | None = None,
            facts: Iterable[SeedFacts] | None = None) -> Analysis:
    """The analysis of a record from its seeds' facts (``facts``; by default computed
    columnar, :func:`record_facts`): what is kept of a seed is its numbers (rates, pass@k,
    per-step series), never its rows, so a record of many seeds is analysed in the memory of
    one batch of rows plus a few kilobytes per seed.

    Hypotheses decided: a checked ``registration``'s (else the plan's own), and
    ``exploratory`` ones given afterwards (a hypotheses section), each family on its own."""
    if not record["runs"]:
        raise ValueError("the record holds no completed seed")
    samples = plan.eval_samples
    contracts = plan_contracts(plan)
    reference = contracts[0]
    wanted = outcome_metrics(contracts)
    ks = tuple(range(1, samples + 1))
    # pass@k of a question from its accepted count, for every count and k
    pass_table = np.array([[pass_at_k(samples, c, k) for k in ks]
                           for c in range(samples + 1)])
    rule = monitor_rule(plan) if any(spec.is_rl for spec in arm_specs(plan)) else None
    trained_on = {spec.name: spec.contract for spec in arm_specs(plan)}

    # per (stage, split, decoding, metric): one value per seed, in seed order
    values: dict[tuple[str, str, str, str], list[float]] = {}
    curves: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    per_arm: dict[str, _ArmSeries] = {}
    # per (stage, split, decoding, contract): one row of per-question accepted counts a seed
    counts: dict[tuple[str, str, str, str], list[np.ndarray]] = {}
    asked: dict[str, tuple[tuple[int, ...], ...]] = {}  # per split: its questions, in order
    sft_loss = _Columns()
    compute = _ComputeSums(plan)
    seeds: list[int] = []
    stages: tuple[str, ...] = ()
    splits: tuple[str, ...] = ()
    arms: list[str] = []
    for fact in record_facts(record, plan) if facts is None else facts:
        if not seeds:
            stages = tuple(dict.fromkeys(stage for stage, _, _ in fact.evaluations))
            splits = tuple(dict.fromkeys(split for stage, split, _ in fact.evaluations
                                         if stage == stages[0]))
            # arms every seed trained: those of the first seed, less any a later seed lacks
            arms = [a for a in arm_names(plan) if a in fact.training]
            compute.stages = stages
        seeds.append(fact.seed)
        for stage in stages:
            for split in splits:
                for decoding in ("greedy", "sampled"):
                    block = fact.evaluations[(stage, split, decoding)]
                    if asked.setdefault(split, block.questions) != block.questions:
                        raise ValueError(f"seed {fact.seed} asked the {split} questions in "
                                         "another order than the first seed")
                    computed = {f"{name}_rate": sum(c) / block.rows
                                for name, c in block.accepted.items()}
                    computed["coverage"] = (sum(c > 0 for c in block.accepted[reference])
                                            / len(block.questions))
                    for metric in wanted[decoding]:
                        values.setdefault((stage, split, decoding, metric), []).append(
                            computed[metric])
                    for name, c in block.accepted.items():
                        counts.setdefault((stage, split, decoding, name), []).append(
                            np.array(c, dtype=np.uint16))
                # each question's accepted count, then every k from it, averaged in
                # question order (a running sum adds them as Python's sum does)
                accepted = np.asarray(fact.evaluations[(stage, split, "sampled")]
                                      .accepted[reference], dtype=np.int64)
                totals = np.cumsum(pass_table[accepted], axis=0)[-1]
                curves.setdefault((stage, split), []).append(
                    tuple((totals / len(accepted)).tolist()))
        for arm in list(arms):
            if arm not in fact.training:
                arms.remove(arm)
                per_arm.pop(arm, None)
                continue
            trained = fact.training[arm]
            if arm not in per_arm:
                window = max(1, len(trained.steps) // 10)
                per_arm[arm] = _ArmSeries(
                    steps=trained.steps,
                    series={name: _Columns() for name in dynamics_series(contracts)},
                    onsets=[], paid=[], right=[],
                    window=(trained.steps[-window], trained.steps[-1]))
            gathered = per_arm[arm]
            for name, columns in gathered.series.items():
                columns.add(trained.series[name])
            contract = trained_on.get(arm)
            if contract is not None and contract != reference:
                # 8 bytes a step, as the series are kept (a tuple of floats took 32)
                gap_series = array("d", (trained.series[f"{contract}_reward"]
                                         - trained.series[f"{reference}_reward"]).tolist())
                assert rule is not None  # an arm that trains on a contract is RL
                result = cusum(gap_series, rule.drift, rule.threshold)
                gathered.onsets.append(Onset(
                    arm=arm, seed=fact.seed, contract=contract, gaps=gap_series,
                    alarm=result.alarm, onset=result.onset,
                    kl_trend=slope(trained.series["kl"].tolist()),
                    entropy_trend=slope(trained.series["entropy"].tolist())))
            if contract is not None:
                window = max(1, len(per_arm[arm].steps) // 10)
                trials = int(trained.rows[-window:].sum())
                gathered.trials = trials
                gathered.paid.append(trained.window_sum(contract, window) / trials)
                gathered.right.append(trained.window_sum(reference, window) / trials)
        sft_loss.add(fact.sft_loss)
        compute.add(fact.compute)
    if not seeds:
        raise ValueError("the record holds no completed seed")

    held = {key: np.stack(rows) for key, rows in counts.items()}
    tabled = Analysis(schema=SCHEMA, plan_sha256=record["plan_sha256"], seeds=tuple(seeds),
                      stages=stages, arms=(), splits=splits, eval_samples=samples,
                      interval_method="", band_method="", outcomes=(), hacking_gaps=(),
                      pass_at_k=(), dynamics=(), sft_loss=Band(mean=(), low=(), high=()),
                      contracts=contracts, counts=held, questions=asked)

    def spread(stage: str, split: str, decoding: str, metric: str,
               per_seed: Sequence[float], versus: str | None = None) -> Spread:
        """The metric's crossed spread (its difference from stage ``versus``, paired by seed
        and question, where given), carrying the per-seed values as computed above."""
        table, per_cell = tabled.cells(stage, split, decoding, metric)  # type: ignore[misc]
        if versus is not None:
            table = table - tabled.cells(versus, split, decoding, metric)[0]  # type: ignore
        found = crossed_spread([(1.0, table)], per_cell)
        return dataclasses.replace(found, per_seed=tuple(per_seed),
                                   mean=sum(per_seed) / len(per_seed))

    outcomes = []
    for (stage, split, decoding, metric), per_seed in values.items():
        change = None
        if stage != "initial" and "initial" in stages:
            base = values[("initial", split, decoding, metric)]
            change = spread(stage, split, decoding, metric,
                            [a - b for a, b in zip(per_seed, base, strict=True)],
                            versus="initial").interval()
        outcomes.append(Outcome(stage=stage, split=split, decoding=decoding, metric=metric,
                                value=spread(stage, split, decoding, metric,
                                             per_seed).interval(rate=True),
                                change_from_sft=change))

    gaps = []
    if len(contracts) > 1:
        for stage in stages:
            for split in splits:
                right = values[(stage, split, "sampled", f"{reference}_rate")]
                paid = values[(stage, split, "sampled", f"{contracts[1]}_rate")]
                gaps.append(HackingGap(stage=stage, split=split, gap=spread(
                    stage, split, "sampled", "hacking_gap",
                    [p - r for p, r in zip(paid, right, strict=True)]).interval()))

    pass_curves = []
    for (stage, split), per_seed in curves.items():
        # a question's pass@k rests on about samples // k independent draws of k answers
        per_k = [spread(stage, split, "sampled", f"pass@{k}",
                        [curve[i] for curve in per_seed]).interval(rate=True)
                 for i, k in enumerate(ks)]
        pass_curves.append(PassAtK(stage=stage, split=split, k=ks, per_seed=tuple(per_seed),
                                   mean=tuple(i.mean for i in per_k),
                                   low=tuple(i.low for i in per_k),
                                   high=tuple(i.high for i in per_k)))

    dynamics, onsets, rewards = [], [], []
    for arm in arms:
        gathered = per_arm[arm]
        onsets += gathered.onsets
        contract = trained_on.get(arm)
        if contract is not None:
            rewards.append(TrainingReward(
                arm=arm, contract=contract, steps=gathered.window,
                reward=rate_interval(gathered.paid, gathered.trials),
                reference=rate_interval(gathered.right, gathered.trials),
                trials=gathered.trials))
        dynamics.append(Dynamics(arm=arm, steps=gathered.steps, series={
            name: columns.band() for name, columns in gathered.series.items()}))

    analysis = Analysis(schema=SCHEMA, plan_sha256=record["plan_sha256"],
                        seeds=tuple(seeds), stages=stages, arms=tuple(arms),
                        splits=splits, eval_samples=samples, interval_method=INTERVAL_METHOD,
                        band_method=BAND_METHOD, outcomes=tuple(outcomes),
                        hacking_gaps=tuple(gaps), pass_at_k=tuple(pass_curves),
                        dynamics=tuple(dynamics), sft_loss=sft_loss.band(),
                        compute=compute.result(), contracts=contracts,
                        hacking_onsets=tuple(onsets),
                        onset_method="" if rule is None else describe_rule(rule),
                        onset_rule=rule,
                        training_rewards=tuple(rewards), counts=held, questions=asked)
    from postlab.analysis.hypotheses import families, verdicts_for

    decided = families(plan, registration, exploratory)
    if registration is not None:
        analysis = dataclasses.replace(analysis, registration={
            key: record["registration"][key]
            for key in ("registered_at", "training_started_at", "sha256")})
    if decided and len(seeds) >= 2:
        # Decided here, from the same per-seed values as every other number of the report.
        analysis = dataclasses.replace(analysis, verdicts=tuple(
            verdict for section, standing in decided
            for verdict in verdicts_for(analysis, section, standing)))
    return analysis


class _ComputeSums:
    """Per-stage compute from the record, summed seed by seed (absent in records made before
    it was recorded: then there is none)."""

    def __init__(self, plan: Plan) -> None:
        self.pipelines = {arm.name: arm.pipeline for arm in arm_specs(plan)}
        self.from_untrained = {arm.name for arm in arm_specs(plan) if arm.from_untrained}
        self.stages: tuple[str, ...] = ()
        self.sums: dict[str, list[list[int]]] | None = None
        self.keys: dict[str, list[str]] = {}
        self.complete = True
        self.seeds = 0

    def add(self, compute: dict[str, dict[str, int]] | None) -> None:
        if compute is None or not self.complete:
            self.complete = False
            return
        if self.sums is None:
            self.keys = {stage: list(compute[stage]) for stage in self.stages}
            self.sums = {stage: [] for stage in self.stages}
        for stage in self.stages:
            self.sums[stage].append([compute[stage][k] for k in self.keys[stage]])
        self.seeds += 1

    def result(self) -> tuple[Compute, ...]:
        if not self.complete or self.sums is None:
            return ()
        n = self.seeds

        def mean(stage: str) -> dict[str, float]:
            return {k: sum(counts[i] for counts in self.sums[stage]) / n
                    for i, k in enumerate(self.keys[stage])}

        result = []
        for stage in self.stages:
            own = mean(stage)
            starts_from_sft = stage != "initial" and stage not in self.from_untrained
            base = mean("initial") if starts_from_sft else {}
            total = {k: own[k] + (base[k] if starts_from_sft else 0) for k in own}
            result.append(Compute(stage=stage, pipeline=self.pipelines.get(stage, "sft"),
                                  own=own, total=total))
        return tuple(result)
