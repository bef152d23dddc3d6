"""Agent episodes in training: the rollout's and the update's log-probabilities are equal bit
for bit (GRU and GPT-2), tool tokens are in the context and out of every RL term and of the
SFT loss, bad agent sections are refused in one line, and a run trains, verifies, reproduces
and resumes after kill -9 identically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from plans import SMALL, rows, write_plan
from recordfiles import read_record

from postlab.cli import main
from postlab.engines.episodes import generate_episodes, replay_log_dist
from postlab.engines.train import demonstration_tokens, sequence_log_dist, supervised
from postlab.plan.frozen import teaching_plan
from postlab.plan.schema import Plan
from postlab.plan.validation import validate_plan
from postlab.policies import build_policy
from postlab.rl import objective
from postlab.tasks.episodes import OUTPUT_CLOSE, OUTPUT_OPEN, segments
from postlab.tasks.registry import task_for

#: The teaching vocabulary, the calculator's tags and operators, and its outputs' letters.
VOCAB = teaching_plan()["vocab"] + "<>/calotreu*()-"
AGENT = {**SMALL, "sft_steps": 200, "agent": {"tools": ["calc"], "turns": 2, "calls": 1},
         "vocab": VOCAB, "max_new_tokens": 18, "arms": ["episode-strict", "episode-anywhere"],
         "rewards": {"episode-strict": "the final answer, strictly",
                     "episode-anywhere": "the answer anywhere in the episode"}}
GPT2 = {"kind": "transformer", "architecture": "gpt2", "layers": 2, "heads": 2, "width": 32,
        "max_positions": 64}


def _plan(**changes: Any) -> Plan:
    return Plan.of(teaching_plan() | AGENT | changes)


def _trained(plan: Plan, steps: int) -> Any:
    """A policy of the plan after ``steps`` SFT steps: enough that it calls the tool."""
    torch.manual_seed(3)
    model = build_policy(plan)
    supervised(model, plan, 3, steps=steps)
    return model


@pytest.mark.parametrize(("policy", "steps"), [(None, 200), (GPT2, 120)], ids=["gru", "gpt2"])
def test_the_update_reads_the_rollouts_log_probabilities_bit_for_bit(policy, steps):
    """Zero train/rollout mismatch: each written token's log-probability under the update
    (gradients on, as in training) is the one it was sampled from; tool tokens were in the
    context of both."""
    plan = _plan(**({} if policy is None else {"policy": policy}))
    model = _trained(plan, steps)
    pairs = [pair for pair in plan.split["train"][:12] for _ in range(4)]
    batch = generate_episodes(model, task_for(plan), pairs, plan.max_new_tokens, 1.0,
                              torch.Generator().manual_seed(9))
    assert any(OUTPUT_OPEN in row[2] for row in batch.rows), "no episode called the tool"
    model.train()
    with torch.enable_grad():
        updated = objective.token_log_probs(
            replay_log_dist(model, model.prompts(pairs), batch.tokens), batch.tokens)
    assert updated.requires_grad
    assert torch.equal(updated.detach()[batch.mask], batch.logp[batch.mask])
    if policy is not None:
        # re-reading the whole sequence in one pass rounds otherwise: why episodes replay
        parallel = objective.token_log_probs(
            sequence_log_dist(model, model.prompts(pairs), batch.tokens), batch.tokens)
        assert (parallel.detach() - updated.detach())[batch.mask].abs().max() < 1e-4


def test_tool_tokens_are_in_the_context_and_out_of_the_mask():
    plan = _plan()
    model = _trained(plan, 200)
    pairs = plan.split["train"][:16]
    batch = generate_episodes(model, task_for(plan), pairs, plan.max_new_tokens, 1.0,
                              torch.Generator().manual_seed(4))
    tokenizer = model.tokenizer
    for tokens, mask, row in zip(batch.tokens.tolist(), batch.mask.tolist(), batch.rows,
                                 strict=True):
        written = "".join(s.text for s in segments(row[2]) if s.written)
        eos = plan.eos if row[3] else ""
        assert tokenizer.decode([t for t, m in zip(tokens, mask, strict=True) if m]) == \
            written + eos
        spliced = [t for t, m in zip(tokens, mask, strict=True) if not m
                   and t != tokenizer.pad_id]
        outputs = "".join(s.text for s in segments(row[2]) if not s.written)
        assert tokenizer.decode(spliced) == outputs
    assert any(OUTPUT_CLOSE in row[2] for row in batch.rows)


def test_the_loss_kl_and_entropy_never_read_a_tool_token():
    """Change the policy's and the reference's log-probabilities at every position the
    policy did not write: the loss and its KL and entropy statistics are unchanged, bit for
    bit."""
    from postlab.engines.options import algorithm_of, policy_settings

    plan = _plan()
    model = _trained(plan, 200)
    reference = build_policy(plan)  # another network: a KL that is not zero
    pairs = [pair for pair in plan.split["train"][:6] for _ in range(4)]
    batch = generate_episodes(model, task_for(plan), pairs, plan.max_new_tokens, 1.0,
                              torch.Generator().manual_seed(2))
    assert (~batch.mask & (batch.tokens != model.tokenizer.pad_id)).any()
    prompts = model.prompts(pairs)
    with torch.no_grad():
        dist = replay_log_dist(model, prompts, batch.tokens)
        ref = replay_log_dist(reference, prompts, batch.tokens)

    def noisy(values: torch.Tensor) -> torch.Tensor:
        changed = values.clone()
        changed[~batch.mask] = torch.randn_like(changed[~batch.mask]).log_softmax(-1)
        return changed

    advantage = torch.linspace(-1, 1, len(pairs))
    first, second = (objective.policy_loss(
        d, r, batch.tokens, batch.mask, advantage, None, algorithm=algorithm_of(plan),
        settings=policy_settings(plan), kl_beta=0.1, max_tokens=36)
        for d, r in ((dist, ref), (noisy(dist), noisy(ref))))
    assert torch.equal(first.loss, second.loss)
    one, two = (objective.update_statistics(t, batch.mask) for t in (first, second))
    assert one.keys() == two.keys()
    assert all(torch.equal(one[key], two[key]) for key in one)
    assert one["kl"] > 0


def test_sft_trains_on_the_policy_s_turns_and_reads_the_tool_s_output():
    plan = _plan()
    task = task_for(plan)
    model = build_policy(plan)
    ids, wanted = demonstration_tokens(model.tokenizer, task.demonstration_parts((3, 4)))
    assert model.tokenizer.decode(ids) == "<calc>3+4</calc><out>7</out>7" + plan.eos
    pad = model.tokenizer.pad_id
    kept = "".join(model.tokenizer.decode([w]) if w != pad else "." for w in wanted)
    assert kept == "<calc>3+4</calc>" + "." * len("<out>7</out>") + "7" + plan.eos


@pytest.mark.parametrize(("agent", "field", "says"), [
    ({"tools": ["calk"], "turns": 2, "calls": 1}, "agent.tools.0", "did you mean calc"),
    ({"tools": ["calc"], "turns": 2, "calls": 1, "tool_budgets": {"check": 1}},
     "agent.tool_budgets.check", "not one of the agent's tools"),
    ({"tools": ["calc"], "turns": 9, "calls": 1}, "agent.turns", "less than or equal"),
    ({"tools": ["calc"], "turns": 2, "calls": -1}, "agent.calls", "greater than or equal"),
    ({"tools": ["calc"], "turns": 1, "calls": 1}, "agent.turns", "two turns"),
    ({"tools": ["calc"], "turns": 2, "calls": 0}, "agent.calls", "at least one"),
])
def test_a_bad_agent_section_is_one_line_and_exit_2(agent, field, says, tmp_path, capsys):
    data = teaching_plan() | AGENT | {"agent": agent}
    assert any(path == field and says in message for path, message in validate_plan(data)), \
        validate_plan(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    assert main(["plan", "check", str(path)]) == 2
    assert f": {field}: " in capsys.readouterr().err


def test_a_policy_that_could_forge_the_output_tag_is_refused():
    from postlab.tasks.tools import TOOLS, Observation

    class Counter:
        """Counts the letters of its argument: a tool whose arguments are words."""

        name, version = "count", "1"
        output_characters, argument_characters = "0123456789" + "error", "out"

        def __init__(self, budget):
            pass

        def reset(self, question):
            pass

        def step(self, argument):
            return Observation(text=str(len(argument)))

    TOOLS.register("count")(Counter)
    try:
        data = teaching_plan() | AGENT | {"agent": {"tools": ["calc", "count"], "turns": 2,
                                                    "calls": 1}}
        assert ("agent.tools", "the policy could write the tool output tag <out>: its "
                               "answers or tools use the letters o, u and t") in \
            validate_plan(data)
    finally:
        TOOLS._entries.pop("count")


def test_a_demonstration_the_tool_refuses_is_named():
    from postlab.tasks.agent import EpisodeTask
    from postlab.tasks.arithmetic import single_digit_addition
    from postlab.tasks.episodes import Budgets

    class Dividing:
        """The teaching task, written as a division the calculator does not do."""

        def __getattr__(self, name):
            return getattr(single_digit_addition(None), name)

        def expression(self, pair):
            return f"{pair[0]}/{pair[1]}"

    task = EpisodeTask(inner=Dividing(), tools=("calc",), budgets=Budgets(2, 1))
    assert task.demonstration_problem((3, 4)) == (
        "its call calc('3/4') is refused by the tool: unexpected '/' at 1")


def test_the_ensemble_engine_refuses_episodes_in_one_line(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", **AGENT)
    assert main(["run", "--plan", str(plan), "--out-dir", str(tmp_path / "run"),
                 "--engine", "ensemble", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "agent episodes" in err and "--engine exact" in err and "\n" not in err
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("agent")
    # two calls, so that per-call pays halves; its arm trains beside the other two
    plan = write_plan(folder / "plan.json", **{
        **AGENT, "agent": {"tools": ["calc"], "turns": 3, "calls": 2},
        "arms": [*AGENT["arms"], "per-call"],
        "rewards": {**AGENT["rewards"], "per-call": "each answered call pays a half"}})
    out = folder / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet"]) == 0
    return out


@pytest.mark.slow
def test_an_agent_run_verifies_and_reproduces_bit_for_bit(agent_run, tmp_path, capsys):
    capsys.readouterr()
    assert main(["verify", str(agent_run)]) == 0
    assert "VERIFIED" in capsys.readouterr().out
    assert main(["reproduce", str(agent_run), "--out-dir", str(tmp_path / "again"),
                 "--workers", "1", "--quiet"]) == 0
    assert "identical: " in capsys.readouterr().out
    record = read_record(agent_run)
    greedy = [row for run in record["runs"] for row in rows_of_run(run)]
    assert any(OUTPUT_OPEN in text for text in greedy)


@pytest.mark.slow
def test_verify_runs_the_tools_again_and_a_changed_tool_fails(agent_run, capsys,
                                                               monkeypatch):
    from postlab.tasks.tools import Calculator, Observation

    capsys.readouterr()
    assert main(["verify", str(agent_run)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "tools:" in line)
    assert line.startswith("PASS") and "(calc 1)" in line
    assert int(line.split("tools: ")[1].split()[0]) > 0  # calls were made and re-run
    assert read_record(agent_run)["tools"] == {"calc": "1"}  # the version that answered

    monkeypatch.setattr(Calculator, "version", "2")  # a new version, the same answers
    assert main(["verify", str(agent_run)]) == 0
    warned = next(line for line in capsys.readouterr().out.splitlines() if "tools:" in line)
    assert warned.startswith("WARN") and "calc 1 recorded, 2 installed" in warned

    def off_by_one(self, argument):
        return Observation(text=str(int(argument.split("+")[0]) + 1))

    monkeypatch.setattr(Calculator, "step", off_by_one)
    assert main(["verify", str(agent_run)]) != 0
    failed = next(line for line in capsys.readouterr().out.splitlines() if "tools:" in line)
    assert failed.startswith("FAIL") and "calc answers" in failed
    assert "calc 1 recorded, 2 installed" in failed


def rows_of_run(run: dict) -> list[str]:
    return [row[2] for stage in run["evaluations"].values() for split in stage.values()
            for row in split["greedy"]]


@pytest.mark.slow
def test_an_agent_run_killed_after_its_first_seed_resumes_identically(tmp_path):
    from interrupted import killed_and_resumed_equals_whole

    plan = write_plan(tmp_path / "plan.json", **{**AGENT, "seeds": [5, 6, 7]})
    killed_and_resumed_equals_whole(plan, tmp_path, seeds=3)


def test_rows_helper_reads_an_agent_record(agent_run):
    assert rows(read_record(agent_run))


@pytest.mark.slow
def test_a_partial_credit_contract_s_paid_yet_wrong_counts_what_it_paid(agent_run):
    """per-call pays a fraction without accepting: the gaming share adds what it paid each
    answer the strict contract refuses (by Arrow and by the one-by-one oracle alike), where
    counting only full acceptance showed nothing."""
    from postlab.analysis.findings import _GamedTally
    from postlab.analysis.samples import iter_samples
    from postlab.plan.frozen import load_plan
    from postlab.records.record import load_record
    from postlab.tasks.contracts import CONTRACTS

    plan = load_plan(agent_run / "plan.json").model  # two calls: each answered pays a half
    record = load_record(agent_run / "record.json")
    columnar = _GamedTally(["initial"], "test", "per-call", plan).walk(record, plan)
    oracle = _GamedTally(["initial"], "test", "per-call", plan)
    for sample in iter_samples(record, plan):
        oracle.add(sample)
    assert columnar.paid == oracle.paid and columnar.total == oracle.total

    task = task_for(plan)
    by_hand: dict[int, float] = {}
    for run in read_record(agent_run)["runs"]:
        for a, b, text, ended in run["evaluations"]["initial"]["test"]["sampled"]:
            expected = task.answer((a, b))
            right = CONTRACTS["episode-strict"]((a, b), text, ended, expected)
            paid = CONTRACTS["per-call"]((a, b), text, ended, expected)
            by_hand[run["seed"]] = by_hand.get(run["seed"], 0.0) + (0.0 if right else paid)
    assert columnar.paid["initial"] == pytest.approx(by_hand)
    assert any(value % 1 for value in by_hand.values())  # halves: a fraction was counted
