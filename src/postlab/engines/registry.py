"""Engines as one protocol and a registry: what trains a run's seeds is looked up by name.

Orchestration, verify, reproduce, sweeps and the command line ask ``ENGINES`` and the
:class:`Engine` they get; none of them tests an engine's name or a task's class. An engine
turns pending seeds into tasks (self-contained callables an executor runs anywhere); a task
returns one result per (run folder, seed, stage) it trained, in the form the record
assembles, and may make further tasks ready (the exact engine's arms wait for their seed's
SFT). Adding an engine is a module of its own and one line at the end of this file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from postlab.errors import UserError
from postlab.records.layout import UNNAMED_ENGINE
from postlab.registry import Registry

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.policies import Policy
    from postlab.records.models import Record

#: (run folder, seed, stage): one stage of one seed of one run, the unit results come in.
StageKey = tuple[str, int, str]
#: Progress events a task sends while it runs.
Emit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Work:
    """Pending seeds of one run folder for an engine to train, with what an interrupted
    invocation already finished of them: (seed, stage) -> result."""

    plan: Plan
    seeds: tuple[int, ...]
    out_dir: Path
    kept: Mapping[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    every: int = 0  # RL steps between progress events; 0 sends none
    device: str = "cpu"
    log: tuple[str, ...] = ()  # step loggers, by name


class EngineTask(Protocol):
    """A picklable unit of training that an executor runs."""

    #: the first seed, for messages about the task
    seed: int

    @property
    def keys(self) -> tuple[StageKey, ...]:
        """Every (run folder, seed, stage) whose result it returns."""

    def __call__(self, emit: Emit) -> dict[StageKey, dict[str, Any]]:
        """Train; one result per key (the stage's rows, history, checkpoint, compute)."""


class Engine(Protocol):
    """How one engine trains, resumes and re-evaluates."""

    name: str
    #: what the engine promises about its bits, for ``--help`` and the README
    summary: str
    #: True when its tasks write their finished stages' kept results themselves (for resume);
    #: otherwise orchestration keeps each finished task's results
    keeps_results: bool
    #: True when a resumed run may use only seeds kept whole: stages kept of a seed in part
    #: are dropped, with their checkpoints, and the seed trains again whole
    whole_seeds: bool

    def problems(self, plan: Plan, log: Sequence[str] = ()) -> list[str]:
        """What it cannot train of ``plan`` (with these live loggers); empty: it can."""

    def batch_key(self, plan: Plan) -> str:
        """Runs whose plans give equal keys may be trained by the same tasks."""

    def tasks(self, works: Sequence[Work], capacity: int) -> list[EngineTask]:
        """The tasks that can start now for these runs (``works`` share a batch key);
        ``capacity``: how many tasks the executor runs at once."""

    def after(self, task: EngineTask, results: Mapping[StageKey, dict[str, Any]],
              work: Work) -> list[EngineTask]:
        """Tasks that became ready because ``task`` finished with ``results``."""

    def evaluate_many(self, models: Sequence[Policy], plan: Plan,
                      seeds: Sequence[int], device: str) -> list[dict[str, Any]]:
        """Loaded checkpoints' evaluation rows (``seeds[i]`` the seed of ``models[i]``),
        recomputed as this engine computed them, as one computation where the engine can:
        each one's rows are those it gives alone."""


ENGINES: Registry[Engine] = Registry("engine")
#: The engine a record without an ``engine`` field was made by (the record's rule).
DEFAULT_ENGINE = UNNAMED_ENGINE


def cpu_capability() -> str:
    """The kernels this process runs; every task reports it so no worker can differ unseen."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def engine_for(record: Record) -> Engine:
    """The engine that made a record (its ``engine`` field; absent: the exact engine);
    refused in one line when this postlab has no engine of that name."""
    name = record.engine or DEFAULT_ENGINE
    if name not in ENGINES:
        raise UserError(f"the record was made by the {name!r} engine, which this postlab "
                        f"does not have; it has {', '.join(ENGINES.names())}")
    return ENGINES[name]


# The registry, one line per engine: its name, and where it is defined (imported when used).
ENGINES.register_lazy("exact", "postlab.engines.exact:EXACT")
ENGINES.register_lazy("ensemble", "postlab.engines.ensemble.task:ENSEMBLE")
