"""Finished stages of seeds not yet recorded, kept in the run folder for resume.

A seed enters the record only when all its stages are in; until then each finished stage's
result waits in the folder's kept results (its weights are already a checkpoint), with the
settings it was computed under, so an interrupted run resumes without training it again, and
never under other settings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.jsonio import MalformedJSON, dump_json, parse_json, publish_bytes, read_bytes
from postlab.machine import numerics
from postlab.plan.arms import arm_names
from postlab.policies.checkpoint import checkpoint_name
from postlab.records.layout import UNNAMED_ENGINE
from postlab.records.record import KEPT_DIR, KEPT_SETTINGS, keep_results, kept_result_path

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

#: (seed, stage) -> that stage's result
Kept = dict[tuple[int, str], dict[str, Any]]


def _settings(record: dict[str, Any]) -> dict[str, Any]:
    return {"plan_sha256": record["plan_sha256"], "device": record["device"],
            "numerics": record["numerics"], "engine": record.get("engine", UNNAMED_ENGINE)}


def write_kept_settings(out_dir: Path, record: dict[str, Any]) -> None:
    """The settings kept results are computed under, written once, before the first."""
    folder = out_dir / KEPT_DIR
    folder.mkdir(exist_ok=True)
    if not (folder / KEPT_SETTINGS).exists():
        publish_bytes(folder / KEPT_SETTINGS, dump_json(_settings(record)))


def keep_result(out_dir: Path, record: dict[str, Any], key: tuple[str, int, str],
                result: dict[str, Any]) -> None:
    """Write a finished stage's result (no weights: its checkpoint is on disk), so a resumed
    run does not train it again; the first one also writes the settings it was computed
    under."""
    write_kept_settings(out_dir, record)
    keep_results({key: result})


def check_kept_settings(out_dir: Path, record: dict[str, Any]) -> None:
    """Kept results are reused only under the settings they were computed under, as a
    record's completed seeds are."""
    path = out_dir / KEPT_DIR / KEPT_SETTINGS
    if not path.is_file():
        return
    try:
        then = parse_json(read_bytes(path, "kept settings"), str(path))
        deciding = numerics.differences(then["numerics"], record["numerics"])[0]
        same_plan = then["plan_sha256"] == record["plan_sha256"]
        then_engine = then.get("engine", UNNAMED_ENGINE)
        same_engine = then_engine == record.get("engine", UNNAMED_ENGINE)
    except (MalformedJSON, KeyError, TypeError):
        raise UserError(f"{path}: malformed; remove the folder {path.parent} to train its "
                        "tasks again") from None
    if not same_plan:
        raise UserError(f"{path}: kept results of another plan; remove {path.parent}")
    if not same_engine:
        raise UserError(f"{out_dir}: the run was started with the {then_engine} "
                        f"engine; resume it with --engine {then_engine}")
    if deciding:
        raise UserError(f"{out_dir}: the run was started with other numeric "
                        f"settings ({'; '.join(deciding)}); resume it where they can be the "
                        "same (postlab run --resume pins the run's own code path and device)")


def _usable(out_dir: Path, path: Path, seed: int, stage: str, capability: str) -> dict | None:
    """A kept result, or None where it cannot be read, names another seed or stage, was
    computed with other kernels, or its checkpoint is missing or differs."""
    try:
        result = parse_json(read_bytes(path, "kept task result"), str(path))
        info = result["checkpoint"]
        ok = (result["seed"] == seed and result.get("arm", "initial") == stage
              and result["capability"] == capability
              and hashlib.sha256((out_dir / info["file"]).read_bytes()).hexdigest()
              == info["sha256"])
    except (UserError, KeyError, TypeError, OSError):
        return None
    return result if ok else None


def kept_results(out_dir: Path, record: dict[str, Any], plan: Plan, pending: Sequence[int],
                 say: Callable[[str], None]) -> Kept:
    """Results kept by an interrupted invocation for ``pending`` seeds. One that is not
    usable is dropped: its task runs again, giving the same bits. Leftovers of seeds already
    recorded (a crash between the two writes) are removed."""
    kept: Kept = {}
    folder = out_dir / KEPT_DIR
    if not folder.is_dir():
        return kept
    for leftover in folder.glob(".*.partial"):
        leftover.unlink()
    drop_kept(out_dir, plan, (seed for seed in plan.seeds if seed not in pending))
    capability = record["numerics"]["cpu_capability"]
    for seed in pending:
        for stage in ["initial", *arm_names(plan)]:
            path = kept_result_path(out_dir, seed, stage)
            if not path.is_file():
                continue
            result = _usable(out_dir, path, seed, stage, capability)
            if result is not None:
                kept[(seed, stage)] = result
            else:
                path.unlink()
                say(f"resuming: {path.name} is unusable; that task runs again")
    return kept


def drop_kept(out_dir: Path, plan: Plan, seeds: Iterable[int]) -> None:
    """Remove the kept results of ``seeds`` (the record holds them now, or they train
    again)."""
    for seed in seeds:
        for stage in ["initial", *arm_names(plan)]:
            kept_result_path(out_dir, seed, stage).unlink(missing_ok=True)


def whole_seeds_kept(out_dir: Path, plan: Plan, pending: Sequence[int], kept: Kept,
                     say: Callable[[str], None]) -> Kept:
    """The kept results of the seeds kept whole only, for an engine that trains a seed whole:
    what is kept of the others is dropped, and so are their checkpoint files (no record or
    kept result names them, and they are trained again in another company, which on a GPU
    may give other bits than the file holds)."""
    stages = ["initial", *arm_names(plan)]
    whole = {seed for seed in pending if all((seed, s) in kept for s in stages)}
    replaced = 0
    for seed in pending:
        if seed in whole:
            continue
        drop_kept(out_dir, plan, [seed])
        for stage in stages:
            path = out_dir / checkpoint_name(seed, stage)
            if path.is_file():
                path.unlink()
                replaced += 1
    if replaced:
        say(f"resuming: {replaced} checkpoints of seeds not finished whole are trained again")
    return {key: value for key, value in kept.items() if key[0] in whole}


def remove_kept(out_dir: Path) -> None:
    """Every seed is recorded: nothing kept is needed any more."""
    tasks = out_dir / KEPT_DIR
    if tasks.is_dir():
        for path in tasks.iterdir():
            path.unlink()
        tasks.rmdir()
