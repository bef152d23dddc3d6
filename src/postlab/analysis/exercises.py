"""The worked answers that arithmetic can show, computed by the library's own functions.

Each exercise returns its inputs and results as data (tests assert them) plus a few lines for
people. Answers 8 and 9 are arguments about method, not numbers, so they have no entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from postlab.analysis.metrics import coverage, metrics
from postlab.plan.frozen import split_by_unordered_pair
from postlab.records.rows import Row
from postlab.rl.groups import contrast_probability, expected_groups_until_contrast, group_advantages
from postlab.rl.losses import clipped_term, token_coefficients
from postlab.tasks.arithmetic import ARITHMETIC_CONTRACTS
from postlab.tasks.contracts import score

#: The teaching task's contracts: the reference rule ("correct") and the gameable one.
REFERENCE, GAMEABLE = ARITHMETIC_CONTRACTS


@dataclass(frozen=True)
class Exercise:
    number: int
    title: str
    values: dict[str, Any]
    lines: list[str] = field(default_factory=list)


def _fraction(x: float) -> str:
    return str(Fraction(x).limit_denominator(1000))


def exercise_1() -> Exercise:
    cases = [((5, 5), "1010", True), ((0, 1), "1", False)]
    values, lines = {}, []
    for pair, text, terminated in cases:
        got = {name: score(Row(*pair, text, terminated), name) for name in ARITHMETIC_CONTRACTS}
        values[text] = got
        state = "terminated" if terminated else "not terminated"
        lines.append(f"{pair[0]}+{pair[1]}, output {text!r} ({state}): "
                     + " ".join(f"{name}={ok}" for name, ok in got.items()))
    return Exercise(1, "strict vs substring contract", values, lines)


def exercise_2() -> Exercise:
    mixed = group_advantages([1, 1, 1, 1, 0, 0, 0, 0])
    constant = group_advantages([0] * 8)
    lines = [f"rewards 1,1,1,1,0,0,0,0 -> mean 0.5, std 0.5, advantages "
             f"{[round(a, 6) for a in mixed]}",
             f"rewards all 0 -> advantages {constant}"]
    return Exercise(2, "group-normalised advantages", {"mixed": mixed, "constant": constant},
                    lines)


def exercise_3() -> Exercise:
    q = contrast_probability(0.01, 8)
    groups = expected_groups_until_contrast(0.01, 8)
    lines = [f"p=0.01, G=8: P(mixed group) = {q:.6f}; expected groups until one = "
             f"1/{q:.6f} = {groups:.2f}"]
    return Exercise(3, "waiting for a group with signal", {"contrast": q, "groups": groups},
                    lines)


def exercise_4() -> Exercise:
    lengths = [4, 16]
    values, lines = {}, []
    for reduction in ("seq-mean-token-mean", "token-mean"):
        weights = token_coefficients(lengths, reduction, per_sequence_units=True)
        per_answer = [row[0] for row in weights]
        values[reduction] = per_answer
        lines.append(f"lengths {lengths}, {reduction}: per-token coefficient "
                     + ", ".join(f"{_fraction(w)} (length {n})"
                                 for w, n in zip(per_answer, lengths, strict=True)))
    lines.append("(coefficients relative to a mean over sequences)")
    return Exercise(4, "per-token loss weights under two reductions", values, lines)


def exercise_5() -> Exercise:
    values = {sign: clipped_term(1.3, sign, 0.2) for sign in (1.0, -1.0)}
    lines = [f"ratio 1.3, clip 0.2, advantage {a:+.0f}: min(r*A, clip(r)*A) = {v:.1f}"
             for a, v in values.items()]
    return Exercise(5, "PPO clipped term", values, lines)


def exercise_6() -> Exercise:
    split = split_by_unordered_pair()
    unordered = {name: {tuple(sorted(p)) for p in pairs} for name, pairs in split.items()}
    overlaps = {f"{x}&{y}": len(unordered[x] & unordered[y])
                for x, y in (("train", "dev"), ("train", "test"), ("dev", "test"))}
    sizes = {name: len(pairs) for name, pairs in split.items()}
    lines = [f"ordered pairs per split: {sizes}",
             f"unordered pairs shared between splits: {overlaps}"]
    return Exercise(6, "split by unordered pair", {"sizes": sizes, "overlaps": overlaps}, lines)


def exercise_7() -> Exercise:
    def rows(successes: list[int]) -> list[list[Any]]:
        # Question 1 is 1+2 (answer 3), question 2 is 2+2 (answer 4); four samples each.
        out = []
        for (a, b), good in zip(((1, 2), (2, 2)), successes, strict=True):
            out += [[a, b, str(a + b) if i < good else "9", True] for i in range(4)]
        return out

    values, lines = {}, []
    for name, successes in (("before", [1, 1]), ("after", [4, 0])):
        batch = rows(successes)
        m = metrics(batch)
        covered = coverage(batch, 4)
        values[name] = {"correct": m[REFERENCE], "accuracy": m[f"{REFERENCE}_rate"],
                        "covered": covered}
        lines.append(f"{name}: correct {m[REFERENCE]}/8 "
                     f"(accuracy {m[f'{REFERENCE}_rate']:.2f}), "
                     f"covered {covered}/2 questions")
    return Exercise(7, "accuracy vs coverage", values, lines)


def exercise_10() -> Exercise:
    cases = [((3, 4), "7"), ((3, 4), "007"), ((5, 5), "010")]
    values, lines = {}, []
    for pair, text in cases:
        got = {name: score(Row(*pair, text, True), name) for name in (REFERENCE, "exact")}
        values[text] = got
        lines.append(f"{pair[0]}+{pair[1]}, output {text!r} (terminated): "
                     + " ".join(f"{name}={ok}" for name, ok in got.items()))
    return Exercise(10, "a stricter contract: exact", values, lines)


EXERCISES: dict[int, Callable[[], Exercise]] = {
    1: exercise_1, 2: exercise_2, 3: exercise_3, 4: exercise_4, 5: exercise_5,
    6: exercise_6, 7: exercise_7, 10: exercise_10,
}

#: Answers that are arguments, not arithmetic; the command says so instead of computing.
DISCURSIVE = {8: "exact KL only at visited prefixes, sampled by the old policy",
              9: "designing matched-compute ablations (SFT only, RL only, SFT then RL)"}
