"""Checks that a valid plan can be trained by this engine, beyond the plan's field types."""

from __future__ import annotations

from typing import Any

from postlab.contracts import CONTRACTS
from postlab.errors import UserError

SUPPORTED_TASKS = ("single_digit_addition",)


def check_trainable(plan: dict[str, Any], source: str) -> None:
    """Raise UserError naming the first field that this engine cannot train."""
    def fail(field: str, why: str) -> None:
        raise UserError(f"{source}: {field}: {why}")

    if plan["task"] not in SUPPORTED_TASKS:
        fail("task", f"unknown task {plan['task']!r}; known: {', '.join(SUPPORTED_TASKS)}")
    for arm in plan["arms"]:
        if arm not in CONTRACTS:
            fail("arms", f"unknown reward contract {arm!r}; known: "
                         f"{', '.join(sorted(CONTRACTS.names()))}")
    if len(set(plan["arms"])) != len(plan["arms"]) or "initial" in plan["arms"]:
        fail("arms", "arm names must be unique and not 'initial'")
    vocab = plan["vocab"]
    for name in ("eos", "pad"):
        if len(plan[name]) != 1 or plan[name] not in vocab:
            fail(name, f"must be one character of vocab {vocab!r}")
    if plan["eos"] == plan["pad"]:
        fail("pad", "must differ from eos")
    missing = sorted(set("0123456789+=") - set(vocab))
    if missing:
        fail("vocab", f"lacks characters the task needs: {''.join(missing)}")
    if len(set(vocab)) != len(vocab):
        fail("vocab", "has repeated characters")
    if "train" not in plan["split"] or "test" not in plan["split"]:
        fail("split", "needs at least 'train' and 'test'")
    for split, pairs in plan["split"].items():
        if not pairs:
            fail(f"split.{split}", "is empty")
        for pair in pairs:
            if len(pair) != 2 or not all(0 <= v <= 9 for v in pair):
                fail(f"split.{split}", f"{pair} is not a pair of single digits")
    if not plan["seeds"] or len(set(plan["seeds"])) != len(plan["seeds"]):
        fail("seeds", "must be a non-empty list of distinct seeds")
    for name in ("embedding", "hidden", "threads", "sft_steps", "sft_batch", "rl_steps",
                 "prompts_per_step", "group_size", "updates_per_rollout", "max_new_tokens",
                 "eval_samples"):
        if plan[name] < 1:
            fail(name, f"must be at least 1, got {plan[name]}")
    for name in ("sft_lr", "rl_lr", "temperature", "gradient_clip"):
        if not plan[name] > 0:
            fail(name, f"must be positive, got {plan[name]}")
    if not 0 < plan["clip"] < 1:
        fail("clip", f"must lie in (0, 1), got {plan['clip']}")
    if plan["kl_beta"] < 0:
        fail("kl_beta", f"must not be negative, got {plan['kl_beta']}")
    if plan["max_new_tokens"] < 3:
        fail("max_new_tokens", "must leave room for a two-digit sum and EOS (at least 3)")
