"""The plan schema: one test per constraint, each rejected with its field named."""

import json

import pytest
from plans import VARIANT_A, VARIANT_B

from postlab.cli import main
from postlab.plan.frozen import plan_bytes, teaching_plan
from postlab.plan.schema import json_schema
from postlab.plan.validation import validate_plan

BASE = teaching_plan()


def _arm(**fields):
    return {"name": "x", "pipeline": "sft-then-rl", "contract": "strict"} | fields


CASES = [
    ({"version": 0}, "version"),
    ({"version": True}, "version"),
    ({"date": "20/10/2026"}, "date"),
    ({"task": "chess"}, "task"),
    ({"operand_digits": 2}, "operand_digits"),
    ({"task": "multi_digit_addition", "operand_digits": 9}, "operand_digits"),
    ({"split": {"test": [[1, 2]]}}, "split"),
    ({"split": {"train": [[1, 2]], "test": []}}, "split.test"),
    ({"split": {"train": [[1, 2, 3]], "test": [[4, 5]]}}, "split.train.0"),
    ({"split": {"train": [[10, 2]], "test": [[4, 5]]}}, "split.train.0"),
    ({"split": {"train": [[1, 2]], "test": [[2, 1]]}}, "split.test.0"),
    ({"seeds": []}, "seeds"),
    ({"seeds": [1, 1]}, "seeds"),
    ({"seeds": ["1"]}, "seeds.0"),
    ({"vocab": "0123456789+=~_~"}, "vocab"),
    ({"vocab": "0123456789=~_"}, "vocab"),
    ({"eos": "~~"}, "eos"),
    ({"eos": "x"}, "eos"),
    ({"pad": "~"}, "pad"),
    ({"pad": "7"}, "pad"),
    ({"embedding": 0}, "embedding"),
    ({"hidden": 0}, "hidden"),
    ({"threads": 0}, "threads"),
    ({"sft_steps": -1}, "sft_steps"),
    ({"sft_batch": 0}, "sft_batch"),
    ({"sft_lr": 0}, "sft_lr"),
    ({"rl_steps": 0}, "rl_steps"),
    ({"prompts_per_step": 0}, "prompts_per_step"),
    ({"group_size": 1}, "group_size"),
    ({"updates_per_rollout": 0}, "updates_per_rollout"),
    ({"rl_lr": -0.1}, "rl_lr"),
    ({"clip": 0}, "clip"),
    ({"clip": 1.0}, "clip"),
    ({"clip_high": 1.5}, "clip_high"),
    ({"kl_beta": -0.1}, "kl_beta"),
    ({"max_new_tokens": 2}, "max_new_tokens"),
    ({"temperature": 0}, "temperature"),
    ({"eval_samples": 0}, "eval_samples"),
    ({"gradient_clip": 0}, "gradient_clip"),
    ({"arms": []}, "arms"),
    ({"arms": ["lenient"]}, "arms.0"),
    ({"arms": ["strict", "strict"]}, "arms"),
    ({"arms": [_arm(name="initial")]}, "arms"),
    ({"arms": [_arm(contract=None)]}, "arms.0"),
    ({"arms": [_arm(pipeline="sft-only")]}, "arms.0"),
    ({"arms": [_arm(pipeline="dpo")]}, "arms.0"),
    ({"arms": [_arm(colour="red")]}, "arms.0"),
    ({"loss_reduction": "sum"}, "loss_reduction"),
    ({"advantage": "ppo-gae"}, "advantage"),
    ({"kl": "k2"}, "kl"),
    ({"dynamic_sampling": {"max_extra_groups": 0}}, "dynamic_sampling.max_extra_groups"),
    ({"dynamic_sampling": {"budget": 3}}, "dynamic_sampling"),
    ({"selection": 5}, "selection"),
    ({"rewards": {"strict": 1}}, "rewards.strict"),
    ({"parent": {"sha256": "abc", "changes": ["clip"]}}, "parent.sha256"),
    ({"colour": "red"}, "colour"),
]


@pytest.mark.parametrize(("change", "field"), CASES, ids=[c[1] + "-" + str(i)
                                                          for i, c in enumerate(CASES)])
def test_each_invalid_field_is_named(change, field):
    problems = validate_plan(BASE | change)
    assert problems, change
    assert any(path == field or path.startswith(field + ".") for path, _ in problems), problems


def test_every_problem_is_listed_at_once(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(BASE | {"clip": 2, "group_size": 1, "colour": "red"}))
    assert main(["plan", "check", str(plan)]) == 2
    err = capsys.readouterr().err
    for field in ("clip", "group_size", "colour"):
        assert f": {field}: " in err
    assert "3 problems" in err


def test_plans_written_before_still_load(tmp_path, capsys):
    for data in (BASE, BASE | VARIANT_A, BASE | VARIANT_B):
        assert validate_plan(data) == []
    path = tmp_path / "plan.json"
    path.write_bytes(plan_bytes(BASE))
    assert main(["plan", "check", str(path)]) == 0
    assert "valid plan" in capsys.readouterr().out


def test_valid_options_pass():
    options = BASE | {"loss_reduction": "constant-normaliser", "advantage": "leave-one-out",
                      "kl": "k3", "clip_high": 0.28, "dynamic_sampling": {"max_extra_groups": 4},
                      "arms": ["strict", {"name": "rl-only", "pipeline": "rl-only",
                                          "contract": "exact"},
                               {"name": "more-sft", "pipeline": "sft-only", "sft_steps": 50}]}
    assert validate_plan(options) == []


def test_schema_documents_every_field(capsys):
    assert main(["plan", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema == json_schema()
    properties = schema["properties"]
    assert set(properties) >= set(BASE)
    for name, spec in properties.items():
        assert spec.get("description"), name
    assert "arXiv:2503.20783" in properties["loss_reduction"]["description"]  # Dr. GRPO
    assert "RLOO" in properties["advantage"]["description"]
    assert "Schulman" in properties["kl"]["description"]
    assert "DAPO" in properties["clip_high"]["description"]
    assert schema["additionalProperties"] is False
