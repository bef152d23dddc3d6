"""A plan's time and memory priced from a calibration's unit costs: pure arithmetic over the
plan's counts, so what a calibration measured can be reused (:mod:`.calibrations`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from postlab.plan.arms import arm_specs
from postlab.runs.counts import FLOAT_BYTES, ROW_BYTES, ComputeEstimate, estimate_counts, plan_shape

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

#: Once per run, after training: the summary, the fingerprint, the last syncs.
FINISH_SECONDS = 0.5
#: A run's start (interpreter, torch, the plan's checks) where the process's age is unknown.
STARTUP_SECONDS = 4.0
#: Checkpoints are written, synced, read back, hashed and re-evaluated after every stage.
CHECKPOINT_BYTES_PER_SECOND = 2e8


@dataclass(frozen=True)
class Line:
    """Seconds per position of one call as ``fixed + per_row * rows``."""

    fixed: float
    per_row: float

    def seconds(self, rows: float, positions: int) -> float:
        return (self.fixed + self.per_row * rows) * positions


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Unit costs on this machine, measured at bounded sizes."""

    sft: Line  # one SFT forward and backward, batch built from pairs
    reference: Line  # the prompts and the reference's forward pass of one RL step
    update: Line  # one RL update's forward, objective and backward
    decode: Line  # one call of generate
    row_seconds: float  # per completion: turning tokens into a row and rewarding it
    write_seconds: float  # per record row written (into a chunk)
    optimizer_seconds: float  # per gradient step: clipping and Adam
    seconds: float  # how long calibrating took
    #: the process's age when calibrating began: what a run spends before (None: unknown)
    started_seconds: float | None = None
    #: real steps over the modelled ones, for an SFT step, a stage's evaluation and an RL
    #: step (:mod:`.timing`, real paths): what the bounded measurements leave out
    factors: tuple[float, float, float] = (1.0, 1.0, 1.0)
    #: measured peak memory: of a decode per sequence (at the plan's positions), and of the
    #: engine's RL step at the plan's batch; None where not measured
    decode_row_bytes: float | None = None
    step_bytes: int | None = None
    #: resident memory once the bounded measurements are done and before the engine's own
    #: steps are timed: what a run holds before training (interpreter, torch and its kernels'
    #: buffers, the policy's libraries, one model)
    base_bytes: int
    #: when these figures were measured, where they were kept from an earlier run
    #: (:mod:`postlab.runs.calibrations`); None when measured by this process
    reused_from: str | None = None


def expected_extra_groups(plan: Plan) -> float:
    """Extra groups dynamic sampling is expected to draw per RL step, for the time (counts
    and memory keep the whole budget, ``max_extra_groups``, as their bound).

    A group's rewards are all equal when its ``group_size`` answers all pass or all fail:
    ``q**G + (1-q)**G`` for a question the policy passes with probability ``q``. Nothing is
    known of ``q`` before training, so it is taken as uniform on [0, 1], which makes that
    ``p = 2 / (G + 1)``; every constant group is drawn again, and a fresh group is constant with
    the same ``p``, so a step draws ``prompts * p / (1 - p) = prompts * 2 / (G - 1)`` groups on
    average without a budget; capped at the budget, which bounds the mean of a budgeted loop
    from above (8 prompts, G = 8, a budget of 2: 2 against 1.5 simulated). Rewards with
    partial credit are constant less often, so they draw fewer. The whole budget priced the
    dynamic-sampling example at 1.13-1.35 times its run (medians of three invocations of
    bench/bench_estimate.py), whose steps drew 0.5-1.2 extra groups of 8 (this model: 2.3).
    """
    dynamic = plan.dynamic_sampling
    if not dynamic:
        return 0.0
    budget = dynamic.max_extra_groups
    group = plan.group_size
    if group < 2:  # one answer per group: every group is constant
        return float(budget)
    return min(float(budget), plan.prompts_per_step * 2 / (group - 1))


@dataclass(frozen=True)
class RLWork:
    """What one RL step does besides its batch's decode: the extra groups dynamic sampling
    draws, and the updates (each over ``trained_rows`` rows, which the step's reference pass
    also reads; a step with no group to train on makes neither)."""

    extra_groups: float
    trained_rows: float
    updates: float

    @classmethod
    def expected(cls, plan: Plan) -> RLWork:
        """A run's step: the groups it is expected to draw, every update over the whole batch
        (dynamic sampling replaces most constant groups, so dropping the rest spares little)."""
        return cls(expected_extra_groups(plan), plan.prompts_per_step * plan.group_size,
                   plan.updates_per_rollout)

    @classmethod
    def observed(cls, plan: Plan, compute: dict[str, int], steps: int) -> RLWork:
        """What ``steps`` steps did, from their ``compute`` counts. An untrained policy's
        groups are nearly all constant: dynamic sampling then draws its whole budget, and a
        plan that drops constant groups may update on nothing at all."""
        batch = plan.prompts_per_step * plan.group_size
        updates = compute["gradient_steps"]
        return cls(max(0.0, compute["completions"] / steps - batch) / plan.group_size,
                   compute["examples_seen"] / updates if updates else 0.0, updates / steps)


def unit_seconds(plan: Plan, c: Calibration,
                  rl: RLWork | None = None) -> tuple[float, float, float]:
    """Modelled seconds of an SFT step, a stage's evaluation (every split, greedy and
    sampled) and an RL step doing ``rl`` (default: :meth:`RLWork.expected`), each times its
    real-path factor."""
    shape = plan_shape(plan)
    positions = shape["decode_positions"]

    def decode(rows: float) -> float:
        return c.decode.seconds(rows, positions) + c.row_seconds * rows

    sft_step = c.sft.seconds(plan.sft_batch, shape["sft_positions"]) + c.optimizer_seconds
    evaluation = sum(decode(len(pairs)) + decode(len(pairs) * plan.eval_samples)
                     for pairs in plan.split.values())
    group = plan.group_size
    work = RLWork.expected(plan) if rl is None else rl
    rl_step = decode(plan.prompts_per_step * group)
    if work.extra_groups:  # one more decode call, or a few
        rl_step += decode(work.extra_groups * group)
    if work.trained_rows:
        rows = work.trained_rows
        # one reference pass per step that updates, each followed by updates_per_rollout
        passes = work.updates / plan.updates_per_rollout
        rl_step += (passes * c.reference.seconds(rows, positions)
                    + work.updates * (c.update.seconds(rows, positions) + c.optimizer_seconds))
    sft_factor, evaluation_factor, rl_factor = c.factors
    return sft_step * sft_factor, evaluation * evaluation_factor, rl_step * rl_factor


def work_parts(plan: Plan, calibration: Calibration) -> dict[str, float]:
    """The engine's work on one worker, all seeds, priced by the calibration: its SFT
    steps, evaluations, RL steps, and the rest (checkpoints, the record's writing)."""
    shape = plan_shape(plan)
    c = calibration
    sft_step, evaluation, rl_step = unit_seconds(plan, c)
    arms = arm_specs(plan)
    stages = 1 + len(arms)
    seeds = len(plan.seeds)
    checkpoint = shape["parameters"] * FLOAT_BYTES * 3 / CHECKPOINT_BYTES_PER_SECOND
    sft_steps = plan.sft_steps + sum(arm.own_sft_steps(plan) for arm in arms)
    rl_steps = plan.rl_steps * sum(arm.is_rl for arm in arms)
    # each seed's rows are written once, into a chunk (record.json is a small manifest)
    writing = c.write_seconds * estimate_counts(plan).record_rows
    return {"sft": seeds * sft_steps * sft_step,
            # each stage is evaluated, saved, reloaded and evaluated again
            "evaluation": seeds * stages * 2 * evaluation,
            "rl": seeds * rl_steps * rl_step,
            "other": seeds * stages * checkpoint + writing}


def wall_seconds(plan: Plan, calibration: Calibration) -> float:
    """The run's time on one worker, from its process's start: the engine's work
    (:func:`work_parts`), priced by the calibration.

    Decodes are priced at ``max_new_tokens`` steps (an upper bound: decoding stops once every
    sequence has ended), and dynamic sampling at the extra groups it is expected to draw
    (:func:`expected_extra_groups`), not its whole budget. For models far larger than the
    teaching plan's the calibration sees only a few sequences, whose matrix products are less
    efficient than the plan's, so the estimate errs high (about twice the measured time at
    hidden 4096).
    """
    c = calibration
    # from the process's start: what it spent before calibrating, the calibration, then the
    # work, which every run in one process pays once
    started = STARTUP_SECONDS if c.started_seconds is None else c.started_seconds
    return started + c.seconds + sum(work_parts(plan, c).values()) + FINISH_SECONDS


def priced(counts: ComputeEstimate, plan: Plan,
           calibration: Calibration) -> ComputeEstimate:
    """The counts with this machine's figures: the wall time, and the process's own memory
    added to the plan's."""
    batch_bytes = measured_batch_bytes(plan, counts, calibration)
    return replace(counts, seconds=wall_seconds(plan, calibration),
                   calibration_seconds=calibration.seconds, batch_bytes=batch_bytes,
                   calibration_reused_from=calibration.reused_from,
                   memory_bytes=(counts.memory_bytes - counts.batch_bytes + batch_bytes
                                 + calibration.base_bytes),
                   base_bytes=calibration.base_bytes)


def measured_batch_bytes(plan: Plan, counts: ComputeEstimate,
                         calibration: Calibration) -> int:
    """The largest batch's memory from what the calibration measured where it could: a
    decode's peak per sequence times the plan's largest decode, the engine's RL step at the
    plan's batch; the modelled figure for the rest. The model above is written for the GRU,
    and put a small GPT-2's evaluation at a fifth of its measured 160 MiB."""
    if calibration.decode_row_bytes is None and calibration.step_bytes is None:
        return counts.batch_bytes
    sampled = max(len(pairs) for pairs in plan.split.values()) * plan.eval_samples
    per_evaluation = sum(len(p) for p in plan.split.values()) * (1 + plan.eval_samples)
    measured = [counts.batch_bytes if counts.batch_kind == "SFT" else 0]
    if calibration.decode_row_bytes is not None:
        measured.append(int(calibration.decode_row_bytes * sampled)
                        + 2 * per_evaluation * ROW_BYTES)
    if calibration.step_bytes is not None:
        measured.append(calibration.step_bytes)
    return max(measured)
