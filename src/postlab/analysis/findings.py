"""Findings: what a run's numbers say, as facts a renderer turns into sentences.

A finding is a template key and the numbers behind it, each with its interval; the words are
in :mod:`postlab.render.labels`, one template per key and language, so no sentence is ever
written by hand for a particular run. Which template a finding uses (raised, lowered, or no
clear change) is decided here from the interval alone: an interval above zero is a rise, one
below zero a fall, one holding zero no clear change, and a single seed no interval at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from postlab.analysis.intervals import Interval, crossed_spread, interval, rate_interval
from postlab.analysis.results import Analysis, TrainingReward
from postlab.analysis.samples import Sample, Tally, judged_rows
from postlab.plan.arms import plan_contracts
from postlab.tasks.contracts import DRAWN

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.records.models import Record

UP, DOWN, UNCLEAR, SINGLE = "up", "down", "unclear", "single"


@dataclass(frozen=True, kw_only=True)
class Finding:
    """``key`` picks the template; ``values`` fill it (intervals, counts, names)."""

    key: str
    direction: str | None
    values: dict[str, Any]


def direction(value: Interval) -> str:
    """up, down or unclear from where the interval lies against zero; single without one."""
    if value.low is None or value.high is None:
        return SINGLE
    if value.low > 0:
        return UP
    if value.high < 0:
        return DOWN
    return UNCLEAR


def findings(analysis: Analysis, record: Record, plan: Plan,
             split: str, tables: Callable[[], Iterable[Any]] | None = None) -> list[Finding]:
    """The run's findings on ``split``, in reading order: SFT, then each arm. ``tables``
    makes the record's checked flat tables afresh for each pass over the answers (None: the
    record's own, each seed checked first, :func:`~postlab.records.columns.record_tables`)."""
    reference = analysis.contracts[0]
    rate = f"{reference}_rate"
    result: list[Finding] = []
    n = len(analysis.seeds)
    if "initial" in analysis.stages:
        result.append(Finding(key="sft_result", direction=None, values={
            "split": split, "seeds": n, "samples": analysis.eval_samples,
            "greedy": analysis.outcome("initial", split, "greedy", rate).value,
            "sampled": analysis.outcome("initial", split, "sampled", rate).value,
            "coverage": analysis.outcome("initial", split, "sampled", "coverage").value}))
    rewards = {r.arm: r for r in analysis.training_rewards}
    for stage in analysis.stages:
        if stage == "initial":
            continue
        sampled = analysis.outcome(stage, split, "sampled", rate)
        if sampled.change_from_sft is not None:
            result.append(Finding(key="arm_change", direction=direction(sampled.change_from_sft),
                                  values={"stage": stage, "split": split,
                                          "value": sampled.value,
                                          "change": sampled.change_from_sft}))
            if sampled.change_from_control is not None:
                assert analysis.control is not None
                result.append(Finding(key="control_change",
                                      direction=direction(sampled.change_from_control),
                                      values={"stage": stage, "split": split,
                                              "control": analysis.control,
                                              "change": sampled.change_from_control}))
            coverage = analysis.outcome(stage, split, "sampled", "coverage")
            assert coverage.change_from_sft is not None
            result.append(Finding(key="coverage_change",
                                  direction=direction(coverage.change_from_sft),
                                  values={"stage": stage, "split": split,
                                          "value": coverage.value,
                                          "change": coverage.change_from_sft}))
        if stage in rewards and split != "train":
            trained = rewards[stage]
            # per seed: how often training rollouts were right (under the reference) minus the
            # same seed's success on questions training never asked; the variance of seeds
            # (the rollouts a one-column table of each seed's own draws) and of questions
            difference = _reward_minus_held_out(analysis, trained, stage, split,
                                                sampled.value.per_seed)
            key = ("train_vs_held_out" if trained.contract == reference else
                   "random_vs_held_out" if trained.contract in DRAWN else
                   "lenient_vs_held_out")
            result.append(Finding(key=key, direction=direction(difference),
                                  values={"stage": stage, "split": split,
                                          "contract": trained.contract,
                                          "first": trained.steps[0], "last": trained.steps[1],
                                          "reward": trained.reward, "right": trained.reference,
                                          "held_out": sampled.value,
                                          "difference": difference}))
        # the control is paid for what it is paid for: its acceptance of wrong answers is
        # its design, not gaming, and it is judged against the arms instead; an arm paid at
        # random has nothing to game
        if stage in rewards and rewards[stage].contract != reference and \
                stage != analysis.control and rewards[stage].contract not in DRAWN:
            result.append(_gaming(analysis, record, plan, stage, split,
                                  rewards[stage].contract, tables))
    for verdict in analysis.verdicts:
        low, high = sorted((verdict.bound, verdict.opposite))
        result.append(Finding(key="hypothesis", direction=verdict.outcome, values={
            "id": verdict.id, "statement": verdict.statement, "mean": verdict.mean,
            "low": low, "high": high, "level": verdict.level, "standing": verdict.standing,
            "registered_at": (analysis.registration or {}).get("registered_at", "")}))
    return result


def _reward_minus_held_out(analysis: Analysis, trained: TrainingReward, stage: str,
                           split: str, held_out: Sequence[float]) -> Interval:
    per_seed = [r - h for r, h in zip(trained.reference.per_seed, held_out, strict=True)]
    cells = analysis.cells(stage, split, "sampled", f"{analysis.contracts[0]}_rate")
    if cells is None:
        return interval(per_seed)
    rollouts = np.array(trained.reference.per_seed)[:, None]
    found = crossed_spread([(1.0, rollouts), (-1.0, cells[0])], [trained.trials, cells[1]])
    return dataclasses.replace(found, per_seed=tuple(per_seed),
                               mean=sum(per_seed) / len(per_seed)).interval()


class _GamedTally:
    """Paid-and-wrong answers of some stages on one split, per seed, and the commonest such
    answer of each stage, counted on one walk of the sampled answers (a finding needs the
    trained arm's and the SFT model's; each walk decodes and judges every answer).

    An answer the reference refuses counts by what the lenient contract pays it: 1 or 0
    for most contracts, a fraction for a partial-credit one (``per-call`` pays a third for
    each of three calls), so the share is the reward paid to wrong answers per answer and
    a contract that never pays in full still shows what it paid for."""

    def __init__(self, stages: list[str], split: str, contract: str,
                 plan: Plan) -> None:
        self.stages, self.split, self.contract = stages, split, contract
        order = plan_contracts(plan)
        self.reference, self.place = order[0], order.index(contract)  # in a Sample's scores
        self.paid: dict[str, dict[int, float]] = {stage: {} for stage in stages}
        self.total: dict[str, dict[int, int]] = {stage: {} for stage in stages}
        self.gamed = {stage: Tally() for stage in stages}

    def walk(self, record: Record, plan: Plan,
             tables: Iterable[Any] | None = None) -> _GamedTally:
        """Tally the record's judged answers (:func:`~postlab.analysis.samples.judged_rows`,
        ``tables`` as it takes)."""
        for rows in judged_rows(record, plan, tables):
            self.add_rows(rows, plan)
        return self

    def add(self, sample: Sample) -> None:
        """One answer (the row-by-row path, kept as the oracle of :meth:`add_rows`)."""
        if (sample.stage not in self.stages or sample.split != self.split
                or sample.decoding != "sampled"):
            return
        total, paid = self.total[sample.stage], self.paid[sample.stage]
        total[sample.seed] = total.get(sample.seed, 0) + 1
        pays = (sample.scores[self.place] if sample.scores
                else float(self.contract in sample.accepted))
        hit = float(pays) if self.reference not in sample.accepted else 0.0
        paid[sample.seed] = paid.get(sample.seed, 0.0) + hit
        if hit > 0:
            self.gamed[sample.stage].add(sample)

    def add_rows(self, rows: Any, plan: Plan) -> None:
        """:meth:`add` of every answer of a judged table, counted per seed in Arrow."""
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = rows.filter(pc.and_(pc.equal(rows.column("split"), self.split),
                                   pc.equal(rows.column("decoding"), "sampled")))
        paid = pc.if_else(rows.column(f"accepted:{self.reference}"), 0.0,
                          pc.cast(rows.column(f"score:{self.contract}"), pa.float64()))
        rows = rows.append_column("paid", paid)
        for stage in self.stages:
            of_stage = rows.filter(pc.equal(rows.column("stage"), stage))
            grouped = of_stage.group_by("seed", use_threads=False).aggregate(
                [("paid", "sum"), ("ordinal", "count"), ("ordinal", "min")]
            ).sort_by("ordinal_min")
            total, paid_of = self.total[stage], self.paid[stage]
            for entry in grouped.to_pylist():
                total[entry["seed"]] = total.get(entry["seed"], 0) + entry["ordinal_count"]
                paid_of[entry["seed"]] = paid_of.get(entry["seed"], 0.0) + entry["paid_sum"]
            gamed = of_stage.filter(pc.greater(of_stage.column("paid"), 0))
            self.gamed[stage].add_rows(gamed, plan)

    def shares(self, stage: str) -> tuple[dict[int, float], int]:
        total, paid = self.total[stage], self.paid[stage]
        trials = next(iter(total.values()))
        return {seed: paid[seed] / total[seed] for seed in total}, trials


def _gaming(analysis: Analysis, record: Record, plan: Plan, stage: str,
            split: str, contract: str, tables: Callable[[], Iterable[Any]] | None) -> Finding:
    """What an arm trained on a lenient contract learned to game: the share of its sampled
    answers that contract pays although they are wrong, its change from the SFT model (which
    decides the verb), the commonest such answer (on ``split`` if any, else from its own
    rollouts) and each seed's onset. ``tables``: makes the record's checked flat tables
    afresh for each pass (None: the record's own, each seed checked first)."""
    import pyarrow.compute as pc

    before_too = "initial" in analysis.stages and stage != "initial"
    tally = _GamedTally([stage, "initial"] if before_too else [stage], split, contract,
                        plan).walk(record, plan, None if tables is None else tables())
    shares, trials = tally.shares(stage)
    seeds = list(analysis.seeds)
    share = rate_interval([shares[s] for s in seeds], trials)
    change = None
    if "initial" in analysis.stages:
        before, _ = tally.shares("initial") if before_too else (shares, trials)
        change = interval([shares[s] - before[s] for s in seeds])

    found = tally.gamed[stage].examples(limit=1)
    where = "held_out"
    if not found:
        from_rollouts = Tally()
        for rows in judged_rows(record, plan, None if tables is None else tables(),
                                rollouts=True):
            from_rollouts.add_rows(rows.filter(pc.and_(
                pc.and_(pc.equal(rows.column("stage"), stage),
                        pc.invert(rows.column(f"accepted:{plan_contracts(plan)[0]}"))),
                pc.greater(rows.column(f"score:{contract}"), 0))), plan)
        found = from_rollouts.examples(limit=1)
        where = "rollouts"
    onsets = tuple((o.seed, o.onset) for o in analysis.hacking_onsets if o.arm == stage)
    return Finding(key="gaming", direction=None if change is None else direction(change),
                   values={"stage": stage, "split": split, "contract": contract,
                           "share": share, "change": change,
                           "example": found[0] if found else None, "example_from": where,
                           "onsets": onsets})
