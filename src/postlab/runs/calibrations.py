"""Calibrations kept per machine, so that running a plan again does not time it again.

Every ``postlab run`` and ``postlab sweep`` prices its plan by calibrating on this machine
(:func:`postlab.runs.timing.calibrate`): on the teaching plan 2.1-3.2 s of CPU in the
main process on 2 cores (timing the engine's own steps, and the first calls into torch's
kernels), which a run with worker processes never needs there otherwise, and which competes
with the workers for the cores. So a calibration is kept in the user's
cache folder (the one :mod:`postlab.runs.remembered` uses) and reused by a later run of the
same plan on the same machine, with the same postlab source, torch, Python, platform, CPU,
usable cores and CPU code path, for at most :data:`MAX_AGE_SECONDS`; ``--recalibrate``
measures afresh (and keeps the new figures).

Like the verification memo it is a cache, not evidence: nothing a run records depends on
it, an unreadable, malformed, stale or unwritable entry only means the plan is calibrated
again, and the estimate says when the figures it reuses were measured.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.jsonio import dump_json, parse_json, read_bytes, replace_bytes
from postlab.machine import numerics
from postlab.machine.cache import cache_dir
from postlab.machine.resources import process_seconds, usable_cores
from postlab.runs.counts import ComputeEstimate
from postlab.runs.estimate import check_size
from postlab.runs.pricing import Calibration, Line
from postlab.runs.timing import calibrate

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

#: Versions the key and the layout: a later layout never reads an earlier one's files.
STORE_VERSION = 2
#: How long figures are reused. A machine's speed drifts (other work, power settings): on
#: the shared development machine the same run took 13.7 s one day and 43 s another, so
#: figures older than a working day are measured again.
MAX_AGE_SECONDS = 12 * 3600
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"


def calibration_key(plan: Plan) -> str:
    """One sha256 over everything a calibration's figures depend on: the plan (every field:
    sizes, tasks and the share of the run the engine's steps are timed within) and the
    machine and code that time it."""
    from postlab.machine.provenance import software, source_digest

    parts = {
        "store": STORE_VERSION,
        "plan": hashlib.sha256(dump_json(plan.data())).hexdigest(),
        "source": source_digest(),
        **software(),
        "cpu": numerics.cpu_model(),
        "cores": usable_cores(),
        "code_path": numerics.current_pin(),
    }
    return hashlib.sha256(dump_json(parts)).hexdigest()


def _path(key: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / "calibrations" / f"{key}.json"


def _number(value: Any) -> float:
    """A kept figure: every one is a finite count of seconds, bytes or a ratio, never below 0."""
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 0):
        raise TypeError(f"not a figure: {value!r}")
    return float(value)


def _from_json(data: dict[str, Any]) -> Calibration:
    """The stored figures as a Calibration; TypeError or KeyError if they are not."""
    values: dict[str, Any] = {}
    for field in fields(Calibration):
        if field.name == "reused_from":
            continue
        value = data[field.name]
        if field.name in ("sft", "reference", "update", "decode"):
            value = Line(fixed=_number(value["fixed"]), per_row=_number(value["per_row"]))
        elif field.name == "factors":
            if not isinstance(value, list) or len(value) != 3:
                raise TypeError("factors: expected three numbers")
            value = tuple(_number(v) for v in value)
        elif field.name in ("step_bytes", "base_bytes"):
            if value is not None or field.name == "base_bytes":
                value = int(_number(value))
        elif value is not None or field.name not in ("started_seconds", "decode_row_bytes"):
            value = _number(value)
        values[field.name] = value
    return Calibration(**values)


def stored_calibration(plan: Plan) -> Calibration | None:
    """This plan's calibration kept on this machine, fresh enough to reuse, as a run that
    starts now would use it; None where there is none."""
    key = calibration_key(plan)
    path = _path(key)
    if path is None:
        return None
    try:
        data = parse_json(read_bytes(path, "stored calibration"), str(path))
        if data["store"] != STORE_VERSION or data["key"] != key:
            return None
        measured = datetime.strptime(data["measured_at"], _TIME_FORMAT).replace(tzinfo=UTC)
        stored = _from_json(data["calibration"])
    except (UserError, KeyError, TypeError, ValueError, AttributeError):
        return None  # unreadable or not ours: the plan is simply calibrated again
    age = time.time() - measured.timestamp()
    if not 0 <= age <= MAX_AGE_SECONDS:
        return None
    # Started now, and not calibrating: none of the calibration's time is this run's.
    return replace(stored, seconds=0.0,
                   started_seconds=process_seconds(), reused_from=data["measured_at"])


def keep_calibration(plan: Plan, calibration: Calibration) -> None:
    """Keep a fresh calibration for later runs of the plan; a folder that cannot be written
    costs the next run its calibration, nothing more."""
    key = calibration_key(plan)
    path = _path(key)
    if path is None:
        return
    kept = asdict(calibration)
    kept.pop("reused_from")
    kept["factors"] = list(calibration.factors)
    entry = {"store": STORE_VERSION, "key": key,
             "measured_at": datetime.now(UTC).strftime(_TIME_FORMAT), "calibration": kept}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_bytes(path, dump_json(entry, indent=1))
    except (OSError, UserError):
        pass


def calibration_for(plan: Plan, *, recalibrate: bool = False) -> Calibration:
    """The plan's calibration: kept from an earlier run on this machine where there is one
    (and ``recalibrate`` is not asked), else measured now and kept."""
    if not recalibrate:
        stored = stored_calibration(plan)
        if stored is not None:
            return stored
    fresh = calibrate(plan)
    keep_calibration(plan, fresh)
    return fresh


def check_size_here(plan: Plan, allow_large: bool, *, recalibrate: bool = False
                    ) -> ComputeEstimate:
    """:func:`postlab.runs.estimate.check_size` priced by this machine's kept calibration
    (or a fresh one, then kept): what ``run`` and ``sweep`` print before they train."""
    return check_size(plan, allow_large,
                      lambda data: calibration_for(data, recalibrate=recalibrate))
