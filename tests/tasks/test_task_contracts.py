"""A task brings its own contracts: every command works on it and names them, not the teaching
contracts.

The toy task (single-digit subtraction a-b with a >= b, judged by two contracts of its own) is
registered here, in the test, and only for this module: the registry context managers take it
out again, so no other test sees it.
"""

from __future__ import annotations

import io
import json
import operator
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from postlab.cli import main
from postlab.plan.arms import plan_contracts
from postlab.plan.frozen import freeze, teaching_plan
from postlab.plan.schema import Plan
from postlab.plan.validation import validate_plan
from postlab.records.blocks import iter_rows
from postlab.records.record import load_record, record_in
from postlab.tasks.arithmetic import Task
from postlab.tasks.contracts import CONTRACT_WORDS, CONTRACTS, ContractWords, describe, score
from postlab.tasks.registry import TASKS
from postlab.tasks.rows import Row

TASK = "single_digit_subtraction"
EXACT, LENIENT = "exact_difference", "lenient_difference"


def exact_difference(pair: Sequence[int], text: str, terminated: bool,
                     expected: int | None = None) -> int:
    """Terminated and exactly the difference's decimal form."""
    return int(terminated and text == str(expected))


def lenient_difference(pair: Sequence[int], text: str, terminated: bool,
                       expected: int | None = None) -> int:
    """The difference's digits anywhere, terminated or not (gameable on purpose)."""
    return int(str(expected) in text)


def subtraction(plan: dict[str, Any]) -> Task:
    return Task(TASK, "-", operator.sub, 1, contracts=(EXACT, LENIENT))


@pytest.fixture(scope="module")
def registered() -> Iterator[None]:
    with ExitStack() as stack:
        stack.enter_context(TASKS.registered(TASK, subtraction))
        stack.enter_context(CONTRACTS.registered(EXACT, exact_difference))
        stack.enter_context(CONTRACTS.registered(LENIENT, lenient_difference))
        # Words for one contract only: the other is named by its own name.
        stack.enter_context(CONTRACT_WORDS.registered(EXACT, {
            "en": ContractWords("exact-difference", "exact difference success",
                                "exact difference reward rate", "correct difference"),
            "zh": ContractWords("精确差", "精确差正确率", "精确差奖励率", "差正确"),
        }))
        yield


def toy_plan() -> dict[str, Any]:
    # a >= b only: every pair is its own unordered pair, and no difference is negative.
    pairs = [[a, b] for a in range(10) for b in range(a + 1)]
    split = {"train": [p for p in pairs if sum(p) % 4],
             "test": [p for p in pairs if not sum(p) % 4]}
    return teaching_plan() | {
        "task": TASK, "split": split, "seeds": [3], "vocab": "0123456789-=~_",
        "embedding": 12, "hidden": 16, "sft_steps": 30, "sft_batch": 8, "rl_steps": 4,
        "prompts_per_step": 3, "group_size": 4, "eval_samples": 3, "max_new_tokens": 3,
        "arms": [EXACT, LENIENT],
        "rewards": {EXACT: "terminated, exactly str(a-b)", LENIENT: "str(a-b) anywhere"},
    }


@pytest.fixture(scope="module")
def toy_run(registered: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The toy plan trained once for the module: its run folder and what the run printed."""
    folder = tmp_path_factory.mktemp("toy")
    plan = folder / "plan.json"
    freeze(plan, toy_plan())
    printed = io.StringIO()
    with redirect_stdout(printed):
        # One worker: the run happens in this process. Worker processes start from a fresh
        # import of postlab and would not see the task and contracts registered only here.
        assert main(["run", "--plan", str(plan), "--out-dir", str(folder / "run"),
                     "--workers", "1"]) == 0
    return folder / "run", printed.getvalue()


def _no_teaching_contracts(text: str) -> None:
    assert "strict" not in text and "substring" not in text


def test_the_registrations_do_not_leak_out(registered: None) -> None:
    assert TASK in TASKS and EXACT in CONTRACTS
    with TASKS.registered("another_task", subtraction):
        assert "another_task" in TASKS
    assert "another_task" not in TASKS
    with pytest.raises(ValueError, match="already registered"):
        TASKS.register(TASK)(subtraction)


def test_the_plan_schema_accepts_the_task(registered: None) -> None:
    plan = toy_plan()
    assert validate_plan(plan) == []
    assert plan_contracts(Plan.of(plan)) == (EXACT, LENIENT)
    problems = validate_plan(plan | {"vocab": "0123456789+=~_"})
    assert ("vocab", "lacks characters the task needs: -") in problems
    assert any(field == "arms.0" for field, _ in validate_plan(plan | {"arms": ["nope"]}))


def test_score_applies_the_task_answer(registered: None) -> None:
    answer = subtraction({}).answer
    assert score(Row(7, 3, "4", True), EXACT, answer) == 1
    assert score(Row(7, 3, "04", True), EXACT, answer) == 0
    assert score(Row(7, 3, "444", False), LENIENT, answer) == 1
    assert describe(LENIENT, "en").rate == "lenient_difference acceptance"


def test_run_progress_summary_and_verify(toy_run: tuple[Path, str],
                                         capsys: pytest.CaptureFixture) -> None:
    run, out = toy_run
    assert f"arm={EXACT} step=4 {EXACT}=" in out and f" {LENIENT}=" in out
    _no_teaching_contracts(out)
    summary = json.loads((run / "summary.json").read_text())
    assert list(summary[0]["test"]["sampled"]) == [
        "n", EXACT, LENIENT, f"{EXACT}_rate", f"{LENIENT}_rate", "mean_tokens", "truncated",
        "covered", "questions"]
    rows = list(iter_rows(load_record(record_in(run))))
    assert {located.place.stage for located in rows} == {"initial", EXACT, LENIENT}
    assert all(located.row.a >= located.row.b for located in rows)
    assert main(["verify", str(run)]) == 0
    _no_teaching_contracts(capsys.readouterr().out)


def test_text_report_names_the_task_contracts(toy_run: tuple[Path, str],
                                              capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(toy_run[0]), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert ("seed / stage / greedy correct difference / sampled correct difference / "
            "lenient_difference accepted / covered by 3 samples") in out
    _no_teaching_contracts(out)


def test_json_report_names_the_task_contracts(toy_run: tuple[Path, str],
                                              capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(toy_run[0]), "--format", "json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert data["arms"] == [EXACT, LENIENT]
    assert {o["metric"] for o in data["outcomes"]} == {f"{EXACT}_rate", f"{LENIENT}_rate",
                                                       "coverage"}
    assert list(data["dynamics"][0]["series"])[:2] == [f"{EXACT}_reward", f"{LENIENT}_reward"]
    assert data["hacking_gaps"]
    _no_teaching_contracts(out)


def test_tables_and_html_name_the_task_contracts(toy_run: tuple[Path, str], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(toy_run[0]), "--format", "markdown", "--lang", "en"]) == 0
    markdown = capsys.readouterr().out
    assert "| sampled | exact difference success |" in markdown
    assert "lenient_difference acceptance" in markdown
    assert ("Reward hacking gap: lenient_difference acceptance minus exact difference "
            "success") in markdown
    assert "unbiased estimator, exact-difference contract" in markdown
    assert f"RL under {EXACT}" in markdown
    _no_teaching_contracts(markdown)
    page = tmp_path / "report.html"
    assert main(["report", str(toy_run[0]), "--lang", "zh", "--html", str(page)]) == 0
    capsys.readouterr()
    html = page.read_text()
    assert "精确差正确率" in html and "lenient_difference 接受率" in html
    assert "（无偏估计，精确差契约）" in html
    _no_teaching_contracts(html)
