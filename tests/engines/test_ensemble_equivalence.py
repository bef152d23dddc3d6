"""The ensemble engine against the exact one on the teaching plan, CI-sized: 8 seeds trained by
both engines, compared seed by seed (the same initial weights, so a t interval over per-seed
differences), every metric shown equivalent within the CI margins
(``postlab.analysis.equivalence.CI_MARGINS``; the full check with 32 seeds per engine and the
tighter margins is ``bench/bench_ensemble.py``)."""

from __future__ import annotations

import pytest

from postlab.analysis.equivalence import CI_MARGINS, compare_engines
from postlab.cli import main
from postlab.plan.frozen import freeze, teaching_plan
from postlab.records.record import load_record

pytestmark = pytest.mark.slow

SEEDS = list(range(1, 9))


def test_the_engines_are_equivalent_on_the_teaching_plan(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    freeze(plan, teaching_plan() | {"seeds": SEEDS})
    records = {}
    for engine in ("exact", "ensemble"):
        out = tmp_path / engine
        assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--engine", engine,
                     "--workers", "1", "--quiet"]) == 0
        records[engine] = load_record(out / "record.json")
    results = compare_engines(records["exact"], records["ensemble"], teaching_plan(),
                              CI_MARGINS, paired=True)
    assert len(results) == 2 * len(CI_MARGINS)
    shown = [f"{r.metric}/{r.arm}: {r.difference:+.4f} [{r.low:+.4f}, {r.high:+.4f}] "
             f"margin {r.margin:.4f}" for r in results]
    assert all(r.paired and r.equivalent for r in results), "\n".join(shown)
