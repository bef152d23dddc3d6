"""``postlab freeze`` and ``postlab plan``: writing and inspecting plans."""

from __future__ import annotations

import argparse
import sys

from postlab.errors import UserError


def freeze(args: argparse.Namespace) -> int:
    import datetime

    from postlab.plan.frozen import (
        complete_draft,
        derive_plan,
        freeze,
        load_plan,
        read_draft,
        teaching_plan_loaded,
    )

    if args.draft is not None:
        if args.parent is not None or args.settings:
            raise UserError("freeze --draft takes no --from or --set: edit the draft instead")
        if args.path.exists():
            raise UserError(f"{args.path}: already exists; postlab never overwrites an output")
        data = complete_draft(read_draft(args.draft))
        digest = freeze(args.path, data)
        section = data["reasoning_gym"]
        sizes = ", ".join(f"{name} {count}" for name, count in section["sizes"].items())
        print(f"froze {args.path} (sha256 {digest}): {section['dataset']} items ({sizes}) "
              f"from reasoning-gym {section['version']}, items sha256 "
              f"{section['items_sha256'][:16]}…")
        return 0
    if args.parent is None and not args.settings:
        digest = freeze(args.path)
        print(f"froze the teaching plan: {args.path} (sha256 {digest})")
        return 0
    parent = load_plan(args.parent) if args.parent else teaching_plan_loaded()
    if args.path.exists():
        raise UserError(f"{args.path}: already exists; postlab never overwrites an output")
    data = derive_plan(parent, args.settings, datetime.date.today().isoformat())
    digest = freeze(args.path, data)
    print(f"froze plan version {data['version']}: {args.path} (sha256 {digest}); parent "
          f"{parent.sha256[:16]}…, changed {', '.join(data['parent']['changes'])}")
    return 0


def register(args: argparse.Namespace) -> int:
    from postlab.api.registering import register as write

    registration = write(args.out, args.plan, args.hypotheses)
    count = len(registration["hypotheses"]["tests"])
    print(f"registered {count} hypothes{'is' if count == 1 else 'es'} at "
          f"{registration['registered_at']} for plan {registration['plan_sha256'][:16]}…: "
          f"{args.out} (hypotheses sha256 {registration['hypotheses_sha256'][:16]}…); train "
          f"with 'postlab run --registration {args.out}'")
    return 0


def _print_monitor(data: dict) -> None:
    """The hacking monitor's rule as the plan fixes it, computed now: the drift and threshold
    a calibrated rule chooses for the plan's steps and batch, and what it promises."""
    from postlab.analysis.aggregate import describe_rule, monitor_rule
    from postlab.plan.arms import arm_specs, plan_contracts

    strictest = plan_contracts(data)[0]
    if any(spec.is_rl and spec.contract != strictest for spec in arm_specs(data)):
        print(f"hacking monitor: {describe_rule(monitor_rule(data))}")


def plan(args: argparse.Namespace) -> int:
    import json

    from postlab.jsonio import parse_json, read_bytes
    from postlab.plan.frozen import load_plan, plan_differences, sha256_hex
    from postlab.plan.schema import json_schema, validate_plan

    if args.plan_command == "schema":
        print(json.dumps(json_schema(), indent=2, ensure_ascii=False))
        return 0
    if args.plan_command == "check":
        raw = read_bytes(args.path, "plan")
        problems = validate_plan(parse_json(raw, str(args.path)))
        if not problems:
            print(f"{args.path}: valid plan (sha256 {sha256_hex(raw)})")
            _print_monitor(parse_json(raw, str(args.path)))
            return 0
        for path, message in problems:
            print(f"{args.path}: {path}: {message}", file=sys.stderr)
        print(f"{args.path}: {len(problems)} problems", file=sys.stderr)
        return 2

    a, b = load_plan(args.a), load_plan(args.b)
    if a.sha256 == b.sha256:
        print(f"identical plans (sha256 {a.sha256})")
        return 0
    parent = b.data.get("parent") or {}
    if parent.get("sha256") == a.sha256:
        print(f"{args.b} is a version of {args.a} (its parent sha256 matches)")
    for line in plan_differences(a.data, b.data):
        print(line)
    return 0
