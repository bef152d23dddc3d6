"""A transformer policy goes through every RL option, every arm pipeline, the figures, the HTML
page and a resume after SIGKILL, with the same checks as the GRU: a run verifies, reproduces
identically, and a killed run resumed gives the rows and checkpoints of one never killed."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from plans import SMALL, rows, write_plan
from recordfiles import read_record

from postlab.cli import main
from postlab.rl.algorithms import ADVANTAGES, KL_ESTIMATORS, REDUCTIONS

pytestmark = pytest.mark.slow

GPT2 = {"kind": "transformer", "architecture": "gpt2", "layers": 1, "heads": 2, "width": 16,
        "max_positions": 16}
#: One seed, a few steps: enough for groups to hold both rewards now and then.
TINY = {**SMALL, "seeds": [3], "sft_steps": 12, "rl_steps": 2, "arms": ["strict"],
        "policy": GPT2}

OPTIONS: list[dict[str, Any]] = (
    [{"advantage": name} for name in ADVANTAGES]
    + [{"loss_reduction": name} for name in REDUCTIONS]
    + [{"kl": name} for name in KL_ESTIMATORS]
    + [{"clip_high": 0.28}, {"dynamic_sampling": {"max_extra_groups": 3}}]
)


def _option_id(option: dict[str, Any]) -> str:
    key, value = next(iter(option.items()))
    return f"{key}={value if not isinstance(value, dict) else 'on'}"


@pytest.mark.parametrize("option", OPTIONS, ids=[_option_id(o) for o in OPTIONS])
def test_every_rl_option_trains_a_transformer_and_verifies(option, tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", **TINY, **option)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet"]) == 0
    record = read_record(out)
    steps = record["runs"][0]["training"]["strict"]
    assert len(steps) == TINY["rl_steps"]
    if "dynamic_sampling" in option:
        assert all("sampling" in step for step in steps)
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    assert "VERIFIED" in capsys.readouterr().out


PIPELINES = {**TINY, "clip_high": 0.28, "kl": "k3", "advantage": "leave-one-out",
             "arms": [{"name": "sft-then-rl", "pipeline": "sft-then-rl", "contract": "strict"},
                      {"name": "rl-only", "pipeline": "rl-only", "contract": "substring"},
                      {"name": "sft-more", "pipeline": "sft-only", "sft_steps": 6}]}


def test_arm_pipelines_plot_and_html_on_a_transformer(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", **PIPELINES)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet"]) == 0
    record = read_record(out)
    assert set(record["runs"][0]["checkpoints"]) >= {"initial", "sft-then-rl", "rl-only",
                                                      "sft-more"}
    assert all(entry["reload_equal"] for entry in record["runs"][0]["checkpoints"].values())
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    assert "VERIFIED" in capsys.readouterr().out
    assert main(["reproduce", str(out), "--out-dir", str(tmp_path / "again"), "--workers", "1",
                 "--quiet"]) == 0
    assert "identical: " in capsys.readouterr().out

    assert main(["plot", str(out), "--lang", "en"]) == 0
    figures = sorted(p.name for p in (out / "figures").iterdir())
    assert figures and all(p.stat().st_size > 1000 for p in (out / "figures").iterdir())
    assert {"outcomes.png", "pass_at_k.png", "sft_loss.png"} <= set(figures)

    page = tmp_path / "report.html"
    assert main(["report", str(out), "--html", str(page), "--lang", "en"]) == 0
    text = page.read_text()
    assert text.count("data:image/png;base64,") >= 3
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", text)
    for arm in ("sft-then-rl", "rl-only", "sft-more"):
        assert arm in text


#: Long enough that the run can be killed after its first seed and before its last.
RESUMABLE = {**TINY, "seeds": [3, 4, 5], "sft_steps": 40, "rl_steps": 8}


def test_a_killed_transformer_run_resumes_to_the_same_bits(tmp_path):
    plan = write_plan(tmp_path / "plan.json", **RESUMABLE)
    whole = tmp_path / "whole"
    assert main(["run", "--plan", str(plan), "--out-dir", str(whole), "--workers", "1",
                 "--quiet"]) == 0

    out = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "postlab", "run", "--plan", str(plan),
                                "--out-dir", str(out), "--workers", "1", "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "record.json").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    partial = read_record(out)
    assert 1 <= len(partial["runs"]) < len(RESUMABLE["seeds"])

    done = subprocess.run([sys.executable, "-m", "postlab", "run", "--out-dir", str(out),
                           "--resume", "--workers", "1", "--quiet"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    whole_rows = rows(read_record(whole))
    assert rows(read_record(out)) == whole_rows
    assert (out / "summary.json").read_bytes() == (whole / "summary.json").read_bytes()
    names = sorted(p.name for p in whole.glob("*.pt"))
    assert names and names == sorted(p.name for p in out.glob("*.pt"))
    for name in names:
        assert (out / name).read_bytes() == (whole / name).read_bytes()
    assert not list(out.glob(".*.partial"))
