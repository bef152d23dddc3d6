"""The report a reader opens: rate intervals inside [0, 1], findings in words tied to their
numbers, the answers themselves (right, gamed, wrong), success per operand pair, the first
screen in a real browser, ``postlab samples`` and ``plot --overwrite``."""

from __future__ import annotations

import json
import math
import re
import shutil
from collections import Counter

import pytest
from browser import needs_chromium, probe_page

from postlab.analysis.aggregate import analyse
from postlab.analysis.findings import DOWN, SINGLE, UNCLEAR, UP, direction, findings
from postlab.analysis.intervals import Interval, crossed_interval, interval, paired_difference
from postlab.analysis.samples import (
    CORRECT,
    GAMED,
    WRONG,
    classify,
    examples,
    iter_samples,
    pair_grids,
    stage_examples,
)
from postlab.cli import main
from postlab.plan.frozen import teaching_plan_loaded
from postlab.plan.schema import Plan
from postlab.records.models import Record
from postlab.records.record import (
    bundled_record_path,
    bundled_run_dir,
    load_record,
    one_document,
)
from postlab.render import figures as figures_module
from postlab.render.sentences import sentence
from postlab.tasks.contracts import CONTRACTS


@pytest.fixture(scope="module")
def record() -> Record:
    return load_record(bundled_record_path())


def _with_runs(record: Record, runs: list[dict]) -> Record:
    """The record with other seeds' entries (their JSON), typed as a reader types it."""
    return Record.of(one_document(record) | {"runs": runs})


@pytest.fixture(scope="module")
def plan() -> Plan:
    return teaching_plan_loaded().model


@pytest.fixture(scope="module")
def analysis(record, plan):
    return analyse(record, plan)


def _judge(a: int, b: int, text: str, terminated: bool) -> str:
    """The teaching contracts called directly, written apart from postlab.analysis.samples."""
    right = CONTRACTS["strict"]((a, b), text, terminated, a + b)
    paid = CONTRACTS["substring"]((a, b), text, terminated, a + b)
    return "correct" if right else ("gamed" if paid else "wrong")


# --- intervals of rates -------------------------------------------------------------------------

def test_two_seed_rates_stay_inside_the_unit_interval(record, plan):
    """The report's own example: two seeds whose coverage differs a lot got [-1.38, 1.96]."""
    two = _with_runs(record, [run.data() for run in record.runs[:2]])
    result = analyse(two, plan)
    coverage = result.outcome("substring", "test", "sampled", "coverage").value
    assert interval(coverage.per_seed).low < 0  # a t interval on these rates leaves [0, 1]
    for item in result.outcomes:
        value = item.value
        assert 0 <= value.low <= value.mean <= value.high <= 1, item
    for curve in result.pass_at_k:
        for mean, low, high in zip(curve.mean, curve.low, curve.high, strict=True):
            assert 0 <= low <= mean <= high <= 1


def test_outcome_intervals_count_outputs_and_questions(record, plan, analysis):
    """Every held-out interval comes from the seeds x questions table of its cells: 3 seeds
    x 19 held-out test questions, each cell a greedy answer (1 trial), a question's share of
    16 samples, or its coverage; a change from SFT from the per-cell differences."""
    questions = len(plan.split["test"])
    run = record.runs[0]
    assert len(run.evaluations["initial"]["test"].greedy) == questions
    assert len(run.evaluations["initial"]["test"].sampled) == questions * 16
    for decoding, metric, per_cell in (("greedy", "strict_rate", 1),
                                       ("sampled", "strict_rate", 16),
                                       ("sampled", "coverage", 1)):
        item = analysis.outcome("strict", "test", decoding, metric)
        table, trials = analysis.cells("strict", "test", decoding, metric)
        before, _ = analysis.cells("initial", "test", decoding, metric)
        assert table.shape == (3, questions) and trials == per_cell
        assert table.mean(axis=1) == pytest.approx(item.value.per_seed)
        found = crossed_interval([(1.0, table)], trials, rate=True)
        assert (item.value.low, item.value.high) == pytest.approx((found.low, found.high))
        # both arms' answers floor the change: the per-cell differences, both arms' draws
        change = paired_difference((table, trials), (before, trials)).interval()
        assert (item.change_from_sft.low, item.change_from_sft.high) == pytest.approx(
            (change.low, change.high))


def test_pass_at_k_intervals_count_draws_of_k(analysis):
    """pass@1 is sampled success and pass@16 is coverage: their intervals are those."""
    for curve in analysis.pass_at_k:
        first = analysis.outcome(curve.stage, curve.split, "sampled", "strict_rate").value
        last = analysis.outcome(curve.stage, curve.split, "sampled", "coverage").value
        assert math.isclose(curve.mean[0], first.mean) and math.isclose(curve.low[0], first.low)
        assert math.isclose(curve.high[0], first.high)
        assert math.isclose(curve.low[-1], last.low) and math.isclose(curve.high[-1], last.high)


# --- findings ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("low", "high", "expected"), [
    (0.01, 0.2, UP), (-0.3, -0.001, DOWN), (-0.1, 0.1, UNCLEAR), (0.0, 0.2, UNCLEAR),
    (None, None, SINGLE)])
def test_direction_is_decided_by_the_interval_alone(low, high, expected):
    assert direction(Interval(per_seed=(0.1,), mean=0.1, low=low, high=high)) == expected


def test_training_reward_is_the_last_tenth_of_steps(record, analysis):
    """Recomputed with a plain loop over the rows of the last 24 of 240 steps."""
    for reward in analysis.training_rewards:
        assert reward.steps == (217, 240)
        for run, value in zip(record.runs, reward.reward.per_seed, strict=True):
            rows = [row for step in run.arms[reward.arm][-24:] for row in step.rows]
            paid = sum(CONTRACTS[reward.contract]((a, b), text, done, a + b)
                       for a, b, text, done in rows)
            assert value == paid / len(rows)


def test_findings_of_the_teaching_run(record, plan, analysis):
    found = findings(analysis, record, plan, "test")
    keys = [(f.key, f.values.get("stage")) for f in found]
    assert keys == [("sft_result", None),
                    ("arm_change", "strict"), ("coverage_change", "strict"),
                    ("train_vs_held_out", "strict"),
                    ("arm_change", "substring"), ("coverage_change", "substring"),
                    ("lenient_vs_held_out", "substring"), ("gaming", "substring")]
    by_key = {(f.key, f.values.get("stage")): f for f in found}
    # each sentence carries the interval that decided its verb
    change = by_key[("arm_change", "substring")]
    value = change.values["change"]
    assert value.high < 0 and change.direction == DOWN
    words = sentence(change, "en")
    assert "lowered held-out (test) sampled success by" in words
    assert f"{-value.mean:.3f} [{-value.high:.3f}, {-value.low:.3f}]" in words
    unclear = by_key[("arm_change", "strict")]
    assert unclear.direction == UNCLEAR and "did not clearly change" in sentence(unclear, "en")
    # the lenient arm's training success is set against held-out success, not its reward
    lenient = by_key[("lenient_vs_held_out", "substring")]
    right, held = lenient.values["right"], lenient.values["held_out"]
    assert lenient.values["difference"].per_seed == tuple(
        r - h for r, h in zip(right.per_seed, held.per_seed, strict=True))
    gaming = by_key[("gaming", "substring")]
    example = gaming.values["example"]
    a, b = (int(x) for x in example.prompt.rstrip("=").split("+"))
    assert _judge(a, b, example.text, example.terminated) == "gamed"
    text = sentence(gaming, "en")
    assert f"{example.prompt}{example.text}" in text
    for onset in analysis.hacking_onsets:
        assert f"seed {onset.seed}: step {onset.onset}" in text
    # the share the trained contract pays for wrong answers, counted by a plain loop
    for seed, share in zip(analysis.seeds, gaming.values["share"].per_seed, strict=True):
        run = next(r for r in record.runs if r.seed == seed)
        rows = run.evaluations["substring"]["test"].sampled
        assert share == sum(_judge(*row) == "gamed" for row in rows) / len(rows)
    # the same findings in Chinese, with the same numbers, signs included
    for finding in found:
        english, chinese = sentence(finding, "en"), sentence(finding, "zh")
        numbers = re.findall(r"[-+]?\d+\.\d+", english)
        assert numbers and all(n in chinese for n in numbers), (english, chinese)


def test_gaming_is_judged_by_the_contract_the_arm_trained_on(record, plan):
    """An arm trained on 'exact' is not charged with what 'substring' pays: exact never
    accepts a wrong answer, so its share is zero and no example is shown."""
    renamed = plan.replace(arms=["strict", "exact"])
    runs = []
    for entry in record.runs:
        run = entry.data()
        moved = dict(run)
        moved["evaluations"] = {("exact" if k == "substring" else k): v
                                for k, v in run["evaluations"].items()}
        moved["training"] = {("exact" if k == "substring" else k): v
                             for k, v in run["training"].items()}
        moved["compute"] = {("exact" if k == "substring" else k): v
                            for k, v in run["compute"].items()}
        runs.append(moved)
    other = _with_runs(record, runs)
    found = findings(analyse(other, renamed), other, renamed, "test")
    gaming = next(f for f in found if f.key == "gaming")
    assert gaming.values["contract"] == "exact"
    assert gaming.values["share"].mean == 0 and gaming.values["example"] is None
    assert "9112" not in sentence(gaming, "en")


def test_findings_on_the_train_split_say_so(record, plan, analysis):
    found = findings(analysis, record, plan, "train")
    assert all(f.key not in ("train_vs_held_out", "lenient_vs_held_out") for f in found)
    text = " ".join(sentence(f, "en") for f in found)
    assert "held-out" not in text and "training-pair (train)" in text


# --- the answers ---------------------------------------------------------------------------------

def test_classify():
    contracts = ("strict", "substring")
    assert classify(("strict", "substring"), contracts) == CORRECT
    assert classify(("substring",), contracts) == GAMED
    assert classify((), contracts) == WRONG


def test_samples_agree_with_a_plain_loop(record, plan):
    counted: Counter = Counter()
    for run in record.runs:
        for stage, splits in run.evaluations.items():
            for a, b, text, done in splits["test"].sampled:
                counted[(stage, _judge(a, b, text, done))] += 1
    mine = Counter((s.stage, s.kind) for s in iter_samples(record, plan, split="test",
                                                           decoding="sampled"))
    assert mine == counted
    assert counted[("substring", "gamed")] > 0
    for group in stage_examples(record, plan, "test"):
        assert group.count == counted[(group.stage, group.kind)]
        assert all(e.kind == group.kind for e in group.examples)
        shown = [e.count for e in group.examples]
        assert shown == sorted(shown, reverse=True)


def test_examples_group_identical_answers():
    samples = list(iter_samples(load_record(bundled_record_path()), teaching_plan_loaded().model,
                                stages=["substring"], split="test", decoding="sampled"))
    grouped = examples(samples)
    assert sum(e.count for e in grouped) == len(samples)
    assert len({(e.prompt, e.text, e.terminated) for e in grouped}) == len(grouped)


def test_pair_grids_equal_a_plain_loop(record, plan):
    grids = {(g.stage, g.split): g for g in pair_grids(record, plan)}
    assert set(grids) == {(stage, split) for stage in ("initial", "strict", "substring")
                          for split in ("train", "dev", "test")}
    for (stage, split), grid in grids.items():
        assert set(grid.rates) == {tuple(p) for p in plan.split[split]}
        per_pair: dict = {}
        for run in record.runs:
            for a, b, text, done in run.evaluations[stage][split].sampled:
                cell = per_pair.setdefault((a, b), [])
                cell.append(_judge(a, b, text, done) == "correct")
        for pair, answers in per_pair.items():
            assert math.isclose(grid.rates[pair], sum(answers) / len(answers))


# --- postlab samples ----------------------------------------------------------------------------

def test_samples_command_lists_gamed_answers(capsys):
    assert main(["samples", "--stage", "substring", "--filter", "gamed", "--limit", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("RL under substring · test split, sampled · gamed: ")
    assert out[0].endswith("distinct, the commonest 3 shown")
    assert len(out) == 5
    for line in out[1:4]:
        assert "accepted by: substring" in line
    # the first page says how to see the rest
    assert out[4].endswith("--filter correct|gamed|wrong, --seed")
    assert "--limit 0 all of them" in out[4]
    assert main(["samples", "--stage", "substring", "--filter", "gamed", "--limit", "0"]) == 0
    every = capsys.readouterr().out.splitlines()
    assert len(every) > 5 and "not shown" not in every[-1]


def test_samples_jsonl_is_every_answer(record, capsys):
    assert main(["samples", "--format", "jsonl", "--split", "rollouts", "--seed", "22",
                 "--stage", "strict"]) == 0
    lines = capsys.readouterr().out.splitlines()
    run = next(r for r in record.runs if r.seed == 22)
    assert len(lines) == sum(len(step.rows) for step in run.arms["strict"])
    first = json.loads(lines[0])
    assert first["step"] == 1 and first["decoding"] == "rollout" and first["split"] is None
    assert first["kind"] == _judge(first["a"], first["b"], first["text"], first["terminated"])


@pytest.mark.parametrize(("args", "words"), [
    (["--stage", "nope"], "--stage nope: the run's stages are initial, strict, substring"),
    (["--split", "rollouts", "--stage", "initial"], "RL arms with rollouts are strict"),
    (["--seed", "5"], "--seed 5: the run's seeds are 11, 22, 33"),
    (["--split", "nope"], "--split nope"),
    (["--limit", "-1"], "--limit -1"),
    (["--filter", "odd"], "odd"),
    (["--format", "jsonl", "--limit", "3"], "--limit is for the text format"),
    (["--split", "rollouts", "--decoding", "greedy"], "--decoding is for evaluation splits"),
])
def test_samples_refusals_are_one_line(args, words, capsys):
    assert main(["samples", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and words in captured.err


# --- plot --overwrite ---------------------------------------------------------------------------

def test_plot_overwrite_replaces_only_its_own_figures(tmp_path, capsys):
    out = tmp_path / "figures"
    assert main(["plot", "--out-dir", str(out), "--lang", "en"]) == 0
    (out / "pass_at_k.png").write_bytes(b"stale")
    assert main(["plot", "--out-dir", str(out)]) == 2
    assert (out / "pass_at_k.png").read_bytes() == b"stale"
    assert main(["plot", "--out-dir", str(out), "--overwrite", "--lang", "en"]) == 0
    assert (out / "pass_at_k.png").read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures"]  # nothing left aside
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["plot", "--out-dir", str(out), "--overwrite"]) == 2
    assert "notes.txt, which plot did not write" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"


def test_plot_never_touches_a_record(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(bundled_run_dir(), run)
    assert main(["plot", str(run), "--out-dir", str(run), "--overwrite"]) == 2
    assert "which plot did not write" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == sorted(
        p.name for p in bundled_run_dir().iterdir())


# --- Chinese labels -----------------------------------------------------------------------------

def test_missing_cjk_font_is_said_in_one_line_and_on_the_page(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(figures_module, "_find_cjk_font", lambda: None)
    out = tmp_path / "figures"
    assert main(["plot", "--out-dir", str(out), "--lang", "zh"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CJK" in err
    capsys.readouterr()
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page), "--lang", "zh", "--format", "json"]) == 0
    assert "中文图注需要 CJK 字体" in page.read_text()  # the notice, not the page's font
    assert "No CJK font here" in err  # readable where Chinese is not


def test_chinese_figures_use_a_cjk_font_when_one_is_installed():
    from matplotlib import font_manager

    installed = [p for p in font_manager.findSystemFonts() if "cjk" in p.lower()]
    if not installed:
        pytest.skip("no CJK font installed here (.ci/run installs one where it can)")
    lang, font = figures_module.figure_language("zh")
    assert lang == "zh" and font is not None


# --- the page -----------------------------------------------------------------------------------

@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_opens_on_what_was_trained_and_what_it_found(tmp_path, capsys, lang):
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page), "--lang", lang, "--format", "json"]) == 0
    text = page.read_text()
    for anchor in ('id="summary"', 'id="verification"', 'id="findings"', 'id="answers"',
                   'data-figure="pair_success"', 'data-figure="generalisation"'):
        assert anchor in text
    assert ("VERIFIED" if lang == "en" else "已核验") in text
    assert "single_digit_addition" in text and "11,678" in text
    assert text.count("<li>") == 8
    assert "6+3=" in text  # an answer as the model wrote it


def test_a_record_without_its_run_folder_is_not_marked_failed(tmp_path, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(bundled_run_dir() / "record.json.gz", bare / "record.json.gz")
    page = tmp_path / "report.html"
    assert main(["report", "--record", str(bare / "record.json.gz"), "--html", str(page),
                 "--format", "json", "--lang", "en"]) == 0
    text = page.read_text()
    assert 'class="badge unknown"' in text and "not checked" in text
    assert "NOT VERIFIED" not in text


def test_a_failed_verification_is_on_the_page(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(bundled_run_dir(), run)
    checkpoint = run / "seed-11-strict.pt"
    checkpoint.write_bytes(checkpoint.read_bytes() + b"x")
    page = tmp_path / "report.html"
    assert main(["report", str(run), "--html", str(page), "--format", "json", "--lang",
                 "en"]) == 0
    text = page.read_text()
    assert 'class="badge fail"' in text and "NOT VERIFIED" in text


@needs_chromium
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_first_screen_and_every_figure_in_chromium(tmp_path, capsys, lang):
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page), "--lang", lang, "--format", "json"]) == 0
    seen = probe_page(page, 1280, 900)
    assert seen["images"] == 7 and seen["decoded"] == 7
    parts = seen["parts"]
    # summary, verification and findings on the first screen; answers and the heatmap next
    for name in ("summary", "verification", "findings"):
        assert 0 <= parts[name] < 900, (name, parts)
    for name in ("answers", "figure:pair_success"):
        assert 0 <= parts[name] < 3 * 900, (name, parts)
    english = ("What was trained", "Verification", "Findings", "VERIFIED", "gamed")
    words = english if lang == "en" else ("训练了什么", "核验", "结论", "已核验", "投机")
    for word in words:
        assert word in seen["text"], word
