"""Row-by-row comparison of two records of the same plan (``postlab reproduce``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

PARTS = ("SFT losses", "evaluation rows", "rollout rows", "zero-variance counts",
         "update statistics", "checkpoint reloads")


@dataclass(frozen=True, kw_only=True)
class Comparison:
    first: str | None  # where the records first diverge, with both values; None if identical
    differing: dict[str, int]  # part -> how many entries differ
    compared: dict[str, int]  # part -> how many entries were compared

    @property
    def identical(self) -> bool:
        return self.first is None


class _Walker:
    def __init__(self) -> None:
        self.first: str | None = None
        self.differing: Counter[str] = Counter()
        self.compared: Counter[str] = Counter()

    def item(self, part: str, where: str, old: Any, new: Any) -> None:
        self.compared[part] += 1
        if old != new:
            self.differing[part] += 1
            if self.first is None:
                self.first = f"{where}: recorded {old!r}, new {new!r}"

    def sequence(self, part: str, where: str, old: list, new: list) -> None:
        for index in range(max(len(old), len(new))):
            a = old[index] if index < len(old) else "(missing)"
            b = new[index] if index < len(new) else "(missing)"
            self.item(part, f"{where}, row {index}", a, b)


def compare_records(recorded: dict[str, Any], new: dict[str, Any]) -> Comparison:
    walk = _Walker()
    new_runs = {run["seed"]: run for run in new["runs"]}
    for run in recorded["runs"]:
        seed = run["seed"]
        other = new_runs.get(seed)
        if other is None:
            walk.item("SFT losses", f"seed {seed}", "present", "missing")
            continue
        walk.sequence("SFT losses", f"seed {seed}, SFT loss", run["sft_loss"],
                      other["sft_loss"])
        for stage, splits in run["evaluations"].items():
            for split, decoded in splits.items():
                for decoding, rows in decoded.items():
                    fresh = other["evaluations"].get(stage, {}).get(split, {}).get(decoding, [])
                    walk.sequence("evaluation rows",
                                  f"seed {seed}, stage {stage}, split {split}, {decoding}",
                                  rows, fresh)
        for arm, history in run["training"].items():
            fresh_history = other["training"].get(arm, [])
            for index, step in enumerate(history):
                fresh = fresh_history[index] if index < len(fresh_history) else {}
                where = f"seed {seed}, arm {arm}, step {step['step']}"
                walk.sequence("rollout rows", where, step["rows"], fresh.get("rows", []))
                walk.item("zero-variance counts", f"{where}, zero_variance_groups",
                          step["zero_variance_groups"], fresh.get("zero_variance_groups"))
                walk.sequence("update statistics", f"{where}, update",
                              step["updates"], fresh.get("updates", []))
        for stage, info in run.get("checkpoints", {}).items():
            walk.item("checkpoint reloads", f"seed {seed}, stage {stage}, reload_equal",
                      info.get("reload_equal"),
                      other.get("checkpoints", {}).get(stage, {}).get("reload_equal"))
    return Comparison(first=walk.first, differing={p: walk.differing[p] for p in PARTS},
                      compared={p: walk.compared[p] for p in PARTS})


def render_comparison(result: Comparison) -> str:
    if result.identical:
        total = sum(result.compared.values())
        return f"identical: {total} rows and statistics compared, none differ\n"
    lines = [f"DIFFERENT: first divergence at {result.first}"]
    for part in PARTS:
        lines.append(f"  {part}: {result.differing[part]} of {result.compared[part]} differ")
    return "\n".join(lines) + "\n"
