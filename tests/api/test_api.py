"""postlab from Python, as a script or notebook uses it: the README's example, checked."""

from __future__ import annotations

import subprocess
import sys

import pytest
from plans import SMALL, write_plan

import postlab
from postlab.errors import UserError


def test_a_script_runs_verifies_reports_compares_and_reproduces(tmp_path):
    plan = write_plan(tmp_path / "plan.json", **SMALL)
    lines: list[str] = []
    result = postlab.run(tmp_path / "run", plan, workers=1, say=lines.append)
    assert lines[0].startswith("code path: ") and lines[1].startswith("device: cpu")
    assert result.fingerprint == (tmp_path / "run" / "fingerprint.txt").read_text().split()[0]
    assert [run.seed for run in result.record.runs] == [3, 4]

    checked = postlab.verify(tmp_path / "run", expect=result.fingerprint)
    assert checked.verified and all(c.status != "fail" for c in checked.checks)

    page = tmp_path / "page.html"
    report = postlab.report(tmp_path / "run", html=page)
    assert report.findings and report.analysis.seeds == (3, 4)
    assert page.read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(UserError, match="already exists"):
        postlab.report(tmp_path / "run", html=page)

    other = write_plan(tmp_path / "other.json", **(SMALL | {"kl_beta": 0.1}))
    postlab.run(tmp_path / "beta", other, workers=1)
    compared = postlab.compare([tmp_path / "run", tmp_path / "beta"], split="test")
    assert compared.comparison.versions == ("run", "beta") and compared.comparison.metrics

    again = postlab.reproduce(tmp_path / "run", tmp_path / "again", workers=1)
    assert again.identical

    loaded = postlab.load_run(tmp_path / "run")
    assert loaded.seeds == (3, 4) and loaded.plan.sha256 == report.run.plan.sha256
    with pytest.raises(UserError, match="already exists"):
        postlab.run(tmp_path / "run", plan)
    assert not (tmp_path / "nothing").exists()
    with pytest.raises(UserError, match="engine 'exactly': unknown \\(did you mean exact\\?\\)"):
        postlab.run(tmp_path / "nothing", plan, engine="exactly")
    assert not (tmp_path / "nothing").exists()


def test_importing_postlab_and_its_command_line_loads_no_torch():
    """The API is importable (and the CLI parses) without torch: it loads when work starts."""
    code = ("import sys, postlab, postlab.api, postlab.cli; postlab.cli.build_parser(); "
            "print(postlab.run.__module__, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["postlab.api.training", "False"]


def test_the_readme_python_example_runs_as_written(tmp_path):
    """The README's "From Python" block, verbatim, in a fresh process beside the examples."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "README.md").read_text()
    section = text[text.index("## From Python"):]
    start = section.index("```python\n") + len("```python\n")
    code = section[start:section.index("\n```", start)]
    (tmp_path / "examples").symlink_to(root / "examples")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0].startswith("code path: ") and any(line.startswith("True ") for line in out)
    assert (tmp_path / "runs" / "k3" / "report.html").is_file()


def test_the_page_pins_the_record_s_code_path_before_torch_loads(tmp_path):
    """``report --html`` in a fresh process: the record's code path is pinned before reading
    the plan loads torch (the quick start's last step)."""
    page = tmp_path / "page.html"
    done = subprocess.run([sys.executable, "-m", "postlab", "report", "--format", "table",
                           "--html", str(page), "--lang", "en"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert page.read_text().startswith("<!DOCTYPE html>")
