"""Arms as pipelines, dynamic sampling and tasks, on small runs and by hand."""

import pytest
from plans import SMALL, typed, write_plan

from postlab.plan.frozen import load_plan, split_by_unordered_pair
from postlab.plan.validation import validate_plan
from postlab.runs.orchestration import RunOptions, run_plan
from postlab.tasks.contracts import exact, strict, substring
from postlab.tasks.registry import TASKS, task_for


def _run(tmp_path, **changes):
    plan = write_plan(tmp_path / "plan.json", **(SMALL | changes))
    return run_plan(load_plan(plan), plan.read_bytes(),
                    RunOptions(out_dir=tmp_path / "run", workers=1))


def test_pipelines_and_their_compute(tmp_path):
    arms = [{"name": "then", "pipeline": "sft-then-rl", "contract": "strict"},
            {"name": "only", "pipeline": "rl-only", "contract": "strict"},
            {"name": "more", "pipeline": "sft-only", "sft_steps": 7}]
    record = _run(tmp_path, arms=arms, seeds=[3])
    run = record.runs[0]
    assert list(run.evaluations) == ["initial", "then", "only", "more"]
    assert list(run.arms) == ["then", "only"]
    assert run.arm_sft_loss is not None and len(run.arm_sft_loss["more"]) == 7
    assert run.compute is not None
    per_step = SMALL["prompts_per_step"] * SMALL["group_size"]
    rl = {"completions": SMALL["rl_steps"] * per_step,
          "gradient_steps": SMALL["rl_steps"] * 2,
          "examples_seen": SMALL["rl_steps"] * 2 * per_step}
    for arm in ("then", "only"):
        assert {k: getattr(run.compute[arm], k) for k in rl} == rl
        assert run.compute[arm].tokens_generated == sum(
            len(r.text) + r.terminated for step in run.arms[arm] for r in step.rows)
    assert run.compute["more"].model_dump() == {
        "completions": 0, "tokens_generated": 0, "gradient_steps": 7,
        "examples_seen": 7 * SMALL["sft_batch"]}
    assert run.compute["initial"].gradient_steps == SMALL["sft_steps"]
    # RL only starts from the untrained model, so its first rollouts differ from SFT-then-RL's
    assert list(run.arms["only"][0].rows) != list(run.arms["then"][0].rows)


def test_dynamic_sampling_records_what_it_drew(tmp_path):
    record = _run(tmp_path, seeds=[3], rl_steps=8, dynamic_sampling={"max_extra_groups": 3})
    size = SMALL["group_size"]
    steps = record.runs[0].arms["strict"]
    for step in steps:
        sampling = step.sampling
        assert sampling is not None
        assert sampling.kept == SMALL["prompts_per_step"]
        assert sampling.drawn == sampling.kept + sampling.dropped
        assert sampling.dropped <= 3 and sampling.replaced <= sampling.dropped
        assert len(sampling.dropped_rows) == sampling.dropped * size
        for start in range(0, len(sampling.dropped_rows), size):
            group = sampling.dropped_rows[start:start + size]
            assert len({strict(r.pair, r.text, r.terminated) for r in group}) == 1  # no signal
        if sampling.drawn - sampling.kept < 3:
            assert step.zero_variance_groups == 0  # budget left: every constant group went
    assert sum(s.sampling.dropped for s in steps if s.sampling is not None) > 0
    assert all(s.sampling is not None for s in steps)


def test_tasks_by_hand():
    multi = TASKS["multi_digit_addition"](typed(task="multi_digit_addition", operand_digits=2))
    assert multi.prompt((7, 45)) == "07+45=" and multi.answer((7, 45)) == 52
    assert multi.longest_answer == 3 and len(multi.unordered_pairs()) == 100 * 101 // 2
    times = task_for(typed(task="single_digit_multiplication"))
    assert times.prompt((3, 4)) == "3*4=" and times.answer((3, 4)) == 12
    assert "*" in times.required_characters
    assert strict((3, 4), "12", True, times.answer((3, 4))) == 1
    assert strict((3, 4), "7", True, times.answer((3, 4))) == 0
    assert substring((3, 4), "x12", False, 12) == 1 and exact((3, 4), "012", True, 12) == 0


def test_task_split_is_by_unordered_pair():
    wide = typed(task="multi_digit_addition", operand_digits=2)
    pairs = TASKS["multi_digit_addition"](wide).unordered_pairs()
    split = split_by_unordered_pair(seed=1, sizes=(50, 10, 10), pairs=pairs)
    unordered = {k: {tuple(sorted(p)) for p in v} for k, v in split.items()}
    assert [len(v) for v in unordered.values()] == [50, 10, 10]
    assert not unordered["train"] & unordered["test"]


@pytest.mark.parametrize("changes", [
    {"task": "single_digit_multiplication"},                 # vocab lacks '*'
    {"task": "multi_digit_addition", "operand_digits": 2},    # budget 6 ok; pairs fine
])
def test_task_constraints_follow_from_the_task(changes):
    from postlab.plan.frozen import teaching_plan

    problems = validate_plan(teaching_plan() | changes)
    if changes["task"] == "single_digit_multiplication":
        assert ("vocab", "lacks characters the task needs: *") in problems
    else:
        assert problems == []
        too_short = validate_plan(teaching_plan() | changes | {"max_new_tokens": 3})
        assert [p for p, _ in too_short] == ["max_new_tokens"]
