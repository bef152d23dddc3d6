"""A sweep file: a base plan, the versions to try and the seeds every version trains.

A sweep compares plan versions, so every version must be a plan in its own right (frozen, hashed,
naming its parent) and all of them must share the seeds, which is what lets a comparison pair
results by seed. Expansion is pure: it turns the file into the list of plans to freeze, and
every problem (an unknown key, a value the schema refuses, two versions that are the same plan)
is found here, before anything trains.

The file is JSON::

    {"base": "plan.json",            # optional: the teaching plan when absent
     "seeds": [1, 2, 3, 4],          # every version trains these
     "versions": [{"name": "clip-higher", "set": {"clip_high": 0.28}},    # optional
                  {"name": "k3", "set": ["kl=k3"]}],    # or KEY=VALUE, as freeze --set
     "grid": {"kl_beta": [0.0, 0.03, 0.1]}}                                # optional

``versions`` lists versions by hand; ``grid`` adds one version per combination of values. The
base plan with the sweep's seeds is always the first version, named ``base``; a grid point equal
to it is that version, not a copy.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from postlab.errors import UserError
from postlab.jsonio import parse_json
from postlab.plan.frozen import (
    AUTOMATIC_KEYS,
    LoadedPlan,
    describe_problems,
    parse_setting,
    plan_bytes,
    sha256_hex,
)
from postlab.sweeps.folder import RESERVED_NAMES

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

#: Version names become folder names.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]{0,79}$")
#: A grid multiplies; past this many versions a sweep file is more likely a mistake.
MAX_VERSIONS = 256


class VersionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    name: str = Field(description="folder name of this version's run")
    set: dict[str, Any] = Field(min_length=1, description=(
        "plan keys and their new values, or a list of KEY=VALUE as freeze --set takes them"))

    @field_validator("set", mode="before")
    @classmethod
    def _settings(cls, value: Any) -> Any:
        """``["clip=0.3", ...]`` reads as ``freeze --set`` reads each (JSON when it parses)."""
        if not isinstance(value, list):
            return value
        changes: dict[str, Any] = {}
        for setting in value:
            if not isinstance(setting, str):
                raise ValueError("each setting is a KEY=VALUE string")
            try:
                key, parsed = parse_setting(setting)
            except UserError as exc:
                raise ValueError(str(exc).removeprefix("--set ")) from None
            if key in changes:
                raise ValueError(f"{key} is set twice")
            changes[key] = parsed
        return changes

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value) or value == "base":
            raise ValueError("letters, digits and . _ = + - (at most 80), not 'base'")
        return value


class SweepSpec(BaseModel):
    """The sweep file, typed; unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    base: str | None = Field(None, description="the base plan's path, relative to the file")
    seeds: list[int] = Field(min_length=1, max_length=1000, description="seeds of every version")
    versions: list[VersionSpec] = Field(default_factory=list)
    grid: dict[str, list[Any]] = Field(default_factory=dict, description=(
        "plan key -> values; one version per combination"))

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("seeds must be distinct")
        return value

    @field_validator("grid")
    @classmethod
    def _grid(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in value.items():
            if not values:
                raise ValueError(f"{key}: needs at least one value")
            if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
                raise ValueError(f"{key}: values must be distinct")
        return value


@dataclass(frozen=True)
class Version:
    """One plan of a sweep: its name, the keys it changes from the base, the plan itself."""

    name: str
    changes: dict[str, Any]
    #: the plan as its file will hold it
    data: dict[str, Any]

    @functools.cached_property
    def plan(self) -> Plan:
        from postlab.plan.schema import Plan

        return Plan.of(self.data)

    @property
    def raw(self) -> bytes:
        return plan_bytes(self.data)

    @property
    def sha256(self) -> str:
        return sha256_hex(self.raw)


def parse_sweep(raw: bytes, source: str) -> SweepSpec:
    """The typed sweep file, or one line naming the first problem."""
    data = parse_json(raw, source)
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "(top level)"
        raise UserError(f"{source}: {where}: {first['msg']}") from None


def _label(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _grid_versions(grid: dict[str, list[Any]]) -> list[VersionSpec]:
    keys = list(grid)
    versions = []
    for values in itertools.product(*(grid[k] for k in keys)):
        name = ",".join(f"{k}={_label(v)}" for k, v in zip(keys, values, strict=True))
        safe = re.sub(r"[^A-Za-z0-9._=+-]", "_", name.replace(",", "+"))[:80]
        versions.append(VersionSpec.model_construct(name=safe,
                                                    set=dict(zip(keys, values, strict=True))))
    return versions


def expand(spec: SweepSpec, base: LoadedPlan, today: str, source: str) -> list[Version]:
    """Every version as a validated plan, the base first; refused in one line otherwise.

    Each non-base version is derived from the base version (the base plan with the sweep's
    seeds), so it names that version's hash as its parent and lists exactly the keys it
    changes, as ``postlab freeze --from --set`` would.
    """
    from postlab.plan.schema import PlanModel
    from postlab.plan.validation import validate_plan

    if base.model.seeds != spec.seeds:
        base_data = _derive(base.data, base.sha256, {"seeds": spec.seeds}, today)
        problems = validate_plan(base_data)
        if problems:
            raise UserError(f"{source}: seeds: {describe_problems(problems)}")
    else:
        base_data = dict(base.data)
    base_version = Version("base", {}, base_data)
    versions = [base_version]
    seen = {base_version.sha256: "base"}
    specs = [(item, False) for item in spec.versions] + [
        (item, True) for item in _grid_versions(spec.grid)]
    if len(specs) + 1 > MAX_VERSIONS:
        raise UserError(f"{source}: {len(specs) + 1} versions; at most {MAX_VERSIONS}")
    # Folder names: unique even where the filesystem ignores case, and never the sweep's files.
    names = {"base"} | {name.lower() for name in RESERVED_NAMES}
    for item, from_grid in specs:
        if item.name.lower() in names:
            taken = ("a name the sweep folder uses" if item.name.lower() in
                     {n.lower() for n in RESERVED_NAMES} else "named twice (letter case aside)")
            raise UserError(f"{source}: version {item.name!r}: {taken}")
        names.add(item.name.lower())
        for key in item.set:
            if key in AUTOMATIC_KEYS or key == "seeds":
                raise UserError(f"{source}: version {item.name}: {key} is set by the sweep")
            if key == "split":
                raise UserError(f"{source}: version {item.name}: split: versions of a sweep "
                                "share their held-out questions, so that seeds pair")
            if key not in PlanModel.model_fields:
                raise UserError(f"{source}: version {item.name}: unknown plan key {key!r}")
        # Compared as their JSON text: 1 and true, or 0 and 0.0, are different plans.
        changes = {k: v for k, v in item.set.items() if not _same(base_data.get(k), v)}
        if not changes:
            if from_grid:
                continue  # a grid point at the base's values is the base version
            raise UserError(f"{source}: version {item.name}: every setting equals the base "
                            "plan's; it would be the base version again")
        plan = _derive(base_data, base_version.sha256, changes, today)
        problems = validate_plan(plan)
        if problems:
            raise UserError(f"{source}: version {item.name}: {describe_problems(problems)}")
        version = Version(item.name, changes, plan)
        if version.sha256 in seen:
            raise UserError(f"{source}: versions {seen[version.sha256]} and {item.name} are the "
                            "same plan")
        seen[version.sha256] = item.name
        versions.append(version)
    return versions


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _derive(parent: dict[str, Any], parent_sha256: str, changes: dict[str, Any],
            today: str) -> dict[str, Any]:
    data = {k: v for k, v in parent.items() if k != "parent"} | changes
    data["version"] = parent["version"] + 1
    data["date"] = today
    data["parent"] = {"sha256": parent_sha256, "changes": list(changes)}
    return data


def base_path(spec: SweepSpec, sweep_file: Path) -> Path | None:
    """The base plan's path, read relative to the sweep file's folder."""
    if spec.base is None:
        return None
    path = Path(spec.base)
    return path if path.is_absolute() else sweep_file.parent / path
