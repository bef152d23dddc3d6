"""Demonstration selection (answer 9): SFT arms that choose their demonstrations by
difficulty, at the plan's steps and batch, from the same untrained weights and random stream
as the seed's SFT; with the random rule such an arm is that SFT, bit for bit."""

from __future__ import annotations

import math
import random

import pytest
from plans import SMALL, trained_with_the_cli, typed, write_plan

from postlab.cli import main
from postlab.plan.frozen import teaching_plan
from postlab.plan.validation import validate_plan
from postlab.tasks.registry import TASKS, task_for
from postlab.tasks.selection import SELECTIONS, hardest_start, order


def test_arithmetic_difficulty_counts_carries_then_digits():
    add = TASKS["single_digit_addition"](typed())
    assert add.difficulty((7, 8)) == (1.0, 2.0) and add.difficulty((2, 3)) == (0.0, 1.0)
    assert add.difficulty((5, 5)) == (1.0, 2.0) and add.difficulty((0, 0)) == (0.0, 1.0)
    wide = TASKS["multi_digit_addition"](
        typed(task="multi_digit_addition", operand_digits=2))
    assert wide.difficulty((45, 55)) == (2.0, 3.0)  # 5+5 carries, 4+5+1 carries
    assert wide.difficulty((45, 51)) == (0.0, 2.0)
    assert wide.difficulty((19, 1)) == (1.0, 2.0)
    times = TASKS["single_digit_multiplication"](
        typed(task="single_digit_multiplication"))
    assert times.difficulty((3, 4)) == (0.0, 2.0) and times.difficulty((2, 3)) == (0.0, 1.0)


def test_reasoning_gym_difficulty_is_the_items_own_settings():
    pytest.importorskip("reasoning_gym")
    from pathlib import Path

    from postlab.plan.frozen import load_plan

    root = Path(__file__).resolve().parents[2]
    plan = load_plan(root / "examples" / "gym" / "chain-sum.json").model
    task = task_for(plan)
    key = plan.split["train"][0]
    metadata = task.item(key).entry["metadata"]
    settings = sorted(metadata["difficulty"])
    assert settings and task.difficulty(key) == tuple(float(metadata[s]) for s in settings)


def _plan_order_draws(pairs, seed, steps, batch):
    rng = random.Random(seed)
    return [rng.choices(pairs, k=batch) for _ in range(steps)]


def test_the_rules_draw_what_they_say():
    plan = typed()
    pairs = plan.split["train"]
    task = task_for(plan)
    steps, batch = 10, 16
    # random: the teaching plan's own draws, in the plan's order
    split = order(pairs, task.difficulty, "random")
    rng = random.Random(1011)
    assert [SELECTIONS["random"](split, rng, t, steps, batch) for t in range(steps)] == \
        _plan_order_draws(pairs, 1011, steps, batch)
    # easiest first: a pool of the ceil(N (t+1) / T) easiest, growing to the whole split
    ranked = order(pairs, task.difficulty, "easiest-first")
    levels = [task.difficulty(p) for p in ranked.pairs]
    assert levels == sorted(levels) and sorted(map(tuple, ranked.pairs)) == sorted(
        map(tuple, pairs))
    rng = random.Random(5)
    for t in range(steps):
        pool = math.ceil(len(pairs) * (t + 1) / steps)
        drawn = SELECTIONS["easiest-first"](ranked, rng, t, steps, batch)
        assert len(drawn) == batch
        assert all(ranked.pairs.index(p) < pool for p in drawn)
    # hardest only: the hardest levels holding at most half of the split, never split
    start = hardest_start(ranked)
    hard = ranked.pairs[start:]
    assert 0 < len(hard) <= len(pairs) // 2
    assert start == 0 or levels[start - 1] < levels[start]
    carries = [p for p in pairs if p[0] + p[1] >= 10]
    assert sorted(map(tuple, hard)) == sorted(map(tuple, carries))  # the carries, here
    drawn = SELECTIONS["hardest-only"](ranked, random.Random(3), 0, steps, 200)
    assert {tuple(p) for p in drawn} <= {tuple(p) for p in hard}


def test_hardest_only_keeps_whole_levels_up_to_half():
    from postlab.tasks.selection import Ordered

    def start(levels):
        return hardest_start(Ordered(pairs=[(0, i) for i in range(len(levels))],
                                     levels=[(v,) for v in levels]))

    assert start([0, 0, 0, 1, 1, 2]) == 3  # levels 1 and 2 hold 3 of 6
    assert start([0, 0, 0, 0, 1, 2]) == 4  # adding level 0 would pass half
    assert start([0, 1, 1, 1, 1, 1]) == 1  # the hardest level, though it is most of them
    assert start([3, 3]) == 0 and start([]) == 0


@pytest.mark.parametrize(("arm", "needle"), [
    ({"name": "x", "pipeline": "sft-selected"}, "needs one"),
    ({"name": "x", "pipeline": "sft-selected", "selection": "hardest-first"},
     "unknown selection 'hardest-first'"),
    ({"name": "x", "pipeline": "sft-selected", "selection": "easiest-first",
      "contract": "strict"}, "no contract"),
    ({"name": "x", "pipeline": "sft-only", "sft_steps": 5, "selection": "easiest-first"},
     "goes with the sft-selected pipeline"),
])
def test_the_plan_check_refuses_a_selection_where_it_does_not_belong(arm, needle):
    problems = validate_plan(teaching_plan() | {"arms": ["strict", arm]})
    assert any(needle in message for _, message in problems), problems


SELECTED = SMALL | {"arms": [
    "strict",
    {"name": "sft-again", "pipeline": "sft-selected", "selection": "random"},
    {"name": "easiest-first", "pipeline": "sft-selected", "selection": "easiest-first"},
    {"name": "hardest-only", "pipeline": "sft-selected", "selection": "hardest-only"},
]}


@pytest.fixture(scope="module")
def selected_run(tmp_path_factory):
    return trained_with_the_cli(tmp_path_factory.mktemp("selected"), **SELECTED)


def test_the_random_rule_is_the_seeds_sft_bit_for_bit(selected_run):
    import torch

    from postlab.policies.checkpoint import load_checkpoint
    from postlab.records.opened import open_run

    record = open_run(selected_run).record
    for run in record.runs:
        assert run.arm_sft_loss is not None and run.checkpoints is not None
        assert run.compute is not None
        assert run.arm_sft_loss["sft-again"] == run.sft_loss
        assert run.evaluations["sft-again"] == run.evaluations["initial"]
        weights = [load_checkpoint(selected_run / run.checkpoints[stage].file,
                                   run.checkpoints[stage].sha256)["state_dict"]
                   for stage in ("initial", "sft-again")]
        assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
        for rule in ("easiest-first", "hardest-only"):
            assert len(run.arm_sft_loss[rule]) == SMALL["sft_steps"]
            assert run.arm_sft_loss[rule] != run.sft_loss
            assert run.compute[rule] == run.compute["initial"]  # matched


def test_exercise_9_and_the_reports_show_the_rules(selected_run, capsys):
    assert main(["verify", str(selected_run)]) == 0
    capsys.readouterr()
    assert main(["exercises", "9", str(selected_run)]) == 0
    out = capsys.readouterr().out
    for rule in ("easiest-first", "hardest-only"):
        line = next(line for line in out.splitlines() if line.strip().startswith(rule))
        assert line.split()[:2] == [rule, rule] and "[" in line  # the rule, and intervals
    assert "the selection's effect against random demonstrations" in out
    assert main(["report", str(selected_run), "--format", "json"]) == 0
    import json

    compute = {c["stage"]: c for c in json.loads(capsys.readouterr().out)["compute"]}
    assert compute["easiest-first"]["pipeline"] == "sft-selected"
    assert compute["easiest-first"]["total"] == compute["initial"]["total"]


def test_the_ensemble_engine_refuses_selected_arms(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", **SELECTED)
    assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "run"),
                 "--engine", "ensemble", "--quiet"]) == 2
    assert "sft-selected arms" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
