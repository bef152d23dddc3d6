"""Where a command computes: the CPU code path pinned before torch loads, the device, and the
number of worker processes. Each choice returns a line saying what was chosen and why, for the
command line to print and a script to log.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError

if TYPE_CHECKING:
    from postlab.records.models import Record


def did_you_mean(word: str, known: list[str]) -> str:
    """' (did you mean X?)' for the closest known name, or '': a typo is fixed from one line."""
    import difflib

    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def describe_path(name: str | None) -> str:
    from postlab.machine import numerics

    if name is None:
        return "native (nothing pinned: this machine's libraries choose their kernels)"
    settings = " ".join(f"{k}={v}" for k, v in numerics.CODE_PATHS[name].environment.items())
    return f"{name} ({settings})"


def check_cpu_path(choice: str | None) -> None:
    """Refuse an unknown code path before anything runs, naming the closest one."""
    from postlab.machine import numerics

    known = [numerics.PORTABLE, numerics.NATIVE, *numerics.CODE_PATHS.names()]
    if choice is not None and choice not in known:
        raise UserError(f"--cpu-path {choice}: unknown{did_you_mean(choice, known)}; "
                        f"choose one of {', '.join(known)}")


def _pin_fallback(reason: str) -> str:
    from postlab.machine import numerics

    fallback = numerics.resolve_choice(numerics.PORTABLE)
    numerics.pin(fallback)
    return f"code path: {describe_path(fallback)} ({reason})"


def pin_for_record(record: Record, choice: str | None, *, strict: bool) -> str:
    """Pin the code path a record was made on (or ``choice``); return a line saying which.

    With ``strict``, a path this machine cannot run is an error naming what the record needs
    and what the machine has; without, the machine's portable path is used and said.
    """
    return pin_for_numerics(None if record.numerics is None else record.data()["numerics"],
                            choice, strict=strict)


def pin_for_numerics(recorded: dict[str, Any] | None, choice: str | None, *,
                     strict: bool) -> str:
    """:func:`pin_for_record` from the ``numerics`` a record (or a resumed run's kept
    settings) holds as JSON (None: it names none)."""
    from postlab.machine import numerics

    check_cpu_path(choice)
    if choice is not None:
        name = numerics.resolve_choice(choice)
        numerics.pin(name)
        return f"code path: {describe_path(name)} (chosen with --cpu-path)"
    name = numerics.recorded_path(recorded)
    if name is not None:
        why = numerics.cannot_run(name)
        if why is None:
            numerics.pin(name)
            return f"code path: {describe_path(name)} (the record's, pinned)"
        message = (f"the record was made on CPU code path {name} and {why}; this machine can "
                   f"run {numerics.describe_supported()}")
        if strict:
            raise UserError(f"{message}. Reproduce it on a machine that runs {name}, or pass "
                            "--cpu-path to compare across code paths (bits may then differ)")
        return _pin_fallback(message)
    if isinstance(recorded, dict):
        try:
            settings = numerics.pin_native_like(recorded)
        except UserError as exc:
            if strict:
                raise
            return _pin_fallback(str(exc))
        shown = " ".join(f"{k}={v}" for k, v in settings.items())
        return f"code path: the record's native settings, pinned ({shown})"
    return _pin_fallback("the record names none; records made before postlab recorded it "
                         "were made unpinned")


def pin_for_run(out_dir: Path, cpu_path: str | None, resume: bool) -> str:
    """Pin the code path of a new run, or of the run being resumed (its own by default)."""
    from postlab.machine import numerics

    check_cpu_path(cpu_path)
    if resume and cpu_path is None:
        from postlab.records.record import resume_settings

        settings = resume_settings(out_dir)
        if settings is not None:
            return pin_for_numerics(settings.get("numerics"), None, strict=True)
    name = numerics.resolve_choice(cpu_path or numerics.PORTABLE)
    numerics.pin(name)
    how = "chosen with --cpu-path" if cpu_path else "portable, the default"
    return f"code path: {describe_path(name)} ({how})"


def device_for_run(out_dir: Path, choice: str | None, resume: bool) -> tuple[str, str]:
    """The run's device and a line saying how it was chosen; cuda where there is none is
    refused here, before anything is written."""
    from postlab.machine import device

    how = "chosen with --device"
    if choice is None and resume:
        from postlab.records.record import resume_settings

        settings = resume_settings(out_dir)
        if settings is not None:
            choice, how = settings.get("device", "cpu"), "the run's own"
    if choice is None:
        choice, how = "cpu", "the default"
    device.prepare(choice)  # before CUDA initialises
    resolved = device.resolve(choice)
    if choice == "auto":
        how = ("auto: torch finds a CUDA device" if resolved == "cuda"
               else "auto: torch finds no CUDA device here")
    return resolved, f"device: {resolved} ({how})"


def device_for_record(record: Record, choice: str | None) -> str:
    """The device to reproduce a record on: ``choice``, else the record's, which this machine
    must have; refused in one line before training otherwise."""
    from postlab.machine import device

    if choice is not None:
        device.prepare(choice)
        return device.resolve(choice)
    recorded = record.device or "cpu"
    device.prepare(recorded)
    if recorded == "cuda" and not device.cuda_available():
        cuda = None if record.numerics is None else record.numerics.cuda
        gpu = (cuda or {}).get("device_name")
        made_on = f"cuda ({gpu})" if gpu else "cuda"
        raise UserError(f"the record was made on {made_on} and torch finds no CUDA device "
                        "here; reproduce it on a machine with CUDA, or pass --device cpu to "
                        "compare across devices (bits may then differ)")
    return device.resolve(recorded)


def worker_count(workers: int | None, device: str = "cpu") -> int:
    """The worker count; with more than one, the workers' server starts now, importing torch
    while this process does the same.

    On CUDA a run has one worker: processes sharing one GPU would split its memory and gain
    little on models this size, and one process keeps the GPU's state in one place.
    """
    from postlab.records.fields import MAX_WORKERS
    from postlab.runs.workers import WORKERS_VARIABLE, default_workers, start_worker_server

    if device == "cuda":
        if workers is not None and workers > 1:
            raise UserError(f"--workers {workers} with device cuda: a CUDA run trains "
                            "in one process; leave --workers out or set it to 1")
        count = 1 if workers is None else workers
    else:
        count = workers if workers is not None else default_workers()
    if count < 1:
        raise UserError(f"--workers must be at least 1, got {count}")
    if count > MAX_WORKERS:
        named = f"--workers {count}" if workers is not None else f"{WORKERS_VARIABLE}={count}"
        raise UserError(f"{named}: at most {MAX_WORKERS} workers (a record names no more)")
    if count > 1:
        start_worker_server()
    return count
