"""reasoning-gym datasets as tasks: freezing, pins, contracts, and a run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from recordfiles import read_record

from postlab.cli import main
from postlab.errors import UserError
from postlab.plan.frozen import complete_draft, plan_bytes
from postlab.plan.schema import Plan
from postlab.plan.validation import validate_plan
from postlab.policies import build_policy
from postlab.tasks import gym
from postlab.tasks.contracts import CONTRACTS
from postlab.tasks.registry import task_for
from postlab.tasks.rows import Row

SECTION = {"dataset": "chain_sum",
           "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
           "seed": 7, "sizes": {"train": 24, "dev": 4, "test": 8}}

DRAFT = {
    "version": 1, "date": "2026-12-02", "task": "reasoning_gym", "reasoning_gym": SECTION,
    "seeds": [5], "eos": "~", "pad": "_", "embedding": 8, "hidden": 16, "threads": 1,
    "sft_steps": 6, "sft_batch": 4, "sft_lr": 0.003, "rl_steps": 2, "prompts_per_step": 2,
    "group_size": 2, "updates_per_rollout": 1, "rl_lr": 0.0005, "clip": 0.2,
    "kl_beta": 0.03, "max_new_tokens": 22, "temperature": 1.0, "eval_samples": 2,
    "gradient_clip": 1.0, "arms": ["rg-strict", "rg-substring"],
    "loss_reduction": "token-mean", "advantage": "group-std", "kl": "exact",
    "selection": "fixed last checkpoint", "rewards": {"rg-strict": "tagged, right",
                                                      "rg-substring": "anywhere"},
}


@pytest.fixture(scope="module")
def plan() -> dict:
    return complete_draft(json.loads(json.dumps(DRAFT)))


def _item(dataset: str = "chain_sum", **config) -> gym.GymItem:
    section = {"dataset": dataset, "config": config, "seed": 3, "sizes": {"train": 2}}
    return gym.generate_items(section)[0]


def test_freezing_a_draft_pins_the_items_and_writes_split_and_vocab(plan: dict) -> None:
    section = plan["reasoning_gym"]
    assert section["version"] == "0.1.25"
    items = gym.generate_items(SECTION)
    assert len(items) == 36 and len({item.question for item in items}) == 36
    assert section["items_sha256"] == gym.items_sha256(items)
    assert plan["split"]["train"] == [[0, i] for i in range(24)]
    assert plan["split"]["test"] == [[0, i] for i in range(28, 36)]
    assert list(plan)[:5] == ["version", "date", "task", "reasoning_gym", "split"]
    assert plan["vocab"].endswith("~_") and "<" in plan["vocab"] and "\n" in plan["vocab"]
    assert validate_plan(plan) == []
    # the same draft freezes to the same bytes
    assert plan_bytes(complete_draft(json.loads(json.dumps(DRAFT)))) == plan_bytes(plan)


def test_the_task_prompts_with_the_template_and_demonstrates_the_tagged_answer(plan) -> None:
    task = task_for(Plan.of(plan))
    item = gym.generate_items(SECTION)[3]
    assert task.prompt([0, 3]) == item.question + "\n"
    assert task.demonstration([0, 3]) == f"<answer>{item.answer}</answer>"
    assert task.answer([0, 3]) is item and task.answer_value([0, 3]) == item.answer
    assert set(task.answer_characters) <= set("<answer>/-0123456789")
    assert task.operand_limit is None


def test_prompts_are_left_padded_to_the_longest_so_company_does_not_matter(plan) -> None:
    long_plan = complete_draft({**json.loads(json.dumps(DRAFT)), "reasoning_gym": {
        **SECTION, "config": {"min_terms": 2, "max_terms": 3, "min_digits": 1,
                              "max_digits": 2}}})
    typed_plan = Plan.of(long_plan)
    torch.manual_seed(0)
    policy = build_policy(typed_plan)
    keys = [key for keys in long_plan["split"].values() for key in keys]
    lengths = {len(task_for(typed_plan).prompt(key)) for key in keys}
    assert len(lengths) > 1, "the configuration should give prompts of several lengths"
    alone = [policy.prompts([key])[0] for key in keys]
    together = policy.prompts(keys)
    assert together.shape == (len(keys), max(lengths))
    assert all(torch.equal(a, b) for a, b in zip(alone, together, strict=True))
    pad = policy.tokenizer.pad_id
    shortest = min(keys, key=lambda k: len(task_for(typed_plan).prompt(k)))
    row = policy.prompts([shortest])[0].tolist()
    assert row[0] == pad and pad not in row[-len(task_for(typed_plan).prompt(shortest)):]


@pytest.mark.parametrize(("text", "terminated", "strict", "anywhere"), [
    ("<answer>{a}</answer>", True, 1, 1),
    ("<answer> {a} </answer>  ", True, 1, 1),           # white space around is allowed
    ("thinking 1 2 3 <answer>{a}</answer>", True, 1, 1),  # text before the answer is allowed
    ("<answer>{a}</answer>", False, 0, 1),              # no EOS
    ("<answer>{a}</answer> and more", True, 0, 1),      # something after the answer
    ("<answer>{a}</answer><answer>{a}</answer>", True, 0, 1),  # two answers
    ("<answer>{a}", True, 0, 1),                        # unclosed
    ("{a}", True, 0, 1),                                # untagged
    ("<answer>9{a}9</answer>", True, 0, 1),             # hedged: gamed
    ("<answer>x</answer>", True, 0, 0),
])
def test_the_strict_format_and_anywhere_contracts(text, terminated, strict, anywhere) -> None:
    item = _item(min_terms=2, max_terms=2, min_digits=2, max_digits=2)
    output = text.format(a=item.answer)
    assert CONTRACTS["rg-strict"]((0, 0), output, terminated, item) == strict
    assert CONTRACTS["rg-substring"]((0, 0), output, terminated, item) == anywhere


def test_plain_numbers_are_compared_by_value_with_math_verify() -> None:
    item = _item(min_terms=2, max_terms=2, min_digits=1, max_digits=1)
    value = int(item.answer)
    assert CONTRACTS["rg-strict"]((0, 0), f"<answer>{value}.0</answer>", True, item) == 1
    assert CONTRACTS["rg-strict"]((0, 0), f"<answer>{2 * value}/2</answer>", True, item) == 1
    assert CONTRACTS["rg-strict"]((0, 0), f"<answer>{value + 1}</answer>", True, item) == 0
    half = gym.GymItem("test", 0, "half?", "0.5", {"answer": "0.5"}, lambda a, e: 0.0)
    assert gym.judged_right("1/2", half) and not gym.judged_right("1/3", half)
    # only plain numbers reach math-verify: an expression with the reference's value is not
    # the dataset's answer
    assert not gym.judged_right("1/4+1/4", half)


def test_the_dataset_scorer_keeps_its_partial_credit() -> None:
    item = _item("countdown")
    wrong = CONTRACTS["rg-score"]((0, 0), "<answer>1+2</answer>", True, item)
    assert wrong == pytest.approx(item.scorer("1+2", item.entry)) and 0 < wrong < 1
    assert CONTRACTS["rg-score"]((0, 0), f"<answer>{item.answer}</answer>", True, item) == 1.0
    # untagged, the whole output is the answer; the last tagged answer counts
    assert CONTRACTS["rg-score"]((0, 0), item.answer, False, item) == 1.0
    assert CONTRACTS["rg-score"]((0, 0), f"<answer>1</answer><answer>{item.answer}</answer>",
                                 True, item) == 1.0
    assert CONTRACTS["rg-strict"]((0, 0), "<answer>1+2</answer>", True, item) == 0


def test_a_changed_pin_is_refused_naming_the_version_that_made_the_items(plan) -> None:
    edited = json.loads(json.dumps(plan))
    edited["reasoning_gym"]["items_sha256"] = "0" * 64
    edited["reasoning_gym"]["version"] = "0.1.24"
    [(path, message)] = validate_plan(edited)
    assert path == "reasoning_gym.items_sha256"
    assert "made by reasoning-gym 0.1.24" in message and "0.1.25" in message
    unfrozen = json.loads(json.dumps(plan))
    del unfrozen["reasoning_gym"]["items_sha256"]
    assert "not frozen" in validate_plan(unfrozen)[0][1]
    moved = json.loads(json.dumps(plan))
    moved["split"]["test"][0] = [0, 0]
    assert validate_plan(moved)[0][0] == "split"


def test_contracts_must_read_the_task_s_kind_of_answer(plan) -> None:
    wrong = {**plan, "arms": ["strict"]}
    assert any("judges integer answers" in message for _, message in validate_plan(wrong))
    from postlab.plan.frozen import teaching_plan

    arithmetic = {**teaching_plan(), "arms": ["rg-strict"]}
    assert any("judges item answers" in message for _, message in validate_plan(arithmetic))


def test_bad_drafts_get_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    cases = {
        "chain_summ": ("did you mean chain_sum", {}),
        "chain_sum": ("refuses this configuration: AssertionError: max_terms must be >= "
                      "min_terms", {"min_terms": 5, "max_terms": 2}),
    }
    for index, (dataset, (said, config)) in enumerate(cases.items()):
        draft = {**DRAFT, "reasoning_gym": {**SECTION, "dataset": dataset, "config": config}}
        path = tmp_path / f"draft-{index}.json"
        path.write_text(json.dumps(draft))
        assert main(["freeze", str(tmp_path / f"plan-{index}.json"), "--draft", str(path)]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1
        assert not (tmp_path / f"plan-{index}.json").exists()
    draft = tmp_path / "pinned.json"
    draft.write_text(json.dumps({**DRAFT, "split": {"train": [[0, 0]]}}))
    assert main(["freeze", str(tmp_path / "x.json"), "--draft", str(draft)]) == 2
    assert "freeze writes the split" in capsys.readouterr().err


def test_a_missing_library_is_named_with_its_extra(without_module) -> None:
    without_module("reasoning_gym")
    with pytest.raises(UserError, match=r"pip install 'postlab\[gym\]'"):
        gym._library()


@pytest.fixture(scope="module")
def trained(plan: dict, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gym")
    path = folder / "plan.json"
    path.write_bytes(plan_bytes(plan))
    assert main(["run", "--plan", str(path), "--out-dir", str(folder / "run"), "--quiet",
                 "--workers", "1"]) == 0
    return folder


@pytest.mark.slow
def test_a_gym_run_verifies_reproduces_and_reads(trained: Path, capsys) -> None:
    run = trained / "run"
    record = read_record(run)
    rows = record["runs"][0]["evaluations"]["initial"]["test"]["sampled"]
    assert [Row.of(r).pair for r in rows][:2] == [(0, 28), (0, 28)]
    summary = json.loads((run / "summary.json").read_text())
    assert {"rg-strict", "rg-substring", "rg-score"} <= set(summary[0]["test"]["sampled"])
    assert main(["verify", str(run)]) == 0
    assert main(["reproduce", str(run), "--out-dir", str(trained / "again"),
                 "--workers", "1"]) == 0
    assert "identical" in capsys.readouterr().out
    assert main(["samples", str(run), "--limit", "2"]) == 0
    shown = capsys.readouterr().out
    assert "State the final answer" in shown and "⏎" in shown
    assert main(["report", str(run), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["plan_sha256"]
    assert main(["report", str(run), "--contract", "strict"]) == 2
    assert "judges integer answers" in capsys.readouterr().err
    assert main(["export", str(run), "--out-dir", str(trained / "tables")]) == 0
    import pyarrow.parquet as parquet

    table = parquet.read_table(trained / "tables" / "eval_samples.parquet")
    assert table.schema.field("answer").type == "string"
    assert table.schema.field("rg-score").type == "double"
    assert "strict" not in table.schema.names


@pytest.mark.slow
def test_a_gym_run_killed_after_its_first_seed_resumes_identically(plan, tmp_path) -> None:
    from interrupted import killed_and_resumed_equals_whole

    longer = {**plan, "seeds": [5, 6, 7], "sft_steps": 30, "rl_steps": 12}
    path = tmp_path / "plan.json"
    path.write_bytes(plan_bytes(longer))
    killed_and_resumed_equals_whole(path, tmp_path, seeds=3)


def test_the_ensemble_engine_refuses_item_tasks(plan: dict) -> None:
    from postlab.engines.ensemble.task import problems

    assert any("reasoning_gym task" in problem for problem in problems(Plan.of(plan)))


def test_the_example_is_its_draft_frozen() -> None:
    folder = Path(__file__).resolve().parents[2] / "examples" / "gym"
    draft = json.loads((folder / "chain-sum.draft.json").read_text())
    frozen = (folder / "chain-sum.json").read_bytes()
    assert plan_bytes(complete_draft(draft)) == frozen
    plan = json.loads(frozen)
    assert validate_plan(plan) == []
    assert plan["arms"] == ["rg-strict", "rg-substring"] and len(plan["seeds"]) == 3


def test_the_bpe_lora_example_is_its_draft_frozen() -> None:
    folder = Path(__file__).resolve().parents[2] / "examples" / "gym"
    draft = json.loads((folder / "chain-sum-bpe-lora.draft.json").read_text())
    frozen = (folder / "chain-sum-bpe-lora.json").read_bytes()
    assert plan_bytes(complete_draft(draft)) == frozen
    plan = json.loads(frozen)
    assert validate_plan(plan) == []
    assert plan["tokenizer"]["kind"] == "bpe" and plan["lora"]["rank"] == 8


def test_tables_and_sentences_show_a_long_prompt_by_its_end(plan) -> None:
    from postlab.render.labels import BRIEF_PROMPT, brief

    prompt = task_for(Plan.of(plan)).prompt([0, 0])
    shown = brief(prompt)
    assert len(prompt) > BRIEF_PROMPT and shown.startswith("…") and shown.endswith("=⏎")
    assert len(shown) == BRIEF_PROMPT + 1 and "\n" not in shown
    assert prompt.rstrip("\n").endswith(shown[1:-1])
    assert brief("3+4=") == "3+4="  # arithmetic prompts are shown whole


def test_a_draft_without_config_freezes_and_its_page_names_the_dataset(tmp_path) -> None:
    draft = json.loads(json.dumps(DRAFT))
    del draft["reasoning_gym"]["config"]
    draft["max_new_tokens"] = 40
    plan = complete_draft(draft)
    assert "config" not in plan["reasoning_gym"] and validate_plan(plan) == []
    from postlab.render.overview import OVERVIEW_WORDS, _task_words

    typed_plan = Plan.of(plan)
    words = _task_words(typed_plan, task_for(typed_plan), OVERVIEW_WORDS["en"])
    assert words.startswith("reasoning_gym: chain_sum; items generated by reasoning-gym")


def test_only_thousands_separators_are_dropped_before_comparing_numbers() -> None:
    item = gym.GymItem("test", 0, "q", "34", {"answer": "34"}, lambda a, e: 0.0)
    big = gym.GymItem("test", 1, "q", "1000", {"answer": "1000"}, lambda a, e: 0.0)
    assert not gym.judged_right("3,4", item) and not gym.judged_right("1,2,3", big)
    assert gym.judged_right("1,000", big) and gym.judged_right("1000.0", big)


def test_a_changed_section_under_the_same_version_says_to_freeze_again(plan) -> None:
    edited = json.loads(json.dumps(plan))
    edited["reasoning_gym"]["seed"] = 8
    [(path, message)] = validate_plan(edited)
    assert path == "reasoning_gym.items_sha256"
    assert "give other items than the plan pins" in message and "--draft` again" in message


@pytest.mark.slow
def test_a_gym_run_reports_as_text_html_and_rescored(trained: Path, capsys) -> None:
    run = trained / "run"
    assert main(["report", str(run), "--lang", "en"]) == 0
    text = capsys.readouterr().out
    assert "rg-strict" in text
    import re

    assert all(len(decimals) <= 2 for decimals in re.findall(r"\d\.(\d+)/\d", text))
    assert main(["report", str(run), "--contract", "rg-score", "--contract", "rg-strict",
                 "--split", "test"]) == 0
    rescored = capsys.readouterr().out
    assert "rg-score=" in rescored
    assert all(len(decimals) <= 2 for decimals in re.findall(r"=\d+\.(\d+)/", rescored))
    page = trained / "page.html"
    assert main(["report", str(run), "--html", str(page), "--lang", "en"]) == 0
    capsys.readouterr()
    html = page.read_text()
    assert "reasoning_gym: chain_sum" in html and "<answer>" not in html


def test_partial_credit_counts_print_to_two_decimals_and_whole_counts_as_integers() -> None:
    from postlab.records.metrics import count_text

    assert count_text(0.15795454545454546) == "0.16" and count_text(3.0) == "3"
    assert count_text(12) == "12"
