"""Where a structurally valid record does not fit its plan: names it cannot be read under,
parts it lacks, digests that no longer match, and counts that differ from the plan's.

Kept apart from the structural check (``records.models``) because these need the plan,
and from reading (``records.record``); each check has a per-seed form so that a chunked
record's seeds are checked as a reader's own walk reaches them (:func:`each_seed`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from postlab.records.chunks import ChunkedRuns
from postlab.records.models import Record, SeedEntry, Step
from postlab.tasks.rows import pairs_of

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


def reading_problems(record: Record, plan: Plan) -> list[str]:
    """Where a record cannot be read under its plan: stages, splits, arms or checkpoint
    entries the plan does not name, or sampled rows that do not form groups of
    ``eval_samples`` answers to one question. A record may hold fewer parts than the plan
    (a hand-made or partial record is still readable); ``verify`` asks for all of them."""
    return [p for run in record.runs for p in run_reading_problems(run, plan)]


def run_reading_problems(run: SeedEntry, plan: Plan) -> list[str]:
    """:func:`reading_problems` of one seed."""
    from postlab.plan.arms import arm_names, rl_contracts
    from postlab.records.metrics import question_groups

    stages = ["initial", *arm_names(plan)]
    rl_arms = set(rl_contracts(plan))
    problems = []
    seed = run.seed
    for part, names, known in (("stage", run.evaluations, stages),
                               ("checkpoint entry", run.checkpoints or {}, stages),
                               ("compute entry", run.compute or {}, stages),
                               ("RL arm", run.arms, rl_arms)):
        problems += [f"seed {seed}: {part} {name!r} is not in the plan"
                     for name in names if name not in known]
    for stage, splits in run.evaluations.items():
        for split, decoded in splits.items():
            where = f"seed {seed}, stage {stage}, split {split}"
            if split not in plan.split:
                problems.append(f"{where}: the plan has no such split")
                continue
            try:
                question_groups(decoded.sampled, plan.eval_samples)
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
    return problems


def run_missing_parts(run: SeedEntry, stages: list[str] | None) -> list[str]:
    """What one seed's entry of a postlab record lacks of the parts every one carries
    (``stages``: the plan's; None: the entry's own), and checkpoint entries that name
    another file than the stage's or a stage the plan does not have."""
    from postlab.policies.checkpoint import checkpoint_name

    seed = run.seed
    missing = [f"seed {seed}: {key}" for key in
               ("sft_loss", "training", "checkpoints", "compute", "digests")
               if getattr(run, key) is None]
    checkpoints = run.checkpoints or {}
    for stage in stages or list(run.evaluations):
        info = checkpoints.get(stage)
        if info is None:
            missing.append(f"seed {seed}: checkpoint entry of stage {stage}")
        elif info.file != checkpoint_name(seed, stage):
            missing.append(f"seed {seed}, stage {stage}: checkpoint file {info.file!r} "
                           f"is not {checkpoint_name(seed, stage)!r}")
    for stage in checkpoints:
        if stages is not None and stage not in stages:
            missing.append(f"seed {seed}: checkpoint entry of unknown stage {stage}")
    return missing


def changed_parts(record: Record) -> list[str]:
    """Parts of a postlab record that no longer match the digests taken when they were made
    (none for a record that carries no digests, such as the reference's)."""
    return [p for run in record.runs for p in run_changed_parts(run)]


def run_changed_parts(run: SeedEntry) -> list[str]:
    """:func:`changed_parts` of one seed: its parts' digests now against those recorded (as
    written: the JSON, not the model, is what was hashed)."""
    from postlab.records.integrity import compare_digests

    data = run.data()
    return compare_digests(data, data["digests"]) if "digests" in data else []


def each_seed(record: Record, problems_of: Callable[[SeedEntry], list[str]],
              fail: Callable[[list[str]], None]) -> None:
    """Check every seed of a record, ``fail`` given the problems found (it raises).

    A record in memory is checked at once, all seeds together. A chunked record's seeds are
    checked as the reader's own walk first reaches each, before the walk sees it, so a
    reader's checks cost no walk of their own; such a reader must walk every seed before it
    writes or prints anything (each reader computes first and publishes last).
    """
    runs = record.runs
    if isinstance(runs, ChunkedRuns):
        runs.on_each(functools.partial(_fail_on, problems_of, fail))
        return
    problems = [p for run in runs for p in problems_of(run)]
    if problems:
        fail(problems)


def settle(record: Record, seeds: list[int] | None = None) -> None:
    """Read the given seeds (None: all) so that their :func:`each_seed` checks run now, for a
    reader that prints as it goes."""
    wanted = None if seeds is None else set(seeds)
    for index, seed in enumerate(record.seed_order()):
        if wanted is None or seed in wanted:
            record.runs[index]


def _fail_on(problems_of: Callable[[SeedEntry], list[str]],
             fail: Callable[[list[str]], None], run: SeedEntry) -> None:
    problems = problems_of(run)
    if problems:
        fail(problems)


def _sampling_problem(step: Step, plan: Plan) -> bool:
    """A step's dynamic-sampling record is there exactly when the plan samples dynamically,
    and its counts agree with its rows: groups kept fill the step, every group drawn beyond
    them was dropped (its rows kept), within the plan's budget."""
    dynamic = plan.dynamic_sampling
    sampling, size = step.sampling, plan.group_size
    if (sampling is not None) != (dynamic is not None):
        return True
    if dynamic is None or sampling is None:
        return False
    return (sampling.kept * size != len(step.rows)
            or sampling.drawn != sampling.kept + sampling.dropped
            or len(sampling.dropped_rows) != sampling.dropped * size
            or not sampling.replaced <= sampling.dropped <= dynamic.max_extra_groups)


def _updates_expected(step: Step, plan: Plan) -> int:
    """A step's updates: the plan's, or none where dynamic sampling drops the groups whose
    rewards are all equal from the update and every group of the step was such a group."""
    dynamic = plan.dynamic_sampling
    if dynamic is not None and dynamic.constant_groups == "drop" and \
            step.zero_variance_groups * plan.group_size == len(step.rows):
        return 0
    return plan.updates_per_rollout


def record_plan_problems(record: Record, plan: Plan) -> list[str]:
    """Where a (structurally valid) record does not fit its plan: seeds, stages, splits,
    questions, samples per question, RL steps, rows per step, groups and updates."""
    return [*seed_list_problems(record, plan),
            *(p for run in record.runs for p in run_plan_problems(run, plan))]


def seed_list_problems(record: Record, plan: Plan) -> list[str]:
    """The record's seeds against the plan's (without reading a chunked record's rows)."""
    seeds = record.seed_order()
    return [] if seeds == plan.seeds else [f"seeds {seeds}, plan has {plan.seeds}"]


def run_plan_problems(run: SeedEntry, plan: Plan) -> list[str]:
    """:func:`record_plan_problems` of one seed, less the seed list."""
    from postlab.plan.arms import arm_names, arm_specs

    problems: list[str] = []
    stages = ["initial", *arm_names(plan)]
    rl_arms = [arm.name for arm in arm_specs(plan) if arm.is_rl]
    per_step = plan.prompts_per_step * plan.group_size
    seed = run.seed
    losses = run.sft_loss or []
    if len(losses) != plan.sft_steps:
        problems.append(f"seed {seed}: {len(losses)} SFT losses, plan "
                        f"has {plan.sft_steps} steps")
    if list(run.evaluations) != stages:
        problems.append(f"seed {seed}: stages {list(run.evaluations)}, expected {stages}")
    for stage, splits in run.evaluations.items():
        if list(splits) != list(plan.split):
            problems.append(f"seed {seed}, stage {stage}: splits {list(splits)}")
            continue
        for split, pairs in plan.split.items():
            greedy = pairs_of(splits[split].greedy)
            wanted = [(a, b) for a, b in pairs]
            sampled = pairs_of(splits[split].sampled)
            expected = [p for p in wanted for _ in range(plan.eval_samples)]
            if greedy != wanted or sampled != expected:
                problems.append(f"seed {seed}, stage {stage}, split {split}: questions or "
                                f"samples per question differ from the plan")
    if run.compute is not None and list(run.compute) != stages:
        problems.append(f"seed {seed}: compute for stages {list(run.compute)}, "
                        f"expected {stages}")
    sft_only = {arm.name: arm.own_sft_steps(plan) for arm in arm_specs(plan)
                if not arm.is_rl}
    extra_sft = run.arm_sft_loss or {}
    if list(extra_sft) != list(sft_only) or any(
            len(extra_sft[name]) != steps for name, steps in sft_only.items()):
        problems.append(f"seed {seed}: SFT-only arms' losses "
                        f"{ {k: len(v) for k, v in extra_sft.items()} }, plan has "
                        f"{sft_only}")
    training = run.arms
    if list(training) != rl_arms:
        problems.append(f"seed {seed}: RL arms {list(training)}, plan has {rl_arms}")
        return problems
    for arm, history in training.items():
        if [step.step for step in history] != list(range(1, plan.rl_steps + 1)):
            problems.append(f"seed {seed}, arm {arm}: {len(history)} RL steps, plan has "
                            f"{plan.rl_steps}")
            continue
        for step in history:
            rows = step.rows
            questions = pairs_of(rows)
            bad_rows = len(rows) != per_step or _sampling_problem(step, plan)
            bad_groups = any(len(set(questions[i:i + plan.group_size])) != 1
                             for i in range(0, len(questions), plan.group_size))
            if bad_rows or bad_groups or len(step.updates) != _updates_expected(step, plan):
                problems.append(f"seed {seed}, arm {arm}, step {step.step}: rows, "
                                "groups or updates do not fit the plan")
                break
    return problems
