"""postlab from Python: every command's work as a function with typed arguments.

``freeze``, ``check_plan`` and ``diff_plans`` write and inspect plans (:mod:`.planning`);
``evaluate`` measures a plan's starting model (:mod:`.evaluating`); ``register`` fixes
hypotheses before training (:mod:`.registering`); ``run``, ``reproduce`` and ``sweep``
train (:mod:`.training`); ``verify``, ``report``, ``compare``, ``plot``, ``export``,
``samples`` and ``exercises`` read (:mod:`.reading`); ``load_run`` gives a checked run's
rows as tables. The command line (:mod:`postlab.cli`) parses, calls these and prints.
Bad input raises :class:`~postlab.errors.UserError` before anything is written.
"""

from postlab.api.evaluating import evaluate
from postlab.api.planning import check_plan, diff_plans, freeze
from postlab.api.reading import compare, exercises, export, plot, report, samples, verify
from postlab.api.registering import register
from postlab.api.training import reproduce, run, sweep
from postlab.export.loaded import load_run

__all__ = ["check_plan", "compare", "diff_plans", "evaluate", "exercises", "export", "freeze",
           "load_run", "plot", "register", "report", "reproduce", "run", "samples", "sweep",
           "verify"]
