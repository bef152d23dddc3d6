"""Findings: what a run's numbers say, as facts a renderer turns into sentences.

A finding is a template key and the numbers behind it, each with its interval; the words are
in :mod:`postlab.render.labels`, one template per key and language, so no sentence is ever
written by hand for a particular run. Which template a finding uses (raised, lowered, or no
clear change) is decided here from the interval alone: an interval above zero is a rise, one
below zero a fall, one holding zero no clear change, and a single seed no interval at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from postlab.analysis.aggregate import Analysis
from postlab.analysis.intervals import Interval, interval
from postlab.analysis.samples import GAMED, examples, iter_samples

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


def findings(analysis: Analysis, record: dict[str, Any], plan: dict[str, Any],
             split: str) -> list[Finding]:
    """The run's findings on ``split``, in reading order: SFT, then each arm."""
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
    gaps = {g.stage: g.gap for g in analysis.hacking_gaps if g.split == split}
    for stage in analysis.stages:
        if stage == "initial":
            continue
        sampled = analysis.outcome(stage, split, "sampled", rate)
        if sampled.change_from_sft is not None:
            result.append(Finding(key="arm_change", direction=direction(sampled.change_from_sft),
                                  values={"stage": stage, "split": split,
                                          "value": sampled.value,
                                          "change": sampled.change_from_sft}))
            coverage = analysis.outcome(stage, split, "sampled", "coverage")
            assert coverage.change_from_sft is not None
            result.append(Finding(key="coverage_change",
                                  direction=direction(coverage.change_from_sft),
                                  values={"stage": stage, "split": split,
                                          "value": coverage.value,
                                          "change": coverage.change_from_sft}))
        if stage in rewards:
            trained = rewards[stage]
            # per seed: the late training reward minus the same seed's held-out success
            difference = interval([r - h for r, h in zip(
                trained.reward.per_seed, sampled.value.per_seed, strict=True)])
            result.append(Finding(key="train_vs_held_out", direction=direction(difference),
                                  values={"stage": stage, "split": split,
                                          "contract": trained.contract,
                                          "first": trained.steps[0], "last": trained.steps[1],
                                          "reward": trained.reward, "held_out": sampled.value,
                                          "difference": difference}))
            if trained.contract != reference and stage in gaps:
                result.append(_gaming(analysis, record, plan, stage, split, trained.contract,
                                      gaps[stage]))
    for verdict in analysis.verdicts:
        result.append(Finding(key="hypothesis", direction=verdict.outcome, values={
            "id": verdict.id, "statement": verdict.statement, "mean": verdict.mean,
            "level": verdict.level}))
    return result


def _gaming(analysis: Analysis, record: dict[str, Any], plan: dict[str, Any], stage: str,
            split: str, contract: str, gap: Interval) -> Finding:
    """The hacking gap of an arm trained on a lenient contract, with its most frequent gamed
    answer (held-out if any, else from its own rollouts) and each seed's onset."""
    found = examples(iter_samples(record, plan, stages=[stage], split=split,
                                  decoding="sampled", kinds=[GAMED]), limit=1)
    where = "held_out"
    if not found:
        found = examples(iter_samples(record, plan, stages=[stage], kinds=[GAMED],
                                      rollouts=True), limit=1)
        where = "rollouts"
    onsets = tuple((o.seed, o.onset) for o in analysis.hacking_onsets if o.arm == stage)
    return Finding(key="gaming", direction=direction(gap), values={
        "stage": stage, "split": split, "contract": contract, "gap": gap,
        "example": found[0] if found else None, "example_from": where, "onsets": onsets})
