"""Metrics over raw output rows, and the per-seed, per-stage, per-split summary.

A row is ``[a, b, text, terminated]``: the question's operands, the visible output, and whether
EOS was emitted. Every reported number is computed from such rows, never stored on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from postlab.tasks.contracts import CONTRACTS

Row = Sequence[Any]
#: The task's answer for an operand pair; the teaching task's is the sum.
Answer = Callable[[Sequence[int]], int]


def count_under(rows: Iterable[Row], contract: str, answer: Answer = sum) -> int:
    check = CONTRACTS[contract]
    return sum(check(row[:2], row[2], row[3], answer(row[:2])) for row in rows)


def metrics(rows: Sequence[Row], answer: Answer = sum) -> dict[str, Any]:
    """Counts and rates under both teaching contracts, mean tokens (EOS counts) and truncations."""
    n = len(rows)
    if n == 0:
        raise ValueError("metrics need at least one row")
    strict = count_under(rows, "strict", answer)
    substring = count_under(rows, "substring", answer)
    return {
        "n": n, "strict": strict, "substring": substring,
        "strict_rate": strict / n, "substring_rate": substring / n,
        "mean_tokens": sum(len(row[2]) + int(row[3]) for row in rows) / n,
        "truncated": sum(not row[3] for row in rows),
    }


def question_groups(rows: Sequence[Row], samples: int) -> list[Sequence[Row]]:
    """Split rows into consecutive blocks of ``samples`` answers to the same question."""
    if samples <= 0 or len(rows) % samples:
        raise ValueError(f"{len(rows)} rows do not form groups of {samples}")
    groups = [rows[i:i + samples] for i in range(0, len(rows), samples)]
    for group in groups:
        first = list(group[0][:2])
        if any(list(row[:2]) != first for row in group):
            raise ValueError(f"a group of {samples} rows mixes questions (first {first})")
    return groups


def coverage(rows: Sequence[Row], samples: int, contract: str = "strict",
             answer: Answer = sum) -> int:
    """Questions with at least one accepted answer among their samples (pass@samples count)."""
    return sum(count_under(group, contract, answer) > 0
               for group in question_groups(rows, samples))


def evaluate(rows: Sequence[Row], samples: int, answer: Answer = sum) -> dict[str, Any]:
    """Metrics plus coverage: ``covered`` of ``questions`` had a strict success."""
    covered = coverage(rows, samples, answer=answer)
    return dict(metrics(rows, answer), covered=covered, questions=len(rows) // samples)


def summarize(record: dict[str, Any], eval_samples: int,
              answer: Answer = sum) -> list[dict[str, Any]]:
    """One entry per seed and stage, each split scored greedy (1 sample) and sampled."""
    summary = []
    for run in record["runs"]:
        for stage, splits in run["evaluations"].items():
            entry: dict[str, Any] = {"seed": run["seed"], "stage": stage}
            for split, decoded in splits.items():
                entry[split] = {"greedy": evaluate(decoded["greedy"], 1, answer),
                                "sampled": evaluate(decoded["sampled"], eval_samples, answer)}
            summary.append(entry)
    return summary
