"""Registering hypotheses before training, and reading hypotheses given afterwards.

``register`` writes a registration file (``postlab.plan.registration``) that ``run`` copies
into the run folder before its first step; ``read_registration`` checks one against the plan
about to train; ``read_hypotheses`` reads a hypotheses file for a plan (to register it, or
for a report to decide as exploratory).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.jsonio import dump_json, parse_json, publish_bytes, read_bytes
from postlab.plan.frozen import LoadedPlan, describe_problems, load_plan, teaching_plan_loaded
from postlab.plan.registration import (
    make_registration,
    parse_time,
    registration_problems,
    section_problems,
    utc_now,
)

if TYPE_CHECKING:
    from postlab.plan.schema import Hypotheses


def read_hypotheses(path: Path, plan: LoadedPlan) -> dict[str, Any]:
    """A hypotheses file (the plan's ``hypotheses`` section on its own: ``alpha`` and
    ``tests``), checked against the plan as if the plan held it."""
    section = parse_json(read_bytes(path, "hypotheses"), str(path))
    problems = section_problems(plan.model, section)
    if problems:
        raise UserError(f"{path}: not hypotheses of the plan {plan.path}: "
                        f"{describe_problems(problems)}")
    return section


def read_exploratory(path: Path, plan: LoadedPlan, fixed: Hypotheses | None
                     ) -> dict[str, Any]:
    """Hypotheses given to a report after training, to be decided as exploratory: checked
    against the plan, and with ids of their own, so that no row of a report can be taken for
    the registered (or the plan's own) hypothesis ``fixed`` names the same."""
    from postlab.plan.schema import Hypotheses

    section = read_hypotheses(path, plan)
    taken = {test.id for test in fixed.tests} if fixed is not None else set()
    clash = [test.id for test in Hypotheses.model_validate(section).tests if test.id in taken]
    if clash:
        raise UserError(f"{path}: hypothesis id {clash[0]!r} is already one the run fixed "
                        "before training; give the exploratory one another id")
    return section


def register(out: str | Path, plan: str | Path | None = None,
             hypotheses: str | Path | None = None) -> dict[str, Any]:
    """Write the registration of ``hypotheses`` (a file; default: the plan's own) for
    ``plan`` (default: the teaching plan) to the new file ``out``; return it."""
    out = Path(out)
    from postlab.plan.schema import section_data

    loaded = load_plan(Path(plan)) if plan is not None else teaching_plan_loaded()
    if out.exists() or out.is_symlink():
        raise UserError(f"{out}: already exists; postlab never overwrites an output")
    own = loaded.model.hypotheses
    if hypotheses is not None:
        if own is not None:
            raise UserError(f"{loaded.path}: the plan states hypotheses of its own; register "
                            "those (without --hypotheses), or use a plan without them")
        section = read_hypotheses(Path(hypotheses), loaded)
    elif own is None:
        raise UserError(f"{loaded.path}: the plan states no hypotheses; give them with "
                        "--hypotheses FILE")
    else:
        section = section_data(own)  # as the plan's file gives it
    registration = make_registration(loaded.sha256, section, utc_now())
    publish_bytes(out, dump_json(registration, indent=2))
    return registration


def read_registration(path: Path, plan: LoadedPlan) -> bytes:
    """A registration file's bytes, checked for the plan about to train: its form and hashes,
    the plan it names, hypotheses that fit the plan, and a time not yet to come."""
    import datetime

    raw = read_bytes(path, "registration")
    registration = parse_json(raw, str(path))
    problems = registration_problems(registration, plan.model, plan.sha256)
    if problems:
        raise UserError(f"{path}: {problems[0]}")
    when = parse_time(registration["registered_at"])
    assert when is not None  # registration_problems checked it
    if when > datetime.datetime.now(datetime.UTC):
        raise UserError(f"{path}: registered at {registration['registered_at']}, a time still "
                        "to come on this machine's clock")
    return raw
