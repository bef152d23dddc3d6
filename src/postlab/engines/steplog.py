"""Step loggers: training scalars written while a run trains, to watch it live.

A logger is a registry entry (:data:`LOGGERS`) named on the command line (``--log
tensorboard``). Each task opens its own loggers where it runs, from names alone (tasks may run
in another process or on another machine), writes one set of scalars per step into the run
folder and closes them when it ends or fails::

    RUN/logs/<logger>/seed-<seed>/<stage>/

with ``<stage>`` ``sft`` for a seed's SFT task and the arm's name for an arm's task, so a
viewer shows every seed and arm as a run of its own. Logging only reads what a step already
computed: a run with loggers has the same record, summary and checkpoints, bit for bit, as one
without. Logs are not part of the record: ``verify`` and the fingerprint ignore them, and a
resumed run logs only the tasks it trains again.

Tags per RL step (the report's per-step series, :func:`postlab.records.metrics.step_series`,
with the same definitions): ``reward/<contract>`` for every contract the plan reports,
``kl``, ``entropy``, ``clip_fraction``, ``gradient_norm`` (before clipping), ``loss`` (the
last three averaged over the step's updates, as the report does), ``mean_tokens``,
``truncated`` and ``zero_variance_groups``. Per SFT step: ``sft/loss``.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from postlab.errors import UserError
from postlab.registry import Registry

#: The folder of a run that holds every logger's output; not hashed, not verified.
LOGS_DIR = "logs"
#: The stage folder of a seed's SFT task (arms use their own names).
SFT_STAGE = "sft"

#: Tag of each per-step series after the rewards (``records.metrics.STEP_SERIES``).
RL_TAGS = {"kl": "kl", "entropy": "entropy", "ratio_outside_clip": "clip_fraction",
           "gradient_norm_before_clip": "gradient_norm", "loss": "loss",
           "mean_tokens": "mean_tokens", "truncated": "truncated",
           "zero_variance_groups": "zero_variance_groups"}
SFT_LOSS_TAG = "sft/loss"


def reward_tag(contract: str) -> str:
    return f"reward/{contract}"


def rl_scalars(entry: dict[str, Any], answer: Callable[..., int],
               contracts: Sequence[str], drawn: tuple[str, int, float] | None = None
               ) -> dict[str, float]:
    """One RL step's scalars from its history entry (the step as the engine made it, the
    record's form), by the report's own function, so a live curve and the report's curve are
    the same numbers. ``drawn``: an arm paid at random, as (contract, seed, rate): its
    reward is the share the stream paid, recomputed as reports recompute it."""
    # Here, not at the top: the command line imports this module to list the loggers.
    from postlab.records.metrics import STEP_SERIES, step_series
    from postlab.records.models import Step

    # typed as a record's step is read; its rows are the engine's own, not checked again
    step = Step.model_validate(entry, context={"rows_checked": True})
    series = step_series(step, list(step.rows), answer, contracts)
    values = {reward_tag(name): series[f"{name}_reward"] for name in contracts}
    if drawn is not None:
        from postlab.tasks.contracts import random_paid

        contract, seed, rate = drawn
        rows = len(step.rows)
        values[reward_tag(contract)] = float(random_paid(seed, [step.step], [rows], rate)[0]
                                             ) / rows
    values.update({RL_TAGS[name]: series[name] for name in STEP_SERIES})
    return values


class StepLogger(Protocol):
    """Where one task's scalars go; created inside the task, in the folder it is given."""

    def scalars(self, step: int, values: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class LoggerKind(Protocol):
    """A registry entry: builds a logger for a folder, and says if its package is missing."""

    def __call__(self, folder: Path) -> StepLogger: ...

    def require(self) -> None: ...


LOGGERS: Registry[LoggerKind] = Registry("logger")


def check_loggers(names: Sequence[str]) -> None:
    """Refuse an unknown logger or a missing package before anything is written."""
    for name in names:
        try:
            kind = LOGGERS[name]
        except KeyError as exc:
            raise UserError(f"--log {name}: {exc.args[0]}") from None
        kind.require()


def log_folder(out_dir: Path, logger: str, seed: int, stage: str) -> Path:
    return out_dir / LOGS_DIR / logger / f"seed-{seed}" / stage


class StepLogs:
    """The loggers of one task, used as a context manager so they are closed (and flushed)
    however the task ends. With no names it does nothing, so tasks log unconditionally."""

    def __init__(self, names: Sequence[str], out_dir: Path, seed: int, stage: str) -> None:
        self._loggers: list[StepLogger] = []
        try:
            for name in names:
                self._loggers.append(LOGGERS[name](log_folder(out_dir, name, seed, stage)))
        except BaseException:
            self.close()
            raise

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        for logger in list(self._loggers):
            try:
                logger.scalars(step, values)
            except Exception as exc:
                # A log is a view of training, not part of it: a full disk or a broken
                # writer stops that logger, never the training.
                self._loggers.remove(logger)
                _closed_quietly(logger)
                _say(f"logging stopped ({type(logger).__name__}): {exc}")

    def close(self) -> None:
        loggers, self._loggers = self._loggers, []
        for logger in loggers:
            try:
                logger.close()
            except Exception as exc:  # every logger is closed; none hides the task's result
                _say(f"a log could not be closed ({type(logger).__name__}): {exc}")

    def __enter__(self) -> StepLogs:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _say(message: str) -> None:
    print(f"postlab: {message}", file=sys.stderr, flush=True)


def _closed_quietly(logger: StepLogger) -> None:
    with contextlib.suppress(Exception):
        logger.close()


#: Event files TensorBoard's writers name ``events.out.tfevents.<time>.<host>...``.
EVENT_FILES = "events.out.tfevents.*"


@LOGGERS.register("tensorboard")
class TensorBoardLogger:
    """Scalars as TensorBoard event files (``tensorboard --logdir RUN/logs/tensorboard``),
    flushed after every step so a running TensorBoard shows it at once."""

    @staticmethod
    def require() -> None:
        # Its event writer is imported (it loads no torch, and the command line checks before
        # torch may load), so a broken install is found before any task starts.
        try:
            for name in ("tensorboard", "tensorboard.summary.writer.event_file_writer"):
                importlib.import_module(name)
        except Exception:
            raise UserError("--log tensorboard needs the tensorboard extra: "
                            "pip install 'postlab[tensorboard]'") from None

    def __init__(self, folder: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # A task trained again (resumed after an interruption) starts its folder afresh, so
        # each step keeps one value; the values are the same bits as before.
        if folder.is_dir():
            for old in folder.glob(EVENT_FILES):
                old.unlink()
        self._writer = SummaryWriter(log_dir=str(folder))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        for tag, value in values.items():
            self._writer.add_scalar(tag, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
