"""Which seeds of a chunked record are proven to fit their plan, by array comparisons over a

batch of seeds (:mod:`postlab.records.columns`), so that a reader of many seeds need not
build each seed's entry in Python to check it.

The per-seed checks (``records.models``: the entry's structure; ``records.conformance``:
that it can be read under its plan, that it fits the plan, that it is whole) are the
specification. The check here is only sufficient: a seed it proves holds exactly the parts,
stages, splits, questions, arms, steps, rows per step, groups, updates and checkpoint entries
its plan makes, with every value in range, so every per-seed check would pass it. A seed it
does not prove is read and checked the per-seed way, which names what is wrong (or passes
it: this check may be stricter, never looser). Plans with dynamic sampling are left to the
per-seed checks.

The digests are compared apart, from the same flat tables
(:func:`~postlab.records.integrity.table_digests`); a seed must pass both to be proven
(:func:`~postlab.records.columns.not_proven`). A value that cannot be what a postlab record
holds (a null where a chunk's column may hold one, a layout that is not postlab's) leaves its
seed unproven, never fails here: the per-seed checks say what is wrong with it.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from postlab.errors import UserError
from postlab.records.chunk_codec import ROW_LIMITS

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

#: Parts of a seed's entry every postlab record carries (``conformance.run_missing_parts``).
WHOLE_PARTS = frozenset({"seed", "sft_loss", "evaluations", "training", "checkpoints",
                         "compute", "digests"})
#: The parts an entry may hold besides (``records.chunk_codec.RUN_KEYS``), a step's parts
#: where the plan samples plainly, and an update's statistics: a layout naming others is
#: rebuilt into an entry the per-seed checks refuse.
OPTIONAL_PARTS = frozenset({"arm_sft_loss"})
STEP_PARTS = frozenset({"step", "rows", "zero_variance_groups", "updates"})
UPDATE_PARTS = frozenset({"loss", "gradient_norm_before_clip", "kl", "entropy",
                          "ratio_outside_clip"})
MAX_SEED = 2**62
MAX_COUNT = 10**15
SHA256 = re.compile(r"[0-9a-f]{64}")


def _stages(plan: Plan) -> list[str]:
    from postlab.plan.arms import arm_names

    return ["initial", *arm_names(plan)]


def _template(plan: Plan) -> dict[str, Any]:
    """What every seed of the plan holds, as arrays to compare a batch with."""
    from postlab.plan.arms import arm_specs

    stages = _stages(plan)
    labels, a, b, block_of_row = [], [], [], []
    for stage in stages:
        for split, pairs in plan.split.items():
            for decoding, times in (("greedy", 1), ("sampled", plan.eval_samples)):
                block_of_row += [len(labels)] * (times * len(pairs))
                labels.append((stage, split, decoding))
                for pair in pairs:
                    a += [pair[0]] * times
                    b += [pair[1]] * times
    rl_arms = [arm.name for arm in arm_specs(plan) if arm.is_rl]
    sft_only = [(arm.name, arm.own_sft_steps(plan)) for arm in arm_specs(plan)
                if not arm.is_rl]
    return {"stages": stages, "labels": labels, "a": np.array(a, dtype=np.int64),
            "block_of_row": np.array(block_of_row, dtype=np.int64),
            "b": np.array(b, dtype=np.int64), "rl_arms": rl_arms, "sft_only": sft_only,
            "steps": np.arange(1, plan.rl_steps + 1, dtype=np.int64)}


def _rows_in_range(a: Any, b: Any, text: Any, terminated: Any) -> bool:
    if any(column.null_count for column in (a, b, text, terminated)):
        return False
    for operand in (a, b):
        if len(operand) and not (pc.min(operand).as_py() >= 0
                                 and pc.max(operand).as_py() <= ROW_LIMITS["operand"]):
            return False
    return not len(text) or pc.max(pc.utf8_length(text)).as_py() <= ROW_LIMITS["text"]


def _finite(values: np.ndarray, low: float = -math.inf, high: float = math.inf) -> bool:
    return bool(np.all(np.isfinite(values) & (values >= low) & (values <= high)))


def unproven_seeds(tables: Any, plan: Plan, folder: Path | None) -> list[int]:
    """The seeds of a batch (:class:`~postlab.records.columns.RowTables`) this check cannot
    prove fit their plan; ``folder``: the run folder, whose checkpoint files must be there
    (None: a record read alone)."""
    seeds = list(tables.seeds)
    if plan.dynamic_sampling is not None or not seeds:
        return seeds
    template = _template(plan)
    count = len(seeds)
    if not _batch_fits(tables, plan, template, count):
        return seeds
    runs = tables.runs
    unproven = []
    stages = template["stages"]
    for run in runs.select(["seed", "layout", "sft_loss", "arms", "checkpoints",
                            "arm_sft_loss", "compute", "digests"]).to_pylist():
        try:
            fits = _seed_fits(run, plan, template, stages, folder)
        except (TypeError, KeyError, ValueError, AttributeError, UserError):
            fits = False  # a null or a foreign layout: the per-seed checks name it
        if not fits:
            unproven.append(run["seed"])
    return unproven


def _batch_fits(tables: Any, plan: Plan, template: dict[str, Any],
                count: int) -> bool:
    """Everything a batch's rows, blocks and steps must be, for all its seeds at once."""
    evaluations, rollouts, steps = tables.evaluations, tables.rollouts, tables.steps
    blocks, labels = tables.blocks, template["labels"]
    if blocks.num_rows != count * len(labels):
        return False
    if list(zip(*(blocks.column(k).to_pylist() for k in ("stage", "split", "decoding")),
                strict=True)) != labels * count:
        return False
    if not np.array_equal(blocks.column("seed").to_numpy(),
                          np.repeat(np.array(tables.seeds, dtype=np.int64), len(labels))):
        return False
    width = len(template["a"])
    if evaluations.num_rows != count * width:
        return False
    if not np.array_equal(evaluations.column("block_id").to_numpy(),
                          np.tile(template["block_of_row"], count)
                          + np.repeat(np.arange(count) * len(labels), width)):
        return False
    for name in ("a", "b"):
        values = evaluations.column(name).to_numpy().reshape(count, width)
        if not np.all(values == template[name]):
            return False
    if not _rows_in_range(*(evaluations.column(k) for k in ("a", "b", "text", "terminated"))):
        return False

    arms, rl_steps = template["rl_arms"], plan.rl_steps
    per_step = plan.prompts_per_step * plan.group_size
    if steps.num_rows != count * len(arms) * rl_steps:
        return False
    if steps.column("arm").to_pylist() != [arm for _ in range(count) for arm in arms
                                           for _ in range(rl_steps)]:
        return False
    if not np.array_equal(steps.column("seed").to_numpy(), np.repeat(
            np.array(tables.seeds, dtype=np.int64), len(arms) * rl_steps)):
        return False  # each seed's own arms and steps, not a neighbour's
    if not np.all(steps.column("step").to_numpy().reshape(-1, rl_steps) == template["steps"]):
        return False
    if steps.column("sampling").null_count != steps.num_rows:
        return False
    zero_variance = steps.column("zero_variance_groups").to_numpy()
    if not np.all((zero_variance >= 0) & (zero_variance <= MAX_COUNT)):
        return False
    updates = steps.column("updates").combine_chunks()
    lengths = updates.value_lengths().to_numpy(zero_copy_only=False)
    # (a plan that samples dynamically, whose steps may have no update, is not proven here)
    expected = np.full(len(lengths), plan.updates_per_rollout)
    if updates.null_count or not np.array_equal(lengths, expected):
        return False
    flat = updates.flatten()
    if flat.null_count or any(flat.field(k).null_count for k in
                              ("loss", "kl", "entropy", "gradient_norm_before_clip",
                               "ratio_outside_clip")):
        return False
    if not (_finite(flat.field("loss").to_numpy()) and _finite(flat.field("kl").to_numpy())
            and _finite(flat.field("entropy").to_numpy(), 0.0)
            and _finite(flat.field("gradient_norm_before_clip").to_numpy(), 0.0)
            and _finite(flat.field("ratio_outside_clip").to_numpy(), 0.0, 1.0)):
        return False

    if rollouts.num_rows != steps.num_rows * per_step:
        return False
    if not np.array_equal(rollouts.column("step_id").to_numpy(),
                          np.repeat(np.arange(steps.num_rows), per_step)):
        return False
    for name in ("a", "b"):
        grouped = rollouts.column(name).to_numpy().reshape(-1, plan.group_size)
        if not np.all(grouped == grouped[:, :1]):
            return False
    return _rows_in_range(*(rollouts.column(k) for k in ("a", "b", "text", "terminated")))


@lru_cache(maxsize=4096)
def _is_sha(value: str) -> bool:
    return SHA256.fullmatch(value) is not None


def _seed_fits(run: dict[str, Any], plan: Plan, template: dict[str, Any],
               stages: list[str], folder: Path | None) -> bool:
    """Everything one seed's small parts must be."""
    from postlab.jsonio import parse_json
    from postlab.policies.checkpoint import checkpoint_name

    seed = run["seed"]
    if not 0 <= seed <= MAX_SEED or run["digests"] is None:
        return False
    layout = parse_json(run["layout"], "layout")
    if not isinstance(layout, dict) or not isinstance(layout.get("run"), list):
        return False
    parts = set(layout["run"])
    if (not parts >= WHOLE_PARTS or not parts <= WHOLE_PARTS | OPTIONAL_PARTS
            or len(parts) != len(layout["run"]) or set(layout.get("step", ())) != STEP_PARTS
            or len(layout["step"]) != len(STEP_PARTS)
            or set(layout.get("update", ())) != UPDATE_PARTS
            or len(layout["update"]) != len(UPDATE_PARTS) or layout.get("sampling")):
        return False
    if run["arms"] != template["rl_arms"]:
        return False
    losses = run["sft_loss"]
    if len(losses) != plan.sft_steps or not all(math.isfinite(v) for v in losses):
        return False
    extra = [(entry["arm"], len(entry["losses"])) for entry in run["arm_sft_loss"]]
    if extra != template["sft_only"] or not all(
            math.isfinite(v) for entry in run["arm_sft_loss"] for v in entry["losses"]):
        return False
    if ("arm_sft_loss" not in layout["run"]) and template["sft_only"]:
        return False
    compute = run["compute"]
    if [entry["stage"] for entry in compute] != stages or any(
            value is None or not 0 <= value <= MAX_COUNT
            for entry in compute for key, value in entry.items() if key != "stage"):
        return False
    checkpoints = run["checkpoints"]
    if [entry["stage"] for entry in checkpoints] != stages:
        return False
    for entry in checkpoints:
        if (entry["file"] != checkpoint_name(seed, entry["stage"])
                or entry["sha256"] is None or not _is_sha(entry["sha256"])
                or entry["reload_equal"] is None):
            return False
        if folder is not None and not (folder / entry["file"]).is_file():
            return False
    return True
