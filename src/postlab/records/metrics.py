"""Metrics over raw output rows, and the per-seed, per-stage, per-split summary.

A row is a :class:`~postlab.tasks.rows.Row`: the question's operands, the visible output,
and whether EOS was emitted. Every reported number is computed from such rows, never stored on
its own. Rows are scored under the contracts the caller names (a plan's come from
:func:`~postlab.tasks.arithmetic.plan_contracts`); the first of them decides coverage.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from postlab.plan.arms import plan_contracts
from postlab.records.blocks import iter_run_rows, rows_by_place
from postlab.records.models import Record, SeedEntry, Step
from postlab.tasks.arithmetic import ARITHMETIC_CONTRACTS
from postlab.tasks.contracts import CONTRACTS, Answer, scored
from postlab.tasks.registry import answer_function
from postlab.tasks.rows import Row

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

__all__ = ["Answer", "count_text", "count_under", "coverage", "evaluate", "metrics",
           "question_groups", "summarize", "summary_for", "summary_of", "table_summary"]

#: Keys of a metrics entry that are not contract counts; a contract may not take these names.
RESERVED = frozenset({"n", "mean_tokens", "truncated", "covered", "questions"})


def count_under(rows: Iterable[Sequence[Any]], contract: str, answer: Answer = sum) -> int:
    scorer = CONTRACTS[contract]
    return sum(scored(scorer, answer, Row.of(row)) for row in rows)


def metrics(rows: Sequence[Sequence[Any]], answer: Answer = sum,
            contracts: Sequence[str] = ARITHMETIC_CONTRACTS) -> dict[str, Any]:
    """Counts and rates under each contract, mean tokens (EOS counts) and truncations.

    Keys, in order: ``n``, one count per contract, one ``<contract>_rate`` per contract,
    ``mean_tokens``, ``truncated`` (the teaching contracts give the reference's summary keys).
    """
    n = len(rows)
    if n == 0:
        raise ValueError("metrics need at least one row")
    clash = RESERVED.intersection(contracts)
    if clash:
        raise ValueError(f"a contract cannot be named {', '.join(sorted(clash))} in metrics")
    typed = [Row.of(row) for row in rows]
    counts = {name: count_under(typed, name, answer) for name in contracts}
    return {"n": n, **counts, **{f"{name}_rate": count / n for name, count in counts.items()},
            "mean_tokens": sum(row.tokens for row in typed) / n,
            "truncated": sum(not row.terminated for row in typed)}


def count_text(value: float) -> str:
    """A count under a contract as reports print it: whole answers as an integer, a sum of
    partial credits (``rg-score``) to two decimals."""
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def question_groups(rows: Sequence[Sequence[Any]], samples: int) -> list[list[Row]]:
    """Split rows into consecutive blocks of ``samples`` answers to the same question."""
    if samples <= 0 or len(rows) % samples:
        raise ValueError(f"{len(rows)} rows do not form groups of {samples}")
    typed = [Row.of(row) for row in rows]
    groups = [typed[i:i + samples] for i in range(0, len(typed), samples)]
    for group in groups:
        first = group[0].pair
        if any(row.pair != first for row in group):
            raise ValueError(f"a group of {samples} rows mixes questions (first {list(first)})")
    return groups


def coverage(rows: Sequence[Sequence[Any]], samples: int,
             contract: str = ARITHMETIC_CONTRACTS[0], answer: Answer = sum) -> int:
    """Questions with at least one accepted answer among their samples (pass@samples count)."""
    return sum(count_under(group, contract, answer) > 0
               for group in question_groups(rows, samples))


def evaluate(rows: Sequence[Sequence[Any]], samples: int, answer: Answer = sum,
             contracts: Sequence[str] = ARITHMETIC_CONTRACTS) -> dict[str, Any]:
    """Metrics plus coverage: ``covered`` of ``questions`` had a success under the first
    contract."""
    covered = coverage(rows, samples, contracts[0], answer)
    return dict(metrics(rows, answer, contracts), covered=covered,
                questions=len(rows) // samples)


def summarize(record: Record, eval_samples: int, answer: Answer = sum,
              contracts: Sequence[str] = ARITHMETIC_CONTRACTS) -> list[dict[str, Any]]:
    """One entry per seed and stage, each split scored greedy (1 sample) and sampled."""
    return [entry for run in record.runs
            for entry in summarize_run(run, eval_samples, answer, contracts)]


def summarize_run(run: SeedEntry, eval_samples: int, answer: Answer = sum,
                  contracts: Sequence[str] = ARITHMETIC_CONTRACTS) -> list[dict[str, Any]]:
    """:func:`summarize` of one seed, for readers that walk the seeds once."""
    blocks = rows_by_place(iter_run_rows(run, training=False))
    entries: dict[str, dict[str, Any]] = {}
    for place in blocks:
        entry = entries.setdefault(place.stage, {"seed": place.seed, "stage": place.stage})
        if place.split in entry:
            continue
        greedy, sampled = (blocks.get(place._replace(decoding=d), [])
                           for d in ("greedy", "sampled"))
        entry[place.split] = {"greedy": evaluate(greedy, 1, answer, contracts),
                              "sampled": evaluate(sampled, eval_samples, answer, contracts)}
    return list(entries.values())


def table_summary(tables: Any, samples: int, answer: Answer = sum,
                  contracts: Sequence[str] = ARITHMETIC_CONTRACTS) -> list[dict[str, Any]]:
    """:func:`summarize` of a batch of seeds' flat tables (:mod:`postlab.records.columns`),
    computed columnar: each distinct answer scored once, counts summed per block and
    question by Arrow. The same entries, bit for bit (a partial-credit contract's sums are
    added in row order, as :func:`summarize` adds them)."""
    import numpy as np
    import pyarrow.compute as pc

    from postlab.records.columns import (
        answers_per_question,
        judged,
        scores_table,
        with_questions,
    )
    from postlab.tasks.contracts import PARTIAL_CREDIT

    # a partial-credit reward's sums are added in row order, as summarize adds them (Arrow's
    # grouped sum adds a group's values in the order it is given them)
    ordered = any(name in PARTIAL_CREDIT for name in contracts)
    rows = judged(tables.evaluations, scores_table(tables, answer, contracts), ordered=ordered)
    blocks = tables.blocks
    decodings = blocks.column("decoding").to_pylist()
    per_block = answers_per_question(tables, samples)
    rows = with_questions(rows, per_block)
    rows = rows.append_column("open", pc.cast(pc.invert(rows.column("terminated")), "int64"))
    sums = [(f"score:{name}", "sum") for name in contracts]
    per = rows.group_by("block_id", use_threads=False).aggregate(
        [("position", "count"), *sums, ("tokens", "sum"), ("open", "sum")]).sort_by("block_id")
    questions = rows.group_by(["block_id", "question"], use_threads=False).aggregate(
        [(f"score:{contracts[0]}", "sum"), ("a", "count"), ("a", "min"), ("a", "max"),
         ("b", "min"), ("b", "max")])
    first = questions.column(f"score:{contracts[0]}_sum").to_numpy()
    held = questions.column("a_count").to_numpy()
    asked = questions.column("block_id").to_numpy()
    if any(pc.any(pc.not_equal(questions.column(f"{o}_min"), questions.column(f"{o}_max"))
                  ).as_py() for o in "ab"):
        raise ValueError("a group of answers mixes questions")
    count = max(blocks.num_rows, 1)
    covered = np.bincount(asked, weights=first > 0, minlength=count).astype(np.int64)
    groups = np.bincount(asked, minlength=count)
    uneven = np.bincount(asked, weights=held != per_block[asked], minlength=count) > 0
    values = {name: per.column(name).to_pylist() for name in per.column_names}
    labels = {name: blocks.column(name).to_pylist() for name in ("seed", "stage", "split")}
    found = {}
    for place, block in enumerate(values["block_id"]):
        n = values["position_count"][place]
        if uneven[block]:
            raise ValueError(f"{n} rows do not form groups of {per_block[block]}")
        counts = {name: values[f"score:{name}_sum"][place] for name in contracts}
        found[block] = {"n": n, **counts,
                        **{f"{name}_rate": c / n for name, c in counts.items()},
                        "mean_tokens": values["tokens_sum"][place] / n,
                        "truncated": values["open_sum"][place],
                        "covered": int(covered[block]),
                        "questions": n // int(per_block[block])}
        if groups[block] != found[block]["questions"]:
            raise ValueError(f"{n} rows do not form groups of {per_block[block]}")
    entries: dict[tuple[int, str], dict[str, Any]] = {}
    for block in range(blocks.num_rows):
        seed, stage, split = labels["seed"][block], labels["stage"][block], labels["split"][block]
        entry = entries.setdefault((seed, stage), {"seed": seed, "stage": stage})
        if split in entry:
            continue
        places = {decodings[b]: b for b in range(blocks.num_rows)
                  if (labels["seed"][b], labels["stage"][b], labels["split"][b])
                  == (seed, stage, split)}
        entry[split] = {}
        for decoding in ("greedy", "sampled"):
            if decoding not in places or places[decoding] not in found:
                raise ValueError("metrics need at least one row")
            entry[split][decoding] = found[places[decoding]]
    return list(entries.values())


def summary_of(record: Record, plan: Plan,
               tables: Iterable[Any] | None = None) -> list[dict[str, Any]]:
    """:func:`summary_for`, computed columnar (:func:`table_summary`) from ``tables``, the
    record's flat tables as a reader checked them (None: the record's own, each seed checked
    first: :func:`~postlab.records.columns.record_tables`)."""
    from postlab.records.columns import record_tables

    answer, contracts = answer_function(plan), plan_contracts(plan)
    return [entry for batch in (record_tables(record, plan) if tables is None else tables)
            for entry in table_summary(batch, plan.eval_samples, answer, contracts)]


def summary_for(record: Record, plan: Plan) -> list[dict[str, Any]]:
    """The summary a plan's run writes: its samples, its task's answers, its contracts."""
    return summarize(record, plan.eval_samples, answer_function(plan), plan_contracts(plan))


def run_summary_for(run: SeedEntry, plan: Plan) -> list[dict[str, Any]]:
    """:func:`summary_for` of one seed."""
    return summarize_run(run, plan.eval_samples, answer_function(plan), plan_contracts(plan))


#: Per-step training series after the rollout reward rates (one ``<contract>_reward`` per
#: contract, from the rows); the rest come from the update statistics and the rows' lengths.
STEP_SERIES = ("zero_variance_groups", "kl", "entropy", "ratio_outside_clip",
               "gradient_norm_before_clip", "loss", "mean_tokens", "truncated")


def step_series(step: Step, rows: Sequence[Row], answer: Answer,
                contracts: Sequence[str]) -> dict[str, float]:
    """One RL step's series (:func:`dynamics_series`) from its history entry and rollout rows;
    shared with live logging (``engines.steplog``) so both show the same numbers."""
    n = len(rows)
    updates = step.updates

    def mean_update(key: str) -> float:
        # NaN: the step made no update (DAPO's dynamic sampling found no group with signal)
        return sum(getattr(u, key) for u in updates) / len(updates) if updates else math.nan

    return {
        **{f"{name}_reward": count_under(rows, name, answer) / n for name in contracts},
        "zero_variance_groups": float(step.zero_variance_groups),
        "kl": mean_update("kl"), "entropy": mean_update("entropy"),
        "ratio_outside_clip": mean_update("ratio_outside_clip"),
        "gradient_norm_before_clip": mean_update("gradient_norm_before_clip"),
        "loss": mean_update("loss"),
        "mean_tokens": sum(row.tokens for row in rows) / n,
        "truncated": sum(not row.terminated for row in rows) / n,
    }
