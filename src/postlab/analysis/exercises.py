"""The worked answers that arithmetic can show, computed by the library's own functions.

Each exercise returns its inputs and results as data (tests assert them) plus a few lines for
people. Answers 8 and 9 are computed on a trained run (:data:`RUN_EXERCISES`): 8 on any run
(by default the bundled one), 9 on a run whose arms are pipelines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from postlab.plan.frozen import split_by_unordered_pair
from postlab.records.metrics import coverage, metrics
from postlab.rl.groups import contrast_probability, expected_groups_until_contrast, group_advantages
from postlab.rl.losses import clipped_term, token_coefficients
from postlab.tasks.arithmetic import ARITHMETIC_CONTRACTS
from postlab.tasks.contracts import score
from postlab.tasks.rows import Row

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.records.models import Record

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


def exercise_9(analysis: Any, plan: Plan, split: str = "test") -> Exercise:
    """Answer 9 on a run: what RL adds over more SFT at matched compute, and what RL does
    without SFT. One row per stage: its pipeline, its compute including the SFT it starts
    from, and held-out results with 95% intervals over seeds (change from SFT paired by seed).
    """
    from postlab.plan.arms import arm_specs

    first = analysis.contracts[0]
    compute = {c.stage: c for c in analysis.compute}
    rules = {arm.name: arm.selection for arm in arm_specs(plan) if arm.selection}
    values: dict[str, Any] = {}
    lines = [f"held-out {split} split, {len(analysis.seeds)} seeds; compute includes the SFT "
             "a stage starts from; 95% intervals over seeds and questions"]
    lines.append(f"{'stage':14s} {'pipeline':12s} {'grad steps':>10s} {'completions':>11s}  "
                 f"{'sampled success':22s} {'change from SFT':24s} coverage")
    for stage in analysis.stages:
        success = analysis.outcome(stage, split, "sampled", f"{first}_rate")
        cover = analysis.outcome(stage, split, "sampled", "coverage")
        cost = compute.get(stage)
        pipeline = cost.pipeline if cost else "?"
        if stage in rules:
            pipeline = rules[stage]  # an sft-selected arm: its demonstration rule
        steps = cost.total["gradient_steps"] if cost else float("nan")
        completions = cost.total["completions"] if cost else float("nan")
        change = success.change_from_sft
        values[stage] = {"pipeline": cost.pipeline if cost else "?",
                         "selection": rules.get(stage, "random" if stage == "initial" else None),
                         "gradient_steps": steps,
                         "completions": completions, "success": success.value.mean,
                         "success_low": success.value.low, "success_high": success.value.high,
                         "change": change.mean if change else None,
                         "change_low": change.low if change else None,
                         "change_high": change.high if change else None,
                         "coverage": cover.value.mean}
        lines.append(f"{stage:14s} {pipeline:12s} {steps:10g} {completions:11g}  "
                     f"{_interval(success.value, signed=False):22s} "
                     f"{_interval(change) if change else '—':24s} {cover.value.mean:.3f}")
    lines.append("read: an RL arm beats the SFT-only arm with as many gradient steps only if "
                 "its change from SFT exceeds the SFT-only arm's; RL only shows what reward "
                 "alone teaches from untrained weights")
    if rules:
        lines.append("an arm named by its demonstration rule (easiest-first, hardest-only) is "
                     "the SFT again from the same untrained weights, with as many steps and "
                     "demonstrations, chosen by that rule: its change from SFT is the "
                     "selection's effect against random demonstrations, paired by seed")
    return Exercise(9, "ablations at matched compute: SFT only, RL only, SFT then RL, and "
                       "demonstrations chosen by difficulty",
                    values, lines)


def _interval(value: Any, signed: bool = True) -> str:
    form = "+.3f" if signed else ".3f"
    if value.low is None:
        return f"{value.mean:{form}}"
    return f"{value.mean:{form}} [{value.low:{form}}, {value.high:{form}}]"


def exercise_8(record: Record, plan: Plan, folder: Any,
               prompts: int = 4, samples: int = 5000, *,
               tables: Callable[[], Any] | None = None) -> Exercise:
    """Answer 8 on a run (``tables`` unused: it reads the first seed's entry, checked as it is
    read): for each RL arm of the first seed, the exact KL to the SFT model over
    whole completions (enumerated) against the per-prefix exact KL summed along sampled
    completions, as training uses it, and the summed log-ratio (k1). Averaged over the first
    ``prompts`` test questions, ``samples`` completions each."""
    import statistics

    import torch

    from postlab.analysis.sequence_kl import exact_sequence_kl, sampled_prefix_kl
    from postlab.plan.arms import arm_specs
    from postlab.policies import policy_kind
    from postlab.policies.checkpoint import load_checkpoint
    from postlab.policies.restore import policy_from_checkpoint

    run = record.runs[0]
    seed = run.seed
    checkpoints = run.checkpoints
    if checkpoints is None:
        raise KeyError("checkpoints")
    # the policies' layer reads the checkpoints as plain values (file, sha256)
    plain = {stage: info.model_dump() for stage, info in checkpoints.items()}

    def load(stage: str) -> Any:
        info = checkpoints[stage]
        payload = load_checkpoint(folder / info.file, info.sha256, kind=policy_kind(plan))
        return policy_from_checkpoint(plan, payload, seed, folder, plain).eval()

    reference = load("initial")
    pairs = plan.split["test"][:prompts]
    budget = plan.max_new_tokens
    values: dict[str, Any] = {}
    lines = [f"seed {seed}; KL of each RL arm to the SFT model over whole completions (up to "
             f"{budget} tokens), averaged over {len(pairs)} test questions; sampled: "
             f"{samples} completions per question from the arm"]
    lines.append(f"{'arm':12s} {'exact (enumerated)':>19s}  {'per-prefix sum, sampled':>24s}  "
                 f"{'k1 log-ratio, sampled':>22s}  per-sample spread (sd, min..max)")
    for arm in [a.name for a in arm_specs(plan) if a.is_rl]:
        policy = load(arm)
        exact, prefix, k1 = [], [], []
        generator = torch.Generator().manual_seed(seed + 8000)
        for pair in pairs:
            prompt = policy.prompts([pair])
            exact.append(exact_sequence_kl(policy, reference, prompt, budget))
            sampled = sampled_prefix_kl(policy, reference, prompt, budget, samples, generator)
            prefix.append(sampled.prefix_sums)
            k1.append(sampled.log_ratios)
        every_prefix = [v for group in prefix for v in group]
        every_k1 = [v for group in k1 for v in group]
        # questions weigh equally: the sampled mean is the mean of per-question means
        mean_exact = sum(exact) / len(exact)
        mean_prefix = sum(statistics.fmean(g) for g in prefix) / len(prefix)
        mean_k1 = sum(statistics.fmean(g) for g in k1) / len(k1)
        se_prefix = (sum(statistics.variance(g) / len(g) for g in prefix) ** 0.5) / len(prefix)
        se_k1 = (sum(statistics.variance(g) / len(g) for g in k1) ** 0.5) / len(k1)
        values[arm] = {"exact": mean_exact, "prefix_mean": mean_prefix,
                       "prefix_se": se_prefix, "k1_mean": mean_k1, "k1_se": se_k1,
                       "prefix_sd": statistics.stdev(every_prefix),
                       "prefix_min": min(every_prefix), "prefix_max": max(every_prefix),
                       "per_question_exact": exact}
        lines.append(f"{arm:12s} {mean_exact:19.5f}  {mean_prefix:15.5f} ± {se_prefix:.5f}  "
                     f"{mean_k1:13.5f} ± {se_k1:.5f}  {statistics.stdev(every_prefix):.4f}, "
                     f"{min(every_prefix):.4f}..{max(every_prefix):.4f}")
        del every_k1
    lines.append("read: the per-prefix sums average to the exact KL (within their standard "
                 "error) yet differ from completion to completion; k1 is unbiased too, with "
                 "more spread")
    return Exercise(8, "exact KL at visited prefixes vs over whole completions", values, lines)


def _exercise_9_on_run(record: Record, plan: Plan, folder: Any, *,
                       tables: Callable[[], Any] | None = None) -> Exercise:
    from postlab.analysis.aggregate import analyse, record_facts
    from postlab.errors import UserError
    from postlab.plan.arms import arm_specs

    pipelines = {arm.pipeline for arm in arm_specs(plan)}
    if not ({"sft-only", "sft-then-rl"} <= pipelines or "sft-selected" in pipelines):
        raise UserError(f"{folder}: answer 9 compares an sft-only arm with an sft-then-rl arm "
                        "(and rl-only if present), or demonstrations chosen by difficulty "
                        "(an sft-selected arm) with the random ones of the SFT; this run's arms "
                        f"are {', '.join(sorted(pipelines))} (see examples/arms-pipelines.json "
                        "and examples/arms-demonstrations.json)")
    facts = None if tables is None else record_facts(record, plan, tables())
    return exercise_9(analyse(record, plan, facts=facts), plan)


#: Answers computed on a run: postlab exercises N [RUN] -> (record, plan, folder, tables) ->
#: Exercise, ``tables`` making the record's flat tables checked as a reader checks them.
RUN_EXERCISES: dict[int, Callable[..., Exercise]] = {8: exercise_8, 9: _exercise_9_on_run}

EXERCISES: dict[int, Callable[[], Exercise]] = {
    1: exercise_1, 2: exercise_2, 3: exercise_3, 4: exercise_4, 5: exercise_5,
    6: exercise_6, 7: exercise_7, 10: exercise_10,
}

#: Answers that are arguments, not arithmetic; the command says so instead of computing.
DISCURSIVE: dict[int, str] = {}
