"""Row-by-row comparison of two records of the same plan (``postlab reproduce``).

Both sides are walked, so a seed, stage, split, arm or step present in only one of them is a
difference too, as are the dynamic-sampling records, compute, SFT-only losses and checkpoint
hashes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from postlab.records.models import Record

PARTS = ("structure", "SFT losses", "evaluation rows", "rollout rows", "zero-variance counts",
         "update statistics", "dynamic sampling", "compute", "checkpoints")
MISSING = "(missing)"


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

    def sequence(self, part: str, where: str, old: Any, new: Any) -> None:
        old = old if isinstance(old, list) else []
        new = new if isinstance(new, list) else []
        for index in range(max(len(old), len(new))):
            a = old[index] if index < len(old) else MISSING
            b = new[index] if index < len(new) else MISSING
            self.item(part, f"{where}, row {index}", a, b)

    def keys(self, where: str, old: dict, new: dict) -> list[str]:
        """Keys of both sides in order; a key on one side only is a structural difference."""
        keys = list(old) + [k for k in new if k not in old]
        for key in keys:
            if (key in old) != (key in new):
                self.item("structure", f"{where} {key}", "present" if key in old else MISSING,
                          "present" if key in new else MISSING)
        return [k for k in keys if k in old and k in new]


def compare_records(recorded: Record, new: Record) -> Comparison:
    """Where two records' seeds differ, value by value as each record wrote them (a
    reproduction must give the same JSON: 63 and 63.0 differ, so entries are compared as read,
    ``data()``, not as typed)."""
    walk = _Walker()
    # by position, so a chunked record's seeds are read one pair at a time
    old_at = {seed: index for index, seed in enumerate(recorded.seed_order())}
    new_at = {seed: index for index, seed in enumerate(new.seed_order())}
    for seed in walk.keys("seed", old_at, new_at):
        old, fresh = recorded.runs[old_at[seed]].data(), new.runs[new_at[seed]].data()
        walk.sequence("SFT losses", f"seed {seed}, SFT loss", old.get("sft_loss"),
                      fresh.get("sft_loss"))
        for stage in walk.keys(f"seed {seed}, stage", old["evaluations"], fresh["evaluations"]):
            splits_old, splits_new = old["evaluations"][stage], fresh["evaluations"][stage]
            for split in walk.keys(f"seed {seed}, stage {stage}, split", splits_old, splits_new):
                for decoding in ("greedy", "sampled"):
                    walk.sequence("evaluation rows",
                                  f"seed {seed}, stage {stage}, split {split}, {decoding}",
                                  splits_old[split].get(decoding), splits_new[split].get(decoding))
        training_old, training_new = old.get("training", {}), fresh.get("training", {})
        for arm in walk.keys(f"seed {seed}, arm", training_old, training_new):
            history_old, history_new = training_old[arm], training_new[arm]
            for index in range(max(len(history_old), len(history_new))):
                a = history_old[index] if index < len(history_old) else {}
                b = history_new[index] if index < len(history_new) else {}
                where = f"seed {seed}, arm {arm}, step {index + 1}"
                if not a or not b:
                    walk.item("structure", where, "present" if a else MISSING,
                              "present" if b else MISSING)
                    continue
                walk.sequence("rollout rows", where, a["rows"], b["rows"])
                walk.item("zero-variance counts", f"{where}, zero_variance_groups",
                          a["zero_variance_groups"], b["zero_variance_groups"])
                walk.sequence("update statistics", f"{where}, update", a["updates"],
                              b["updates"])
                if "sampling" in a or "sampling" in b:
                    walk.item("dynamic sampling", f"{where}, sampling", a.get("sampling"),
                              b.get("sampling"))
        for key, part in (("arm_sft_loss", "SFT losses"), ("compute", "compute")):
            if key in old or key in fresh:
                walk.item(part, f"seed {seed}, {key}", old.get(key), fresh.get(key))
        checkpoints_old, checkpoints_new = old.get("checkpoints", {}), fresh.get("checkpoints", {})
        # Checkpoint bytes are postlab's own layout: compare hashes only between its records.
        fields = ("sha256", "reload_equal") if recorded.made_by_postlab else ("reload_equal",)
        for stage in walk.keys(f"seed {seed}, checkpoint", checkpoints_old, checkpoints_new):
            for field in fields:
                walk.item("checkpoints", f"seed {seed}, stage {stage} checkpoint {field}",
                          checkpoints_old[stage].get(field), checkpoints_new[stage].get(field))
    return Comparison(first=walk.first, differing={p: walk.differing[p] for p in PARTS},
                      compared={p: walk.compared[p] for p in PARTS})


def render_comparison(result: Comparison) -> str:
    if result.identical:
        total = sum(result.compared.values())
        return f"identical: {total} rows and statistics compared, none differ\n"
    lines = [f"DIFFERENT: first divergence at {result.first}"]
    for part in PARTS:
        if result.compared[part] or result.differing[part]:
            lines.append(f"  {part}: {result.differing[part]} of {result.compared[part]} differ")
    return "\n".join(lines) + "\n"
