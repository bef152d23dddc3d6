"""Engines are a registry: a third engine plugs in with its own module and one registration,
and orchestration, the record, verify and resume work for it unchanged."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from plans import SMALL, rows, write_plan
from recordfiles import read_record, write_record

from postlab.cli import main
from postlab.engines.exact import EXACT, arm_task, sft_task
from postlab.engines.registry import DEFAULT_ENGINE, ENGINES, StageKey, Work, engine_for
from postlab.plan.arms import arm_names
from postlab.plan.frozen import load_plan
from postlab.registry import Registry
from postlab.runs.orchestration import RunOptions, run_plan


@dataclass(frozen=True)
class WholeSeed:
    """A seed's SFT and then every arm, in one task (the exact engine's steps, one after the
    other in one process)."""

    plan: dict[str, Any]
    seed: int
    out_dir: Path

    @property
    def keys(self) -> tuple[StageKey, ...]:
        return tuple((str(self.out_dir), self.seed, stage)
                     for stage in ("initial", *arm_names(self.plan)))

    def __call__(self, emit) -> dict[StageKey, dict[str, Any]]:
        sft = sft_task(self.plan, self.seed, self.out_dir, 0, emit)
        results = {self.keys[0]: {k: v for k, v in sft.items()
                                  if k not in ("state_dict", "untrained_state_dict")}}
        for key in self.keys[1:]:
            results[key] = arm_task(self.plan, self.seed, key[2], sft, self.out_dir, 0, emit)
        return results


class SeedAtOnce:
    name = "seed-at-once"
    summary = "a seed's stages in one task"
    keeps_results = False
    whole_seeds = True

    def __init__(self) -> None:
        self.calls: list[str] = []

    def problems(self, plan: Mapping[str, Any], log: Sequence[str] = ()) -> list[str]:
        return []

    def batch_key(self, plan: Mapping[str, Any]) -> str:
        return "alone"

    def tasks(self, works: Sequence[Work], capacity: int) -> list:
        self.calls.append("tasks")
        return [WholeSeed(work.plan, seed, work.out_dir) for work in works
                for seed in work.seeds]

    def after(self, task, results, work: Work) -> list:
        return []

    def evaluate_many(self, models, plan, seeds, device):
        self.calls.append("evaluate")
        return EXACT.evaluate_many(models, plan, seeds, device)


def test_a_third_engine_trains_records_verifies_and_resumes(tmp_path, capsys):
    plan_path = write_plan(tmp_path / "plan.json", **SMALL)
    plan = load_plan(plan_path)
    exact = run_plan(plan, plan.raw, RunOptions(out_dir=tmp_path / "exact"))
    engine = SeedAtOnce()
    with ENGINES.registered(engine.name, engine):
        record = run_plan(plan, plan.raw, RunOptions(out_dir=tmp_path / "third",
                                                     engine=engine.name))
        assert record.engine == engine.name and engine_for(record) is engine
        assert rows(record) == rows(exact)  # the same steps, in other tasks
        assert main(["verify", str(tmp_path / "third")]) == 0
        assert "evaluate" in engine.calls
        # resume: a seed kept whole is recorded from its kept results, the other trains
        out = tmp_path / "third"
        partial = read_record(out)
        partial["runs"] = partial["runs"][:1]
        write_record(out, partial)
        (out / "summary.json").unlink()
        (out / "fingerprint.txt").unlink()
        engine.calls.clear()
        resumed = run_plan(None, None, RunOptions(out_dir=out, resume=True,
                                                  engine=engine.name))
        assert engine.calls == ["tasks"] and rows(resumed) == rows(exact)
        with pytest.raises(Exception, match="started with the seed-at-once engine"):
            run_plan(None, None, RunOptions(out_dir=out, resume=True, engine=DEFAULT_ENGINE))
    capsys.readouterr()
    with pytest.raises(KeyError, match="unknown engine 'seed-at-once'; known: ensemble, exact"):
        ENGINES["seed-at-once"]


def test_lazy_entries_import_only_when_looked_up():
    registry: Registry[Any] = Registry("thing")
    registry.register_lazy("dumps", "json:dumps")
    assert registry.names() == ["dumps"] and "dumps" in registry
    assert registry["dumps"] is json.dumps
    with pytest.raises(ValueError, match="already registered"):
        registry.register_lazy("dumps", "json:loads")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("dumps")(json.loads)
