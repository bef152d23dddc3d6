"""Write the study's plans (run once, before training; refuses to overwrite).

    python studies/gspo-and-controls/make_plans.py            # part 1: grpo, gspo
    python studies/gspo-and-controls/make_plans.py random     # part 2: the random control

Both are versions of the teaching plan with 256 seeds and three arms: strict, substring and
format (paid for a well-formed answer whatever its value), format the control. ``grpo.json``
keeps the teaching plan's token-level PPO clip; ``gspo.json`` changes the policy loss to GSPO
as its paper runs it (sequence-level ratio clipped to [1 - 3e-4, 1 + 4e-4], mean per sequence).
"""

from __future__ import annotations

import json
from pathlib import Path

from postlab.plan.frozen import derive_plan, freeze, teaching_plan_loaded

HERE = Path(__file__).resolve().parent
DATE = "2026-12-07"
SEEDS = list(range(1, 257))
FORMAT_RULE = "terminated, nonempty ASCII digits, whatever their value (a control)"
HYPOTHESES = {"alpha": 0.05, "tests": [
    {"id": "strict-over-control",
     "statement": "RL under strict raises held-out sampled strict success above the "
                  "format-only control's by more than 0.01",
     "metric": "success", "compare": {"stage": "strict", "split": "test",
                                      "versus_stage": "format"},
     "direction": "increase", "margin": 0.01},
    {"id": "substring-over-control",
     "statement": "RL under substring raises held-out sampled strict success above the "
                  "format-only control's by more than 0.01",
     "metric": "success", "compare": {"stage": "substring", "split": "test",
                                      "versus_stage": "format"},
     "direction": "increase", "margin": 0.01},
    {"id": "substring-games",
     "statement": "RL under substring widens the held-out hacking gap (substring acceptance "
                  "minus strict success) over the SFT model's by more than 0.01",
     "metric": "hacking_gap", "compare": {"stage": "substring", "split": "test",
                                          "versus_stage": "initial"},
     "direction": "increase", "margin": 0.01},
]}
#: Part 2, registered after part 1's results and before its own training: the random control
#: the study asked for, once postlab had one (Spurious Rewards pays half the rows at random).
RANDOM_RULE = ("each rollout row paid 1 with probability random_rate from the run's random "
               "stream, whatever it says (a control)")
RANDOM_HYPOTHESES = {"alpha": 0.05, "tests": [
    {"id": f"{arm}-over-random",
     "statement": f"RL under {arm} raises held-out sampled strict success above the "
                  "random-reward control's by more than 0.01",
     "metric": "success", "compare": {"stage": arm, "split": "test", "versus_stage": "random"},
     "direction": "increase", "margin": 0.01} for arm in ("strict", "substring")] + [
    {"id": "random-raises-success",
     "statement": "RL under the random reward raises held-out sampled strict success above "
                  "the SFT model's by more than 0.01 (what Spurious Rewards found on one "
                  "model family)",
     "metric": "success", "compare": {"stage": "random", "split": "test",
                                      "versus_stage": "initial"},
     "direction": "increase", "margin": 0.01}]}
RANDOM = {"seeds": SEEDS, "arms": ["strict", "substring", "random"], "control": "random",
          "random_rate": 0.5, "hypotheses": RANDOM_HYPOTHESES}
BASE = {"seeds": SEEDS, "arms": ["strict", "substring", "format"], "control": "format",
        "hypotheses": HYPOTHESES}
GSPO = {"policy_loss": "gspo", "clip": 0.0003, "clip_high": 0.0004,
        "loss_reduction": "seq-mean-token-mean"}


def settings(changes: dict) -> list[str]:
    return [f"{key}={json.dumps(value)}" for key, value in changes.items()]


def main(part: str = "") -> None:
    teaching = teaching_plan_loaded()
    if part == "random":
        rewards = dict(teaching.model.rewards, random=RANDOM_RULE)
        plans = (("grpo-random", RANDOM), ("gspo-random", RANDOM | GSPO))
    else:
        rewards = dict(teaching.model.rewards, format=FORMAT_RULE)
        plans = (("grpo", BASE), ("gspo", BASE | GSPO))
    for name, changes in plans:
        freeze(HERE / f"{name}.json",
               derive_plan(teaching, settings(changes | {"rewards": rewards}), DATE))
        print(f"wrote {name}.json")


if __name__ == "__main__":
    import sys

    main(*sys.argv[1:2])
