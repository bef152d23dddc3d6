"""Estimates before training: counts against real records, limits, calibration's bounds."""

import dataclasses
import json
import time

import pytest
import torch
from plans import rows, typed, write_plan

from postlab.errors import UserError
from postlab.plan.frozen import load_plan
from postlab.policies.gru import CharGRU
from postlab.runs import counts as counts_mod
from postlab.runs import estimate as est_mod
from postlab.runs import limits as limits_mod
from postlab.runs import pricing as pricing_mod
from postlab.runs import timing as timing_mod
from postlab.runs.counts import estimate_counts
from postlab.runs.estimate import check_size, estimate
from postlab.runs.estimate_text import format_bytes, format_count, format_seconds, render_estimate
from postlab.runs.limits import MAX_SECONDS
from postlab.runs.orchestration import RunOptions, run_plan
from postlab.runs.timing import calibrate

#: One seed, every pipeline, a few steps of each: trains in about a second.
TINY = {"seeds": [3], "embedding": 8, "hidden": 8, "sft_steps": 6, "sft_batch": 4,
        "rl_steps": 3, "prompts_per_step": 2, "group_size": 3, "eval_samples": 2,
        "arms": ["strict",
                 {"name": "only", "pipeline": "rl-only", "contract": "substring"},
                 {"name": "more", "pipeline": "sft-only", "sft_steps": 5}]}

#: Valid plans that would train for days or exhaust memory (the teaching plan otherwise).
ENORMOUS = {
    "sft_steps": ({"sft_steps": 1_000_000}, "gradient steps"),
    "hidden": ({"hidden": 4096}, "model parameters"),
    "eval_samples": ({"eval_samples": 10_000}, "record rows"),
    "batch": ({"prompts_per_step": 100_000, "group_size": 10_000}, "memory"),
}


def _train(folder, **changes):
    plan = write_plan(folder / "plan.json", **changes)
    loaded = load_plan(plan)
    record = run_plan(loaded, plan.read_bytes(), RunOptions(out_dir=folder / "run", workers=1))
    return loaded.model, record


def _record_rows(record):
    count = 0
    for run in record.runs:
        for history in run.arms.values():
            for step in history:
                count += len(step.rows)
                count += len(step.sampling.dropped_rows) if step.sampling is not None else 0
        for evaluation in run.evaluations.values():
            count += sum(len(s.greedy) + len(s.sampled) for s in evaluation.values())
    return count


def _checkpoints(record):
    return [{stage: info.sha256 for stage, info in run.checkpoints.items()}
            for run in record.runs]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("tiny"), **TINY)


def test_counts_by_hand_and_against_a_real_run(tiny):
    plan, record = tiny
    est = estimate_counts(plan)
    questions = sum(len(p) for p in plan.split.values())
    assert questions == 100
    # two RL arms x 3 steps x 2 prompts x 3 answers
    assert est.rl_completions == 2 * 3 * 2 * 3 == 36
    # 4 stages, each evaluated twice (after training and after reloading its checkpoint):
    # every question greedy once and sampled twice
    assert est.completions == 36 + 4 * 2 * 100 * 3 == 2436
    assert est.tokens == 2436 * plan.max_new_tokens
    # SFT 6, sft-only arm 5, two RL arms x 3 steps x 2 updates
    assert est.gradient_steps == 6 + 5 + 2 * 3 * 2 == 23
    assert est.record_rows == 36 + 4 * 100 * 3 == 1236
    assert est.parameters == record.parameters == CharGRU.from_plan(plan).parameter_count()
    # the largest batch: the train split's questions sampled twice, 4 prompt + 6 - 1 positions
    assert (est.batch_kind, est.batch_sequences, est.batch_positions) == ("evaluation",
                                                                           63 * 2, 9)

    compute = [c for run in record.runs for c in run.compute.values()]
    assert sum(c.completions for c in compute) == est.rl_completions
    assert sum(c.gradient_steps for c in compute) == est.gradient_steps
    recorded_tokens = sum(c.tokens_generated for c in compute)
    assert recorded_tokens <= est.rl_completions * plan.max_new_tokens <= est.tokens
    assert _record_rows(record) == est.record_rows


def test_dynamic_sampling_is_an_upper_bound(tmp_path):
    changes = TINY | {"arms": ["strict"], "dynamic_sampling": {"max_extra_groups": 2}}
    plan, record = _train(tmp_path, **changes)
    est = estimate_counts(plan)
    assert est.rl_completions == 3 * (2 + 2) * 3
    compute = record.runs[0].compute["strict"]
    assert 3 * 2 * 3 <= compute.completions <= est.rl_completions
    assert compute.gradient_steps == 3 * 2
    assert compute.tokens_generated <= est.rl_completions * plan.max_new_tokens
    assert _record_rows(record) <= est.record_rows


def _draws_by_loop(prompts: int, group: int, budget: int, steps: int, seed: int) -> float:
    """Extra groups per step, simulated plainly: each question's pass rate uniform, a group
    constant when its answers all pass or all fail, every constant group drawn again."""
    import random

    rng = random.Random(seed)

    def constant() -> bool:
        q = rng.random()
        passes = sum(rng.random() < q for _ in range(group))
        return passes in (0, group)

    total = 0
    for _ in range(steps):
        waiting = sum(constant() for _ in range(prompts))
        drawn = 0
        while waiting and drawn < budget:
            count = min(waiting, budget - drawn)
            drawn += count
            waiting -= sum(not constant() for _ in range(count))
        total += drawn
    return total / steps


def test_dynamic_sampling_is_timed_at_the_groups_it_is_expected_to_draw():
    plan = typed()
    expected = pricing_mod.expected_extra_groups
    assert expected(plan) == 0.0  # no dynamic sampling
    # 8 prompts, groups of 8: p = 2/9 constant, 8 * p / (1 - p) = 16/7 groups a step
    assert expected(plan.replace(dynamic_sampling={"max_extra_groups": 8})) == pytest.approx(16 / 7)
    assert expected(plan.replace(dynamic_sampling={"max_extra_groups": 2})) == 2.0  # the budget
    # one answer per group (below the schema's bound: the guard is checked, unvalidated)
    single = plan.replace(dynamic_sampling={"max_extra_groups": 3}).model_copy(
        update={"group_size": 1})
    assert expected(single) == 3.0
    assert expected(plan.replace(group_size=3, prompts_per_step=6,
                                 dynamic_sampling={"max_extra_groups": 20})) == pytest.approx(6.0)
    # against a plain simulation of the resampling loop (a large budget, then a binding one)
    for group, budget in ((8, 1000), (4, 1000), (3, 2)):
        changed = plan.replace(group_size=group, dynamic_sampling={"max_extra_groups": budget})
        simulated = _draws_by_loop(8, group, budget, 4000, seed=group)
        assert expected(changed) == pytest.approx(simulated, rel=0.06), (group, budget)
    # a budget near the mean binds on some steps only: the cap bounds the mean from above
    near = plan.replace(dynamic_sampling={"max_extra_groups": 2})
    assert 1.3 < _draws_by_loop(8, 8, 2, 4000, seed=5) < expected(near) == 2.0


def _fixed_calibration() -> pricing_mod.Calibration:
    """Unit costs chosen, not measured: the pricing below is arithmetic, not timing."""
    line = pricing_mod.Line(1e-4, 1e-5)
    return pricing_mod.Calibration(sft=line, reference=pricing_mod.Line(2e-4, 2e-5),
                               update=pricing_mod.Line(3e-4, 3e-5), decode=line,
                               row_seconds=1e-6, write_seconds=1e-7, optimizer_seconds=1e-3,
                               seconds=1.0, base_bytes=0)


def test_an_rl_step_is_priced_with_the_work_given():
    plan = typed(dynamic_sampling={"max_extra_groups": 8})
    calibration = _fixed_calibration()
    unit, work = pricing_mod.unit_seconds, pricing_mod.RLWork
    positions = counts_mod.plan_shape(plan)["decode_positions"]  # a full decode's, and an RL pass's
    decode = lambda rows: (1e-4 + 1e-5 * rows) * positions + 1e-6 * rows  # noqa: E731
    step = (decode(64) + (2e-4 + 2e-5 * 64) * positions
            + 2 * ((3e-4 + 3e-5 * 64) * positions + 1e-3))
    plain = unit(typed(), calibration)[2]
    assert plain == pytest.approx(step)
    assert unit(plan, calibration, work(0.0, 64, 2))[2] == pytest.approx(plain)
    # extra groups: one more decode of their answers
    for groups in (1.0, 16 / 7, 8.0):
        assert unit(plan, calibration, work(groups, 64, 2))[2] == pytest.approx(
            step + decode(8 * groups))
    # the default: the expected groups, every update over the whole batch
    assert work.expected(plan) == work(16 / 7, 64, 2)
    mid = step + decode(8 * 16 / 7)
    assert unit(plan, calibration)[2] == pytest.approx(mid)
    parts = pricing_mod.work_parts(plan, calibration)
    assert parts["rl"] == pytest.approx(len(plan.seeds) * len(plan.arms)
                                        * plan.rl_steps * mid)
    # steps that drop every group make no reference pass and no update
    assert unit(plan, calibration, work(8.0, 0, 0))[2] == pytest.approx(decode(64) + decode(64))
    # one step in two updating: half the reference passes and half the updates
    half = unit(plan, calibration, work(0.0, 64, 1))[2]
    assert half == pytest.approx(decode(64) + ((2e-4 + 2e-5 * 64) * positions
                                               + 2 * ((3e-4 + 3e-5 * 64) * positions + 1e-3)) / 2)


def test_rl_work_is_read_from_the_steps_counts():
    plan = typed(dynamic_sampling={"max_extra_groups": 8})
    # 4 steps of 8 x 8 answers, 10 extra groups in all, 2 updates each over 64 rows
    counts = {"completions": 4 * 64 + 10 * 8, "gradient_steps": 8, "examples_seen": 8 * 64}
    assert pricing_mod.RLWork.observed(plan, counts, 4) == pricing_mod.RLWork(2.5, 64.0, 2.0)
    # every group constant, dropped: the whole budget drawn and nothing updated
    dropped = {"completions": 4 * (64 + 64), "gradient_steps": 0, "examples_seen": 0}
    assert pricing_mod.RLWork.observed(plan, dropped, 4) == pricing_mod.RLWork(8.0, 0.0, 0.0)


def test_the_rl_factor_compares_the_steps_with_their_own_work(monkeypatch):
    """The calibration's untrained policy draws dynamic sampling's whole budget and, where
    constant groups are dropped, updates on nothing: its steps' time is set against that work,
    not the run's."""
    import postlab.engines.train as train

    plan = typed(dynamic_sampling={"max_extra_groups": 8, "constant_groups": "drop"})
    seen: dict[str, int] = {}
    calls: list[int] = []

    def reinforce(model, reference, some, seed, contract, *args, **kwargs):
        seen["steps"] = steps = some.rl_steps
        calls.append(steps)
        return model, [], {"completions": steps * 128, "tokens_generated": 0,
                           "gradient_steps": 0, "examples_seen": 0}

    real_typical = timing_mod._typical_seconds

    def typical(call, until, first=None):
        seen.pop("steps", None)
        seconds = real_typical(call, until, first)
        # the RL steps are made to take 0.5 s each; the other kinds keep their timing
        return 0.5 * seen["steps"] if "steps" in seen else seconds

    monkeypatch.setattr(train, "reinforce", reinforce)
    monkeypatch.setattr(timing_mod, "_typical_seconds", typical)
    calibration = timing_mod.calibrate(plan)
    assert calls  # the RL steps were timed
    raw = dataclasses.replace(calibration, factors=(1.0, 1.0, 1.0))
    drawn = pricing_mod.unit_seconds(plan, raw, pricing_mod.RLWork(8.0, 0.0, 0.0))[2]
    assert calibration.factors[2] == pytest.approx(0.5 / drawn)
    # against the run's whole step it would have been lower: that step does more
    assert pricing_mod.unit_seconds(plan, raw)[2] > drawn


def test_teaching_plan_figures():
    est = estimate_counts(typed())
    rl = 3 * 2 * 240 * 8 * 8  # seeds x arms x steps x prompts x answers
    evaluations = 3 * 3 * 2 * 100 * (1 + 16)  # seeds x stages x twice x questions x answers
    assert est.rl_completions == rl == 92_160
    assert est.completions == rl + evaluations == 122_760
    assert est.tokens == 122_760 * 6
    assert est.gradient_steps == 3 * (200 + 2 * 240 * 2) == 3_480
    assert est.parameters == 14 * 24 + 3 * 48 * (24 + 48 + 2) + 14 * (48 + 1) == 11_678
    assert est.record_rows == rl + 3 * 3 * 100 * 17 == 107_460
    assert (est.batch_kind, est.batch_sequences, est.batch_positions) == ("evaluation",
                                                                           63 * 16, 9)
    assert est.memory_bytes < 100 * 2**20
    assert est.seconds is None


def test_the_calibrated_estimate_prices_the_counts_it_was_given():
    # estimate() is what benchmarks and readers call; check_size() adds only the limits
    est = estimate(typed())
    counts = estimate_counts(typed())
    assert est.seconds is not None and est.seconds > 1
    assert est.calibration_seconds > 0
    assert est.memory_bytes == (counts.memory_bytes - counts.batch_bytes + est.batch_bytes
                                + est.base_bytes)
    assert est.completions == counts.completions


def test_the_time_counts_from_the_process_start_and_includes_calibrating():
    plan = typed()
    calibration = timing_mod.calibrate(plan)
    assert calibration.started_seconds is not None and calibration.started_seconds > 0
    late = dataclasses.replace(calibration, started_seconds=calibration.started_seconds + 100)
    slow = dataclasses.replace(calibration, seconds=calibration.seconds + 10)
    base = pricing_mod.wall_seconds(plan, calibration)
    assert pricing_mod.wall_seconds(plan, late) - base == pytest.approx(100)
    assert pricing_mod.wall_seconds(plan, slow) - base == pytest.approx(10)
    unknown = dataclasses.replace(calibration, started_seconds=None)
    assert pricing_mod.wall_seconds(plan, unknown) - base == pytest.approx(
        pricing_mod.STARTUP_SECONDS - calibration.started_seconds)


def test_the_engines_own_steps_correct_the_modelled_ones(monkeypatch):
    plan = typed()
    calibration = timing_mod.calibrate(plan)
    assert all(0.2 < factor < 10 for factor in calibration.factors)
    # each factor multiplies its kind of step: doubling the RL one adds the RL steps' time
    rl = pricing_mod.unit_seconds(plan, calibration)[2]
    doubled = dataclasses.replace(calibration, factors=(*calibration.factors[:2],
                                                        2 * calibration.factors[2]))
    rl_steps = len(plan.seeds) * len(plan.arms) * plan.rl_steps
    assert pricing_mod.wall_seconds(plan, doubled) - pricing_mod.wall_seconds(
        plan, calibration) == pytest.approx(rl_steps * rl)
    # where the engine's steps would take too long to time, the modelled ones stand
    monkeypatch.setattr(timing_mod, "REAL_PATH_SECONDS", 0.0)
    monkeypatch.setattr(timing_mod, "REAL_PATH_MAX_SECONDS", 0.0)
    assert timing_mod.calibrate(plan).factors == (1.0, 1.0, 1.0)


def test_the_engines_steps_are_timed_within_a_share_of_the_run(monkeypatch):
    plan = typed()
    # no floor and no share: nothing is timed, the modelled steps stand
    monkeypatch.setattr(timing_mod, "REAL_PATH_SECONDS", 0.0)
    monkeypatch.setattr(timing_mod, "REAL_PATH_SHARE", 0.0)
    assert timing_mod.calibrate(plan).factors == (1.0, 1.0, 1.0)
    # the same floor, with the whole modelled run as the share: every kind is timed
    monkeypatch.setattr(timing_mod, "REAL_PATH_SHARE", 1.0)
    monkeypatch.setattr(timing_mod, "REAL_PATH_MAX_SECONDS", 60.0)
    assert all(factor != 1.0 for factor in timing_mod.calibrate(plan).factors)
    # the share is capped: a cap of nothing times nothing, whatever the share
    monkeypatch.setattr(timing_mod, "REAL_PATH_MAX_SECONDS", 0.0)
    assert timing_mod.calibrate(plan).factors == (1.0, 1.0, 1.0)


def test_the_run_is_the_sum_of_its_parts():
    plan = typed()
    calibration = timing_mod.calibrate(plan)
    parts = pricing_mod.work_parts(plan, calibration)
    sft, evaluation, rl = pricing_mod.unit_seconds(plan, calibration)
    seeds, arms = len(plan.seeds), len(plan.arms)
    assert parts["sft"] == pytest.approx(seeds * plan.sft_steps * sft)
    assert parts["evaluation"] == pytest.approx(seeds * (1 + arms) * 2 * evaluation)
    assert parts["rl"] == pytest.approx(seeds * arms * plan.rl_steps * rl)
    started = calibration.started_seconds
    assert pricing_mod.wall_seconds(plan, calibration) == pytest.approx(
        started + calibration.seconds + sum(parts.values()) + pricing_mod.FINISH_SECONDS)


def test_memory_comes_from_the_measured_batches_where_measured():
    plan = typed()
    counts = estimate_counts(plan)
    calibration = timing_mod.calibrate(plan)
    sampled = 63 * 16  # the largest split's questions x samples
    rows = 2 * (63 + 18 + 19) * 17 * counts_mod.ROW_BYTES  # a stage's rows, the reload check's
    big = dataclasses.replace(calibration, decode_row_bytes=100_000.0, step_bytes=1)
    assert pricing_mod.measured_batch_bytes(plan, counts, big) == 100_000 * sampled + rows
    step = dataclasses.replace(calibration, decode_row_bytes=None, step_bytes=2**30)
    assert pricing_mod.measured_batch_bytes(plan, counts, step) == 2**30
    # nothing measured: the modelled batch
    none = dataclasses.replace(calibration, decode_row_bytes=None, step_bytes=None)
    assert pricing_mod.measured_batch_bytes(plan, counts, none) == counts.batch_bytes
    priced = pricing_mod.priced(counts, plan, big)
    assert priced.memory_bytes == (counts.memory_bytes - counts.batch_bytes
                                   + 100_000 * sampled + rows + big.base_bytes)


def test_teaching_plan_passes_with_a_quick_calibration():
    start = time.perf_counter()
    est = check_size(typed(), allow_large=False)
    # bounds of seconds, not a speed claim: the suite runs two tests at a time on two cores
    assert time.perf_counter() - start < 10.0
    assert 0 < est.calibration_seconds < 10.0
    assert 1 < est.seconds < MAX_SECONDS
    text = render_estimate(est)
    assert len(text.splitlines()) == 2
    for figure in ("3 seeds x 2 arms", "122,760 completions", "<= 736,560 tokens",
                   "3,480 gradient steps", "11,678 parameters", "evaluation 1,008 x 9",
                   "on one worker here (calibrated", "of it before training"):
        assert figure in text
    # the process's own memory (torch loaded, a model built) is measured, and added
    counts = estimate_counts(typed())
    assert est.base_bytes > 50 * 2**20
    assert est.memory_bytes == (counts.memory_bytes - counts.batch_bytes + est.batch_bytes
                                + est.base_bytes)


@pytest.mark.parametrize("name", list(ENORMOUS))
def test_enormous_plans_are_refused_at_once(name, monkeypatch):
    changes, what = ENORMOUS[name]
    plan = typed(**changes)

    def no_calibration(plan):
        raise AssertionError("refusal must come from counts, before calibrating")

    monkeypatch.setattr(est_mod, "calibrate", no_calibration)
    start = time.perf_counter()
    with pytest.raises(UserError) as caught:
        check_size(plan, allow_large=False)
    assert time.perf_counter() - start < 0.1
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("plan too large: ") and what in message
    assert message.endswith("pass --allow-large to run it anyway")


@pytest.mark.parametrize("name", list(ENORMOUS))
def test_enormous_plans_are_accepted_when_allowed(name):
    """Confirmed, a plan is estimated (bounded calibration, nothing trained) and returned."""
    plan = typed(**ENORMOUS[name][0])
    start = time.perf_counter()
    est = check_size(plan, allow_large=True)
    # bounded, even where the calibration is this process's first
    assert time.perf_counter() - start < 10.0
    assert est.seconds is not None and est.seconds > 0
    assert limits_mod.size_problems(est)


def test_figures_in_refusals():
    plan = typed(**ENORMOUS["batch"][0])
    with pytest.raises(UserError, match=r"RL step 1\.0 G x 9 positions") as caught:
        check_size(plan, allow_large=False)
    assert "tokens generated exceeds 1.0 G" in str(caught.value)
    plan = typed(**ENORMOUS["hidden"][0])
    with pytest.raises(UserError, match=r"50\.7 M model parameters exceeds 25\.0 M"):
        check_size(plan, allow_large=False)


def test_time_limit_is_checked_after_calibrating(monkeypatch):
    monkeypatch.setattr(pricing_mod, "wall_seconds", lambda plan, calibration: 2 * MAX_SECONDS)
    with pytest.raises(UserError, match=r"about 2\.0 days on one worker exceeds 24\.0 h"):
        check_size(typed(), allow_large=False)
    assert check_size(typed(), allow_large=True).seconds == 2 * MAX_SECONDS


@pytest.mark.parametrize("changes", [{"hidden": 4096},
                                     {"prompts_per_step": 100_000, "group_size": 10_000,
                                      "sft_batch": 100_000, "eval_samples": 10_000}])
def test_calibration_is_bounded(changes):
    plan = typed(**changes)
    start = time.perf_counter()
    calibration = calibrate(plan)
    assert time.perf_counter() - start < 4.0
    assert calibration.seconds < 4.0


def test_calibration_leaves_training_bit_identical(tiny, tmp_path):
    plan, before = tiny
    torch.manual_seed(1234)
    rng = torch.random.get_rng_state()
    threads = torch.get_num_threads()
    calibrate(plan.replace(threads=2))
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert torch.get_num_threads() == threads
    _, after = _train(tmp_path, **TINY)
    assert rows(after) == rows(before)
    assert [run.compute for run in after.runs] == [run.compute for run in before.runs]
    assert _checkpoints(after) == _checkpoints(before)


def test_estimate_without_calibration_renders():
    est = estimate(typed(), calibrated=False)
    assert est.seconds is None
    assert render_estimate(est).endswith("time not calibrated")


def test_formats():
    assert format_count(9_999_999) == "9,999,999"
    assert format_count(10**9) == "1.0 G"
    assert format_count(1.4e12) == "1.4 T"
    assert format_count(3e20) == "3.00e+20"
    assert format_bytes(512) == "512 B"
    assert format_bytes(5 * 2**20 + 2**19) == "5.5 MiB"
    assert format_bytes(8 * 2**30) == "8.0 GiB"
    assert format_seconds(25) == "25 s"
    assert format_seconds(56 * 60) == "56 min"
    assert format_seconds(7.6 * 3600) == "7.6 h"
    assert format_seconds(3 * 86400) == "3.0 days"


# --- through the command line ----------------------------------------------------------------

def test_run_prints_the_estimate_before_training(tmp_path, capsys):
    from postlab.cli import main

    plan = write_plan(tmp_path / "plan.json", seeds=[3], embedding=8, hidden=8, sft_steps=5,
                      rl_steps=2, prompts_per_step=2, group_size=2, eval_samples=1)
    assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "run"),
                 "--workers", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("code path: ")
    assert lines[1] == "device: cpu (the default)"
    assert lines[2].startswith("estimate: 1 seed x 2 arms;")


@pytest.mark.parametrize("command", ["run", "reproduce"])
def test_a_plan_over_the_limits_is_refused_before_anything_is_written(tmp_path, capsys,
                                                                     command):
    from postlab.cli import main

    plan = write_plan(tmp_path / "plan.json", eval_samples=10_000)
    out = tmp_path / "run"
    if command == "run":
        argv = ["run", "--plan", str(plan), "--out-dir", str(out)]
    else:  # a record of this plan, as if it had been trained with --allow-large
        (tmp_path / "old").mkdir()
        (tmp_path / "old" / "plan.json").write_bytes(plan.read_bytes())
        (tmp_path / "old" / "record.json").write_text(
            json.dumps({"plan_sha256": load_plan(plan).sha256, "runs": []}))
        argv = ["reproduce", str(tmp_path / "old"), "--out-dir", str(out), "--quiet"]
    before = sorted(p.name for p in tmp_path.iterdir())
    started = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-large" in err and "record rows" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_no_real_steps_are_timed_once_the_budget_is_spent():
    """An earlier kind's overrun leaves the budget negative: the next kind times no step
    (a negative count would have made a plan of negative RL steps)."""
    assert timing_mod._steps_within(-30.0, 0.1, timing_mod.REAL_STEPS) == 0
    assert timing_mod._steps_within(0.0, 0.1, 5) == 0
    assert timing_mod._steps_within(timing_mod.REAL_REPEATS * 0.1 * 3, 0.1, 5) == 3
    assert timing_mod._steps_within(1e9, 0.1, 5) == 5
    assert timing_mod._steps_within(1.0, 0.0, 5) == 5
