# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Post-training a tiny adder: the ten answers, computed
#
# A character GRU learns single-digit addition by supervised fine-tuning (SFT), then by
# GRPO-style reinforcement learning (RL) under two reward contracts: `strict` (the output
# is a terminated number equal to a+b) and `substring` (the digits of a+b appear somewhere
# in the output, a rule a policy can game). The chapter behind this lab closes with ten
# exercises; this lesson answers each of them with postlab.
#
# Every number below is computed in this notebook, either by postlab's library, from the
# bundled trained run of the teaching plan that ships with the package, or from a short run
# trained here in a few seconds. The prose never states a computed number: it says what to
# look for, the code prints the number, and an `assert` checks the claim, so a wrong claim
# stops the notebook.
#
# Run it as a notebook (`jupytext --to notebook lessons/en/lesson.py`) or as a plain script
# (`python lessons/en/lesson.py`). It takes well under a minute and a half on two cores.

# %% [markdown]
# ## Setup
#
# Everything the lesson uses comes from postlab. The bundled run holds the record of the
# teaching plan (several seeds; per seed SFT, then one RL arm per contract), its plan and
# every checkpoint. The record is read strictly and checked against the plan it names, and
# is read as typed values: `record.runs[0].arms["strict"][0].rows` are the first RL step's
# answers, each a `Row(a, b, text, terminated)`.

# %%
import json
import random
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch

from postlab.analysis.exercises import EXERCISES, RUN_EXERCISES, exercise_8
from postlab.errors import UserError
from postlab.plan.arms import rl_contracts
from postlab.plan.frozen import (
    derive_plan,
    freeze,
    load_plan,
    parse_plan,
    plan_bytes,
    split_by_unordered_pair,
    teaching_plan_loaded,
)
from postlab.records.blocks import iter_rows
from postlab.records.metrics import summary_for
from postlab.records.record import (
    bundled_run_dir,
    check_plan_link,
    load_record,
    one_document,
    record_in,
)
from postlab.records.rescore import rescore
from postlab.rl.algorithms import resolve
from postlab.rl.groups import contrast_probability, group_advantages
from postlab.rl.losses import token_coefficients
from postlab.rl.objective import clipped_gain, outside_clip
from postlab.tasks.arithmetic import DIGITS
from postlab.tasks.contracts import score
from postlab.tasks.rows import Row


def show(exercise):
    """The library's own lines for one answer."""
    print(f"answer {exercise.number}: {exercise.title}")
    for line in exercise.lines:
        print(f"  {line}")


def rollout_rewards(step, contract):
    """A recorded RL step's rewards under a contract, one list per group of answers."""
    rewards = [score(row, contract) for row in step.rows]
    size = plan.group_size
    return [rewards[i:i + size] for i in range(0, len(rewards), size)]


RUN = bundled_run_dir()
assert RUN is not None, "this build of postlab has no bundled run"
record = load_record(record_in(RUN))
plan_file = load_plan(RUN / "plan.json")
check_plan_link(record, plan_file, str(RUN))  # refuses a record made under another plan
plan = plan_file.model
# the plan's thread count: one torch thread, the fastest on a small shared machine
torch.set_num_threads(plan.threads)
CONTRACT_OF = rl_contracts(plan)  # RL arm -> the contract it was trained on
print("seeds:", plan.seeds, "| RL arms and their contracts:", CONTRACT_OF)
print("RL steps per arm:", plan.rl_steps, "| group size:", plan.group_size)

# %% [markdown]
# ## Answer 1: the strict and the substring contract
#
# *Question: for 5+5, what do the two contracts pay for the output `1010`, and for 0+1,
# what do they pay for `1` when the model never emitted its end-of-sequence token?*
#
# `strict` pays only a terminated output made of digits whose value is the sum; `substring`
# pays any output that contains the sum's digits. So `1010` earns the substring reward and
# not the strict one, and so does an unterminated `1`: under `strict`, an answer that never
# ends is not an answer at all.

# %%
answer_1 = EXERCISES[1]()
show(answer_1)
assert answer_1.values["1010"] == {"strict": 0, "substring": 1}
assert answer_1.values["1"] == {"strict": 0, "substring": 1}

print("5+5, outputs a policy could emit (text, terminated):")
candidates = [("10", True), ("010", True), ("10", False), ("1010", True), ("910", True)]
paid_only_by_substring = []
for text, terminated in candidates:
    row = Row(5, 5, text, terminated)
    strict, substring = score(row, "strict"), score(row, "substring")
    print(f"  {text!r:8} terminated={terminated!s:5}  strict={strict}  substring={substring}")
    if substring and not strict:
        paid_only_by_substring.append((text, terminated))
# every hedge and every unfinished answer is paid by substring alone
assert paid_only_by_substring == [("10", False), ("1010", True), ("910", True)]

# %% [markdown]
# Does a policy actually find these hedges? Count, in the bundled run, the outputs that
# `substring` accepts and `strict` refuses ("gamed" outputs): in the RL rollouts each arm
# was trained on, and in the sampled answers to held-out test questions after training.
# The arm trained on `substring` games several times as often as the arm trained on
# `strict`, and as the SFT model it started from.

# %%
gamed, seen, examples = Counter(), Counter(), Counter()
for place, row in iter_rows(record):
    if place.decoding == "rollout":
        where = "rollout"
    elif place.split == "test" and place.decoding == "sampled":
        where = "test"
    else:
        continue
    seen[place.stage, where] += 1
    if score(row, "substring") and not score(row, "strict"):
        gamed[place.stage, where] += 1
        if place.stage == "substring" and where == "test":
            examples[f"{row.a}+{row.b} -> {row.text!r}"] += 1

labels = {"rollout": "RL rollouts", "test": "test questions, sampled"}
share = {}
for stage, where in seen:
    share[stage, where] = gamed[stage, where] / seen[stage, where]
    print(f"{stage:9} {labels[where]:24} gamed {gamed[stage, where]:5} of "
          f"{seen[stage, where]:5} ({share[stage, where]:.3f})")
print("most frequent gamed test answers of the substring arm:",
      examples.most_common(3))
assert share["substring", "rollout"] > 3 * share["strict", "rollout"]
assert share["substring", "test"] > 3 * max(share["strict", "test"], share["initial", "test"])

# %% [markdown]
# ## Answer 2: group-normalised advantages
#
# *Question: a group of eight answers gets rewards 1,1,1,1,0,0,0,0. What are the mean, the
# standard deviation and the advantages? And when all eight are wrong?*
#
# Each advantage is the reward minus the group mean, divided by the group's population
# standard deviation (plus a tiny constant that keeps the division defined). In the mixed
# group right and wrong answers get advantages of equal size and opposite sign, one
# standard deviation each; in a constant group every advantage vanishes, so that group
# teaches nothing.

# %%
answer_2 = EXERCISES[2]()
show(answer_2)
mixed = [1, 1, 1, 1, 0, 0, 0, 0]
print("mean", statistics.fmean(mixed), "population std", statistics.pstdev(mixed))
assert all(abs(a - (1 if r else -1)) < 1e-6
           for a, r in zip(answer_2.values["mixed"], mixed, strict=True))
assert answer_2.values["constant"] == [0.0] * 8

# %% [markdown]
# The same function on a real group: the first mixed group of the first RL step of the
# first seed's `strict` arm. Training records how many groups per step had no spread at
# all; counting them again from the stored answers must give the recorded number.

# %%
first_run = record.runs[0]
history = first_run.arms["strict"]
group = next(g for g in rollout_rewards(history[0], "strict") if len(set(g)) > 1)
advantages = group_advantages(group)
print("rewards", group)
print("advantages", [round(a, 4) for a in advantages])
assert abs(sum(advantages)) < 1e-6
assert all((a > 0) == bool(r) for a, r in zip(advantages, group, strict=True))

for run in record.runs:
    for arm, steps in run.arms.items():
        constant = sum(len(set(g)) == 1 for step in steps
                       for g in rollout_rewards(step, CONTRACT_OF[arm]))
        recorded = sum(step.zero_variance_groups for step in steps)
        total = len(steps) * plan.prompts_per_step
        print(f"seed {run.seed} {arm:9} groups without signal: {constant} of {total} "
              f"({constant / total:.3f})")
        assert constant == recorded

# %% [markdown]
# ## Answer 3: waiting for a group with signal
#
# *Question: a question is answered correctly with probability 0.01. How many groups of
# eight must be drawn, on average, before one holds both a right and a wrong answer? What
# does that estimate assume?*
#
# A group is mixed unless all eight answers are right or all are wrong; the wait until the
# first mixed group is geometric, so its mean is one over that probability.

# %%
answer_3 = EXERCISES[3]()
show(answer_3)
p, size = 0.01, 8
assert abs(answer_3.values["contrast"] - (1 - p**size - (1 - p) ** size)) < 1e-15
assert abs(answer_3.values["groups"] * answer_3.values["contrast"] - 1) < 1e-12

# a direct simulation of the waiting time agrees, within its standard error
rng = random.Random(3)
waits = []
for _ in range(4000):
    drawn = 0
    while True:
        drawn += 1
        rights = sum(rng.random() < p for _ in range(size))
        if 0 < rights < size:
            break
    waits.append(drawn)
mean_wait = statistics.fmean(waits)
error = statistics.stdev(waits) / len(waits) ** 0.5
print(f"simulated mean wait {mean_wait:.2f} ± {error:.2f} groups")
assert abs(mean_wait - answer_3.values["groups"]) < 4 * error

# %% [markdown]
# The estimate assumes one question with a fixed success rate and independent groups.
# Training breaks all three: each step draws different questions, of different
# difficulty, and the policy changes as it learns. Two checks on the bundled run. If every
# question of a step shared the step's overall success rate, the formula would predict few
# groups without signal; more than twice as many are observed, because easy questions are
# always right and hard ones always wrong. And the success rate itself climbs from the
# first steps to the last.

# %%
for run in record.runs:
    for arm, steps in run.arms.items():
        contract = CONTRACT_OF[arm]
        observed = predicted = 0.0
        for step in steps:
            groups = rollout_rewards(step, contract)
            rate = statistics.fmean(r for g in groups for r in g)
            predicted += len(groups) * (1 - contrast_probability(rate, plan.group_size))
            observed += sum(len(set(g)) == 1 for g in groups)

        def success(window, contract=contract):
            return statistics.fmean(r for step in window
                                    for g in rollout_rewards(step, contract) for r in g)

        early, late = success(steps[:20]), success(steps[-20:])
        print(f"seed {run.seed} {arm:9} groups without signal: observed {observed:.0f}, "
              f"predicted from the step's rate {predicted:.1f}; success in the first 20 "
              f"steps {early:.3f}, in the last 20 {late:.3f}")
        assert observed > 2 * predicted
        assert late > early

# %% [markdown]
# ## Answer 4: how a loss reduction weighs each token
#
# *Question: two answers have 4 and 16 tokens. What weight does each token get when the
# loss is averaged within each answer and then over answers, and what weight when it is
# averaged over all tokens of the batch?*
#
# The weights below are the gradients of the very reductions training uses, expressed
# relative to a plain mean over answers. Averaging within each answer first gives every
# answer the same total weight, so a token of the short answer weighs more than a token of
# the long one; averaging over all tokens gives every token the same weight. Switching
# reductions reshuffles which tokens dominate the gradient; it does not merely rescale the
# whole loss.

# %%
answer_4 = EXERCISES[4]()
show(answer_4)
lengths = [4, 16]
per_answer = answer_4.values["seq-mean-token-mean"]
per_token = answer_4.values["token-mean"]
assert all(abs(w - 1 / n) < 1e-12 for w, n in zip(per_answer, lengths, strict=True))
assert all(abs(w - len(lengths) / sum(lengths)) < 1e-12 for w in per_token)
for reduction in ("seq-mean-token-mean", "token-mean", "constant-normaliser"):
    weights = token_coefficients(lengths, reduction, per_sequence_units=True)
    totals = [sum(row) for row in weights]
    print(f"{reduction:20} short/long token weight {weights[0][0] / weights[1][0]:.2f}, "
          f"total weight per answer {[round(t, 3) for t in totals]}")
    if reduction == "seq-mean-token-mean":
        assert weights[0][0] > weights[1][0] and abs(totals[0] - totals[1]) < 1e-12
    if reduction == "token-mean":
        assert weights[0][0] == weights[1][0] and totals[1] > totals[0]

# %% [markdown]
# Why it matters here: the teaching plan averages over all tokens (its `loss_reduction`
# below), and in the bundled run the gamed answers of the `substring` arm are longer than
# its right answers. Under that reduction each gamed answer carries more tokens, and so
# more weight, in the loss than a right one.

# %%
print("teaching plan's reduction:", plan.loss_reduction)
assert resolve("loss_reduction", plan.loss_reduction) == "token-mean"
for run in record.runs:
    tokens = {"gamed": [], "right": []}
    for step in run.arms["substring"]:
        for row in step.rows:
            if score(row, "strict"):
                tokens["right"].append(row.tokens)
            elif score(row, "substring"):
                tokens["gamed"].append(row.tokens)
    gamed_mean, right_mean = (statistics.fmean(tokens[k]) for k in ("gamed", "right"))
    print(f"seed {run.seed} substring arm: mean tokens of a gamed answer {gamed_mean:.2f}, "
          f"of a right answer {right_mean:.2f}")
    assert gamed_mean > right_mean

# %% [markdown]
# ## Answer 5: the clipped PPO term
#
# *Question: with a probability ratio of 1.3 and a clip range of 0.2, what is
# min(r·A, clip(r)·A) for an advantage of +1, and for −1?*
#
# For a positive advantage the clipped value is the smaller one; for a negative advantage
# the unclipped product is smaller, so the minimum keeps it. Being flagged as outside the
# clip range and having no gradient are different things: autograd on the very function
# training uses shows a zero gradient for +1 and a non-zero one for −1.

# %%
answer_5 = EXERCISES[5]()
show(answer_5)
ratio_value, clip = 1.3, 0.2
assert abs(answer_5.values[1.0] - (1 + clip)) < 1e-12
assert abs(answer_5.values[-1.0] - (-ratio_value)) < 1e-12

for advantage in (1.0, -1.0):
    ratio = torch.tensor([[ratio_value]], requires_grad=True)
    gain = clipped_gain(ratio, torch.tensor([advantage]), clip, clip)
    gain.sum().backward()
    flagged = bool(outside_clip(ratio.detach(), clip, clip).item())
    print(f"advantage {advantage:+.0f}: term {gain.item():+.2f}, d(term)/d(ratio) "
          f"{ratio.grad.item():+.2f}, counted outside the clip range: {flagged}")
    assert flagged
    assert (ratio.grad.item() == 0) == (advantage > 0)

# %% [markdown]
# ## Answer 6: splitting by unordered pair
#
# *Question: why put 3+4 and 4+3 in the same split, and what does the held-out test still
# share with training?*
#
# If the two orders of a pair could land on different sides, a test question could be
# answered by recalling its commuted twin from training. Splitting unordered pairs keeps
# every pair on one side. What stays shared is the task itself and its symbols: every digit
# of a test question is also seen in training. The test asks for new combinations of
# familiar digits under a familiar rule.

# %%
answer_6 = EXERCISES[6]()
show(answer_6)
split = split_by_unordered_pair()
assert set(answer_6.values["overlaps"].values()) == {0}
assert sum(answer_6.values["sizes"].values()) == len(DIGITS) ** 2

# the alternative: shuffle ordered pairs into splits of the same sizes
ordered = [(a, b) for a in range(len(DIGITS)) for b in range(len(DIGITS))]
random.Random(6).shuffle(ordered)
n_train = len(split["train"])
naive_train = set(ordered[:n_train])
naive_test = ordered[len(ordered) - len(split["test"]):]
twins = sum((b, a) in naive_train for a, b in naive_test if a != b)
print(f"an ordered-pair shuffle puts the commuted twin of {twins} of its "
      f"{len(naive_test)} test questions in training")
assert twins > 0

train_digits = {d for pair in split["train"] for d in pair}
test_digits = {d for pair in split["test"] for d in pair}
new_answers = sorted({sum(p) for p in split["test"]} - {sum(p) for p in split["train"]})
print("test digits seen in training:", sorted(test_digits & train_digits),
      "| test answers never a training answer:", new_answers)
assert test_digits <= train_digits
assert new_answers  # some sums must be composed, never seen as a training target

# %% [markdown]
# ## Answer 7: accuracy and coverage
#
# *Question: two questions, four samples each. Before training one sample of each is
# right; after, all four samples of the first are right and none of the second. What
# happens to the number of right answers and to the number of questions covered?*
#
# Right answers double while coverage (questions with at least one right sample) halves:
# a policy can grow more accurate on what it already knows while losing questions it used
# to solve sometimes.

# %%
answer_7 = EXERCISES[7]()
show(answer_7)
before, after = answer_7.values["before"], answer_7.values["after"]
assert after["correct"] == 2 * before["correct"]
assert 2 * after["covered"] == before["covered"]

# %% [markdown]
# The same pattern in the bundled run: per seed, right sampled answers to held-out test
# questions (the plan's `eval_samples` per question) and questions covered, after SFT and
# after each RL arm. There is at least one seed where RL raised the right answers and still
# covered fewer questions.

# %%
sampled = {(e["seed"], e["stage"]): e["test"]["sampled"] for e in summary_for(record, plan)}
print("samples per test question:", plan.eval_samples)
narrowed = []
for seed in plan.seeds:
    base = sampled[seed, "initial"]
    print(f"seed {seed} after SFT: right {base['strict']} of {base['n']}, "
          f"covered {base['covered']} of {base['questions']}")
    for arm in CONTRACT_OF:
        got = sampled[seed, arm]
        print(f"seed {seed} after {arm:9}: right {got['strict']} of {got['n']}, "
              f"covered {got['covered']} of {got['questions']}")
        if got["strict"] > base["strict"] and got["covered"] < base["covered"]:
            narrowed.append((seed, arm))
print("more right answers, fewer questions covered:", narrowed)
assert narrowed

# %% [markdown]
# ## Answer 8: exact KL at visited prefixes
#
# *Question: training uses an exact KL to the SFT model, summed over the whole vocabulary
# at each position. Why is that still not the exact KL between the two models'
# distributions over whole answers?*
#
# Training sums over the vocabulary exactly, but only at positions reached by answers the
# old policy sampled, and which positions those are is itself random. Added up along one
# sampled answer, the result averages to the KL over whole answers, yet it changes from
# one answer to the next. The library computes the true sequence KL by enumerating every
# prefix up to the token budget and compares it with the per-prefix sums along sampled
# answers (and with the summed log-ratio, k1), for each RL arm of the first seed.

# %%
answer_8 = exercise_8(record, plan, RUN, prompts=2, samples=2000)
show(answer_8)
for values in answer_8.values.values():
    assert abs(values["prefix_mean"] - values["exact"]) < 5 * values["prefix_se"]
    assert values["prefix_min"] < values["exact"] < values["prefix_max"]
    assert values["k1_se"] > values["prefix_se"]

# %% [markdown]
# How few prefixes training visits: for each question of the first seed's `strict` arm,
# the distinct prefixes its RL rollouts passed through, against all prefixes a completion
# within the budget could pass through.

# %%
budget = plan.max_new_tokens
per_question = sum(len(DIGITS) ** k for k in range(budget))  # prefixes before EOS
visited = set()
for step in first_run.arms["strict"]:
    for row in step.rows:
        for end in range(min(len(row.text), budget - 1) + 1):
            visited.add((row.pair, row.text[:end]))
questions = len({pair for pair, _ in visited})
fraction = len(visited) / (questions * per_question)
print(f"{questions} questions, {per_question} possible prefixes each; visited "
      f"{len(visited)} in all ({fraction:.5f} of the possible)")
assert fraction < 0.01

# %% [markdown]
# ## Answer 9: ablations at matched compute
#
# *Question: how would you show what RL adds, beyond what more SFT would have given?*
#
# Compare pipelines that differ in one thing at a matched budget: SFT then RL, RL alone
# from untrained weights, and SFT alone continued for as many gradient steps as RL takes;
# several seeds, the same held-out evaluation. The short run below trains such a plan
# (a new version of the teaching plan, fewer RL steps, two seeds) into a temporary folder
# with `python -m postlab run`, then prints the library's ablation table. The table shows
# each stage's compute, so that "matched" is checked rather than assumed, and each result
# with its interval over seeds. Two seeds decide little: their interval is wide, or, when
# both seeds happen to move by the same amount, of zero width, which is no certainty at all.
# A real comparison trains more seeds.

# %%
rl_steps = 40
extra_sft = rl_steps * plan.updates_per_rollout  # as many gradient steps as RL's updates
arms = [{"name": "sft-then-rl", "pipeline": "sft-then-rl", "contract": "strict"},
        {"name": "rl-only", "pipeline": "rl-only", "contract": "strict"},
        {"name": "sft-more", "pipeline": "sft-only", "sft_steps": extra_sft}]
ablation = derive_plan(teaching_plan_loaded(),
                       ["seeds=[11, 22]", f"rl_steps={rl_steps}", f"arms={json.dumps(arms)}"],
                       today="2026-12-01")
with tempfile.TemporaryDirectory() as folder:
    plan_path, out = Path(folder) / "plan.json", Path(folder) / "run"
    freeze(plan_path, ablation)
    trained = subprocess.run([sys.executable, "-m", "postlab", "run", "--plan", str(plan_path),
                              "--out-dir", str(out), "--workers", "1", "--quiet"],
                             capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr
    answer_9 = RUN_EXERCISES[9](load_record(record_in(out)), load_plan(plan_path).model, out)
show(answer_9)
table = answer_9.values
sft = ablation["sft_steps"]
assert table["sft-more"]["gradient_steps"] == table["sft-then-rl"]["gradient_steps"]
assert table["sft-then-rl"]["gradient_steps"] == sft + extra_sft
assert table["rl-only"]["gradient_steps"] == extra_sft
assert table["sft-more"]["completions"] == 0 < table["rl-only"]["completions"]

# %% [markdown]
# ## Answer 10: a stricter contract, and what changing it means
#
# *Question: `strict` accepts `007` for 3+4. How would you make the rule stricter, and
# what must happen to results already reported under the old rule?*
#
# The `exact` contract also requires the output to be the decimal form of the sum, without
# leading zeros. A rule changed after training defines a new measurement rather than fixing
# the old one: the stored outputs stay as they are, both rules score them, and every figure
# says which rule it used.

# %%
answer_10 = EXERCISES[10]()
show(answer_10)
assert answer_10.values["007"] == {"strict": 1, "exact": 0}
assert answer_10.values["010"] == {"strict": 1, "exact": 0}
assert answer_10.values["7"] == {"strict": 1, "exact": 1}

before = json.dumps(one_document(record), sort_keys=True)
rescored = rescore(record, CONTRACT_OF, ["strict", "exact"])
assert json.dumps(one_document(record), sort_keys=True) == before  # the record is only read
for gap in rescored.gaps:
    print(f"bundled run, every evaluation answer: accepted by {gap.looser} and not by "
          f"{gap.stricter}: {gap.accepted_only_by_looser}, with leading zeros: "
          f"{gap.with_leading_zeros}")
gap = {(g.looser, g.stricter): g for g in rescored.gaps}
assert gap["exact", "strict"].accepted_only_by_looser == 0  # exact is never looser
loose = gap["strict", "exact"]
assert loose.accepted_only_by_looser == loose.with_leading_zeros  # all of it is spelling

# %% [markdown]
# Training on the new rule is another experiment: a new plan version whose parent is the
# teaching plan. Its hash differs, and postlab refuses to read the bundled record as if it
# had been trained under it.

# %%
new_plan = derive_plan(teaching_plan_loaded(), ['arms=["strict", "exact"]'],
                       today="2026-12-01")
new_loaded = parse_plan(plan_bytes(new_plan), "new plan")
print("new version", new_plan["version"], "changes", new_plan["parent"]["changes"],
      "| parent is the bundled plan:", new_plan["parent"]["sha256"] == plan_file.sha256)
assert new_plan["parent"]["sha256"] == record.plan_sha256 != new_loaded.sha256
try:
    check_plan_link(record, new_loaded, "bundled record")
except UserError as refusal:
    print("refused:", str(refusal)[:60], "...")
else:
    raise AssertionError("a record must not be read under a plan it was not trained on")
