"""A check's result and the verdict rendered from a list of them: what ``postlab verify``
prints, kept apart from the checks so tests and the reading API read results, not text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["pass", "fail", "warn", "skip"]


@dataclass(frozen=True, kw_only=True)
class Check:
    """One line of ``postlab verify``: a named check, how it came out, and why."""

    name: str
    status: Status
    detail: str


#: What ``verify --quick`` says in place of the re-evaluation it did not do.
QUICK = ("--quick: no checkpoint was re-evaluated (verify without --quick reloads each and "
         "compares its rows)")


def render_checks(checks: list[Check]) -> tuple[str, int]:
    """The checks, one line each, and the verdict with its exit status (1: a check failed)."""
    lines = [f"{check.status.upper():4s}  {check.name}: {check.detail}" for check in checks]
    failed = [c for c in checks if c.status == "fail"]
    warned = [c for c in checks if c.status == "warn"]
    if failed:
        lines.append(f"NOT VERIFIED: {len(failed)} of {len(checks)} checks failed "
                     f"({', '.join(c.name for c in failed)})")
        return "\n".join(lines) + "\n", 1
    quick = any(c.detail == QUICK for c in checks)
    verdict = "VERIFIED (quick, no checkpoint re-evaluated)" if quick else "VERIFIED"
    if warned:  # each warning names its check, so a reader knows which line to read
        lines.append(f"{verdict}: no check failed ({len(warned)} "
                     f"warning{'s' if len(warned) > 1 else ''}: "
                     f"{', '.join(c.name for c in warned)})")
    else:
        lines.append(f"{verdict}: no check failed, no warnings")
    return "\n".join(lines) + "\n", 0
