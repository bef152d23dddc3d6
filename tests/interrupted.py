"""Starting a run as a terminal would, waiting for its first seed, resuming and comparing:
shared by the interruption tests of every task kind."""

import signal
import subprocess
import sys
import time
from pathlib import Path

from plans import rows
from recordfiles import read_record


def as_from_a_terminal() -> None:
    """In the child, before postlab starts: Ctrl-C deliverable and not ignored, as in a shell's
    foreground job, whatever this test process inherited (a test runner's worker may block or
    ignore SIGINT, and a child inherits both)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_run(plan: Path, out: Path) -> subprocess.Popen:
    """``postlab run`` of ``plan`` into ``out`` on two workers, in a child process."""
    return subprocess.Popen([sys.executable, "-m", "postlab", "run", "--plan", str(plan),
                             "--out-dir", str(out), "--workers", "2", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_from_a_terminal)


def wait_for_first_seed(process: subprocess.Popen, out: Path) -> None:
    """Until the run has recorded a seed (its record exists)."""
    deadline = time.monotonic() + 120
    while not (out / "record.json").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)


def resume_and_compare(plan, out, uninterrupted_record, uninterrupted_out):
    """``--resume`` the run in ``out``; its rows, summary and checkpoints must be the
    uninterrupted run's."""
    done = subprocess.run([sys.executable, "-m", "postlab", "run", "--out-dir", str(out),
                           "--resume", "--workers", "2", "--quiet"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    record = read_record(out)
    assert rows(record) == rows(uninterrupted_record)
    assert (out / "summary.json").read_bytes() == (uninterrupted_out / "summary.json").read_bytes()
    checkpoints = sorted(p.name for p in out.glob("*.pt"))
    assert checkpoints == sorted(p.name for p in uninterrupted_out.glob("*.pt"))
    for name in checkpoints:
        assert (out / name).read_bytes() == (uninterrupted_out / name).read_bytes()
    assert not list(out.glob(".*.partial"))


def killed_and_resumed_equals_whole(plan: Path, folder: Path, seeds: int) -> None:
    """Run ``plan`` whole, then again killed with SIGKILL once its first seed is recorded,
    resume that one, and compare; skips if the run finished before the kill landed."""
    import pytest

    from postlab.cli import main

    whole = folder / "whole"
    assert main(["run", "--plan", str(plan), "--out-dir", str(whole), "--quiet",
                 "--workers", "1"]) == 0
    out = folder / "killed"
    process = start_run(plan, out)
    wait_for_first_seed(process, out)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    partial = read_record(out)
    if len(partial["runs"]) == seeds:
        pytest.skip("the run finished before the kill landed")
    resume_and_compare(plan, out, read_record(whole), whole)
