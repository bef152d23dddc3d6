"""A sweep's progress lines, kept apart from the runner so that the command line can make
one before torch loads (the CPU code path is pinned first)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

from postlab.runs.progress import Quiet

if TYPE_CHECKING:
    from postlab.engines.registry import EngineTask
    from postlab.runs.orchestration import OpenRun


class SweepProgress(Quiet):
    """Tasks done, running and failed, and the time left at the rate so far."""

    def __init__(self, total: int, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.total, self.done, self.running, self.failed, self.skipped = total, 0, 0, 0, 0
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.started = time.monotonic()

    def watch(self, event: str, run: OpenRun, task: EngineTask | None,
              error: BaseException | None, count: int) -> None:
        """Counts are of (seed, stage) results: a task stands for every one it trains."""
        if event == "submitted":
            self.running += 1
            return
        if event == "skipped":  # never submitted, or never made: its seed failed
            self.skipped += count
            return
        self.running -= 1
        if event == "failed":
            self.failed += count
            seed = task.seed if task is not None else None
            self.message(f"failed: {run.options.out_dir.name} seed {seed}: "
                         f"{run.failed.get(seed, error)}")
        else:
            self.done += count
        self.message(self.line())

    def line(self) -> str:
        left = self.total - self.done - self.failed - self.skipped
        elapsed = time.monotonic() - self.started
        rate = (self.done + self.failed) / elapsed if elapsed > 0 else 0.0
        eta = f"about {left / rate:.0f} s left" if rate > 0 and left else "—"
        return (f"tasks: {self.done}/{self.total} done, {self.running} running, "
                f"{self.failed} failed" + (f" ({self.skipped} skipped with them)"
                                           if self.skipped else "") + f"; {eta}")

    def message(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)
