"""Verifications remembered by digest, so that showing a run's page again does not repeat
checks that nothing has changed since.

``postlab verify`` always checks afresh. A run's HTML page shows a verification too, and
re-running it on every render was the largest single part of rendering the bundled run's
page (about 4 of 10 seconds on 2 cores). The page now reuses the checks of an earlier
render, or of an earlier ``postlab verify`` (which remembers what it found), when every input
they depend on is the same, and says so, with the time they ran:

- the run's fingerprint (plan, record, summary and every checkpoint, byte for byte), the raw
  record file and the ``fingerprint.txt`` beside it; the checkpoints counted are every
  ``.pt`` file in the run folder, which a chunked record's seeds need not be decoded to list
  (a verification is remembered only where the record names no checkpoint outside them);
- where the run is (check details name its plan's path);
- postlab's source, file by file (checks re-evaluate checkpoints with this code);
- the numeric environment: torch, Python, platform, code path and device.

The memo lives in the user's cache folder (``POSTLAB_CACHE_DIR``, else
``$XDG_CACHE_HOME/postlab``, else ``~/.cache/postlab``), one small JSON file per state. It is a
cache, not evidence: an unreadable, malformed or unwritable memo only means the checks run
again, and the page never claims more than "these checks passed at that time for these
digests".
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from postlab.errors import UserError
from postlab.jsonio import dump_json, parse_json, read_bytes, replace_bytes
from postlab.machine import numerics
from postlab.machine.cache import cache_dir
from postlab.records.fingerprint import FINGERPRINT_FILE, run_fingerprint
from postlab.records.models import Record
from postlab.records.record import RunFiles
from postlab.runs.verdicts import Check
from postlab.runs.verify import device_here, verify_walked

#: Versions the memo's key and layout: a later layout never reads an earlier one's files.
MEMO_VERSION = 2


@dataclass(frozen=True, kw_only=True)
class Verification:
    """Checks of a run, and when they ran if they were reused from an earlier render
    (``reused_from`` is None when they ran just now)."""

    checks: list[Check]
    reused_from: str | None = None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def state_key(files: RunFiles, record: Record) -> str | None:
    """One sha256 over everything a verification's outcome depends on, or None when a file
    it covers cannot be read (then the checks run, and say what is wrong)."""
    from postlab.machine.provenance import software, source_digest

    folder = files.record.parent
    try:
        fingerprint = run_fingerprint(folder, files.record, record,
                                      checkpoint_files=checkpoints_present(folder)).value
        raw = read_bytes(files.record, "record")
        kept = folder / FINGERPRINT_FILE
        # a dangling link counts as there (verify fails it), and reading it ends the reuse
        present = kept.exists() or kept.is_symlink()
        kept_bytes = read_bytes(kept, "fingerprint") if present else None
    except UserError:
        return None
    device = device_here(record)
    # Threads and deterministic kernels are set by the checks themselves, from the plan (which
    # the fingerprint covers): this process's settings before or after them do not count.
    described = {name: value for name, value in
                 numerics.describe(1, numerics.current_pin(), device=device).items()
                 if name not in ("threads", "deterministic")}
    parts = {
        "memo": MEMO_VERSION,
        "fingerprint": fingerprint,
        "record_file": _sha256(raw),
        "fingerprint_file": None if kept_bytes is None else _sha256(kept_bytes),
        "record_path": str(files.record.absolute()),
        "plan_path": str(files.plan),
        "plan_beside": files.plan.is_file(),
        "source": source_digest(),
        **software(),
        "numerics": described,
        "device": device,
    }
    return _sha256(dump_json(parts))


def checkpoints_present(folder: Path) -> set[str]:
    """Every checkpoint file in a run folder: a superset of those its record names, found
    without reading the record's seeds (decoding a teaching seed takes about 30 ms)."""
    try:
        return {path.name for path in folder.iterdir()
                if path.suffix == ".pt" and (path.is_file() or path.is_symlink())}
    except OSError:
        return set()


def _covered(key: str | None, files: RunFiles, named: frozenset[str]) -> Path | None:
    """Where to remember these checks, or None: no key, no cache folder, or a record that
    names a checkpoint the key did not hash (one outside the folder's ``.pt`` files)."""
    if key is None or not named <= checkpoints_present(files.record.parent):
        return None
    return _memo_path(key)


def _check_and_keep(files: RunFiles, record: Record, key: str | None) -> list[Check]:
    """Every check afresh, remembered under ``key`` where the key covers what they read."""
    verified = verify_walked(files, record)
    path = _covered(key, files, verified.checkpoint_files)
    if key is not None and path is not None:
        _write_memo(path, key, verified.checks,
                    datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))
    return verified.checks


def _memo_path(key: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / "verified" / f"{key}.json"


def _read_memo(path: Path, key: str) -> Verification | None:
    try:
        data = parse_json(read_bytes(path, "verification memo"), str(path))
        if data["key"] != key or data["memo"] != MEMO_VERSION:
            return None
        checks = [Check(name=c["name"], status=c["status"], detail=c["detail"])
                  for c in data["checks"]]
        when = data["checked_at"]
    except (UserError, KeyError, TypeError):
        return None  # unreadable or not a memo: the checks simply run again
    if not checks or not isinstance(when, str) or any(
            not isinstance(c.name, str) or not isinstance(c.detail, str)
            or c.status not in ("pass", "fail", "warn", "skip") for c in checks):
        return None
    return Verification(checks=checks, reused_from=when)


def _write_memo(path: Path, key: str, checks: list[Check], when: str) -> None:
    memo = {"memo": MEMO_VERSION, "key": key, "checked_at": when,
            "checks": [asdict(c) for c in checks]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_bytes(path, dump_json(memo, indent=1))
    except (OSError, UserError):
        pass  # a cache that cannot be written costs the next render its checks, nothing more


def verify_and_remember(files: RunFiles, record: Record) -> list[Check]:
    """Every check afresh, as ``postlab verify`` runs them, remembered for the page: a page
    rendered after a verify of the same state shows that verification instead of repeating
    it (the state is taken before the checks run, so it is the state they checked)."""
    return _check_and_keep(files, record, state_key(files, record))


def verify_remembered(files: RunFiles, record: Record) -> Verification:
    """The run's checks as ``postlab verify`` computes them, reused from an earlier call when
    every input they depend on is unchanged (see the module's docstring)."""
    key = state_key(files, record)
    path = None if key is None else _memo_path(key)
    if key is not None and path is not None:
        found = _read_memo(path, key)
        if found is not None:
            return found
    return Verification(checks=_check_and_keep(files, record, key))
