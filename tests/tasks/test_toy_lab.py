"""A toy policy kind and a toy task with its own contracts, registered here, in one plan.

Nothing of the teaching lab is assumed: the policy is a lookup table, the task subtraction,
the contracts the task's own. Registrations are made for this module only and undone after.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from test_task_contracts import (
    EXACT,
    LENIENT,
    TASK,
    exact_difference,
    lenient_difference,
    subtraction,
    toy_plan,
)
from toypolicy import Bigram, BigramFields

from postlab.cli import main
from postlab.plan.frozen import freeze
from postlab.policies import POLICIES, PolicyKind
from postlab.policies.checkpoint import load_checkpoint
from postlab.records.record import load_record
from postlab.tasks.contracts import CONTRACTS
from postlab.tasks.registry import TASKS


@pytest.fixture(scope="module")
def toy_lab() -> Iterator[None]:
    with ExitStack() as stack:
        stack.enter_context(TASKS.registered(TASK, subtraction))
        stack.enter_context(CONTRACTS.registered(EXACT, exact_difference))
        stack.enter_context(CONTRACTS.registered(LENIENT, lenient_difference))
        if "bigram" not in POLICIES:  # test_policies may have registered it already
            stack.enter_context(POLICIES.registered("bigram", PolicyKind(
                build=Bigram, fields=BigramFields,
                size=lambda plan: (len(plan.vocab) ** 2, len(plan.vocab)),
                summary="a test's lookup table indexed by the previous token")))
        yield


def test_a_toy_policy_on_a_toy_task_runs_verifies_and_reports(toy_lab, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    freeze(plan, toy_plan() | {"policy": {"kind": "bigram"}})
    run = tmp_path / "run"
    # One worker: worker processes would not see registrations made only in this process.
    assert main(["run", "--plan", str(plan), "--out-dir", str(run), "--workers", "1",
                 "--quiet"]) == 0
    record = load_record(run / "record.json")
    assert record.parameters == 14 * 14  # the table, not a GRU
    assert list(record.runs[0].arms) == [EXACT, LENIENT]
    assert load_checkpoint(run / f"seed-3-{EXACT}.pt", None, kind="bigram")["kind"] == "bigram"
    capsys.readouterr()
    assert main(["verify", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("VERIFIED")
    assert main(["report", str(run), "--format", "json"]) == 0
    text = capsys.readouterr().out
    report = json.loads(text)
    assert report["plan_sha256"] == record.plan_sha256
    assert f"{EXACT}_rate" in text and "substring" not in text and "strict" not in text
    page = tmp_path / "report.html"
    assert main(["report", str(run), "--html", str(page), "--lang", "en"]) == 0
    html = page.read_text()
    assert html.startswith("<!") and "substring" not in html
