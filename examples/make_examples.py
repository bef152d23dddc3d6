"""Write the example plans: each one is a version of the teaching plan that changes one choice.

    python examples/make_examples.py      (refuses to overwrite; delete the JSON files first)

Every example keeps two seeds; the GRU ones keep 80 RL steps so that each trains in well under
a minute on a 2-core machine, and the two transformer ones (which need the transformers extra)
take 40 RL steps on one arm and about a minute. The README beside this file says what question
each one asks.
"""

from __future__ import annotations

import json
from pathlib import Path

from postlab.jsonio import dump_json, publish_bytes
from postlab.plan.frozen import (
    derive_plan,
    freeze,
    split_by_unordered_pair,
    teaching_plan,
    teaching_plan_loaded,
)
from postlab.plan.schema import Plan
from postlab.tasks.registry import TASKS

HERE = Path(__file__).resolve().parent
DATE = "2026-11-29"
FAST = {"seeds": [11, 22], "rl_steps": 80}


def settings(changes: dict) -> list[str]:
    return [f"{key}={json.dumps(value)}" for key, value in changes.items()]


def multi_digit_split() -> dict:
    plan = Plan.of(teaching_plan() | {"task": "multi_digit_addition", "operand_digits": 2})
    pairs = TASKS["multi_digit_addition"](plan).unordered_pairs()
    return split_by_unordered_pair(seed=7, sizes=(600, 60, 60), pairs=pairs)


#: A tiny causal LM learns two-digit addition from the multi-digit example's 600 pairs; on the
#: teaching plan's 63 single-digit pairs it memorises them and stays near chance held out.
TRANSFORMER = {"task": "multi_digit_addition", "operand_digits": 2, "split": multi_digit_split(),
               "max_new_tokens": 4, "rl_steps": 40, "arms": ["strict"], "eval_samples": 4,
               "sft_steps": 2000, "sft_lr": 0.002}

#: Agents: the teaching questions asked as episodes with a tool (``agents/``). SFT shows one
#: call and its output before the answer; eight seeds, so that a gap has an interval.
AGENT_BASE = {"seeds": [11, 22, 33, 44, 55, 66, 77, 88], "sft_steps": 3000, "rl_steps": 200,
              "max_new_tokens": 18}
STRICT_WORDS = "the final answer (after the last tool output) is strict: EOS, digits only, " \
               "equal to a+b"
CALCULATOR = AGENT_BASE | {
    "vocab": "0123456789+=~_<>/calotreu*()-",
    "agent": {"tools": ["calc"], "turns": 3, "calls": 2},
    "arms": ["episode-strict", "episode-anywhere"],
    "rewards": {"episode-strict": STRICT_WORDS,
                "episode-anywhere": "the decimal a+b appears anywhere in the episode, tool "
                                    "outputs (and the policy's own call) included"}}


def checker(budget: int) -> dict:
    """The checker, paid per successful call: its own budget caps what calling it earns."""
    return AGENT_BASE | {
        "vocab": "0123456789+=~_<>/chekoutrigwn",
        "agent": {"tools": ["check"], "turns": 4, "calls": 3,
                  "tool_budgets": {"check": budget}},
        "arms": ["episode-strict", "per-call"],
        "rewards": {"episode-strict": STRICT_WORDS,
                    "per-call": "each tool call answered without error pays 1/3 (the call "
                                "budget), whatever the answer"}}


EXAMPLES = {
    "loss-seq-mean-token-mean": {"loss_reduction": "seq-mean-token-mean"},
    "loss-constant-normaliser": {"loss_reduction": "constant-normaliser"},
    "advantage-mean-only": {"advantage": "mean-only"},
    "advantage-leave-one-out": {"advantage": "leave-one-out"},
    "advantage-group-mean-batch-std": {"advantage": "group-mean-batch-std"},
    "kl-k1": {"kl": "k1"},
    "kl-k3": {"kl": "k3"},
    "kl-none": {"kl": "none"},
    "clip-higher": {"clip_high": 0.28},
    # the policy losses in the ranges their papers use: GSPO clips a sequence's geometric-mean
    # ratio in a narrow band (3e-4 / 4e-4) and averages per sequence; CISPO sets no effective
    # lower bound on its weight and tunes the upper one; SAPO's temperatures are the paper's
    "policy-gspo": {"policy_loss": "gspo", "clip": 0.0003, "clip_high": 0.0004,
                    "loss_reduction": "seq-mean-token-mean"},
    "policy-cispo": {"policy_loss": "cispo", "clip": 0.99, "clip_high": 0.28},
    "policy-sapo": {"policy_loss": "sapo", "sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05,
                    "loss_reduction": "seq-mean-token-mean"},
    "dynamic-sampling": {"dynamic_sampling": {"max_extra_groups": 8}},
    "dynamic-sampling-drop": {"dynamic_sampling": {"max_extra_groups": 8,
                                                   "constant_groups": "drop"}},
    "contract-exact": {"arms": ["strict", "exact"], "rewards": {
        "strict": "terminated, nonempty ASCII digits, integer equals a+b; leading zeros allowed",
        "exact": "terminated and the text equals str(a+b): no leading zeros"}},
    # a control arm: paid for the answer's form, not its value; reports compare the others
    # with it
    "control-format": {"arms": ["strict", "substring", "format"], "control": "format",
                       "rewards": {
                           "strict": "terminated, nonempty ASCII digits, integer equals a+b; "
                                     "leading zeros allowed",
                           "substring": "decimal str(a+b) occurs anywhere, even without EOS",
                           "format": "terminated, nonempty ASCII digits, whatever their "
                                     "value (a control)"}},
    # the control Spurious Rewards used: paid at random, half the rows, whatever they say
    "control-random": {"arms": ["strict", "substring", "random"], "control": "random",
                       "random_rate": 0.5, "rewards": {
                           "strict": "terminated, nonempty ASCII digits, integer equals a+b; "
                                     "leading zeros allowed",
                           "substring": "decimal str(a+b) occurs anywhere, even without EOS",
                           "random": "each rollout row paid 1 with probability random_rate "
                                     "from the run's random stream, whatever it says (a "
                                     "control)"}},
    "arms-pipelines": {"arms": [
        {"name": "sft-then-rl", "pipeline": "sft-then-rl", "contract": "strict"},
        {"name": "rl-only", "pipeline": "rl-only", "contract": "strict"},
        # 80 RL steps x 2 updates = 160 gradient steps; the SFT-only arm gets as many.
        {"name": "sft-more", "pipeline": "sft-only", "sft_steps": 160},
    ]},
    "arms-demonstrations": {"arms": [
        {"name": "sft-then-rl", "pipeline": "sft-then-rl", "contract": "strict"},
        {"name": "rl-only", "pipeline": "rl-only", "contract": "strict"},
        {"name": "sft-more", "pipeline": "sft-only", "sft_steps": 160},
        # the SFT again from the same weights, as many steps and demonstrations, chosen by
        # difficulty (answer 9: random against by-difficulty selection)
        {"name": "easiest-first", "pipeline": "sft-selected", "selection": "easiest-first"},
        {"name": "hardest-only", "pipeline": "sft-selected", "selection": "hardest-only"},
    ]},
    "task-multi-digit-addition": {"task": "multi_digit_addition", "operand_digits": 2,
                                  "split": multi_digit_split(), "max_new_tokens": 4,
                                  "hidden": 64, "sft_steps": 400},
    "task-multiplication": {"task": "single_digit_multiplication",
                            "vocab": "0123456789*=~_", "rewards": {
                                "strict": "terminated, nonempty ASCII digits, integer equals "
                                          "a*b; leading zeros allowed",
                                "substring": "decimal str(a*b) occurs anywhere, even without "
                                             "EOS"}},
    "transformer-gpt2": TRANSFORMER | {"policy": {
        "kind": "transformer", "architecture": "gpt2", "layers": 2, "heads": 4, "width": 64,
        "max_positions": 12}},
    "transformer-llama": TRANSFORMER | {"policy": {
        "kind": "transformer", "architecture": "llama", "layers": 2, "heads": 4, "width": 64,
        "intermediate": 128, "max_positions": 12}},
    "agents/calculator": CALCULATOR,
    "agents/checker-budget-1": checker(1),
    "agents/checker-budget-3": checker(3),
}


#: Three questions about the teaching setting itself (three seeds, every step), fixed before
#: its training: on the bundled teaching run the first is confirmed, the second refuted and the
#: third inconclusive (Holm across the three at alpha 0.05).
HYPOTHESES = {"alpha": 0.05, "tests": [
    {"id": "coverage-narrows",
     "statement": "RL under the gameable substring contract lowers held-out coverage at 16 "
                  "samples by more than 0.02",
     "metric": "coverage",
     "compare": {"stage": "substring", "split": "test", "versus_stage": "initial"},
     "direction": "decrease", "margin": 0.02},
    {"id": "strict-gains",
     "statement": "RL under strict raises sampled held-out strict success by more than 0.10",
     "metric": "success",
     "compare": {"stage": "strict", "split": "test", "versus_stage": "initial"},
     "direction": "increase", "margin": 0.10},
    {"id": "strict-coverage",
     "statement": "RL under strict lowers held-out coverage by more than 0.05",
     "metric": "coverage",
     "compare": {"stage": "strict", "split": "test", "versus_stage": "initial"},
     "direction": "decrease", "margin": 0.05},
]}

#: Versions of the whole teaching plan (not shortened): their questions are about it.
TEACHING_EXAMPLES = {"hypotheses": {"hypotheses": HYPOTHESES}}

#: A sweep (not a plan): kl_beta at three values on the shortened teaching plan, two seeds,
#: for `postlab sweep examples/sweeps/kl-beta.json --out-dir sweeps/kl`.
SWEEP_BASE = "sweeps/fast-teaching"
SWEEPS = {"sweeps/kl-beta": {"base": "fast-teaching.json", "seeds": [1, 2],
                             "grid": {"kl_beta": [0.0, 0.03, 0.1]}}}

#: The same questions on their own, for a report of the bundled teaching run, which was trained
#: before they were written: ``postlab report --hypotheses examples/hypotheses/teaching.json``
#: decides them as exploratory.
SECTIONS = {"hypotheses/teaching": HYPOTHESES}


def main() -> None:
    teaching = teaching_plan_loaded()
    for name, changes in EXAMPLES.items():
        data = derive_plan(teaching, settings(FAST | changes), DATE)
        freeze(HERE / f"{name}.json", data)
        print(f"wrote examples/{name}.json")
    for name, changes in TEACHING_EXAMPLES.items():
        freeze(HERE / f"{name}.json", derive_plan(teaching, settings(changes), DATE))
        print(f"wrote examples/{name}.json")
    freeze(HERE / f"{SWEEP_BASE}.json", derive_plan(teaching, settings(FAST), DATE))
    print(f"wrote examples/{SWEEP_BASE}.json")
    for name, sweep in SWEEPS.items():
        publish_bytes(HERE / f"{name}.json", dump_json(sweep, indent=2))
        print(f"wrote examples/{name}.json")
    for name, section in SECTIONS.items():
        publish_bytes(HERE / f"{name}.json", dump_json(section, indent=2))
        print(f"wrote examples/{name}.json")


if __name__ == "__main__":
    main()
