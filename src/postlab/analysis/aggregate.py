"""Everything a report shows, computed once from a record's raw rows.

Renderers (terminal, JSON, Markdown, HTML, figures) take the
:class:`~postlab.analysis.results.Analysis` this module returns and lay it out; none of them
computes a number. Held-out intervals are over seeds and
questions (:mod:`postlab.analysis.intervals`): each comes from the seeds x questions table of
its cells (a question's accepted share, coverage or pass@k; for a change or a gap the paired
difference of two cells), which the analysis keeps as accepted counts, 2 bytes a cell. A
training reward's interval is over seeds (each seed's rollouts are its own).
"""

from __future__ import annotations

import dataclasses
import functools
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from postlab.analysis.facts import SeedFacts, Trained, run_facts, table_facts
from postlab.analysis.gathering import ArmSeries, Columns, ComputeSums
from postlab.analysis.intervals import (
    CROSSED_METHOD,
    RATE_METHOD,
    Interval,
    Spread,
    crossed_spread,
    paired_difference,
    rate_interval,
)
from postlab.analysis.monitor import describe_rule, monitor_rule
from postlab.analysis.onset import Onset, cusum, slope
from postlab.analysis.passk import pass_at_k
from postlab.analysis.results import (
    Analysis,
    Band,
    Dynamics,
    HackingGap,
    Outcome,
    PassAtK,
    TrainingReward,
)
from postlab.engines.options import describe_policy_loss
from postlab.plan.arms import arm_names, arm_specs, plan_contracts
from postlab.records.metrics import STEP_SERIES
from postlab.tasks.contracts import DRAWN, random_paid
from postlab.tasks.registry import answer_function

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.records.models import Record

SCHEMA = "postlab.analysis.aggregate/1"
INTERVAL_METHOD = (f"held-out rates, coverage, pass@k, changes from SFT and hacking gaps: "
                   f"{CROSSED_METHOD}; training rewards: {RATE_METHOD}")
BAND_METHOD = "mean over seeds, band from the lowest to the highest seed"


def outcome_metrics(contracts: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Outcome metrics per decoding: the share of outputs accepted under each contract, and
    for sampled answers the share of questions covered (under the first contract)."""
    rates = tuple(f"{name}_rate" for name in contracts)
    return {"greedy": rates, "sampled": (*rates, "coverage")}


def dynamics_series(contracts: Sequence[str]) -> tuple[str, ...]:
    return (*(f"{name}_reward" for name in contracts), *STEP_SERIES)


def record_facts(record: Record, plan: Plan,
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


def oracle_facts(record: Record, plan: Plan) -> Iterator[SeedFacts]:
    """Every seed's facts from its Python rows, row by row (:func:`~postlab.analysis.facts.
    run_facts`): the plain path the columnar one is tested against."""
    samples, answer, contracts = plan.eval_samples, answer_function(plan), plan_contracts(plan)
    for run in record.runs:
        yield run_facts(run, samples, answer, contracts)


def analyse(record: Record, plan: Plan, *,
            registration: dict[str, Any] | None = None,
            exploratory: dict[str, Any] | None = None,
            facts: Iterable[SeedFacts] | None = None) -> Analysis:
    """The analysis of a record from its seeds' facts (``facts``; by default computed
    columnar, :func:`record_facts`): what is kept of a seed is its numbers (rates, pass@k,
    per-step series), never its rows, so a record of many seeds is analysed in the memory of
    one batch of rows plus a few kilobytes per seed.

    Hypotheses decided: a checked ``registration``'s (else the plan's own), and
    ``exploratory`` ones given afterwards (a hypotheses section), each family on its own."""
    if not record.runs:
        raise ValueError("the record holds no completed seed")
    gathered = _Gathering(plan)
    for fact in record_facts(record, plan) if facts is None else facts:
        gathered.add(fact)
    if not gathered.seeds:
        raise ValueError("the record holds no completed seed")

    held = {key: np.stack(rows) for key, rows in gathered.counts.items()}
    tabled = Analysis(schema=SCHEMA, plan_sha256=record.plan_sha256,
                      seeds=tuple(gathered.seeds), stages=gathered.stages, arms=(),
                      splits=gathered.splits, eval_samples=gathered.samples,
                      interval_method="", band_method="", outcomes=(), hacking_gaps=(),
                      pass_at_k=(), dynamics=(), sft_loss=Band(mean=(), low=(), high=()),
                      contracts=gathered.contracts, counts=held, questions=gathered.asked)
    spread = functools.partial(_spread, tabled)
    outcomes = _outcomes(gathered, spread)
    gaps = _hacking_gaps(gathered, spread)
    pass_curves = _pass_curves(gathered, spread)
    dynamics, onsets, rewards = _arm_results(gathered)
    rule = gathered.rule
    analysis = Analysis(schema=SCHEMA, plan_sha256=record.plan_sha256,
                        seeds=tuple(gathered.seeds), stages=gathered.stages,
                        arms=tuple(gathered.arms), splits=gathered.splits,
                        eval_samples=gathered.samples, interval_method=INTERVAL_METHOD,
                        band_method=BAND_METHOD, outcomes=outcomes,
                        hacking_gaps=gaps, pass_at_k=pass_curves,
                        dynamics=dynamics, sft_loss=gathered.sft_loss.band(),
                        compute=gathered.compute.result(), contracts=gathered.contracts,
                        hacking_onsets=onsets,
                        onset_method="" if rule is None else describe_rule(rule),
                        onset_rule=rule,
                        training_rewards=rewards, counts=held, questions=gathered.asked,
                        policy_loss=describe_policy_loss(plan) if gathered.arms else "",
                        control=plan.control)
    return _decided(analysis, record, plan, registration, exploratory)


class _Gathering:
    """What the analysis keeps of every seed, gathered seed by seed in record order: each
    metric's per-seed values, each evaluation's per-question accepted counts, each seed's
    pass@k curve and the RL arms' series; never a seed's rows."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.samples = plan.eval_samples
        self.contracts = plan_contracts(plan)
        self.reference = self.contracts[0]
        self.wanted = outcome_metrics(self.contracts)
        self.ks = tuple(range(1, self.samples + 1))
        # pass@k of a question from its accepted count, for every count and k
        self.pass_table = np.array([[pass_at_k(self.samples, c, k) for k in self.ks]
                                    for c in range(self.samples + 1)])
        self.rule = monitor_rule(plan) if any(spec.is_rl for spec in arm_specs(plan)) else None
        self.trained_on = {spec.name: spec.contract for spec in arm_specs(plan)}
        # per (stage, split, decoding, metric): one value per seed, in seed order
        self.values: dict[tuple[str, str, str, str], list[float]] = {}
        self.curves: dict[tuple[str, str], list[tuple[float, ...]]] = {}
        self.per_arm: dict[str, ArmSeries] = {}
        # per (stage, split, decoding, contract): one row of per-question accepted counts a
        # seed
        self.counts: dict[tuple[str, str, str, str], list[np.ndarray]] = {}
        # per split: its questions, in order
        self.asked: dict[str, tuple[tuple[int, ...], ...]] = {}
        self.sft_loss = Columns()
        self.compute = ComputeSums(plan)
        self.seeds: list[int] = []
        self.stages: tuple[str, ...] = ()
        self.splits: tuple[str, ...] = ()
        self.arms: list[str] = []

    def add(self, fact: SeedFacts) -> None:
        """Fold one seed's facts in (the first seed fixes the stages, splits and arms)."""
        if not self.seeds:
            self.stages = tuple(dict.fromkeys(stage for stage, _, _ in fact.evaluations))
            self.splits = tuple(dict.fromkeys(split for stage, split, _ in fact.evaluations
                                              if stage == self.stages[0]))
            # arms every seed trained: those of the first seed, less any a later seed lacks
            self.arms = [a for a in arm_names(self.plan) if a in fact.training]
            self.compute.stages = self.stages
        self.seeds.append(fact.seed)
        for stage in self.stages:
            for split in self.splits:
                self._add_evaluations(fact, stage, split)
        for arm in list(self.arms):
            if arm not in fact.training:
                self.arms.remove(arm)
                self.per_arm.pop(arm, None)
                continue
            self._add_arm(fact.seed, arm, fact.training[arm])
        self.sft_loss.add(fact.sft_loss)
        self.compute.add(fact.compute)

    def _add_evaluations(self, fact: SeedFacts, stage: str, split: str) -> None:
        """One stage and split of a seed: its rates, coverage, accepted counts and pass@k."""
        reference = self.reference
        for decoding in ("greedy", "sampled"):
            block = fact.evaluations[(stage, split, decoding)]
            if self.asked.setdefault(split, block.questions) != block.questions:
                raise ValueError(f"seed {fact.seed} asked the {split} questions in "
                                 "another order than the first seed")
            computed = {f"{name}_rate": sum(c) / block.rows
                        for name, c in block.accepted.items()}
            computed["coverage"] = (sum(c > 0 for c in block.accepted[reference])
                                    / len(block.questions))
            for metric in self.wanted[decoding]:
                self.values.setdefault((stage, split, decoding, metric), []).append(
                    computed[metric])
            for name, c in block.accepted.items():
                self.counts.setdefault((stage, split, decoding, name), []).append(
                    np.array(c, dtype=np.uint16))
        # each question's accepted count, then every k from it, averaged in
        # question order (a running sum adds them as Python's sum does)
        accepted = np.asarray(fact.evaluations[(stage, split, "sampled")]
                              .accepted[reference], dtype=np.int64)
        totals = np.cumsum(self.pass_table[accepted], axis=0)[-1]
        self.curves.setdefault((stage, split), []).append(
            tuple((totals / len(accepted)).tolist()))

    def _add_arm(self, seed: int, arm: str, trained: Trained) -> None:
        """One RL arm of a seed: its series, its hacking onset where it trains on a lenient
        contract, and its late training reward where it trains on any."""
        reference = self.reference
        if arm not in self.per_arm:
            window = max(1, len(trained.steps) // 10)
            self.per_arm[arm] = ArmSeries(
                steps=trained.steps,
                series={name: Columns() for name in dynamics_series(self.contracts)},
                onsets=[], paid=[], right=[],
                window=(trained.steps[-window], trained.steps[-1]))
        gathered = self.per_arm[arm]
        for name, columns in gathered.series.items():
            columns.add(trained.series[name])
        contract = self.trained_on.get(arm)
        if contract in DRAWN:  # paid at random: its payments recomputed, no hacking onset
            assert self.plan.random_rate is not None  # the plan's validation asks for it
            trained = dataclasses.replace(trained, accepted={
                **trained.accepted, contract: random_paid(seed, trained.steps,
                                                          trained.rows.tolist(),
                                                          self.plan.random_rate)})
        elif contract is not None and contract != reference:
            gathered.onsets.append(self._onset(seed, arm, contract, trained))
        if contract is not None:
            window = max(1, len(self.per_arm[arm].steps) // 10)
            trials = int(trained.rows[-window:].sum())
            gathered.trials = trials
            gathered.paid.append(trained.window_sum(contract, window) / trials)
            gathered.right.append(trained.window_sum(reference, window) / trials)

    def _onset(self, seed: int, arm: str, contract: str, trained: Trained) -> Onset:
        """The seed's per-step hacking gap of an arm and where the monitor's rule alarms."""
        # 8 bytes a step, as the series are kept (a tuple of floats took 32)
        gap_series = array("d", (trained.series[f"{contract}_reward"]
                                 - trained.series[f"{self.reference}_reward"]).tolist())
        rule = self.rule
        assert rule is not None  # an arm that trains on a contract is RL
        result = cusum(gap_series, rule.drift, rule.threshold)
        return Onset(arm=arm, seed=seed, contract=contract, gaps=gap_series,
                     alarm=result.alarm, onset=result.onset,
                     kl_trend=slope(trained.series["kl"].tolist()),
                     entropy_trend=slope(trained.series["entropy"].tolist()))


#: :func:`_spread` bound to the analysis that holds the counts.
_Spreader = Callable[..., Spread]


def _spread(tabled: Analysis, stage: str, split: str, decoding: str, metric: str,
            per_seed: Sequence[float], versus: str | None = None) -> Spread:
    """The metric's crossed spread (its difference from stage ``versus``, paired by seed
    and question, where given), carrying the per-seed values as computed from the facts."""
    table, per_cell = tabled.cells(stage, split, decoding, metric)  # type: ignore[misc]
    if versus is not None:
        other = tabled.cells(versus, split, decoding, metric)[0]  # type: ignore[index]
        found = paired_difference((table, per_cell), (other, per_cell))
    else:
        found = crossed_spread([(1.0, table)], per_cell)
    return dataclasses.replace(found, per_seed=tuple(per_seed),
                               mean=sum(per_seed) / len(per_seed))


def _outcomes(gathered: _Gathering, spread: _Spreader) -> tuple[Outcome, ...]:
    """Every held-out metric's interval, and its changes from the SFT stage and from the
    plan's control arm, each paired by seed and question."""
    values, stages, control = gathered.values, gathered.stages, gathered.plan.control

    def change(stage: str, split: str, decoding: str, metric: str, per_seed: list[float],
               versus: str | None) -> Interval | None:
        if versus is None or stage in ("initial", versus) or versus not in stages:
            return None
        base = values[(versus, split, decoding, metric)]
        return spread(stage, split, decoding, metric,
                      [a - b for a, b in zip(per_seed, base, strict=True)],
                      versus=versus).interval()

    outcomes = []
    for (stage, split, decoding, metric), per_seed in values.items():
        outcomes.append(Outcome(stage=stage, split=split, decoding=decoding, metric=metric,
                                value=spread(stage, split, decoding, metric,
                                             per_seed).interval(rate=True),
                                change_from_sft=change(stage, split, decoding, metric,
                                                       per_seed, "initial"),
                                change_from_control=change(stage, split, decoding, metric,
                                                           per_seed, control)))
    return tuple(outcomes)


def _hacking_gaps(gathered: _Gathering, spread: _Spreader) -> tuple[HackingGap, ...]:
    """Per stage and split, the second contract's sampled acceptance minus the first's."""
    values, contracts, reference = gathered.values, gathered.contracts, gathered.reference
    gaps = []
    if len(contracts) > 1:
        for stage in gathered.stages:
            for split in gathered.splits:
                right = values[(stage, split, "sampled", f"{reference}_rate")]
                paid = values[(stage, split, "sampled", f"{contracts[1]}_rate")]
                gaps.append(HackingGap(stage=stage, split=split, gap=spread(
                    stage, split, "sampled", "hacking_gap",
                    [p - r for p, r in zip(paid, right, strict=True)]).interval()))
    return tuple(gaps)


def _pass_curves(gathered: _Gathering, spread: _Spreader) -> tuple[PassAtK, ...]:
    """Per stage and split, pass@k for every k with its interval."""
    ks = gathered.ks
    pass_curves = []
    for (stage, split), per_seed in gathered.curves.items():
        # a question's pass@k rests on about samples // k independent draws of k answers
        per_k = [spread(stage, split, "sampled", f"pass@{k}",
                        [curve[i] for curve in per_seed]).interval(rate=True)
                 for i, k in enumerate(ks)]
        pass_curves.append(PassAtK(stage=stage, split=split, k=ks, per_seed=tuple(per_seed),
                                   mean=tuple(i.mean for i in per_k),
                                   low=tuple(i.low for i in per_k),
                                   high=tuple(i.high for i in per_k)))
    return tuple(pass_curves)


def _arm_results(gathered: _Gathering) -> tuple[tuple[Dynamics, ...], tuple[Onset, ...],
                                                tuple[TrainingReward, ...]]:
    """Per arm every seed trained: its dynamics bands, hacking onsets and training reward."""
    dynamics, onsets, rewards = [], [], []
    for arm in gathered.arms:
        series = gathered.per_arm[arm]
        onsets += series.onsets
        contract = gathered.trained_on.get(arm)
        if contract is not None:
            rewards.append(TrainingReward(
                arm=arm, contract=contract, steps=series.window,
                reward=rate_interval(series.paid, series.trials),
                reference=rate_interval(series.right, series.trials),
                trials=series.trials))
        dynamics.append(Dynamics(arm=arm, steps=series.steps, series={
            name: columns.band() for name, columns in series.series.items()}))
    return tuple(dynamics), tuple(onsets), tuple(rewards)


def _decided(analysis: Analysis, record: Record, plan: Plan,
             registration: dict[str, Any] | None,
             exploratory: dict[str, Any] | None) -> Analysis:
    """The analysis with its registration and its hypotheses decided, from the same per-seed
    values as every other number of the report."""
    from postlab.analysis.hypotheses import families, verdicts_for

    decided = families(plan, registration, exploratory)
    if registration is not None:
        analysis = dataclasses.replace(analysis, registration={
            key: getattr(record.registration, key)
            for key in ("registered_at", "training_started_at", "sha256")})
    if decided and len(analysis.seeds) >= 2:
        # Decided here, from the same per-seed values as every other number of the report.
        analysis = dataclasses.replace(analysis, verdicts=tuple(
            verdict for section, standing in decided
            for verdict in verdicts_for(analysis, section, standing)))
    return analysis
