"""Exported tables as files: one Parquet or CSV file per table and ``schema.json``, streamed
into a folder that the command line then publishes whole; and reading such a folder back,
typed.

``schema.json`` says what a reader holds: the schema version, the postlab version, each run's
plan and record hashes, the contracts scored, and every table's file, row count and columns.
Parquet files carry the same provenance in their schema metadata; CSV files carry none, so
:func:`read_export` reads them with the types ``schema.json`` declares.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.export.columnar import columnar_batches
from postlab.export.tables import SCHEMA, TABLES, Column, arrow_schema, table_columns
from postlab.jsonio import dump_json, parse_json, publish_bytes, read_bytes
from postlab.version import __version__

if TYPE_CHECKING:
    import pyarrow as pa

    from postlab.export.loaded import LoadedRun

FORMATS = ("parquet", "csv")
SCHEMA_FILE = "schema.json"
#: The key of the provenance entry in a Parquet file's schema metadata.
METADATA_KEY = "postlab.export"
#: Rows per written batch (and Parquet row group): about 10 MB of Python values at a time.
BATCH_ROWS = 65_536


def export_contracts(plans: Sequence[dict[str, Any]], kind: str) -> list[str]:
    """The contract columns of an export: every contract that reads the runs' kind of answer;
    for generated items, those the runs' plans report under (a tagged run's exports keep the
    three columns they always had, a final-number run's have rg-final instead of rg-strict)."""
    from postlab.plan.arms import plan_contracts
    from postlab.tasks.contracts import contracts_for

    names = contracts_for(kind)
    if kind != "item":
        return names
    reported = {name for plan in plans for name in plan_contracts(plan)}
    return [name for name in names if name in reported]


def _provenance(runs: Sequence[tuple[str | None, LoadedRun]]) -> list[dict[str, Any]]:
    return [{"version": version, "record": run.record_path.name,
             "plan_sha256": run.plan_sha256, "record_sha256": run.record_sha256,
             "seeds": list(run.seeds)} for version, run in runs]


def write_export(folder: Path, runs: Sequence[tuple[str | None, LoadedRun]], fmt: str,
                 contracts: Sequence[str] | None = None) -> int:
    """Write every table in ``fmt`` and ``schema.json`` into ``folder`` (a staging folder that
    the caller publishes); returns the number of tables. ``runs`` pairs each checked run with
    its sweep version (None for a lone run); tables span all of them.

    The tables are streamed together: their rows are built and written :data:`BATCH_ROWS` at
    a time while the records' seeds are read once, one by one, so memory holds a batch per
    table and a seed, not the tables (1,000 teaching seeds hold about 25 million evaluation
    rows)."""
    import pyarrow.csv as csv
    import pyarrow.parquet as parquet

    from postlab.tasks.registry import task_for

    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    kinds = {task_for(run.plan.model).answer_kind for _, run in runs}
    if len(kinds) > 1:
        raise UserError("these runs' tasks have different kinds of answer; export them apart")
    names = (export_contracts([run.plan.model for _, run in runs],
                              kinds.pop() if kinds else "integer")
             if contracts is None else list(contracts))
    provenance = _provenance(runs)
    sources = [run.source(version) for version, run in runs]
    columns = {name: table_columns(name, sources, names) for name in TABLES}
    schemas = {name: arrow_schema(columns[name], {METADATA_KEY: json.dumps({
        "schema": SCHEMA, "table": name, "postlab_version": __version__,
        "runs": provenance})}) for name in TABLES}
    rows = dict.fromkeys(TABLES, 0)
    with contextlib.ExitStack() as stack:
        writers = {name: stack.enter_context(
            parquet.ParquetWriter(folder / f"{name}.{fmt}", schemas[name]) if fmt == "parquet"
            else csv.CSVWriter(folder / f"{name}.{fmt}", schemas[name])) for name in TABLES}
        for name, batch in columnar_batches(sources, names, schemas, BATCH_ROWS):
            writers[name].write_batch(batch)
            rows[name] += batch.num_rows
    described = {name: {"file": f"{name}.{fmt}", "rows": rows[name],
                        "meaning": TABLES[name].meaning,
                        "columns": [_column_entry(c) for c in columns[name]]}
                 for name in TABLES}
    publish_bytes(folder / SCHEMA_FILE, dump_json({
        "schema": SCHEMA, "postlab_version": __version__, "format": fmt,
        "sweep": any(version is not None for version, _ in runs), "runs": provenance,
        "contracts": names, "tables": described}, indent=2))
    return len(described)


def _column_entry(column: Column) -> dict[str, Any]:
    return {"name": column.name, "type": column.type, "nullable": column.nullable,
            "meaning": column.meaning}


def read_export(folder: Path) -> dict[str, pa.Table]:
    """An export folder's tables, typed as its ``schema.json`` declares (CSV included)."""
    import pyarrow.csv as csv
    import pyarrow.parquet as parquet

    path = folder / SCHEMA_FILE
    schema = parse_json(read_bytes(path, "export schema"), str(path))
    if not isinstance(schema, dict) or schema.get("schema") != SCHEMA:
        raise UserError(f"{path}: not a postlab export of schema {SCHEMA}")
    tables = {}
    for name, entry in schema["tables"].items():
        columns = [Column(c["name"], c["type"], c["meaning"], c["nullable"])
                   for c in entry["columns"]]
        file = folder / entry["file"]
        if schema["format"] == "parquet":
            tables[name] = parquet.read_table(file)
            continue
        declared = arrow_schema(columns)
        options = csv.ConvertOptions(column_types={f.name: f.type for f in declared},
                                     strings_can_be_null=False,
                                     include_columns=[f.name for f in declared])
        tables[name] = csv.read_csv(file, convert_options=options).cast(declared)
    return tables
