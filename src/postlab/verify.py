"""``postlab verify``: re-check everything a record claims, one line per check.

Checks are computed into plain results first and rendered after, so tests read the results.
A failed check means the record, plan or checkpoints do not say what they claim; a warning
means something differs that can legitimately change bits (another torch, another machine).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from postlab.checkpoint import CheckpointError, load_checkpoint
from postlab.errors import UserError
from postlab.integrity import compare_digests
from postlab.jsonio import parse_json, read_bytes
from postlab.metrics import summarize
from postlab.model import CharGRU
from postlab.plan import LoadedPlan, load_plan, teaching_plan_loaded
from postlab.record import RunFiles, load_record, record_plan_problems
from postlab.rollout import evaluate_model
from postlab.tasks import answer_function

Status = Literal["pass", "fail", "warn", "skip"]


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    status: Status
    detail: str


def _plan_for(files: RunFiles, record: dict[str, Any]) -> tuple[LoadedPlan | None, Check]:
    if files.plan.is_file():
        plan = load_plan(files.plan)
        where = str(files.plan)
    else:
        plan = teaching_plan_loaded()
        where = "the teaching plan (no plan.json beside the record)"
    if plan.sha256 == record["plan_sha256"]:
        return plan, Check(name="plan", status="pass", detail=f"{where} has the recorded "
                                                              f"sha256 {plan.sha256[:16]}…")
    return None, Check(name="plan", status="fail",
                       detail=f"{where} has sha256 {plan.sha256}, the record names "
                              f"{record['plan_sha256']}")


def _first_row_difference(recorded: dict, fresh: dict) -> str:
    for split, decoded in recorded.items():
        for decoding, rows in decoded.items():
            new = fresh.get(split, {}).get(decoding, [])
            for index, (a, b) in enumerate(zip(rows, new, strict=False)):
                if a != b:
                    return f"split {split}, {decoding} row {index}: recorded {a}, now {b}"
            if len(rows) != len(new):
                return f"split {split}, {decoding}: {len(rows)} rows recorded, {len(new)} now"
    return "rows differ"


def _check_checkpoints(record: dict[str, Any], plan: dict[str, Any] | None,
                       folder: Path) -> tuple[Check, Check]:
    hash_problems, eval_problems, reloaded = [], [], 0
    for run in record["runs"]:
        for stage, info in run.get("checkpoints", {}).items():
            path = folder / info["file"]
            try:
                payload = load_checkpoint(path, info["sha256"])
            except CheckpointError as exc:
                hash_problems.append(str(exc))
                continue
            except UserError as exc:
                hash_problems.append(str(exc))
                continue
            if plan is None:
                continue
            model = CharGRU.from_plan(plan)
            try:
                model.load_state_dict(payload["state_dict"])
            except (RuntimeError, KeyError) as exc:
                eval_problems.append(f"seed {run['seed']}, stage {stage}: weights do not fit "
                                     f"the plan's model ({str(exc).splitlines()[0]})")
                continue
            fresh = evaluate_model(model, plan, run["seed"])
            reloaded += 1
            recorded = run["evaluations"].get(stage)
            if fresh != recorded:
                eval_problems.append(f"seed {run['seed']}, stage {stage}: "
                                     + _first_row_difference(recorded or {}, fresh))
            if not info.get("reload_equal", False):
                eval_problems.append(f"seed {run['seed']}, stage {stage}: recorded "
                                     "reload_equal is not true")
    total = sum(len(run.get("checkpoints", {})) for run in record["runs"])
    hashes = Check(name="checkpoint hashes",
                   status="fail" if hash_problems or not total else "pass",
                   detail="; ".join(hash_problems) if hash_problems else
                   (f"{total} checkpoints match their recorded sha256 (checked before loading)"
                    if total else "the record lists no checkpoints"))
    if plan is None:
        evaluation = Check(name="checkpoint re-evaluation", status="skip",
                           detail="needs the record's plan")
    else:
        evaluation = Check(name="checkpoint re-evaluation",
                           status="fail" if eval_problems else "pass",
                           detail="; ".join(eval_problems) if eval_problems else
                           f"{reloaded} checkpoints reloaded and re-evaluated: every row equal")
    return hashes, evaluation


def _check_summary(record: dict[str, Any], plan: dict[str, Any] | None,
                   folder: Path) -> Check:
    path = folder / "summary.json"
    if plan is None:
        return Check(name="summary", status="skip", detail="needs the record's plan")
    if not path.is_file():
        return Check(name="summary", status="skip", detail="no summary.json beside the record")
    try:
        stored = parse_json(read_bytes(path, "summary"), str(path))
    except UserError as exc:
        return Check(name="summary", status="fail", detail=str(exc))
    try:
        fresh = summarize(record, plan["eval_samples"], answer_function(plan))
    except (KeyError, ValueError) as exc:
        return Check(name="summary", status="fail",
                     detail=f"cannot recompute the summary from the raw rows ({exc})")
    if stored == fresh:
        return Check(name="summary", status="pass",
                     detail="summary.json equals the summary recomputed from the raw rows")
    for a, b in zip(stored if isinstance(stored, list) else [], fresh, strict=False):
        if a != b:
            return Check(name="summary", status="fail",
                         detail=f"summary.json differs from the raw rows at seed "
                                f"{b['seed']}, stage {b['stage']}")
    return Check(name="summary", status="fail",
                 detail="summary.json differs from the summary of the raw rows")


def _check_digests(record: dict[str, Any]) -> Check:
    problems, absent = [], 0
    for run in record["runs"]:
        if "digests" not in run:
            absent += 1
            continue
        problems += compare_digests(run, run["digests"])
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more"
                                           if len(problems) > 5 else "")
        return Check(name="raw rows", status="fail",
                     detail=f"changed since training: {shown}")
    if absent:
        return Check(name="raw rows", status="warn",
                     detail=f"{absent} seeds carry no digests (a record not made by postlab); "
                            "rollout rows cannot be checked without re-running")
    return Check(name="raw rows", status="pass",
                 detail="every SFT loss, evaluation split and RL step matches its digest")


def _check_environment(record: dict[str, Any]) -> Check:
    now = {"torch": torch.__version__, "python": platform.python_version(),
           "platform": platform.platform()}
    differ = [f"{key} {record.get(key)} then, {value} now" for key, value in now.items()
              if record.get(key) != value]
    if differ:
        return Check(name="environment", status="warn",
                     detail="; ".join(differ) + " (this can legitimately change bits)")
    return Check(name="environment", status="pass", detail="same torch, Python and platform")


def _check_source(record: dict[str, Any]) -> Check:
    from postlab.engine import source_hashes

    recorded = record.get("source_sha256")
    if not isinstance(recorded, dict):
        return Check(name="source", status="warn", detail="the record names no source")
    now = source_hashes()
    if not any(name.startswith("postlab/") for name in recorded):
        return Check(name="source", status="warn",
                     detail="recorded by another implementation: "
                            + ", ".join(sorted(recorded)))
    changed = sorted(name for name in recorded.keys() & now.keys()
                     if recorded[name] != now[name])
    added = sorted(now.keys() - recorded.keys())
    removed = sorted(recorded.keys() - now.keys())
    parts = ([f"changed {', '.join(changed)}"] if changed else []) + \
            ([f"new {', '.join(added)}"] if added else []) + \
            ([f"gone {', '.join(removed)}"] if removed else [])
    if parts:
        version = record.get("postlab_version", "?")
        return Check(name="source", status="warn",
                     detail=f"postlab source differs from the recording version {version}: "
                            + "; ".join(parts))
    return Check(name="source", status="pass", detail="postlab's source is the recording one")


def verify_run(files: RunFiles) -> list[Check]:
    """Run every check on a run folder or record; UserError if it cannot be checked at all."""
    record = load_record(files.record)
    folder = files.record.parent
    plan, plan_check = _plan_for(files, record)
    checks = [plan_check]
    plan_data = plan.data if plan is not None else None
    checks += list(_check_checkpoints(record, plan_data, folder))
    checks.append(_check_summary(record, plan_data, folder))
    if plan_data is None:
        checks.append(Check(name="counts", status="skip", detail="needs the record's plan"))
    else:
        problems = record_plan_problems(record, plan_data)
        checks.append(Check(name="counts", status="fail" if problems else "pass",
                            detail="; ".join(problems[:5]) if problems else
                            "seeds, arms, steps, rows per step and samples per question "
                            "fit the plan"))
    checks.append(_check_digests(record))
    checks.append(_check_environment(record))
    checks.append(_check_source(record))
    return checks


def render_checks(checks: list[Check]) -> tuple[str, int]:
    lines = [f"{check.status.upper():4s}  {check.name}: {check.detail}" for check in checks]
    failed = [c for c in checks if c.status == "fail"]
    warned = [c for c in checks if c.status == "warn"]
    if failed:
        lines.append(f"NOT VERIFIED: {len(failed)} of {len(checks)} checks failed "
                     f"({', '.join(c.name for c in failed)})")
        return "\n".join(lines) + "\n", 1
    lines.append(f"VERIFIED: no check failed ({len(warned)} warnings)")
    return "\n".join(lines) + "\n", 0
