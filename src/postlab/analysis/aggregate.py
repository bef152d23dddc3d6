"""Everything a report shows, computed once from a record's raw rows.

Renderers (terminal, JSON, Markdown, HTML, figures) take the :class:`Analysis` this module
returns and lay it out; none of them computes a number. Intervals are over seeds, the
independent repetitions of the experiment (:mod:`postlab.analysis.intervals`): rates and
pass@k Student t with a binomial floor, cut to [0, 1], changes and gaps Student t
over the per-seed differences.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from postlab.analysis.intervals import (  # noqa: F401 (interval, t_quantile re-exported)
    CONFIDENCE,
    DIFFERENCE_METHOD,
    RATE_METHOD,
    Interval,
    interval,
    rate_interval,
    t_quantile,
)
from postlab.analysis.onset import DEFAULT_DRIFT, DEFAULT_THRESHOLD, Onset, cusum, slope
from postlab.plan.arms import arm_names, arm_specs, plan_contracts
from postlab.records.metrics import (
    STEP_SERIES,
    Answer,
    count_under,
    evaluate,
    question_groups,
    step_series,
)
from postlab.tasks.arithmetic import ARITHMETIC_CONTRACTS
from postlab.tasks.registry import answer_function
from postlab.tasks.rows import ROLLOUT, Place, Row, iter_run_rows, rows_by_place

SCHEMA = "postlab.analysis.aggregate/1"
INTERVAL_METHOD = (f"rates, coverage and pass@k: {RATE_METHOD}; changes from SFT and hacking "
                   f"gaps: {DIFFERENCE_METHOD}")
BAND_METHOD = "mean over seeds, band from the lowest to the highest seed"
ONSET_METHOD = ("one-sided CUSUM on the per-step gap (the step's rollouts accepted under the "
                "trained contract minus those right under the task's first contract): "
                "S_t = max(0, S_(t-1) + "
                "gap_t - {drift:g}), alarm when S_t > {threshold:g}; onset = first step of the "
                "excursion that raised it")

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
    #: The plan's preregistered hypotheses, decided (``postlab.analysis.hypotheses``); in the
    #: JSON form only when the plan has some.
    verdicts: tuple[Any, ...] = ()
    #: Per RL arm: the late training reward, to set against held-out success.
    training_rewards: tuple[TrainingReward, ...] = ()

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
    by_position = list(zip(*columns, strict=True))
    return Band(mean=tuple(sum(v) / len(v) for v in by_position),
                low=tuple(min(v) for v in by_position),
                high=tuple(max(v) for v in by_position))


def analyse(record: dict[str, Any], plan: dict[str, Any]) -> Analysis:
    runs = record["runs"]
    if not runs:
        raise ValueError("the record holds no completed seed")
    samples = plan["eval_samples"]
    answer = answer_function(plan)
    contracts = plan_contracts(plan)
    reference = contracts[0]
    wanted = outcome_metrics(contracts)
    # each seed's rows by where they sit (kept per run, as a record may repeat a seed)
    blocks = [rows_by_place(iter_run_rows(run)) for run in runs]

    def block(index: int, stage: str, split: str | None, step: int | None,
              decoding: str) -> list[Row]:
        return blocks[index][Place(runs[index]["seed"], stage, split, step, decoding)]

    stages = tuple(runs[0]["evaluations"])
    splits = tuple(runs[0]["evaluations"][stages[0]])
    arms = tuple(a for a in arm_names(plan) if all(a in run.get("training", {}) for run in runs))

    # per (stage, split, decoding, metric): one value per seed, in seed order
    values: dict[tuple[str, str, str, str], list[float]] = {}
    for index in range(len(runs)):
        for stage in stages:
            for split in splits:
                for decoding, count in (("greedy", 1), ("sampled", samples)):
                    result = evaluate(block(index, stage, split, None, decoding), count,
                                      answer, contracts)
                    computed = {metric: result[metric] for metric in wanted["greedy"]}
                    computed["coverage"] = result["covered"] / result["questions"]
                    for metric in wanted[decoding]:
                        values.setdefault((stage, split, decoding, metric), []).append(
                            computed[metric])

    def trials(split: str, decoding: str, metric: str) -> int:
        """How many outputs (or questions) one seed's rate counts."""
        questions = len(block(0, stages[0], split, None, "greedy"))
        return questions * samples if decoding == "sampled" and metric != "coverage" else questions

    outcomes = []
    for (stage, split, decoding, metric), per_seed in values.items():
        change = None
        if stage != "initial" and "initial" in stages:
            base = values[("initial", split, decoding, metric)]
            change = interval([a - b for a, b in zip(per_seed, base, strict=True)])
        outcomes.append(Outcome(stage=stage, split=split, decoding=decoding, metric=metric,
                                value=rate_interval(per_seed, trials(split, decoding, metric)),
                                change_from_sft=change))

    gaps = []
    if len(contracts) > 1:
        for stage in stages:
            for split in splits:
                right = values[(stage, split, "sampled", f"{reference}_rate")]
                paid = values[(stage, split, "sampled", f"{contracts[1]}_rate")]
                gaps.append(HackingGap(stage=stage, split=split, gap=interval(
                    [p - r for p, r in zip(paid, right, strict=True)])))

    ks = tuple(range(1, samples + 1))
    curves = []
    for stage in stages:
        for split in splits:
            # each question's accepted count once per seed, then every k from it
            accepted = [_accepted_per_question(block(index, stage, split, None, "sampled"),
                                               samples, reference, answer)
                        for index in range(len(runs))]
            per_seed = tuple(tuple(_mean_pass_at_k(counts, samples, k) for k in ks)
                             for counts in accepted)
            # pass@k of a question rests on about samples // k independent draws of k
            # answers: questions x samples trials at k = 1 (where it is sampled success) down
            # to one per question at k = samples (where it is coverage)
            questions = len(accepted[0])
            per_k = [rate_interval([curve[i] for curve in per_seed],
                                   questions * (samples // k))
                     for i, k in enumerate(ks)]
            curves.append(PassAtK(stage=stage, split=split, k=ks, per_seed=per_seed,
                                  mean=tuple(i.mean for i in per_k),
                                  low=tuple(i.low for i in per_k),
                                  high=tuple(i.high for i in per_k)))

    dynamics = []
    onsets = []
    rewards: list[TrainingReward] = []
    monitor = plan.get("hacking_monitor") or {}
    drift = monitor.get("drift", DEFAULT_DRIFT)
    threshold = monitor.get("threshold", DEFAULT_THRESHOLD)
    trained_on = {spec.name: spec.contract for spec in arm_specs(plan)}
    for arm in arms:
        per_seed_steps = [[step_series(step, block(index, arm, None, step["step"], ROLLOUT),
                                       answer, contracts)
                           for step in run["training"][arm]] for index, run in enumerate(runs)]
        contract = trained_on.get(arm)
        if contract is not None and contract != reference:
            for run, seed_steps in zip(runs, per_seed_steps, strict=True):
                gap_series = tuple(s[f"{contract}_reward"] - s[f"{reference}_reward"]
                                   for s in seed_steps)
                result = cusum(gap_series, drift, threshold)
                onsets.append(Onset(arm=arm, seed=run["seed"], contract=contract,
                                    gaps=gap_series,
                                    alarm=result.alarm, onset=result.onset,
                                    kl_trend=slope([s["kl"] for s in seed_steps]),
                                    entropy_trend=slope([s["entropy"] for s in seed_steps])))
        steps = tuple(step["step"] for step in runs[0]["training"][arm])
        if contract is not None:
            rewards.append(_training_reward(arm, contract, reference, runs, answer))
        series = {name: _band([[s[name] for s in seed_steps] for seed_steps in per_seed_steps])
                  for name in dynamics_series(contracts)}
        dynamics.append(Dynamics(arm=arm, steps=steps, series=series))

    sft_loss = _band([run["sft_loss"] for run in runs])
    compute = _compute(runs, plan, stages)
    analysis = Analysis(schema=SCHEMA, plan_sha256=record["plan_sha256"],
                        seeds=tuple(run["seed"] for run in runs), stages=stages, arms=arms,
                        splits=splits, eval_samples=samples, interval_method=INTERVAL_METHOD,
                        band_method=BAND_METHOD, outcomes=tuple(outcomes),
                        hacking_gaps=tuple(gaps), pass_at_k=tuple(curves),
                        dynamics=tuple(dynamics), sft_loss=sft_loss, compute=compute,
                        contracts=contracts, hacking_onsets=tuple(onsets),
                        onset_method=ONSET_METHOD.format(drift=drift, threshold=threshold),
                        training_rewards=tuple(rewards))
    if plan.get("hypotheses") and len(runs) >= 2:
        # Decided here, from the same per-seed values as every other number of the report.
        from postlab.analysis.hypotheses import verdicts_for

        analysis = dataclasses.replace(analysis, verdicts=tuple(verdicts_for(analysis, plan)))
    return analysis


def _training_reward(arm: str, contract: str, reference: str, runs: list[dict[str, Any]],
                     answer: Answer) -> TrainingReward:
    history = runs[0]["training"][arm]
    window = max(1, len(history) // 10)
    paid, right, trials = [], [], 0
    for run in runs:
        rows = [Row.of(raw) for step in run["training"][arm][-window:] for raw in step["rows"]]
        trials = len(rows)
        paid.append(count_under(rows, contract, answer) / trials)
        right.append(count_under(rows, reference, answer) / trials)
    return TrainingReward(arm=arm, contract=contract,
                          steps=(history[-window]["step"], history[-1]["step"]),
                          reward=rate_interval(paid, trials),
                          reference=rate_interval(right, trials))


def _compute(runs: list[dict[str, Any]], plan: dict[str, Any],
             stages: tuple[str, ...]) -> tuple[Compute, ...]:
    """Per-stage compute from the record (absent in records made before it was recorded)."""
    if not all("compute" in run for run in runs):
        return ()
    pipelines = {arm.name: arm.pipeline for arm in arm_specs(plan)}
    result = []
    for stage in stages:
        keys = list(runs[0]["compute"][stage])
        own = {k: sum(run["compute"][stage][k] for run in runs) / len(runs) for k in keys}
        starts_from_sft = stage != "initial" and pipelines.get(stage) != "rl-only"
        total = {k: own[k] + (sum(run["compute"]["initial"][k] for run in runs) / len(runs)
                              if starts_from_sft else 0) for k in keys}
        result.append(Compute(stage=stage, pipeline=pipelines.get(stage, "sft"), own=own,
                              total=total))
    return tuple(result)
