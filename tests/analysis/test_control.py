"""Control arms: the `format` contract pays a well-formed answer whatever its value, a plan
names a control arm, and reports give every other arm's held-out change against it, paired by
seed and question, saying when an arm's gain is not distinguishable from the control's."""

from __future__ import annotations

import json

import pytest
from plans import SMALL, trained_with_the_cli

from postlab.analysis.aggregate import analyse
from postlab.cli import main
from postlab.plan.frozen import teaching_plan
from postlab.plan.schema import Plan
from postlab.plan.validation import validate_plan
from postlab.records.metrics import summary_for
from postlab.records.opened import open_run
from postlab.tasks.contracts import score
from postlab.tasks.rows import Row

FORMAT_WORDS = "terminated, nonempty ASCII digits, whatever their value"
CONTROLLED = SMALL | {"arms": ["strict", "format"], "control": "format",
                      "rewards": teaching_plan()["rewards"] | {"format": FORMAT_WORDS}}


@pytest.mark.parametrize(("text", "terminated", "paid"), [
    ("3", True, 1), ("9", True, 1), ("007", True, 1),  # any value, any spelling of digits
    ("", True, 0), ("3", False, 0), ("3 ", True, 0), ("-3", True, 0), ("٣", True, 0)])
def test_format_pays_a_well_formed_answer_whatever_its_value(text, terminated, paid):
    assert score(Row(1, 2, text, terminated), "format") == paid


def test_a_control_must_be_one_of_several_arms():
    plan = teaching_plan()
    assert validate_plan(plan | {"arms": ["strict", "format"], "control": "format"}) == []
    assert validate_plan(plan | {"control": "format"})[0][0] == "control"
    assert "needs another arm" in validate_plan(
        plan | {"arms": ["format"], "control": "format"})[0][1]


@pytest.fixture(scope="module")
def controlled(tmp_path_factory) -> object:
    return trained_with_the_cli(tmp_path_factory.mktemp("control"), **CONTROLLED)


def test_each_arm_is_compared_with_the_control_paired_by_seed(controlled):
    opened = open_run(controlled)
    plan = opened.plan.model
    analysis = analyse(opened.record, plan)
    assert analysis.control == "format"
    summary = summary_for(opened.record, plan)

    def per_seed(stage: str) -> list[float]:
        return [entry["test"]["sampled"]["strict"] / entry["test"]["sampled"]["n"]
                for entry in summary if entry["stage"] == stage]

    differences = [a - b for a, b in zip(per_seed("strict"), per_seed("format"), strict=True)]
    outcome = analysis.outcome("strict", "test", "sampled", "strict_rate")
    change = outcome.change_from_control
    assert change is not None and change.low is not None and change.high is not None
    assert change.mean == pytest.approx(sum(differences) / len(differences), abs=1e-12)
    assert change.low <= change.mean <= change.high
    # the control itself and the SFT model are not compared with the control
    assert analysis.outcome("format", "test", "sampled", "strict_rate").change_from_control \
        is None
    assert analysis.outcome("initial", "test", "sampled", "strict_rate").change_from_control \
        is None


def test_reports_say_how_each_arm_stands_against_the_control(controlled, capsys):
    assert main(["report", str(controlled), "--lang", "en"]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if "control arm" in line)
    assert line.startswith("- RL under strict") and "(RL under format)" in line
    # the control is paid for answers whatever their value by design: not called gaming
    assert "paid by the format contract yet wrong" not in text
    assert main(["report", str(controlled), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["control"] == "format"
    compared = [o for o in data["outcomes"] if o["change_from_control"] is not None]
    assert {o["stage"] for o in compared} == {"strict"}
    assert main(["report", str(controlled), "--lang", "zh", "--format", "markdown"]) == 0
    assert "对照组" in capsys.readouterr().out


def test_a_report_without_a_control_keeps_its_json_as_before(tmp_path, capsys):
    run = trained_with_the_cli(tmp_path, **SMALL)
    assert main(["report", str(run), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "control" not in data
    assert all("change_from_control" not in outcome for outcome in data["outcomes"])
    assert Plan.of(teaching_plan() | SMALL).control is None


# ---- the random contract: paid from the run's own stream, whatever the row says ----------

RANDOM_WORDS = "each rollout row paid 1 with probability random_rate, whatever it says"
RANDOM = SMALL | {"arms": ["strict", "random"], "control": "random", "random_rate": 0.5,
                  "rewards": teaching_plan()["rewards"] | {"random": RANDOM_WORDS}}


def test_random_payments_are_keyed_draws_at_the_stated_rate():
    import torch

    from postlab import counter
    from postlab.tasks.contracts import random_rewards

    paid = random_rewards(7, 3, 200_000, 0.3)
    assert set(paid.unique().tolist()) <= {0.0, 1.0}
    assert abs(paid.mean().item() - 0.3) < 0.005  # 200,000 draws: sd 0.001
    # a pure function of (seed, step, row): the same again, another seed or step differs
    assert torch.equal(paid, random_rewards(7, 3, 200_000, 0.3))
    assert not torch.equal(paid, random_rewards(8, 3, 200_000, 0.3))
    assert not torch.equal(paid, random_rewards(7, 4, 200_000, 0.3))
    # one draw a row, compared with the rate: a higher rate pays every row a lower one does
    assert bool((random_rewards(7, 3, 1000, 0.6) >= random_rewards(7, 3, 1000, 0.3)).all())
    draws = counter.uniform(torch.tensor(7), counter.RANDOM_REWARD, 3, torch.arange(10))
    assert random_rewards(7, 3, 10, 0.5).tolist() == [float(d < 0.5) for d in draws.tolist()]
    # members of an ensemble are paid what each seed alone is paid (a row's place in its
    # step's batch is its key, as in the exact engine)
    together = random_rewards(torch.tensor([5, 9]), 2, 24, 0.5)
    assert torch.equal(together[1], random_rewards(9, 2, 24, 0.5))


def test_random_paid_recounts_each_step_from_the_stream():
    from postlab.tasks.contracts import random_paid, random_rewards

    counts = random_paid(4, [1, 2, 3], [12, 12, 7], 0.4)
    assert counts.tolist() == [int(random_rewards(4, s, n, 0.4).sum())
                               for s, n in ((1, 12), (2, 12), (3, 7))]


@pytest.mark.parametrize(("changes", "field", "says"), [
    ({"random_rate": None}, "random_rate", "set random_rate"),
    ({"arms": ["strict"], "control": None}, "random_rate", "no arm trains on it"),
    ({"dynamic_sampling": {"max_extra_groups": 4}}, "dynamic_sampling", "cannot resample"),
])
def test_a_random_arm_states_its_rate_and_nothing_else_reads_it(changes, field, says):
    plan = {k: v for k, v in (teaching_plan() | RANDOM | changes).items() if v is not None}
    problems = validate_plan(plan)
    assert problems and problems[0][0] == field and says in problems[0][1]
    assert validate_plan(teaching_plan() | RANDOM) == []


@pytest.mark.parametrize("rate", [0, 1, 1.5, -0.2])
def test_a_rate_outside_zero_to_one_is_refused_in_one_line(tmp_path, capsys, rate):
    from plans import write_plan

    plan = write_plan(tmp_path / "plan.json", **(RANDOM | {"random_rate": rate}))
    assert main(["plan", "check", str(plan)]) == 2
    problems = capsys.readouterr().err.strip().splitlines()
    # plan check's form: one line a problem, then their count
    assert len(problems) == 2 and "random_rate: Input should be" in problems[0]
    assert problems[1].endswith("1 problems")


def test_the_exact_engine_pays_each_step_from_the_stream(monkeypatch):
    from postlab.engines import train
    from postlab.tasks.contracts import random_rewards

    calls = []

    def recorded(seed, step, count, rate):
        paid = random_rewards(seed, step, count, rate)
        calls.append((seed, step, count, rate, paid.tolist()))
        return paid

    monkeypatch.setattr(train, "random_rewards", recorded)
    from postlab.policies.base import build_policy

    plan = Plan.of(teaching_plan() | RANDOM)
    model = build_policy(plan)
    train.reinforce(model, model.reference_policy(), plan, 3, "random")
    per = plan.prompts_per_step * plan.group_size
    assert [c[:4] for c in calls] == [(3, step, per, 0.5)
                                      for step in range(1, plan.rl_steps + 1)]


@pytest.fixture(scope="module")
def paid_at_random(tmp_path_factory) -> object:
    return trained_with_the_cli(tmp_path_factory.mktemp("random"), **RANDOM)


def test_a_random_control_trains_and_reports_its_recomputed_payments(paid_at_random, capsys):
    from postlab.tasks.contracts import random_paid

    opened = open_run(paid_at_random)
    plan = opened.plan.model
    analysis = analyse(opened.record, plan)
    assert analysis.control == "random" and "random" not in analysis.contracts
    reward = next(r for r in analysis.training_rewards if r.arm == "random")
    window = max(1, plan.rl_steps // 10)
    expected = []
    for run in opened.record.runs:
        history = run.arms["random"][-window:]
        paid = random_paid(run.seed, [s.step for s in history],
                           [len(s.rows) for s in history], 0.5)
        expected.append(paid.sum() / sum(len(s.rows) for s in history))
    assert list(reward.reward.per_seed) == pytest.approx(expected, abs=1e-12)
    change = analysis.outcome("strict", "test", "sampled", "strict_rate").change_from_control
    assert change is not None and change.low is not None
    assert main(["verify", str(paid_at_random)]) == 0
    assert main(["report", str(paid_at_random), "--lang", "en"]) == 0
    text = capsys.readouterr().out
    assert "(RL under random)" in text and "was paid at random" in text
    assert main(["report", str(paid_at_random), "--contract", "random"]) == 2
    assert "re-scores no rows" in capsys.readouterr().err


def test_both_engines_pay_a_random_arm_the_same_rows(tmp_path):
    """The ensemble pays each member from its seed and step as the exact engine pays a lone
    seed, so a seed's payments agree across engines wherever their batches agree."""
    import torch

    from postlab.engines.ensemble.engine import rewards_for
    from postlab.engines.ensemble.scoring import Answers
    from postlab.tasks.contracts import random_rewards

    digits = torch.full((3, 12, 4), -1)
    answers = Answers(digits=digits, visible=digits >= 0,
                      terminated=torch.ones(3, 12, dtype=torch.bool),
                      expected=torch.full((3, 12, 2), 1), expected_length=torch.full((3, 12), 2))
    seeds = torch.tensor([3, 4, 5])
    got = rewards_for(["random", "strict", "random"], answers, [[], [], []], sum, seeds, 2,
                      0.5)
    assert torch.equal(got[0], random_rewards(3, 2, 12, 0.5))
    assert torch.equal(got[2], random_rewards(5, 2, 12, 0.5))


def _constant_groups_match_the_stream(run) -> None:
    """What training recorded of its rewards (each step's groups with no spread) is what the
    stream pays, recomputed: the payments the reports show are the ones training used."""
    from postlab.tasks.contracts import random_rewards

    record = open_run(run).record
    plan = open_run(run).plan.model
    for entry in record.runs:
        for step in entry.arms["random"]:
            paid = random_rewards(entry.seed, step.step, len(step.rows), plan.random_rate)
            groups = paid.reshape(-1, plan.group_size)
            constant = int(((groups == 0).all(1) | (groups == 1).all(1)).sum())
            assert step.zero_variance_groups == constant, (entry.seed, step.step)


def test_the_exact_engine_recorded_the_streams_payments(paid_at_random):
    _constant_groups_match_the_stream(paid_at_random)


def test_the_ensemble_trains_a_random_control_and_its_report_reads(tmp_path, capsys):
    run = trained_with_the_cli(tmp_path, "--engine", "ensemble", **RANDOM)
    _constant_groups_match_the_stream(run)
    assert main(["verify", str(run)]) == 0
    capsys.readouterr()
    assert main(["report", str(run), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["control"] == "random"
    paid = next(r for r in data["training_rewards"] if r["arm"] == "random")
    assert 0 < paid["reward"]["mean"] < 1


def test_a_random_arm_fits_any_task():
    """It reads no answer, so a reasoning-gym plan takes it beside its own contracts."""
    from pathlib import Path

    gym = json.loads((Path(__file__).resolve().parents[2] / "examples" / "gym"
                      / "chain-sum.json").read_text())
    arms = [*gym["arms"], "random"]
    rewards = gym["rewards"] | {"random": RANDOM_WORDS}
    assert validate_plan(gym | {"arms": arms, "random_rate": 0.25, "rewards": rewards}) == []


def test_live_logs_show_what_the_stream_paid(tmp_path):
    """The random arm's reward curve in TensorBoard is its recomputed payments, step by
    step, as the report reads them."""
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from postlab.tasks.contracts import random_paid

    run = trained_with_the_cli(tmp_path, "--log", "tensorboard", **RANDOM)
    record = open_run(run).record
    for entry in record.runs:
        reader = EventAccumulator(str(run / "logs" / "tensorboard" / f"seed-{entry.seed}"
                                  / "random"), size_guidance={"scalars": 0})
        reader.Reload()
        logged = [(e.step, e.value) for e in reader.Scalars("reward/random")]
        history = entry.arms["random"]
        paid = random_paid(entry.seed, [s.step for s in history],
                           [len(s.rows) for s in history], 0.5)
        assert logged == [(s.step, float(np.float32(p / len(s.rows))))
                          for s, p in zip(history, paid.tolist(), strict=True)]


def test_the_export_says_what_each_rollout_was_paid(paid_at_random):
    """`paid` is the arm's contract's score, or the stream's draw for the random arm; the
    columnar export equals the row-by-row one."""
    import pyarrow as pa
    from plans import assert_export_as_oracle

    from postlab.export.columnar import columnar_batches
    from postlab.export.tables import Source, arrow_schema, table_columns
    from postlab.records.opened import checked_tables
    from postlab.tasks.contracts import contracts_for, random_rewards

    opened = open_run(paid_at_random)
    record, plan = opened.record, opened.plan.model
    sources = [Source(record, plan, tables=lambda: checked_tables(opened))]
    contracts = contracts_for("integer")
    assert_export_as_oracle(sources, contracts, 4096)
    schema = {"rollout_samples": arrow_schema(table_columns("rollout_samples", sources,
                                                            contracts))}
    rows = pa.Table.from_batches(
        [b for _, b in columnar_batches(sources, contracts, schema, 4096)]).to_pylist()
    for entry in record.runs:
        for step in entry.arms["random"]:
            paid = random_rewards(entry.seed, step.step, len(step.rows), 0.5).tolist()
            got = [r["paid"] for r in rows if (r["seed"], r["arm"], r["step"])
                   == (entry.seed, "random", step.step)]
            assert got == paid
    strict = [r for r in rows if r["arm"] == "strict"]
    assert strict and all(r["paid"] == float(r["strict"]) for r in strict)
    assert {r["rewarded_by"] for r in rows} == {"strict", "random"}
