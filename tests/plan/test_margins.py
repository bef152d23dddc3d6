"""Every equivalence margin and default threshold is written once, with its reason, in
postlab.plan.margins; the code reads it from there and the documentation cites each one."""

from __future__ import annotations

from pathlib import Path

import pytest

from postlab.plan import margins
from postlab.plan.margins import DEFAULTS, SETS, default

#: The README and every page of the documentation site.
ROOT = Path(__file__).resolve().parents[2]
README = "\n".join(path.read_text() for path in [ROOT / "README.md",
                                                   *sorted((ROOT / "docs").glob("*.md"))])


def test_every_margin_and_default_says_why():
    for group in [DEFAULTS, *SETS.values()]:
        for name, margin in group.items():
            assert len(margin.why.split()) >= 8, name


def test_the_code_reads_its_defaults_from_the_file():
    pytest.importorskip("scipy")
    from postlab.analysis import coverage, equivalence, hypotheses, intervals
    from postlab.analysis.monitor import monitor_rule
    from postlab.plan.frozen import teaching_plan
    from postlab.plan.schema import HackingMonitor, Hypotheses, Plan

    assert default("hypotheses.alpha") == hypotheses.DEFAULT_ALPHA
    assert Hypotheses.model_fields["alpha"].default == default("hypotheses.alpha")
    assert default("intervals.confidence") == intervals.CONFIDENCE
    assert default("equivalence.level") == equivalence.LEVEL
    assert default("coverage.verdict_margin") == coverage.VERDICT_MARGIN
    assert default("coverage.verdict_level") == coverage.VERDICT_LEVEL
    assert all(field.default is None for field in HackingMonitor.model_fields.values())
    rule = monitor_rule(Plan.of(teaching_plan()))
    assert (rule.stated_false_alarm, rule.tolerated_gap, rule.detect_gap) == (
        default("hacking_monitor.false_alarm"), default("hacking_monitor.tolerated_gap"),
        default("hacking_monitor.detect_gap"))
    half = monitor_rule(Plan.of(teaching_plan() | {"hacking_monitor": {"threshold": 1.0}}))
    assert half.drift == default("hacking_monitor.drift")
    assert margins.values(margins.EQUIVALENCE)["coverage"] == 0.10


def test_the_readme_cites_each_default_with_its_value():
    assert "`postlab.plan.margins`" in README
    for name, margin in DEFAULTS.items():
        assert f"| `{name}` | {margin.value:g} |" in README, name
