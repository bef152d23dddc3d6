"""Registration: hypotheses and margins fixed, with a time, before a run trains.

A plan's own ``hypotheses`` are part of its hash, so of every record made under it; but a
plan can be written after an identical run was seen (training is deterministic), and nothing in
it says when. A registration says when: ``postlab register`` writes the hypotheses (the plan's,
or a file of them for a plan that has none), their sha256, the plan's sha256 and the time;
``postlab run --registration`` copies it into the run folder before the first step and names
its hash and the time training began in the record. A report then says "registered before
training" with the time, and decides hypotheses it is given afterwards apart, as exploratory.

This module holds the registration's form and its checks; reading and writing files is the
callers' (``postlab.api``).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from postlab.plan.schema import PlanModel

#: The registration file's format name, first in the file.
SCHEMA = "postlab.registration/1"

#: The registration file's name in a run folder.
REGISTRATION_FILE = "registration.json"

FIELDS = ("schema", "registered_at", "plan_sha256", "hypotheses", "hypotheses_sha256")

#: How a verdict stands: fixed with a time before training, fixed in the plan (its hash, no
#: time), or given to a report after the run existed.
STANDINGS = ("registered", "plan", "exploratory")


def hypotheses_sha256(section: dict[str, Any]) -> str:
    """The hash of a hypotheses section by content (keys sorted, compact), so it does not
    depend on how a file laid it out."""
    canonical = json.dumps(section, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def utc_now() -> str:
    """The time, to the second, as registrations and records write it."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> datetime.datetime | None:
    """A time written by :func:`utc_now`, or None for anything else."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.UTC)
    except ValueError:
        return None


def make_registration(plan_sha256: str, section: dict[str, Any], now: str) -> dict[str, Any]:
    """The registration of ``section`` (a checked hypotheses section) for a plan."""
    return {"schema": SCHEMA, "registered_at": now, "plan_sha256": plan_sha256,
            "hypotheses": section, "hypotheses_sha256": hypotheses_sha256(section)}


def section_problems(plan: PlanModel, section: Any) -> list[tuple[str, str]]:
    """Why ``section`` cannot be the hypotheses of ``plan`` (a checked plan): the plan's own
    checks, as if the plan held it."""
    from pydantic import ValidationError

    from postlab.plan.schema import Hypotheses, field_path
    from postlab.plan.validation import hypothesis_problems

    try:
        typed = Hypotheses.model_validate(section)
    except ValidationError as exc:
        return [(field_path(("hypotheses", *err["loc"])), err["msg"]) for err in exc.errors()]
    return hypothesis_problems(plan.model_copy(update={"hypotheses": typed}))


def registration_problems(registration: Any, plan: PlanModel, plan_sha256: str
                          ) -> list[str]:
    """Why ``registration`` is not a sound registration for this plan: its form, its hash of
    the hypotheses, the plan it names, and the hypotheses themselves. A plan with hypotheses
    of its own can only have those registered."""
    if not isinstance(registration, dict):
        return ["not a registration (a JSON object)"]
    unknown = sorted(set(registration) - set(FIELDS))
    missing = [key for key in FIELDS if key not in registration]
    if unknown or missing:
        return [f"unknown field {unknown[0]!r}" if unknown else f"missing field {missing[0]!r}"]
    if registration["schema"] != SCHEMA:
        return [f"schema {registration['schema']!r:.60} is not {SCHEMA!r}"]
    problems = []
    if parse_time(registration["registered_at"]) is None:
        problems.append(f"registered_at {registration['registered_at']!r:.60} is not a UTC "
                        "time like 2026-01-31T12:00:00Z")
    if registration["plan_sha256"] != plan_sha256:
        problems.append(f"registered for plan sha256 {registration['plan_sha256']!s:.64}, "
                        f"not this plan's ({plan_sha256})")
    section = registration["hypotheses"]
    if not isinstance(section, dict) or registration["hypotheses_sha256"] != \
            hypotheses_sha256(section):
        problems.append("hypotheses_sha256 is not the hash of its hypotheses (changed since "
                        "registration)")
        return problems
    from postlab.plan.schema import section_data

    own = plan.hypotheses
    if own is not None and \
            hypotheses_sha256(section_data(own)) != registration["hypotheses_sha256"]:
        problems.append("the plan states hypotheses of its own, and these are others")
    problems += [f"{where}: {message}" for where, message in section_problems(plan, section)]
    return problems
