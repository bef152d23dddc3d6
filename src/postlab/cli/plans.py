"""``postlab freeze`` and ``postlab plan``: writing and inspecting plans."""

from __future__ import annotations

import argparse
import sys


def freeze(args: argparse.Namespace) -> int:
    from postlab.api.planning import freeze as write

    frozen = write(args.path, draft=args.draft, parent=args.parent, settings=args.settings)
    plan = frozen.plan
    if args.draft is not None:
        section = plan.reasoning_gym
        sizes = ", ".join(f"{name} {count}" for name, count in section.sizes.items())
        print(f"froze {args.path} (sha256 {frozen.sha256}): {section.dataset} items "
              f"({sizes}) from reasoning-gym {section.version}, items sha256 "
              f"{section.items_sha256[:16]}…")
    elif frozen.parent is None:
        print(f"froze the teaching plan: {args.path} (sha256 {frozen.sha256})")
    else:
        print(f"froze plan version {plan.version}: {args.path} (sha256 {frozen.sha256}); "
              f"parent {frozen.parent[:16]}…, changed {', '.join(plan.parent.changes)}")
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


def plan_schema(args: argparse.Namespace) -> int:
    """``postlab plan schema``."""
    import json

    from postlab.api.planning import plan_schema as schema

    print(json.dumps(schema(), indent=2, ensure_ascii=False))
    return 0


def plan_check(args: argparse.Namespace) -> int:
    """``postlab plan check``: exit 2 with every problem, one per line."""
    from postlab.api.planning import check_plan

    checked = check_plan(args.path)
    if not checked.problems:
        print(f"{args.path}: valid plan (sha256 {checked.sha256})")
        if checked.monitor is not None:
            print(f"hacking monitor: {checked.monitor}")
        return 0
    for path, message in checked.problems:
        print(f"{args.path}: {path}: {message}", file=sys.stderr)
    print(f"{args.path}: {len(checked.problems)} problems", file=sys.stderr)
    return 2


def plan_diff(args: argparse.Namespace) -> int:
    """``postlab plan diff``."""
    from postlab.api.planning import diff_plans

    diff = diff_plans(args.a, args.b)
    if diff.identical:
        print(f"identical plans (sha256 {diff.sha256})")
        return 0
    if diff.b_is_version_of_a:
        print(f"{args.b} is a version of {args.a} (its parent sha256 matches)")
    for line in diff.differences:
        print(line)
    return 0


#: ``postlab plan``'s subcommands.
PLAN_COMMANDS = {"schema": plan_schema, "check": plan_check, "diff": plan_diff}


def plan(args: argparse.Namespace) -> int:
    return PLAN_COMMANDS[args.plan_command](args)
