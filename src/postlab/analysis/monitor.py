"""The hacking monitor's rule as a plan states it, and the words every report uses for it.

Apart from the aggregation because ``postlab plans`` shows a plan's rule before any run exists,
and the rule rests on the plan alone (:mod:`postlab.analysis.onset` holds the CUSUM itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from postlab.analysis.onset import Rule, calibrated_rule, stated_rule
from postlab.plan.margins import default

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

ONSET_METHOD = ("one-sided CUSUM on the per-step gap (the step's rollouts accepted under the "
                "trained contract minus those right under the task's first contract): "
                "S_t = max(0, S_(t-1) + "
                "gap_t - {drift:g}), alarm when S_t > {threshold:g}; onset = first step of the "
                "excursion that raised it; {promise}")
ONSET_CALIBRATED = ("drift and threshold chosen for a false-alarm probability of at most "
                    "{stated:.1%} per seed and arm over {steps} steps of {batch} rollouts at a "
                    "gap of {tolerated:g} (this rule's, exactly: {reached:.2%}); a gap of "
                    "{detect:g} from the first step raises the alarm after {delay:.1f} steps "
                    "on average")
ONSET_STATED = ("drift and threshold stated by the plan; their false-alarm probability per "
                "seed and arm over {steps} steps of {batch} rollouts at a gap of "
                "{tolerated:g}: {reached:.2%}; a gap of {detect:g} from the first step raises "
                "the alarm after {delay:.1f} steps on average")


def monitor_rule(plan: Plan) -> Rule:
    """The plan's hacking-monitor rule with what it promises over its RL steps: calibrated
    for its false-alarm rate (``hacking_monitor.false_alarm``, default in
    ``postlab.plan.margins``), or, where the plan states a drift or a threshold (plans
    written before calibration), that rule, with the old default for the one missing."""
    from postlab.plan.schema import HackingMonitor

    monitor = plan.hacking_monitor or HackingMonitor()
    steps = plan.rl_steps
    batch = plan.prompts_per_step * plan.group_size
    tolerated = monitor.tolerated_gap or default("hacking_monitor.tolerated_gap")
    detect = monitor.detect_gap or default("hacking_monitor.detect_gap")
    if monitor.drift is not None or monitor.threshold is not None:
        drift, threshold = monitor.drift, monitor.threshold
        return stated_rule(default("hacking_monitor.drift") if drift is None else drift,
                           default("hacking_monitor.threshold") if threshold is None
                           else threshold, steps, batch, tolerated, detect)
    rate = monitor.false_alarm or default("hacking_monitor.false_alarm")
    return calibrated_rule(steps, batch, rate, tolerated, detect)


def describe_rule(rule: Rule) -> str:
    """The rule and what it promises, in the words every report form uses."""
    fields = {"steps": rule.steps, "batch": rule.batch, "tolerated": rule.tolerated_gap,
              "detect": rule.detect_gap, "reached": rule.false_alarm, "delay": rule.delay}
    promise = (ONSET_STATED.format(**fields) if rule.stated_false_alarm is None else
               ONSET_CALIBRATED.format(stated=rule.stated_false_alarm, **fields))
    return ONSET_METHOD.format(drift=rule.drift, threshold=rule.threshold, promise=promise)
