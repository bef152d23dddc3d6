"""Progress display: a live terminal view, plain periodic lines, or nothing.

Training code reports events; the display decides how to show them. Events arrive in the main
process (from worker processes through a queue), so one object owns the terminal. An RL event
carries ``rates``: the rollout acceptance under each of the plan's contracts, in their order.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

#: Plain mode prints one line per this many RL steps, as the reference does.
PLAIN_EVERY = 80


class Quiet:
    def handle(self, event: dict[str, Any]) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class Plain(Quiet):
    """Lines for logs and pipes: one per RL arm every ``PLAIN_EVERY`` steps, one per seed."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def handle(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        if kind == "rl" and (event["step"] % PLAIN_EVERY == 0 or (event["step"] == event["total"]
                             and event["total"] < PLAIN_EVERY)):
            rates = " ".join(f"{name}={rate:.3f}" for name, rate in event["rates"].items())
            self._print(f"seed={event['seed']} arm={event['arm']} step={event['step']} {rates}")
        elif kind == "seed_done":
            self._print(f"seed={event['seed']} done")
        elif kind == "message":
            self._print(event["text"])

    def message(self, text: str) -> None:
        self._print(text)


class Live(Quiet):
    """A rich progress view: one bar per seed's SFT and per (seed, arm) RL run."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[rates]}"),
                                 transient=False)
        self.tasks: dict[tuple, Any] = {}
        self.progress.start()

    def _task(self, key: tuple, description: str, total: int) -> Any:
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(description, total=total, rates="")
        return self.tasks[key]

    def handle(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        if kind == "sft":
            task = self._task(("sft", event["seed"]), f"seed {event['seed']} SFT", event["total"])
            self.progress.update(task, completed=event["step"],
                                 rates=f"loss {event['loss']:.3f}")
        elif kind == "rl":
            task = self._task(("rl", event["seed"], event["arm"]),
                              f"seed {event['seed']} RL {event['arm']}", event["total"])
            self.progress.update(task, completed=event["step"],
                                 rates=" ".join(f"{name} {rate:.3f}"
                                                for name, rate in event["rates"].items()))
        elif kind == "message":
            self.message(event["text"])

    def message(self, text: str) -> None:
        self.progress.console.print(text)

    def close(self) -> None:
        self.progress.stop()


def make_display(quiet: bool, stream: TextIO | None = None) -> Quiet:
    if quiet:
        return Quiet()
    target = stream or sys.stdout
    if target.isatty():
        return Live()
    return Plain(target)
