"""Reading run records: strict parsing, structural checks, and the plan-hash link.

A record is the raw output of a run (every evaluation and rollout row). It is checked before
any number is computed from it, so that a damaged file fails with one line naming what is wrong
instead of a traceback or, worse, a quietly wrong table.
"""

from __future__ import annotations

import gzip
from importlib import resources
from pathlib import Path
from typing import Any

from postlab.errors import UserError
from postlab.jsonio import parse_json, read_bytes
from postlab.plan import LoadedPlan

BUNDLED_RECORD = "teaching-record.json.gz"


def bundled_record_path() -> Path | None:
    """The teaching plan's record shipped with the package, or None if this build has none."""
    path = Path(str(resources.files("postlab") / "data" / BUNDLED_RECORD))
    return path if path.is_file() else None


def _check_row(row: Any, where: str) -> None:
    if (not isinstance(row, list) or len(row) != 4
            or not all(type(v) is int for v in row[:2])
            or not isinstance(row[2], str) or type(row[3]) is not bool):
        raise UserError(f"{where}: expected a row [a, b, text, terminated], got {row!r:.80}")


def _check_rows(rows: Any, where: str) -> None:
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{where}: expected a non-empty list of rows")
    for index, row in enumerate(rows):
        _check_row(row, f"{where}[{index}]")


def _require(mapping: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(mapping, dict) or key not in mapping:
        raise UserError(f"{where}: missing field {key!r}")
    value = mapping[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UserError(f"{where}.{key}: wrong type {type(value).__name__}")
    return value


def check_record(record: Any, source: str) -> None:
    """Check the fields that reports read; raise UserError naming the first problem."""
    if not isinstance(record, dict):
        raise UserError(f"{source}: a record must be a JSON object")
    _require(record, "plan_sha256", str, source)
    runs = _require(record, "runs", list, source)
    for i, run in enumerate(runs):
        where = f"{source}: runs[{i}]"
        _require(run, "seed", int, where)
        evaluations = _require(run, "evaluations", dict, where)
        for stage, splits in evaluations.items():
            if not isinstance(splits, dict) or not splits:
                raise UserError(f"{where}.evaluations.{stage}: expected splits")
            for split, decoded in splits.items():
                at = f"{where}.evaluations.{stage}.{split}"
                _check_rows(_require(decoded, "greedy", list, at), f"{at}.greedy")
                _check_rows(_require(decoded, "sampled", list, at), f"{at}.sampled")


def decode_record_bytes(raw: bytes, source: str) -> dict[str, Any]:
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise UserError(f"{source}: damaged gzip data ({exc})") from None
    record = parse_json(raw, source)
    check_record(record, source)
    return record


def load_record(path: Path) -> dict[str, Any]:
    return decode_record_bytes(read_bytes(path, "record"), str(path))


def check_plan_link(record: dict[str, Any], plan: LoadedPlan, source: str) -> None:
    """Refuse to report a record against a plan other than the one it was trained under."""
    if record["plan_sha256"] != plan.sha256:
        raise UserError(f"{source}: record was made under plan sha256 {record['plan_sha256']}, "
                        f"but {plan.path} has sha256 {plan.sha256}")
