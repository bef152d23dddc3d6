"""Every RL algorithm option is used by training, checked on real runs.

A registry entry can look right in isolation and still be dropped on its way into
``reinforce``. So tiny plans are trained for one RL step, and the statistics recorded for
each PPO update are recomputed here from the stored rows and checkpoints by slow loops in
float64, each option written out again from its definition. A second group of tests checks
that every option changes the record relative to the teaching choice.

The first update of a rollout has ratio 1 (the policy that sampled is the one updated), so
it cannot show clipping or a KL: the weights after exactly one update come from a twin plan
with ``updates_per_rollout=1`` (plan A), whose arm checkpoint is the current policy of the
second update of the plan with two updates (plan B).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from lossloops import LOOPS
from plans import write_plan

from postlab.plan.frozen import load_plan, teaching_plan
from postlab.plan.schema import Plan
from postlab.policies.checkpoint import load_checkpoint
from postlab.policies.gru import CharGRU
from postlab.records.models import Record, Step, Update
from postlab.rl.algorithms import (
    ADVANTAGES,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    REDUCTIONS,
    resolve,
)
from postlab.runs.orchestration import RunOptions, run_plan
from postlab.tasks.contracts import CONTRACTS
from postlab.tasks.registry import task_for

pytestmark = pytest.mark.slow

#: One seed, one arm, one RL step: SFT long enough that groups hold both rewards, and an RL
#: learning rate large enough that one Adam step moves ratios well outside the clip range.
TINY: dict[str, Any] = {
    "seeds": [3], "embedding": 12, "hidden": 16, "sft_steps": 30, "sft_batch": 16,
    "sft_lr": 0.02, "rl_steps": 1, "prompts_per_step": 6, "group_size": 4,
    "updates_per_rollout": 2, "rl_lr": 0.02, "kl_beta": 0.3, "eval_samples": 1,
    "arms": ["strict"],
}
ARM = "strict"

#: The registry entries the teaching plan's words mean (its plan keeps the words).
TEACHING = {"advantage": "group-std", "loss_reduction": "token-mean", "kl": "exact"}
#: The policy loss of a plan that names none (the teaching plan's).
DEFAULT_LOSS = "ppo-clip"
CLIP_HIGH = {"clip": 0.2, "clip_high": 0.28}
#: Each policy loss with settings in the range its paper uses (GSPO's clip acts on a
#: sequence's geometric-mean ratio, so its paper's range is narrow: 3e-4 and 4e-4).
LOSSES = {"gspo": {"policy_loss": "gspo", "clip": 0.003, "clip_high": 0.004},
          "cispo": {"policy_loss": "cispo", "clip": 0.2, "clip_high": 0.28},
          "sapo": {"policy_loss": "sapo", "sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05}}
DYNAMIC = {"dynamic_sampling": {"max_extra_groups": 4}}
#: One extra group at most, so groups without signal stay in the step, and DAPO's rule: the
#: update leaves them out.
DROPPED = {"dynamic_sampling": {"max_extra_groups": 1, "constant_groups": "drop"}}

STD_EPSILON = 1e-8
#: float32 training against float64 loops.
REL, ABS = 1e-4, 1e-6
#: A ratio this close to a clip bound may fall on either side in float32.
BOUND_SLACK = 1e-5


# --- the options, written out again from their definitions --------------------------------

Groups = list[list[float]]


def _mean(values: list[float]) -> float:
    total = 0.0
    for value in values:
        total += value
    return total / len(values)


def _population_std(values: list[float]) -> float:
    centre = _mean(values)
    total = 0.0
    for value in values:
        total += (value - centre) ** 2
    return math.sqrt(total / len(values))


def _group_std(groups: Groups) -> Groups:
    """GRPO: (r - group mean) / (group population std + eps)."""
    out = []
    for group in groups:
        centre, spread = _mean(group), _population_std(group)
        out.append([(r - centre) / (spread + STD_EPSILON) for r in group])
    return out


def _mean_only(groups: Groups) -> Groups:
    """Dr. GRPO: r - group mean, no division."""
    out = []
    for group in groups:
        centre = _mean(group)
        out.append([r - centre for r in group])
    return out


def _leave_one_out(groups: Groups) -> Groups:
    """RLOO: each reward against the mean of the other rewards of its group."""
    out = []
    for group in groups:
        row = []
        for i, reward in enumerate(group):
            others = [r for j, r in enumerate(group) if j != i]
            row.append(reward - _mean(others))
        out.append(row)
    return out


def _group_mean_batch_std(groups: Groups) -> Groups:
    """REINFORCE++-baseline: centre within the group, scale by the whole batch's std."""
    centred = _mean_only(groups)
    everything = [value for group in centred for value in group]
    spread = _population_std(everything)
    return [[value / (spread + STD_EPSILON) for value in group] for group in centred]


ADVANTAGE_DEFS: dict[str, Callable[[Groups], Groups]] = {
    "group-std": _group_std, "mean-only": _mean_only, "leave-one-out": _leave_one_out,
    "group-mean-batch-std": _group_mean_batch_std,
}

Sequences = list[list[float]]  # per-token losses of each sequence, valid tokens only


def _token_mean(per_token: Sequences, max_tokens: int) -> float:
    """DAPO: every valid token of the batch weighs the same."""
    total, count = 0.0, 0
    for sequence in per_token:
        for value in sequence:
            total += value
            count += 1
    return total / count


def _seq_mean_token_mean(per_token: Sequences, max_tokens: int) -> float:
    """GRPO as published: mean within each sequence, then over sequences."""
    return _mean([_mean(sequence) for sequence in per_token])


def _constant_normaliser(per_token: Sequences, max_tokens: int) -> float:
    """Dr. GRPO: the sum over valid tokens divided by a constant, sequences x budget."""
    total = 0.0
    for sequence in per_token:
        for value in sequence:
            total += value
    return total / (len(per_token) * max_tokens)


REDUCTION_DEFS: dict[str, Callable[[Sequences, int], float]] = {
    "token-mean": _token_mean, "seq-mean-token-mean": _seq_mean_token_mean,
    "constant-normaliser": _constant_normaliser,
}

Dist = list[float]  # log-probabilities over the vocabulary at one position


def _exact_kl(policy: Dist, reference: Dist, token: int) -> float:
    """KL(pi || ref) of the two categorical distributions at this prefix."""
    total = 0.0
    for log_p, log_q in zip(policy, reference, strict=True):
        total += math.exp(log_p) * (log_p - log_q)
    return total


def _k1(policy: Dist, reference: Dist, token: int) -> float:
    """Schulman's k1: log(p/q) at the sampled token."""
    return policy[token] - reference[token]


def _k3(policy: Dist, reference: Dist, token: int) -> float:
    """Schulman's k3: q/p - 1 - log(q/p) at the sampled token."""
    log_ratio = reference[token] - policy[token]
    return math.exp(log_ratio) - 1 - log_ratio


def _no_kl(policy: Dist, reference: Dist, token: int) -> float:
    """DAPO drops the penalty."""
    return 0.0


KL_DEFS: dict[str, Callable[[Dist, Dist, int], float]] = {
    "exact": _exact_kl, "k1": _k1, "k3": _k3, "none": _no_kl,
}

FIELDS = {"advantage": (ADVANTAGES, ADVANTAGE_DEFS), "loss_reduction": (REDUCTIONS, REDUCTION_DEFS),
          "kl": (KL_ESTIMATORS, KL_DEFS), "policy_loss": (POLICY_LOSSES, LOOPS)}


def _definition(field: str, name: str) -> Callable:
    defs = FIELDS[field][1]
    if name not in defs:
        pytest.fail(f"{field} option {name!r} is registered but has no hand-written "
                    "definition in this module; add one from its source")
    return defs[name]


# --- forward passes and the recomputation ---------------------------------------------------

def _log_softmax(logits: list[float]) -> Dist:
    """Shifted by the maximum so the masked logits (-1e9) cannot overflow."""
    top = max(logits)
    total = 0.0
    for value in logits:
        total += math.exp(value - top)
    log_total = top + math.log(total)
    return [value - log_total for value in logits]


class Policy:
    """A checkpoint run in float64, one sequence at a time; log-distributions are cached."""

    def __init__(self, plan: Plan, path: Path, sha256: str) -> None:
        self.plan = plan
        self.model = CharGRU.from_plan(plan)
        self.model.load_state_dict(load_checkpoint(path, sha256)["state_dict"])
        self.model.double().eval()
        self.cache: dict[tuple, list[Dist]] = {}

    def log_dists(self, row: list) -> list[Dist]:
        """Log-probabilities at each response position of ``row`` (batch of one)."""
        key = (row[0], row[1], row[2], row[3])
        if key not in self.cache:
            prompt = self.model.encode(task_for(self.plan).prompt(row[:2]))
            response = _response(self.plan, row)
            inputs = torch.tensor([prompt + response[:-1]])
            with torch.no_grad():
                logits = self.model(inputs)[0, len(prompt) - 1:].tolist()
            assert len(logits) == len(response)
            self.cache[key] = [_log_softmax(position) for position in logits]
        return self.cache[key]


def _response(plan: Plan, row: list) -> list[int]:
    """The sampled tokens: the visible characters, then EOS if the answer ended."""
    vocab = plan.vocab
    tokens = [vocab.index(c) for c in row[2]]
    if row[3]:
        tokens.append(vocab.index(plan.eos))
    return tokens


def _rewards(plan: Plan, rows: list) -> list[float]:
    """The arm's contract on each row: rows keep the pair, so the task gives the answer."""
    answer = task_for(plan).answer
    return [float(CONTRACTS[ARM](row[:2], row[2], row[3], answer(row[:2]))) for row in rows]


@dataclass(frozen=True)
class Choice:
    """The options one update used, as registry names, so a counterfactual can swap one."""

    advantage: str
    reduction: str
    kl: str
    clip_low: float
    clip_high: float
    policy_loss: str = DEFAULT_LOSS
    tau_pos: float = 1.0
    tau_neg: float = 1.05

    @classmethod
    def of(cls, plan: Plan) -> Choice:
        def name(field: str) -> str:
            word = getattr(plan, field)
            return word if word in FIELDS[field][0] else TEACHING[field]

        high = plan.clip_high
        taus = [value for value, default in ((plan.sapo_tau_pos, 1.0),
                                             (plan.sapo_tau_neg, 1.05))
                for value in [default if value is None else value]]
        return cls(name("advantage"), name("loss_reduction"), name("kl"), plan.clip,
                   plan.clip if high is None else high, name("policy_loss"), *taus)


@dataclass(frozen=True)
class Stats:
    """What the loops make of one update, with the counts that say how decisive it is."""

    loss: float
    kl: float
    entropy: float
    outside: int  # tokens whose ratio lies outside the clip range
    ambiguous: int  # of all tokens, those within BOUND_SLACK of a bound
    tokens: int
    between_bounds: int  # ratios in (1 + clip_low, 1 + clip_high]: only clip-higher keeps them
    gain_between: int  # of those, tokens with a positive advantage: their gain is not clipped


def recompute(plan: Plan, rows: list, current: Policy, old: Policy,
              reference: Policy, choice: Choice) -> Stats:
    """One update's statistics, token by token, from the definitions."""
    size = plan.group_size
    rewards = _rewards(plan, rows)
    groups = [rewards[i:i + size] for i in range(0, len(rewards), size)]
    advantages = [a for group in _definition("advantage", choice.advantage)(groups)
                  for a in group]
    kl_of = _definition("kl", choice.kl)
    loss_of = _definition("policy_loss", choice.policy_loss)
    low, high = 1 - choice.clip_low, 1 + choice.clip_high
    per_token: Sequences = []
    kl_total = entropy_total = 0.0
    outside = ambiguous = tokens = between = gain_between = 0
    for row, advantage in zip(rows, advantages, strict=True):
        now, before, ref = current.log_dists(row), old.log_dists(row), reference.log_dists(row)
        response = _response(plan, row)
        gains, beyond, decided = loss_of(
            [now[p][token] for p, token in enumerate(response)],
            [before[p][token] for p, token in enumerate(response)], advantage,
            choice.clip_low, choice.clip_high, choice.tau_pos, choice.tau_neg)
        losses = []
        for position, token in enumerate(response):
            ratio = decided[position]  # the ratio the clip compares (GSPO's: the sequence's)
            kl = kl_of(now[position], ref[position], token)
            losses.append(-gains[position] + plan.kl_beta * kl)
            kl_total += kl
            for log_p in now[position]:
                entropy_total -= math.exp(log_p) * log_p
            outside += beyond[position]
            ambiguous += min(abs(ratio - low), abs(ratio - high)) < BOUND_SLACK
            between += 1 + choice.clip_low < ratio <= high
            gain_between += 1 + choice.clip_low < ratio < high and advantage > 0
            tokens += 1
        per_token.append(losses)
    loss = _definition("loss_reduction", choice.reduction)(per_token, plan.max_new_tokens)
    return Stats(loss, kl_total / tokens, entropy_total / tokens, outside, ambiguous, tokens,
                 between, gain_between)


def _close(recorded: float, hand: float) -> bool:
    """Equal up to float32 training against float64 loops."""
    return math.isclose(recorded, hand, rel_tol=REL, abs_tol=ABS)


def assert_matches(recorded: Update, hand: Stats, what: str) -> None:
    """The recorded update statistics against the loops; a ratio at a bound may go either way."""
    for key, value in (("loss", hand.loss), ("kl", hand.kl), ("entropy", hand.entropy)):
        stored = getattr(recorded, key)
        assert _close(stored, value), (f"{what}: recorded {key} {stored!r}, "
                                       f"recomputed {value!r}")
    count = round(recorded.ratio_outside_clip * hand.tokens)
    assert abs(count - hand.outside) <= hand.ambiguous, (
        f"{what}: {count} of {hand.tokens} ratios recorded outside the clip range, "
        f"{hand.outside} recomputed ({hand.ambiguous} within {BOUND_SLACK} of a bound)")


def differs(one: Stats, other: Stats) -> bool:
    """The two sets of statistics can be told apart at the comparison's tolerance."""
    return (not _close(one.loss, other.loss) or not _close(one.kl, other.kl)
            or abs(one.outside - other.outside) > one.ambiguous + other.ambiguous)


# --- training runs, shared by the module ----------------------------------------------------

@dataclass
class Twin:
    """Plans A (one update per rollout) and B (two) with the same option changes."""

    plan: Plan  # B's plan
    step_a: Step
    step_b: Step
    sft: Policy  # the RL start, the old policy of every update and the KL reference
    after_one: Policy  # A's arm: the weights after exactly one update

    def check_updates(self, choice: Choice) -> tuple[Stats, Stats]:
        """Both updates of B's first step against the loops; returns the hand statistics."""
        assert list(self.step_a.rows) == list(self.step_b.rows)
        assert self.step_a.zero_variance_groups == self.step_b.zero_variance_groups
        assert self.step_a.updates == self.step_b.updates[:1]
        rows = list(self.step_b.rows)
        first = recompute(self.plan, rows, self.sft, self.sft, self.sft, choice)
        second = recompute(self.plan, rows, self.after_one, self.sft, self.sft, choice)
        assert first.outside == 0  # ratio 1: the updated policy is the one that sampled
        assert_matches(self.step_b.updates[0], first, "update 1")
        assert_matches(self.step_b.updates[1], second, "update 2")
        assert second.outside > 0, "the tiny plan no longer moves ratios outside the clip range"
        return first, second


class Runs:
    """Trains each plan once, on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.records: dict[str, tuple[Plan, Path, Record]] = {}

    def train(self, changes: dict[str, Any]) -> tuple[Plan, Path, Record]:
        key = json.dumps(changes, sort_keys=True)
        if key not in self.records:
            folder = self.root / f"plan-{len(self.records)}"
            folder.mkdir()
            path = write_plan(folder / "plan.json", **(TINY | changes))
            plan = load_plan(path)
            record = run_plan(plan, path.read_bytes(),
                              RunOptions(out_dir=folder / "run", workers=1, progress_every=0))
            self.records[key] = plan.model, folder / "run", record
        return self.records[key]

    def twin(self, changes: dict[str, Any]) -> Twin:
        plan_a, out_a, record_a = self.train(changes | {"updates_per_rollout": 1})
        plan_b, out_b, record_b = self.train(changes | {"updates_per_rollout": 2})
        run_a, run_b = record_a.runs[0], record_b.runs[0]
        assert run_a.checkpoints is not None and run_b.checkpoints is not None
        sft_a, sft_b = run_a.checkpoints["initial"], run_b.checkpoints["initial"]
        arm = run_a.checkpoints[ARM]
        twin = Twin(plan=plan_b, step_a=run_a.arms[ARM][0],
                    step_b=run_b.arms[ARM][0],
                    sft=Policy(plan_b, out_b / sft_b.file, sft_b.sha256),
                    after_one=Policy(plan_b, out_a / arm.file, arm.sha256))
        # The twins share their SFT model (the files differ only by the plan stored in them).
        assert run_a.sft_loss == run_b.sft_loss
        same = Policy(plan_a, out_a / sft_a.file, sft_a.sha256).model.state_dict()
        for key, value in twin.sft.model.state_dict().items():
            assert torch.equal(value, same[key])
        return twin

    def step(self, changes: dict[str, Any]) -> Step:
        """Plan B's first RL step."""
        return self.train(changes | {"updates_per_rollout": 2})[2].runs[0].arms[ARM][0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("options"))


def _changes(field: str, name: str) -> dict[str, Any]:
    """The teaching choice keeps the teaching plan's words, so it shares the baseline runs."""
    return {} if name == TEACHING[field] else {field: name}


def _baseline(field: str) -> str:
    """The choice a plan makes where it names none of ``field``'s options."""
    return TEACHING.get(field, DEFAULT_LOSS)


def _counterfactual(twin: Twin, choice: Choice, **teaching: Any) -> Stats:
    """Update 2 as if the teaching choice had been used on the same weights and rows."""
    return recompute(twin.plan, list(twin.step_b.rows), twin.after_one, twin.sft, twin.sft,
                     replace(choice, **teaching))


# --- 1. recorded statistics = loops from the definitions -----------------------------------

def test_teaching_words_mean_the_teaching_entries() -> None:
    """The loops read a plan's teaching words through TEACHING; it must agree with training."""
    plan = teaching_plan()
    for field, name in TEACHING.items():
        assert plan[field] not in FIELDS[field][0]
        assert resolve(field, plan[field]) == name


@pytest.mark.parametrize("name", ADVANTAGES.names())
def test_advantage_estimator_is_used(runs: Runs, name: str) -> None:
    twin = runs.twin(_changes("advantage", name))
    choice = Choice.of(twin.plan)
    assert choice.advantage == name
    _, second = twin.check_updates(choice)
    if name != TEACHING["advantage"]:
        assert differs(second, _counterfactual(twin, choice, advantage=TEACHING["advantage"]))


@pytest.mark.parametrize("name", REDUCTIONS.names())
def test_loss_reduction_is_used(runs: Runs, name: str) -> None:
    twin = runs.twin(_changes("loss_reduction", name))
    choice = Choice.of(twin.plan)
    assert choice.reduction == name
    _, second = twin.check_updates(choice)
    if name != TEACHING["loss_reduction"]:
        assert differs(second, _counterfactual(twin, choice, reduction=TEACHING["loss_reduction"]))


@pytest.mark.parametrize("name", KL_ESTIMATORS.names())
def test_kl_estimator_is_used(runs: Runs, name: str) -> None:
    twin = runs.twin(_changes("kl", name))
    choice = Choice.of(twin.plan)
    assert choice.kl == name
    first, second = twin.check_updates(choice)
    # the policy still equals the reference: the plain computation gives exactly 0; the
    # engine's two forward passes (policy with gradients, reference without) may differ in the
    # last bit where MKL's results depend on where its buffers sit in memory (seen on an Intel
    # Xeon under MKL_CBWR=AVX2, not under AVX2,STRICT nor on AMD EPYC)
    assert first.kl == 0 and abs(twin.step_b.updates[0].kl) < 1e-9
    if name != TEACHING["kl"]:
        assert differs(second, _counterfactual(twin, choice, kl=TEACHING["kl"]))


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_policy_loss_is_used(runs: Runs, name: str) -> None:
    changes = LOSSES.get(name, {})
    twin = runs.twin(changes)
    choice = Choice.of(twin.plan)
    assert choice.policy_loss == name
    _, second = twin.check_updates(choice)
    if name != DEFAULT_LOSS:
        assert differs(second, _counterfactual(twin, choice, policy_loss=DEFAULT_LOSS))


def test_clip_high_is_used(runs: Runs) -> None:
    twin = runs.twin(CLIP_HIGH)
    choice = Choice.of(twin.plan)
    assert (choice.clip_low, choice.clip_high) == (0.2, 0.28)
    _, second = twin.check_updates(choice)
    # Both the clip statistic and the loss must be able to tell the bounds apart.
    assert second.between_bounds > 0, "no ratio falls where clip-higher differs from symmetric"
    assert second.gain_between > 0, "no token's gain depends on the upper bound"
    symmetric = _counterfactual(twin, choice, clip_high=choice.clip_low)
    assert not _close(second.loss, symmetric.loss)
    assert second.outside < symmetric.outside


def test_dynamic_sampling_is_used(runs: Runs) -> None:
    twin = runs.twin(DYNAMIC)
    twin.check_updates(Choice.of(twin.plan))
    step, baseline = twin.step_b, runs.step({})
    size, budget = TINY["group_size"], DYNAMIC["dynamic_sampling"]["max_extra_groups"]
    plan = twin.plan

    def grouped(rows: list) -> list[list]:
        return [rows[i:i + size] for i in range(0, len(rows), size)]

    def constant(group: list) -> bool:
        return len(set(_rewards(plan, group))) == 1

    before, after = grouped(list(baseline.rows)), grouped(list(step.rows))
    assert len(before) == len(after) == TINY["prompts_per_step"]
    replaced = 0
    for old, new in zip(before, after, strict=True):
        if new != old:
            # only a group without signal may go, and only for one with signal
            assert constant(old) and not constant(new)
            replaced += 1
    left = sum(constant(group) for group in after)
    sampling = step.sampling
    assert sampling is not None
    assert replaced == sampling.replaced > 0
    assert step.zero_variance_groups == left
    assert sampling.kept == TINY["prompts_per_step"]
    assert sampling.drawn - sampling.kept == sampling.dropped <= budget
    assert left == 0 or sampling.dropped == budget
    dropped = grouped(list(sampling.dropped_rows))
    assert all(constant(group) for group in dropped)
    for old, new in zip(before, after, strict=True):
        if new != old:
            assert old in dropped


# --- 2. each option changes the record ------------------------------------------------------

def test_dynamic_sampling_as_dapo_defines_it_leaves_groups_without_signal_out(runs: Runs
                                                                           ) -> None:
    """With constant_groups 'drop' the step's rows keep every group, and both updates equal
    the loops run on the groups with signal alone, not on all of them."""
    twin = runs.twin(DROPPED)
    plan, size = twin.plan, TINY["group_size"]
    rows = list(twin.step_b.rows)
    groups = [rows[i:i + size] for i in range(0, len(rows), size)]
    signal = [row for group in groups if len(set(_rewards(plan, group))) > 1 for row in group]
    left = len(rows) // size - len(signal) // size
    assert left == twin.step_b.zero_variance_groups > 0, "no group without signal is left"
    assert len(rows) == TINY["prompts_per_step"] * size and signal
    assert twin.step_a.updates == twin.step_b.updates[:1]
    choice = Choice.of(plan)
    first = recompute(plan, signal, twin.sft, twin.sft, twin.sft, choice)
    second = recompute(plan, signal, twin.after_one, twin.sft, twin.sft, choice)
    assert_matches(twin.step_b.updates[0], first, "update 1")
    assert_matches(twin.step_b.updates[1], second, "update 2")
    kept_in = recompute(plan, rows, twin.after_one, twin.sft, twin.sft, choice)
    assert differs(second, kept_in)


def _options() -> list[tuple[str, dict[str, Any]]]:
    cases = [(f"{field}={name}", LOSSES[name] if field == "policy_loss" else {field: name})
             for field, (registry, _) in FIELDS.items()
             for name in registry.names() if name != _baseline(field)]
    return [*cases, ("clip_high", CLIP_HIGH), ("dynamic_sampling", DYNAMIC)]


OPTIONS = _options()


@pytest.mark.parametrize("changes", [c for _, c in OPTIONS], ids=[i for i, _ in OPTIONS])
def test_option_changes_the_record(runs: Runs, changes: dict[str, Any]) -> None:
    baseline, step = runs.step({}), runs.step(changes)
    assert (list(step.rows), step.updates) != (list(baseline.rows), baseline.updates)
