"""The ensemble engine against the exact one on the teaching plan, CI-sized: 16 seeds per
engine, independent seeds, every metric shown equivalent within the CI margins
(``postlab.analysis.equivalence.CI_MARGINS``; the full check with 32 seeds and the tighter
margins is ``bench/bench_ensemble.py``)."""

from __future__ import annotations

import pytest

from postlab.analysis.equivalence import CI_MARGINS, compare_engines
from postlab.cli import main
from postlab.plan.frozen import freeze, teaching_plan
from postlab.records.record import load_record

pytestmark = pytest.mark.slow

SEEDS = 16


def test_the_engines_are_equivalent_on_the_teaching_plan(tmp_path, capsys):
    records = {}
    for engine, first in (("exact", 1), ("ensemble", SEEDS + 1)):
        plan = tmp_path / f"{engine}.json"
        freeze(plan, teaching_plan() | {"seeds": list(range(first, first + SEEDS))})
        out = tmp_path / engine
        assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--engine", engine,
                     "--workers", "2", "--quiet"]) == 0
        records[engine] = load_record(out / "record.json")
    results = compare_engines(records["exact"], records["ensemble"], teaching_plan(),
                              CI_MARGINS)
    assert len(results) == 2 * len(CI_MARGINS)
    shown = [f"{r.metric}/{r.arm}: {r.difference:+.4f} [{r.low:+.4f}, {r.high:+.4f}] "
             f"margin {r.margin:.4f}" for r in results]
    assert all(r.equivalent for r in results), "\n".join(shown)
