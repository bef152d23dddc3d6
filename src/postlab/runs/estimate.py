"""What a plan will cost, estimated before it trains; absurd plans are refused unless confirmed.

Every field of a plan is bounded by the schema, yet the bounds multiply: a valid plan can ask
for a billion sequences per RL step, a 50-million-parameter model or ten thousand samples per
question, and it would then train for days or exhaust memory hours in. So a run is first
estimated:

* counts follow from the plan alone: completions and gradient steps are what the engine will
  do (exact, with dynamic sampling's extra groups as an upper bound), tokens are an upper bound
  (every completion may use ``max_new_tokens``), memory is a rough figure for the largest batch
  held at once plus the model's copies and one seed's entry (a run writes each seed's rows
  into a chunk and lets them go);
* time and memory come from a short calibration: the real model code (the model, decoding
  with :func:`postlab.engines.rollout.generate`, the RL objective, the reward contract, record
  writing) is timed on this machine at bounded sizes and scaled linearly to the plan's sizes,
  the engine's own SFT, evaluation and RL steps are run a few times, within a small share of
  the modelled run, to correct for what the bounded timings leave out, and the peak memory
  of a decode and of an RL step is measured for the policy at hand; the process's memory
  before the engine's own steps are run is what a run holds before training, its age when
  calibrating began what the run spent starting.

:func:`check_size` refuses a plan over the limits (:mod:`.limits`) with a one-line
:class:`UserError`, unless the user confirms with ``--allow-large``. Count limits are checked
before anything is built or timed, so an absurd plan is refused at once. The counts are
:mod:`.counts`, the calibration :mod:`.timing`, its pricing :mod:`.pricing`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.runs.counts import ComputeEstimate, estimate_counts
from postlab.runs.limits import ALLOW_FLAG, size_problems
from postlab.runs.pricing import Calibration, priced
from postlab.runs.timing import calibrate

if TYPE_CHECKING:
    from postlab.plan.schema import Plan


def estimate(plan: Plan, *, calibrated: bool = True) -> ComputeEstimate:
    """Counts, and with ``calibrated`` the wall time from a calibration on this machine."""
    counts = estimate_counts(plan)
    if not calibrated:
        return counts
    return priced(counts, plan, calibrate(plan))


def _refuse(problems: Sequence[str]) -> UserError:
    return UserError(f"plan too large: {'; '.join(problems)}; pass {ALLOW_FLAG} to run it "
                     "anyway")


def check_size(plan_data: dict[str, Any], allow_large: bool,
               calibration: Callable[[dict[str, Any]], Calibration] = calibrate
               ) -> ComputeEstimate:
    """Estimate a valid plan and refuse it if it exceeds a limit, unless ``allow_large``.

    Count limits are checked before calibrating, so nothing of an absurd plan is built; the
    calibration itself never allocates more than bounded sizes, even when allowed.
    ``calibration`` gives the figures (a run's reuses a kept one: :mod:`.calibrations`).
    """
    counts = estimate_counts(plan_data)
    problems = size_problems(counts)
    if problems and not allow_large:
        raise _refuse(problems)
    est = priced(counts, plan_data, calibration(plan_data))
    if not allow_large and size_problems(est):
        raise _refuse(size_problems(est))
    return est
