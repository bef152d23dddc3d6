"""postlab: post-training small language models with verifiable rewards, reproducibly.

From Python: ``postlab.freeze`` writes plans (``check_plan`` and ``diff_plans`` inspect
them); ``register`` fixes hypotheses before training; ``run``, ``reproduce`` and ``sweep``
train; ``evaluate`` measures a plan's starting model; ``verify``, ``report``, ``compare`` and
``load_run`` read (see :mod:`postlab.api`); ``Plan`` is the typed plan they all read.
They are imported on first use, so ``import postlab`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from postlab.version import __version__

__all__ = ["Plan", "__version__", "check_plan", "compare", "diff_plans", "evaluate", "exercises",
           "export", "freeze", "load_run", "plan_schema", "plot", "register", "report",
           "reproduce", "run", "samples", "sweep", "verify"]

if TYPE_CHECKING:
    from postlab.api import (
        Plan,
        check_plan,
        compare,
        diff_plans,
        evaluate,
        exercises,
        export,
        freeze,
        load_run,
        plan_schema,
        plot,
        register,
        report,
        reproduce,
        run,
        samples,
        sweep,
        verify,
    )


def __getattr__(name: str) -> Any:
    """The API's functions, imported from :mod:`postlab.api` on first use."""
    if name in __all__ and name != "__version__":
        from postlab import api

        return getattr(api, name)
    raise AttributeError(f"module 'postlab' has no attribute {name!r}")
