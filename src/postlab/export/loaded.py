"""``postlab.load_run``: a run read and checked as the command line checks it, with its rows
as Arrow tables and pandas DataFrames.

A record is checked before any table is built from it (its structure, the plan-hash link, that
its rows fit the plan, and that every part still matches the digests taken in training), so a
DataFrame never shows numbers from a damaged or edited record.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from postlab.errors import UserError
from postlab.plan.frozen import LoadedPlan

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from postlab.export.tables import Source
    from postlab.records.models import Record
    from postlab.records.opened import OpenedRun

EXTRA_HINT = "pip install 'postlab[export]'"


def require_arrow(*, frames: bool = False) -> None:
    """Refuse in one line when the export extra is missing, naming how to install it
    (``frames``: pandas too, for the DataFrame views)."""
    import importlib

    needed = ("pyarrow", "pyarrow.csv", "pyarrow.parquet", *(("pandas",) if frames else ()))
    for module in needed:
        try:
            importlib.import_module(module)
        except ImportError:
            raise UserError(f"tables need {module.partition('.')[0]}: {EXTRA_HINT}") from None


@dataclass(frozen=True)
class LoadedRun:
    """A checked run: its plan and record, what they hold, and tables of its rows.

    ``tables()`` gives Arrow tables; ``eval_samples()``, ``rollout_samples()``, ``updates()``,
    ``steps()``, ``sft_losses()`` and ``summary()`` give the same tables as pandas DataFrames
    (docs/export.md lists their columns). Tables are built once, on first use.
    """

    record_path: Path
    plan_sha256: str
    record_sha256: str
    seeds: tuple[int, ...]
    stages: tuple[str, ...]
    arms: tuple[str, ...]  # the RL arms, each rewarded by the contract ``rewarded_by`` names
    rewarded_by: dict[str, str]
    plan: LoadedPlan = field(repr=False)
    record: Record = field(repr=False)
    #: the opening it was read through, whose checks its tables' rows pass (None: a record
    #: checked whole in memory)
    opened: OpenedRun | None = field(default=None, repr=False)

    def source(self, version: str | None = None) -> Source:
        from postlab.export.tables import Source

        opened = self.opened
        if opened is None:
            return Source(self.record, self.plan.model, version)
        from postlab.records.opened import checked_tables

        return Source(self.record, self.plan.model, version, lambda: checked_tables(opened))

    @functools.cached_property
    def _tables(self) -> dict[str, pa.Table]:
        """Every table, built columnar as ``postlab export`` builds them."""
        import pyarrow as pa

        from postlab.export.columnar import columnar_batches
        from postlab.export.files import export_contracts
        from postlab.export.tables import TABLES, arrow_schema, table_columns
        from postlab.tasks.registry import task_for

        sources = [self.source()]
        contracts = export_contracts([self.plan.model], task_for(self.plan.model).answer_kind)
        schemas = {name: arrow_schema(table_columns(name, sources, contracts))
                   for name in TABLES}
        batches: dict[str, list[pa.RecordBatch]] = {name: [] for name in TABLES}
        for name, batch in columnar_batches(sources, contracts, schemas, 1 << 20):
            batches[name].append(batch)
        return {name: pa.Table.from_batches(batches[name], schema=schemas[name])
                for name in TABLES}

    def tables(self) -> dict[str, pa.Table]:
        """Every table as Arrow, with its declared schema."""
        require_arrow()
        return dict(self._tables)

    def _frame(self, name: str) -> pd.DataFrame:
        require_arrow(frames=True)
        import pandas as pd
        import pyarrow as pa

        # Integer columns stay integers where a value may be missing (steps.groups_*):
        # pandas' nullable Int64 rather than float64 with NaN.
        return self._tables[name].to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)

    def eval_samples(self) -> pd.DataFrame:
        return self._frame("eval_samples")

    def rollout_samples(self) -> pd.DataFrame:
        return self._frame("rollout_samples")

    def updates(self) -> pd.DataFrame:
        return self._frame("updates")

    def steps(self) -> pd.DataFrame:
        return self._frame("steps")

    def sft_losses(self) -> pd.DataFrame:
        return self._frame("sft_losses")

    def summary(self) -> pd.DataFrame:
        return self._frame("summary")


def load_run(path: str | Path | None = None) -> LoadedRun:
    """A run folder or record file (default: the bundled teaching run), read and checked.

    Raises :class:`~postlab.errors.UserError` naming the first problem: a missing or damaged
    record, a plan other than the one it was trained under, rows that do not fit the plan, or
    a part changed since it was recorded.
    """
    from postlab.plan.arms import rl_contracts
    from postlab.records.opened import checked_tables, open_run
    from postlab.sweeps.folder import is_sweep

    target = None if path is None else Path(path)
    if target is not None and is_sweep(target):
        raise UserError(f"{target} is a sweep folder; load one of its versions "
                        f"({target}/VERSION), or export it with 'postlab export'")
    opened = open_run(target)
    record, plan = opened.record, opened.plan
    stages: dict[str, None] = {}
    arms: dict[str, None] = {}
    seeds = []
    # one pass over the seeds' flat tables, which checks each (so the tables built from
    # them later need not), never a seed decoded
    for tables in checked_tables(opened):
        seeds += tables.seeds
        stages.update(dict.fromkeys(tables.blocks.column("stage").unique().to_pylist()))
        arms.update(dict.fromkeys(tables.steps.column("arm").unique().to_pylist()))
    return LoadedRun(record_path=opened.source, plan_sha256=plan.sha256,
                     record_sha256=opened.record_sha256,
                     seeds=tuple(seeds), stages=tuple(stages),
                     arms=tuple(arms), rewarded_by=dict(rl_contracts(plan.model)), plan=plan,
                     record=record, opened=opened)


def load_sweep(folder: Path) -> tuple[list[tuple[str, LoadedRun]], list[str]]:
    """A sweep's versions that have a completed seed, each checked, in the index's order, and
    the names of those that have none yet (left out)."""
    from postlab.records.record import locate_run
    from postlab.sweeps.folder import read_index

    runs, left_out = [], []
    for version in read_index(folder)[1]:
        if locate_run(folder / version.name).record.is_file():
            runs.append((version.name, load_run(folder / version.name)))
        else:
            left_out.append(version.name)
    if not runs:
        raise UserError(f"{folder}: no version has a completed seed yet; finish the sweep with "
                        "'postlab sweep --resume'")
    return runs, left_out
