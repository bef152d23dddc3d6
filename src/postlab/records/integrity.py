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


#: Characters JSON escapes in a string (``json.dumps`` with ``ensure_ascii=False``).
_ESCAPED = r'["\\\x00-\x1f]'
_CONTROL = r"[\x00-\x1f]"


def _json_texts(text: Any) -> Any | None:
    """A string column as JSON string bodies (without quotes), or None where a text holds a
    control character (left to ``json.dumps``, row by row)."""
    import pyarrow.compute as pc

    if not len(text) or not pc.any(pc.match_substring_regex(text, _ESCAPED)).as_py():
        return text
    if pc.any(pc.match_substring_regex(text, _CONTROL)).as_py():
        return None
    text = pc.replace_substring(text, "\\", "\\\\")
    return pc.replace_substring(text, '"', '\\"')


def _row_lists_json(rows: Any, owner: Any, owners: int) -> list[str] | None:
    """Each owner's rows (``owner``: each row's block or step number, rows in order) as the
    JSON ``digest`` hashes, without its brackets; None if a text needs row-by-row escaping."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    text = _json_texts(rows.column("text"))
    if text is None:
        return None
    one = pc.binary_join_element_wise(
        "[", pc.cast(rows.column("a"), pa.string()), ",", pc.cast(rows.column("b"), pa.string()),
        ',"', text, '",', pc.if_else(rows.column("terminated"), "true", "false"), "]", "")
    counts = np.bincount(owner.to_numpy(), minlength=owners) if len(owner) else np.zeros(
        owners, dtype=np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    if isinstance(one, pa.ChunkedArray):
        one = one.combine_chunks()
    return pc.binary_join(pa.ListArray.from_arrays(offsets, one), ",").to_pylist()


#: A step's update statistics, in the order a chunk stores them.
UPDATE_FIELDS = ("loss", "gradient_norm_before_clip", "kl", "entropy", "ratio_outside_clip")


def _statistics_json(steps: Any, keys: list[list[str]]) -> list[str | None] | None:
    """Each step's ``[zero_variance_groups, updates]`` as ``digest`` writes it (None for a
    step with a non-finite statistic, which JSON cannot hold); None for the whole batch when
    its seeds order the statistics differently. One ``%`` format per update writes its five
    floats with Python's own ``repr``, as ``json.dumps`` does (numpy's string conversion
    gives the same text but took 1.7 times as long)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    order = keys[0] if keys and keys[0] else list(UPDATE_FIELDS)
    if any((k or list(UPDATE_FIELDS)) != order for k in keys) or sorted(order) != sorted(
            UPDATE_FIELDS):
        return None
    updates = steps.column("updates").combine_chunks()
    offsets = updates.offsets.to_numpy()
    offsets = offsets - offsets[0]
    flat = updates.flatten()
    fields = [flat.field(name).to_numpy(zero_copy_only=False) for name in order]
    finite = np.logical_and.reduce([np.isfinite(f) for f in fields]) if fields else np.ones(0)
    form = "{" + ",".join(f'"{name}":%r' for name in order) + "}"
    texts = [form % values for values in zip(*(f.tolist() for f in fields), strict=True)]
    lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)),
                                     pa.array(texts, pa.string()))
    joined = pc.binary_join_element_wise(
        "[", pc.cast(steps.column("zero_variance_groups"), pa.string()), ",[",
        pc.binary_join(lists, ","), "]]", "").to_pylist()
    not_finite = np.concatenate([[0], np.cumsum(~finite)])
    bad = (not_finite[offsets[1:]] - not_finite[offsets[:-1]]).tolist()
    return [None if worse else text for text, worse in zip(joined, bad, strict=True)]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def table_digests(tables: Any) -> list[dict[str, Any] | None]:
    """Each seed's digests (:func:`run_digests`) recomputed from a batch's flat tables
    (:class:`~postlab.records.columns.RowTables`), in the batch's seed order, without making a
    Python object per row: the rows' JSON is built by Arrow's string kernels, the few floats
    (losses, update statistics) by Python's own ``repr`` as ``json.dumps`` writes them. None
    for a seed this cannot do exactly (a text with a control character, a dynamic-sampling
    record, a non-finite float): it is checked row by row instead. 64 teaching seeds took
    0.6 s this way, 2.2 s decoded into entries and digested (measured on 2 cores)."""
    blocks, steps = tables.blocks, tables.steps
    runs = tables.runs.select(["seed", "layout", "sft_loss", "arm_sft_loss",
                               "compute"]).to_pylist()
    order = {seed: index for index, seed in enumerate(tables.seeds)}
    evaluations_json = _row_lists_json(tables.evaluations, tables.evaluations.column("block_id"),
                                       blocks.num_rows)
    rollouts_json = _row_lists_json(tables.rollouts, tables.rollouts.column("step_id"),
                                    steps.num_rows)
    if evaluations_json is None or rollouts_json is None:
        return [None] * len(runs)
    digests: list[dict[str, Any]] = [{"evaluations": {}, "training": {}} for _ in runs]

    labels = zip(*(blocks.column(k).to_pylist() for k in ("seed", "stage", "split",
                                                          "decoding")), strict=True)
    pending: dict[tuple[int, str, str], list[str]] = {}
    for (seed, stage, split, decoding), rows in zip(labels, evaluations_json, strict=True):
        pending.setdefault((seed, stage, split), []).append(
            f"{json.dumps(decoding, ensure_ascii=False)}:[{rows}]")
    for (seed, stage, split), parts in pending.items():
        digests[order[seed]]["evaluations"].setdefault(stage, {})[split] = _sha(
            "{" + ",".join(parts) + "}")

    if steps.column("sampling").null_count != steps.num_rows:
        return [None] * len(runs)
    layouts = [_layout(run["layout"]) for run in runs]
    failed = [layout is None for layout in layouts]
    statistics = _statistics_json(steps, [layout["update"] for layout in layouts
                                          if layout is not None])
    if statistics is None:
        return [None] * len(runs)
    seeds = steps.column("seed").to_pylist()
    arms = steps.column("arm").to_pylist()
    for seed, arm, rows, stats in zip(seeds, arms, rollouts_json, statistics, strict=True):
        if stats is None:
            failed[order[seed]] = True
            continue
        digests[order[seed]]["training"].setdefault(arm, []).append(
            {"rows": _sha(f"[{rows}]"), "statistics": _sha(stats)})

    result: list[dict[str, Any] | None] = []
    for place, (run, layout) in enumerate(zip(runs, layouts, strict=True)):
        if layout is None:
            result.append(None)
            continue
        try:
            found = digests[place]
            found["sft_loss"] = digest(run["sft_loss"])
            if "arm_sft_loss" in layout["run"]:
                found["arm_sft_loss"] = digest({entry["arm"]: entry["losses"]
                                                for entry in run["arm_sft_loss"]})
            if "compute" in layout["run"]:
                found["compute"] = digest({entry.pop("stage"): entry
                                           for entry in run["compute"]})
        except (ValueError, TypeError, KeyError, AttributeError):
            # a non-finite float or a null where a list belongs: left to the row-by-row check
            failed[place] = True
        result.append(None if failed[place] else digests[place])
    return result


def _layout(text: Any) -> dict[str, Any] | None:
    """A chunk row's layout (its entry's key orders), or None if it is not one postlab
    writes (the row-by-row check then says what is wrong)."""
    try:
        layout = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(layout, dict) or not all(
            isinstance(layout.get(key), list) and all(isinstance(k, str) for k in layout[key])
            for key in ("run", "step", "update", "sampling")):
        return None
    return layout


def digests_match(found: dict[str, Any] | None, recorded: str | None) -> bool:
    """A seed's recomputed digests (:func:`table_digests`) equal to those it carries (the
    chunk's JSON text). Stricter than :func:`compare_digests`, which ignores recorded parts
    the entry lacks; a seed this does not pass is checked by that, which names the part."""
    if found is None or recorded is None:
        return False
    try:
        return json.loads(recorded) == found
    except ValueError:
        return False
