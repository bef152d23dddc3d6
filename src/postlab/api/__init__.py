"""postlab from Python: every command's work as a function with typed arguments.

``freeze``, ``check_plan``, ``diff_plans`` and ``plan_schema`` write and inspect plans
(:mod:`.planning`);
``evaluate`` measures a plan's starting model (:mod:`.evaluating`); ``register`` fixes
hypotheses before training (:mod:`.registering`); ``run``, ``reproduce`` and ``sweep``
train (:mod:`.training`); ``report`` reads a run (:mod:`.reports`); ``verify``,
``compare``, ``plot``, ``export``, ``samples`` and ``exercises`` read too (:mod:`.reading`);
``load_run`` gives a checked run's rows as tables. The command line (:mod:`postlab.cli`)
parses, calls one of these per command and prints.
Bad input raises :class:`~postlab.errors.UserError` before anything is written.
"""

from typing import TYPE_CHECKING, Any

from postlab.api.designing import design
from postlab.api.evaluating import evaluate
from postlab.api.planning import check_plan, diff_plans, freeze, plan_schema
from postlab.api.reading import compare, exercises, export, plot, samples, verify
from postlab.api.registering import register
from postlab.api.reports import Report, report
from postlab.api.training import reproduce, run, sweep
from postlab.export.loaded import load_run

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


def __getattr__(name: str) -> Any:
    """``Plan``, imported on first use: the plan's model imports the policies (and torch),
    which a command must not load before it pins the CPU code path."""
    if name == "Plan":
        from postlab.plan.schema import Plan

        return Plan
    raise AttributeError(f"module 'postlab.api' has no attribute {name!r}")

__all__ = ["Plan", "Report", "check_plan", "compare", "design", "diff_plans", "evaluate",
           "exercises", "export", "freeze", "load_run", "plan_schema", "plot", "register",
           "report", "reproduce", "run", "samples", "sweep", "verify"]
