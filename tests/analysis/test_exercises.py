"""Every number in answers.md that arithmetic can show, computed by the library."""

import pytest

from postlab.analysis.exercises import EXERCISES
from postlab.cli import main


def test_answer_1():
    v = EXERCISES[1]().values
    assert v["1010"] == {"strict": 0, "substring": 1}
    assert v["1"] == {"strict": 0, "substring": 1}


def test_answer_2():
    v = EXERCISES[2]().values
    assert v["mixed"] == pytest.approx([1, 1, 1, 1, -1, -1, -1, -1])
    assert v["constant"] == [0] * 8


def test_answer_3():
    v = EXERCISES[3]().values
    assert v["contrast"] == pytest.approx(0.077255, abs=5e-7)
    assert round(v["groups"], 2) == 12.94


def test_answer_4():
    v = EXERCISES[4]().values
    assert v["seq-mean-token-mean"] == [pytest.approx(1 / 4), pytest.approx(1 / 16)]
    assert v["token-mean"] == [pytest.approx(1 / 10), pytest.approx(1 / 10)]


def test_answer_5():
    v = EXERCISES[5]().values
    assert v[1.0] == pytest.approx(1.2) and v[-1.0] == pytest.approx(-1.3)


def test_answer_6():
    v = EXERCISES[6]().values
    assert set(v["overlaps"].values()) == {0}
    assert sum(v["sizes"].values()) == 100


def test_answer_7():
    v = EXERCISES[7]().values
    assert v["before"] == {"correct": 2, "accuracy": 0.25, "covered": 2}
    assert v["after"] == {"correct": 4, "accuracy": 0.5, "covered": 1}


def test_answer_10():
    v = EXERCISES[10]().values
    assert v["007"] == {"strict": 1, "exact": 0}
    assert v["7"] == {"strict": 1, "exact": 1}


def test_exercises_command(capsys):
    assert main(["exercises"]) == 0
    out = capsys.readouterr().out
    assert "12.94" in out and "1/16" in out and "-1.3" in out
    assert "postlab exercises 8 [RUN]" in out  # the answers computed on a trained run
    assert main(["exercises", "11"]) == 2


# --- answer 9, computed on a run whose arms are pipelines ------------------------------------

PIPELINE_ARMS = [{"name": "sft-then-rl", "pipeline": "sft-then-rl", "contract": "strict"},
                 {"name": "rl-only", "pipeline": "rl-only", "contract": "strict"},
                 {"name": "sft-more", "pipeline": "sft-only", "sft_steps": 12}]


@pytest.mark.slow
def test_answer_9_is_the_ablation_table_of_a_run(tmp_path, capsys):
    from plans import SMALL, write_plan

    from postlab.analysis.aggregate import analyse
    from postlab.analysis.exercises import exercise_9
    from postlab.plan.frozen import load_plan
    from postlab.records.record import load_record

    plan = write_plan(tmp_path / "plan.json", **(SMALL | {"arms": PIPELINE_ARMS}))
    out = tmp_path / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["exercises", "9", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "answer 9: ablations at matched compute" in printed
    for stage in ("initial", "sft-then-rl", "rl-only", "sft-more"):
        assert f"  {stage} " in printed

    typed = load_plan(plan).model
    analysis = analyse(load_record(out / "record.json"), typed)
    values = exercise_9(analysis, typed).values
    assert values["sft-more"]["pipeline"] == "sft-only"
    # matched compute is visible: SFT + the extra SFT steps, SFT + RL's updates
    sft = typed.sft_steps
    assert values["sft-more"]["gradient_steps"] == sft + 12
    rl_updates = typed.rl_steps * typed.updates_per_rollout
    assert values["sft-then-rl"]["gradient_steps"] == sft + rl_updates
    assert values["rl-only"]["gradient_steps"] == rl_updates
    outcome = analysis.outcome("sft-then-rl", "test", "sampled", "strict_rate")
    assert values["sft-then-rl"]["success"] == outcome.value.mean
    assert values["sft-then-rl"]["change"] == outcome.change_from_sft.mean
    assert values["initial"]["change"] is None


def test_answer_9_needs_a_run_with_pipeline_arms(capsys):
    assert main(["exercises", "9"]) == 2
    assert "postlab exercises 9 RUN" in capsys.readouterr().err
    from postlab.records.record import bundled_run_dir

    assert main(["exercises", "9", str(bundled_run_dir())]) == 2
    assert "compares an sft-only arm" in capsys.readouterr().err
    assert main(["exercises", "3", str(bundled_run_dir())]) == 2
    assert "RUN is for answers 8 and 9 only" in capsys.readouterr().err


# --- answer 8: the exact KL over whole completions ------------------------------------------

def _two_tiny_policies():
    import torch
    from plans import typed

    from postlab.policies import build_policy

    plan = typed(embedding=6, hidden=8)
    torch.manual_seed(1)
    policy = build_policy(plan)
    torch.manual_seed(2)
    reference = build_policy(plan)
    return policy, reference, policy.prompts([[3, 4]])


def test_the_enumerated_kl_is_the_brute_force_sum_over_completions():
    from postlab.analysis.sequence_kl import completion_kl_by_brute_force, exact_sequence_kl

    policy, reference, prompt = _two_tiny_policies()
    for budget in (1, 2, 3):
        tree = exact_sequence_kl(policy, reference, prompt, budget)
        brute = completion_kl_by_brute_force(policy, reference, prompt, budget)
        assert tree == pytest.approx(brute, rel=1e-6, abs=1e-9)
        assert tree > 0
    assert exact_sequence_kl(policy, policy, prompt, 3) == pytest.approx(0.0, abs=1e-12)


def test_reading_one_token_after_a_repeated_cache_equals_reading_whole_prefixes():
    """The GRU enumerates after its repeated state; a kind without a repeatable cache reads
    each prefix whole. Both give the same KL, up to float32 rounding of the logits (the
    output layer reads one position instead of a whole row)."""
    from postlab.analysis.sequence_kl import exact_sequence_kl

    policy, reference, prompt = _two_tiny_policies()
    cached = [exact_sequence_kl(policy, reference, prompt, budget) for budget in (1, 4)]
    for model in (policy, reference):
        model.repeat_cache = lambda cache, times: None
    whole = [exact_sequence_kl(policy, reference, prompt, budget, batch=7)
             for budget in (1, 4)]
    assert cached == pytest.approx(whole, rel=1e-6, abs=1e-12)
    assert cached[1] > cached[0] > 0


def test_sampled_prefix_sums_equal_the_exact_kl_in_expectation_only():
    import statistics

    import torch

    from postlab.analysis.sequence_kl import exact_sequence_kl, sampled_prefix_kl

    policy, reference, prompt = _two_tiny_policies()
    exact = exact_sequence_kl(policy, reference, prompt, 6)
    sampled = sampled_prefix_kl(policy, reference, prompt, 6, 4000,
                                torch.Generator().manual_seed(5))
    mean = statistics.fmean(sampled.prefix_sums)
    se = statistics.stdev(sampled.prefix_sums) / 4000 ** 0.5
    assert abs(mean - exact) < 4 * se  # equal in expectation, within the standard error
    assert statistics.stdev(sampled.prefix_sums) > 10 * se  # different per sample
    k1_se = statistics.stdev(sampled.log_ratios) / 4000 ** 0.5
    assert abs(statistics.fmean(sampled.log_ratios) - exact) < 4 * k1_se
    assert k1_se > se  # the log-ratio is unbiased too, with more spread


@pytest.mark.slow
def test_answer_8_on_the_bundled_run(capsys):
    pytest.importorskip("scipy")
    from plans import typed

    from postlab.analysis.exercises import exercise_8
    from postlab.records.record import bundled_run_dir, load_record

    folder = bundled_run_dir()
    record = load_record(folder / "record.json.gz")
    exercise = exercise_8(record, typed(), folder, prompts=1, samples=2000)
    assert set(exercise.values) == {"strict", "substring"}
    for values in exercise.values.values():
        assert values["exact"] > 0
        assert abs(values["prefix_mean"] - values["exact"]) < 5 * values["prefix_se"]
        assert values["prefix_min"] < values["exact"] < values["prefix_max"]
