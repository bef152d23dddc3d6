"""Reading run records: strict parsing, structural checks, and the plan-hash link.

A record is the raw output of a run (every evaluation and rollout row). It is checked before
any number is computed from it, so that a damaged file fails with one line naming what is wrong
instead of a traceback or, worse, a quietly wrong table.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from postlab.errors import UserError
from postlab.jsonio import parse_json, read_bytes
from postlab.plan import LoadedPlan

BUNDLED_RUN = "teaching-run"
RECORD_NAMES = ("record.json", "record.json.gz")


def bundled_run_dir() -> Path | None:
    """The teaching plan's run folder shipped with the package (record, plan, checkpoints)."""
    path = Path(str(resources.files("postlab") / "data" / BUNDLED_RUN))
    return path if record_in(path).is_file() else None


def bundled_record_path() -> Path | None:
    """The bundled teaching record, or None if this build has none."""
    folder = bundled_run_dir()
    return None if folder is None else record_in(folder)


def record_in(folder: Path) -> Path:
    """A run folder's record: ``record.json``, or its compressed form."""
    for name in RECORD_NAMES:
        if (folder / name).is_file():
            return folder / name
    return folder / RECORD_NAMES[0]


@dataclass(frozen=True)
class RunFiles:
    """Where a run's files are: given a run folder, a record file, or nothing (bundled)."""

    record: Path
    folder: Path | None  # None when only a record file was named

    @property
    def plan(self) -> Path:
        return self.record.parent / "plan.json"


def locate_run(target: Path | None) -> RunFiles:
    if target is None:
        folder = bundled_run_dir()
        if folder is None:
            raise UserError("no bundled record exists in this build of postlab; "
                            "name a record or run folder")
        return RunFiles(record=record_in(folder), folder=folder)
    if target.is_dir():
        return RunFiles(record=record_in(target), folder=target)
    return RunFiles(record=target, folder=None)


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
        if "sft_loss" in run:
            losses = _require(run, "sft_loss", list, where)
            if not all(_is_number(v) for v in losses):
                raise UserError(f"{where}.sft_loss: expected numbers")
        _check_training(run.get("training", {}), f"{where}.training")
        _check_checkpoints(run.get("checkpoints", {}), f"{where}.checkpoints")
        for key in ("arm_sft_loss", "compute"):
            if key in run:
                _check_number_tables(run[key], f"{where}.{key}")
        if "digests" in run and not isinstance(run["digests"], dict):
            raise UserError(f"{where}.digests: expected an object")


def _is_number(value: Any) -> bool:
    return isinstance(value, float | int) and not isinstance(value, bool)


def _check_number_tables(table: Any, where: str) -> None:
    """An object whose values are lists of numbers or objects of numbers."""
    if not isinstance(table, dict):
        raise UserError(f"{where}: expected an object")
    for key, value in table.items():
        values = value.values() if isinstance(value, dict) else value
        if not isinstance(value, dict | list) or not all(_is_number(v) for v in values):
            raise UserError(f"{where}.{key}: expected numbers")


def _check_training(training: Any, where: str) -> None:
    if not isinstance(training, dict):
        raise UserError(f"{where}: expected an object of arms")
    for arm, history in training.items():
        if not isinstance(history, list):
            raise UserError(f"{where}.{arm}: expected a list of steps")
        for index, step in enumerate(history):
            at = f"{where}.{arm}[{index}]"
            _require(step, "step", int, at)
            _check_rows(_require(step, "rows", list, at), f"{at}.rows")
            _require(step, "zero_variance_groups", int, at)
            if "sampling" in step:
                sampling = _require(step, "sampling", dict, at)
                for key in ("drawn", "kept", "dropped", "replaced"):
                    _require(sampling, key, int, f"{at}.sampling")
                if sampling.get("dropped_rows"):
                    _check_rows(sampling["dropped_rows"], f"{at}.sampling.dropped_rows")
            if not _require(step, "updates", list, at):
                raise UserError(f"{at}.updates: expected at least one update")
            for u, update in enumerate(step["updates"]):
                if not isinstance(update, dict) or not all(
                        isinstance(v, float | int) and not isinstance(v, bool)
                        for v in update.values()):
                    raise UserError(f"{at}.updates[{u}]: expected an object of numbers")


def _check_checkpoints(checkpoints: Any, where: str) -> None:
    if not isinstance(checkpoints, dict):
        raise UserError(f"{where}: expected an object of stages")
    for stage, info in checkpoints.items():
        at = f"{where}.{stage}"
        _require(info, "file", str, at)
        _require(info, "sha256", str, at)
        _require(info, "reload_equal", bool, at)
        if "/" in info["file"] or info["file"].startswith("."):
            raise UserError(f"{at}.file: must be a file name in the run folder")


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


def record_plan_problems(record: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    """Where a (structurally valid) record does not fit its plan: seeds, stages, splits,
    questions, samples per question, RL steps, rows per step, groups and updates."""
    from postlab.arms import arm_names, arm_specs

    problems = []
    seeds = [run["seed"] for run in record["runs"]]
    if seeds != plan["seeds"]:
        problems.append(f"seeds {seeds}, plan has {plan['seeds']}")
    stages = ["initial", *arm_names(plan)]
    rl_arms = [arm.name for arm in arm_specs(plan) if arm.is_rl]
    per_step = plan["prompts_per_step"] * plan["group_size"]
    for run in record["runs"]:
        seed = run["seed"]
        if len(run.get("sft_loss", [])) != plan["sft_steps"]:
            problems.append(f"seed {seed}: {len(run.get('sft_loss', []))} SFT losses, plan "
                            f"has {plan['sft_steps']} steps")
        if list(run["evaluations"]) != stages:
            problems.append(f"seed {seed}: stages {list(run['evaluations'])}, expected {stages}")
        for stage, splits in run["evaluations"].items():
            if list(splits) != list(plan["split"]):
                problems.append(f"seed {seed}, stage {stage}: splits {list(splits)}")
                continue
            for split, pairs in plan["split"].items():
                greedy = [row[:2] for row in splits[split]["greedy"]]
                sampled = [row[:2] for row in splits[split]["sampled"]]
                expected = [p for p in pairs for _ in range(plan["eval_samples"])]
                if greedy != pairs or sampled != expected:
                    problems.append(f"seed {seed}, stage {stage}, split {split}: questions or "
                                    f"samples per question differ from the plan")
        training = run.get("training", {})
        if list(training) != rl_arms:
            problems.append(f"seed {seed}: RL arms {list(training)}, plan has {rl_arms}")
            continue
        for arm, history in training.items():
            if [step.get("step") for step in history] != list(range(1, plan["rl_steps"] + 1)):
                problems.append(f"seed {seed}, arm {arm}: {len(history)} RL steps, plan has "
                                f"{plan['rl_steps']}")
                continue
            for step in history:
                rows = step["rows"]
                questions = [tuple(r[:2]) for r in rows]
                bad_rows = len(rows) != per_step or ("sampling" in step and (
                    step["sampling"]["drawn"] != step["sampling"]["kept"]
                    + step["sampling"]["dropped"]))
                bad_groups = any(len(set(questions[i:i + plan["group_size"]])) != 1
                                 for i in range(0, len(questions), plan["group_size"]))
                if bad_rows or bad_groups or len(step["updates"]) != \
                        plan["updates_per_rollout"]:
                    problems.append(f"seed {seed}, arm {arm}, step {step['step']}: rows, "
                                    "groups or updates do not fit the plan")
                    break
    return problems
