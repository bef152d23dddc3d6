"""pass@k: the unbiased estimator of one question's, and its mean over an evaluation's rows.

Pure arithmetic on accepted counts, apart so the result types and the baseline use it without
the aggregation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from postlab.records.metrics import Answer, count_under, question_groups
from postlab.tasks.arithmetic import ARITHMETIC_CONTRACTS


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
