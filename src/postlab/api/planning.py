"""Writing and inspecting plans from a script: ``freeze``, ``check_plan`` and ``diff_plans``.

What ``postlab freeze`` and ``postlab plan`` do, with typed arguments and results: a plan is
written once (an existing path is refused before anything is computed), and a plan that does
not validate is refused with every problem named.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


@dataclass(frozen=True, kw_only=True)
class Frozen:
    """A plan written by :func:`freeze`: where, its sha256 and its content; ``parent`` is the
    parent's sha256 for a new version, None for the teaching plan and a completed draft."""

    path: Path
    sha256: str
    plan: Plan
    parent: str | None = None


def freeze(path: str | Path, *, draft: str | Path | None = None,
           parent: str | Path | None = None, settings: Sequence[str] = (),
           today: str | None = None) -> Frozen:
    """Write a plan to the new file ``path``: the teaching plan; a new version of ``parent``
    (default the teaching plan) with ``settings`` (``KEY=VALUE``), dated ``today`` (default
    today); or the plan a ``draft`` stands for (a reasoning-gym draft's items generated and
    pinned)."""
    from postlab.plan.frozen import (
        complete_draft,
        derive_plan,
        load_plan,
        read_draft,
        teaching_plan,
        teaching_plan_loaded,
    )
    from postlab.plan.frozen import freeze as write
    from postlab.plan.schema import Plan

    target = Path(path)
    settings = list(settings or ())
    if draft is not None:
        if parent is not None or settings:
            raise UserError("freeze --draft takes no --from or --set: edit the draft instead")
        _refuse_existing(target)
        data = complete_draft(read_draft(Path(draft)))
        return Frozen(path=target, sha256=write(target, data), plan=Plan.of(data))
    if parent is None and not settings:
        data = teaching_plan()
        return Frozen(path=target, sha256=write(target), plan=Plan.of(data))
    loaded = load_plan(Path(parent)) if parent is not None else teaching_plan_loaded()
    _refuse_existing(target)
    data = derive_plan(loaded, settings, today or datetime.date.today().isoformat())
    return Frozen(path=target, sha256=write(target, data), plan=Plan.of(data),
                  parent=loaded.sha256)


def _refuse_existing(path: Path) -> None:
    if path.exists():
        raise UserError(f"{path}: already exists; postlab never overwrites an output")


@dataclass(frozen=True, kw_only=True)
class PlanCheck:
    """A plan file checked: its sha256, every problem as (field path, message), and the typed
    plan when there are none (None otherwise); for a valid plan whose RL arms train under a
    looser contract than its strictest, the hacking monitor's rule as the plan fixes it."""

    sha256: str
    plan: Plan | None
    problems: list[tuple[str, str]]
    monitor: str | None = None


def check_plan(path: str | Path) -> PlanCheck:
    """Validate a plan file against the schema and the checks across fields; unreadable or
    malformed JSON is refused (UserError), an invalid plan returns its problems."""
    from postlab.jsonio import parse_json, read_bytes
    from postlab.plan.frozen import sha256_hex
    from postlab.plan.schema import Plan
    from postlab.plan.validation import validate_plan

    raw = read_bytes(Path(path), "plan")
    data = parse_json(raw, str(path))
    problems = validate_plan(data)
    if problems:
        return PlanCheck(sha256=sha256_hex(raw), plan=None, problems=problems)
    plan = Plan.of(data)
    return PlanCheck(sha256=sha256_hex(raw), plan=plan, problems=[],
                     monitor=_monitor(plan))


def _monitor(plan: Plan) -> str | None:
    """The hacking monitor's rule, computed now: the drift and threshold a calibrated rule
    chooses for the plan's steps and batch, and what it promises; None where no RL arm
    trains under a looser contract than the strictest (nothing to monitor)."""
    from postlab.analysis.monitor import describe_rule, monitor_rule
    from postlab.plan.arms import arm_specs, plan_contracts
    from postlab.tasks.contracts import DRAWN

    strictest = plan_contracts(plan)[0]
    # an arm paid at random is not monitored: it has no answer to game
    if any(spec.is_rl and spec.contract not in (strictest, *DRAWN)
           for spec in arm_specs(plan)):
        return describe_rule(monitor_rule(plan))
    return None


def plan_schema() -> dict[str, Any]:
    """The plan file's JSON Schema (from the typed model), for editors and validators."""
    from postlab.plan.schema import json_schema

    return json_schema()


@dataclass(frozen=True, kw_only=True)
class PlanDiff:
    """Plan B against plan A: equal, whether B is a version of A, and the differences."""

    identical: bool
    sha256: str
    b_is_version_of_a: bool
    differences: list[str]


def diff_plans(a: str | Path, b: str | Path) -> PlanDiff:
    """What changed from plan ``a`` to plan ``b`` (splits compared by pair)."""
    from postlab.plan.frozen import load_plan, plan_differences

    first, second = load_plan(Path(a)), load_plan(Path(b))
    if first.sha256 == second.sha256:
        return PlanDiff(identical=True, sha256=first.sha256, b_is_version_of_a=False,
                        differences=[])
    parent = second.model.parent
    return PlanDiff(identical=False, sha256=second.sha256,
                    b_is_version_of_a=parent is not None and parent.sha256 == first.sha256,
                    differences=plan_differences(first.data, second.data))
