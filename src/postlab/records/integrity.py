"""Digests of a record's raw parts, taken when they are produced.

A record carries, per seed, the sha256 of its SFT losses, of each evaluation split and of each
RL step's rollout rows and update statistics. ``postlab verify`` recomputes them, so an edited
or damaged row is found and named (seed, arm, step) even though it cannot be re-derived without
training again. They guard against accidents and careless edits, not against someone who
rewrites the digests as well: for that, compare with ``postlab reproduce``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest(value: Any) -> str:
    """sha256 of a value's canonical JSON (compact, keys in order, floats round-tripped)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _well_formed(recorded: Any) -> bool:
    if not isinstance(recorded, dict) or not isinstance(recorded.get("evaluations"), dict):
        return False
    if not isinstance(recorded.get("training"), dict):
        return False
    stages_ok = all(isinstance(v, dict) for v in recorded["evaluations"].values())
    steps_ok = all(isinstance(steps, list) and all(isinstance(s, dict) for s in steps)
                   for steps in recorded["training"].values())
    return stages_ok and steps_ok


def run_digests(run: dict[str, Any]) -> dict[str, Any]:
    """The digests of one seed's entry in a record."""
    digests = {
        "sft_loss": digest(run["sft_loss"]),
        "evaluations": {stage: {split: digest(decoded) for split, decoded in splits.items()}
                        for stage, splits in run["evaluations"].items()},
        "training": {arm: [{"rows": digest(step["rows"]),
                            "statistics": digest([step["zero_variance_groups"],
                                                  step["updates"]])}
                          | ({"sampling": digest(step["sampling"])} if "sampling" in step
                             else {})
                           for step in history]
                     for arm, history in run["training"].items()},
    }
    for key in ("arm_sft_loss", "compute"):
        if key in run:
            digests[key] = digest(run[key])
    return digests


def compare_digests(run: dict[str, Any], recorded: Any) -> list[str]:
    """Where a seed's parts no longer match the digests taken at training time."""
    seed = run["seed"]
    if not _well_formed(recorded):
        return [f"seed {seed}: the digests themselves are damaged"]
    if "sft_loss" not in run or "training" not in run:
        return [f"seed {seed}: the record lacks the parts its digests cover"]
    problems = []
    current = run_digests(run)
    if current["sft_loss"] != recorded.get("sft_loss"):
        problems.append(f"seed {seed}: SFT losses")
    for key, label in (("arm_sft_loss", "SFT-only arms' losses"), ("compute", "compute")):
        if current.get(key) != recorded.get(key):
            problems.append(f"seed {seed}: {label}")
    for stage, splits in current["evaluations"].items():
        for split, value in splits.items():
            if value != recorded.get("evaluations", {}).get(stage, {}).get(split):
                problems.append(f"seed {seed}, stage {stage}, split {split}: evaluation rows")
    for arm, steps in current["training"].items():
        old_steps = recorded.get("training", {}).get(arm, [])
        if len(old_steps) != len(steps):
            problems.append(f"seed {seed}, arm {arm}: {len(steps)} RL steps, digests for "
                            f"{len(old_steps)}")
            continue
        for index, (now, then) in enumerate(zip(steps, old_steps, strict=True)):
            for part, label in (("rows", "rollout rows"), ("statistics", "update statistics"),
                                ("sampling", "dynamic-sampling record")):
                if now.get(part) != then.get(part):
                    problems.append(f"seed {seed}, arm {arm}, step {index + 1}: {label}")
    return problems
