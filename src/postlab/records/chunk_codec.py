"""How one seed's entry becomes a row of a chunk's Parquet table, and back: the chunk
format's schema, the flattening, and the column-wise row checks of a read.

Pure conversions between a seed's JSON entry and Arrow values, kept apart from the files
(``records.chunks``: writing, hashing, reading on demand, the manifest) so that the format is
read in one place; ``records.columns`` builds its tables with the same flattening.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from postlab.errors import UserError
from postlab.jsonio import parse_json

#: The chunk format, kept in each file's metadata so a later layout cannot be misread.
FORMAT_KEY = b"postlab.chunk"
FORMAT = b"1"


def chunk_schema() -> Any:
    """The Arrow schema of chunk format :data:`FORMAT`: one row per seed, every column fixed."""
    import pyarrow as pa

    row = pa.struct([("a", pa.int64()), ("b", pa.int64()), ("text", pa.string()),
                     ("terminated", pa.bool_())])
    rows = pa.list_(row)
    update = pa.struct([(name, pa.float64()) for name in UPDATE_KEYS])
    sampling = pa.struct([*((name, pa.int64()) for name in SAMPLING_COUNTS),
                          ("dropped_rows", rows)])
    return pa.schema([
        ("seed", pa.int64()),
        # key orders of the run entry and its steps, so a seed reads back as the same JSON
        ("layout", pa.string()),
        ("sft_loss", pa.list_(pa.float64())),
        ("evaluations", pa.list_(pa.struct([("stage", pa.string()), ("split", pa.string()),
                                            ("decoding", pa.string()), ("rows", rows)]))),
        ("arms", pa.list_(pa.string())),
        ("training", pa.list_(pa.struct([
            ("arm", pa.string()), ("step", pa.int64()), ("rows", rows),
            ("zero_variance_groups", pa.int64()), ("updates", pa.list_(update)),
            ("sampling", sampling)]))),
        ("checkpoints", pa.list_(pa.struct([("stage", pa.string()), ("file", pa.string()),
                                            ("sha256", pa.string()),
                                            ("reload_equal", pa.bool_())]))),
        ("arm_sft_loss", pa.list_(pa.struct([("arm", pa.string()),
                                             ("losses", pa.list_(pa.float64()))]))),
        ("compute", pa.list_(pa.struct([("stage", pa.string()),
                                        *((name, pa.int64()) for name in COMPUTE_KEYS)]))),
        ("digests", pa.string()),
    ], metadata={FORMAT_KEY: FORMAT})


UPDATE_KEYS = ("loss", "gradient_norm_before_clip", "kl", "entropy", "ratio_outside_clip")
SAMPLING_COUNTS = ("drawn", "kept", "dropped", "replaced")
COMPUTE_KEYS = ("completions", "tokens_generated", "gradient_steps", "examples_seen")
#: Parts of a seed's entry a chunk stores; every entry postlab writes has exactly these.
RUN_KEYS = frozenset({"seed", "sft_loss", "evaluations", "training", "checkpoints",
                      "arm_sft_loss", "compute", "digests"})


def _row_struct(row: Sequence[Any]) -> dict[str, Any]:
    a, b, text, terminated = row
    return {"a": a, "b": b, "text": text, "terminated": terminated}


def _floats(values: Sequence[Any], where: str, *, lenient: bool = False) -> list[float]:
    # a double column keeps a float exactly; an int would come back a float, another JSON
    if lenient:  # read only (a one-document record as columns): the same values as floats
        return [float(v) if type(v) is int else v for v in values]
    if any(type(v) is not float for v in values):
        raise ValueError(f"{where}: a chunk stores floats only")
    return list(values)


def flat_entry(entry: dict[str, Any], *, lenient: bool = False) -> dict[str, Any]:
    """One seed's entry as a chunk row (the inverse of :func:`entry_of`). ``lenient``: for
    reading an entry as columns, never for writing: integers where floats belong (a record
    another program wrote) become floats of the same value."""
    floats = functools.partial(_floats, lenient=lenient)
    extra = set(entry) - RUN_KEYS
    if extra:
        raise ValueError(f"a chunk cannot store the entry parts {sorted(extra)}")
    steps = [step for history in entry.get("training", {}).values() for step in history]
    step_keys = list(steps[0]) if steps else []
    # a step may have no update (DAPO's dynamic sampling, no group with signal)
    update_keys = next((list(step["updates"][0]) for step in steps if step["updates"]), [])
    sampling_keys = list(steps[0]["sampling"]) if steps and "sampling" in steps[0] else []
    for step in steps:
        if (list(step) != step_keys or any(list(u) != update_keys for u in step["updates"])
                or list(step.get("sampling", {})) != sampling_keys):
            raise ValueError("the steps of one seed differ in layout")
    layout = {"run": list(entry), "step": step_keys, "update": update_keys,
              "sampling": sampling_keys}
    return {
        "seed": entry["seed"],
        "layout": json.dumps(layout, separators=(",", ":")),
        "sft_loss": floats(entry.get("sft_loss", []), "sft_loss"),
        "evaluations": [{"stage": stage, "split": split, "decoding": decoding,
                         "rows": [_row_struct(r) for r in rows]}
                        for stage, splits in entry["evaluations"].items()
                        for split, decoded in splits.items()
                        for decoding, rows in decoded.items()],
        "arms": list(entry.get("training", {})),
        "training": [{"arm": arm, "step": step["step"],
                      "rows": [_row_struct(r) for r in step["rows"]],
                      "zero_variance_groups": step["zero_variance_groups"],
                      "updates": [{k: floats([u[k]], "updates")[0] for k in UPDATE_KEYS}
                                  for u in step["updates"]],
                      "sampling": None if "sampling" not in step else {
                          **{k: step["sampling"][k] for k in SAMPLING_COUNTS},
                          "dropped_rows": [_row_struct(r)
                                           for r in step["sampling"]["dropped_rows"]]}}
                     for arm, history in entry.get("training", {}).items() for step in history],
        "checkpoints": [{"stage": stage, **info}
                        for stage, info in entry.get("checkpoints", {}).items()],
        "arm_sft_loss": [{"arm": arm, "losses": floats(losses, "arm_sft_loss")}
                         for arm, losses in entry.get("arm_sft_loss", {}).items()],
        "compute": [{"stage": stage, **counts}
                    for stage, counts in entry.get("compute", {}).items()],
        "digests": json.dumps(entry["digests"], separators=(",", ":"))
        if "digests" in entry else None,
    }


def _rows(structs: list[dict[str, Any]]) -> list[list[Any]]:
    return [[r["a"], r["b"], r["text"], r["terminated"]] for r in structs]


#: The largest operand and answer text a row may hold (the record's limits).
ROW_LIMITS = {"operand": 10**9, "text": 1024}


def _row_lists(lists: Any, where: str) -> list[list[list[Any]]]:
    """A column of row lists as Python lists of ``[a, b, text, terminated]``, checked column
    by column first (no nulls, operands and text lengths in range), which is what the record's
    row check asks of each row. Building rows from columns, checked this way once per seed,
    took a 16-seed report from 33 s (rows from nested dicts, checked row by row on every
    read) to 16 s."""
    import pyarrow.compute as pc

    if lists.null_count:
        raise UserError(f"{where}: a list of rows is missing")
    fields = lists.flatten().flatten()
    if any(field.null_count for field in fields):
        raise UserError(f"{where}: a row has a missing value")
    a, b, text, terminated = fields
    for operand in (a, b):
        if len(operand) and not (pc.min(operand).as_py() >= 0
                                 and pc.max(operand).as_py() <= ROW_LIMITS["operand"]):
            raise UserError(f"{where}: an operand is outside 0..{ROW_LIMITS['operand']}")
    if len(text) and pc.max(pc.utf8_length(text)).as_py() > ROW_LIMITS["text"]:
        raise UserError(f"{where}: the answer text is longer than any plan allows")
    rows = list(map(list, zip(a.to_pylist(), b.to_pylist(), text.to_pylist(),
                              terminated.to_pylist(), strict=True)))
    out, start = [], 0
    for length in lists.value_lengths().to_pylist():
        out.append(rows[start:start + length])
        start += length
    return out


def _one(table: Any, name: str) -> Any:
    """A column of a one-seed table as one array (a row group reads as one chunk)."""
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def flat_of_group(table: Any, where: str) -> dict[str, Any]:
    """A one-seed row group as :func:`flat_entry` made it, its rows already Python lists."""
    flat = table.drop_columns(["evaluations", "training"]).to_pylist()[0]
    blocks = _one(table, "evaluations").flatten()
    stage, split, decoding, rows = blocks.flatten()
    flat["evaluations"] = [
        {"stage": st, "split": sp, "decoding": de, "rows": ro}
        for st, sp, de, ro in zip(stage.to_pylist(), split.to_pylist(), decoding.to_pylist(),
                                  _row_lists(rows, where), strict=True)]
    steps = _one(table, "training").flatten()
    arm, step, rows, zero_variance, updates, sampling = steps.flatten()
    flat["training"] = [
        {"arm": ar, "step": st, "rows": ro, "zero_variance_groups": zv, "updates": up,
         "sampling": sa}
        for ar, st, ro, zv, up, sa in zip(arm.to_pylist(), step.to_pylist(),
                                          _row_lists(rows, where), zero_variance.to_pylist(),
                                          updates.to_pylist(), sampling.to_pylist(),
                                          strict=True)]
    for step_entry in flat["training"]:
        if step_entry["sampling"] is not None:
            step_entry["sampling"]["dropped_rows"] = _rows(step_entry["sampling"]["dropped_rows"])
    return flat


def entry_of(flat: dict[str, Any], source: str) -> dict[str, Any]:
    """A chunk row back as the seed's entry, its keys in the order they were written."""
    layout = parse_json(flat["layout"], source)
    evaluations: dict[str, Any] = {}
    for block in flat["evaluations"]:
        place = evaluations.setdefault(block["stage"], {}).setdefault(block["split"], {})
        place[block["decoding"]] = block["rows"]
    training: dict[str, list[dict[str, Any]]] = {arm: [] for arm in flat["arms"]}
    for step in flat["training"]:
        values = {"step": step["step"], "rows": step["rows"],
                  "zero_variance_groups": step["zero_variance_groups"],
                  "updates": [{k: u[k] for k in layout["update"]} for u in step["updates"]]}
        if step["sampling"] is not None:
            values["sampling"] = {k: step["sampling"][k] for k in layout["sampling"]}
        training.setdefault(step["arm"], []).append({k: values[k] for k in layout["step"]})
    parts = {
        "seed": flat["seed"], "sft_loss": flat["sft_loss"], "evaluations": evaluations,
        "training": training,
        "checkpoints": {c.pop("stage"): c for c in flat["checkpoints"]},
        "arm_sft_loss": {a["arm"]: a["losses"] for a in flat["arm_sft_loss"]},
        "compute": {c.pop("stage"): c for c in flat["compute"]},
    }
    if flat["digests"] is not None:
        parts["digests"] = parse_json(flat["digests"], source)
    return {key: parts[key] for key in layout["run"]}


def schema_problem(schema: Any) -> str | None:
    """How a chunk's columns depart from the schema its format names (the manifest names
    the format through each chunk's ``postlab.chunk`` key, and the format fixes every column),
    or None. Checked on the file's footer before any column is read, so a chunk without its
    ``seed`` column, say, is refused in one line instead of failing where the column is read."""
    expected = chunk_schema()
    names, wanted = list(schema.names), list(expected.names)
    missing = [name for name in wanted if name not in names]
    extra = [name for name in names if name not in wanted]
    if missing or extra:
        said = [f"missing {', '.join(missing)}" if missing else "",
                f"not in the format {', '.join(extra)}" if extra else ""]
        return (f"its columns differ from chunk format {FORMAT.decode()}'s: "
                + "; ".join(part for part in said if part))
    for field in expected:
        found = schema.field(field.name)
        if not found.type.equals(field.type):
            return (f"column {field.name!r} is {found.type}, chunk format "
                    f"{FORMAT.decode()} has {field.type}")
    if names != wanted:
        return f"its columns are in another order than chunk format {FORMAT.decode()}'s"
    return None
