"""The columnar readers against the per-seed path they replaced, on one run: the same
numbers, and how long each takes.

    python bench/columnar_vs_oracle.py RUN [--skip-export]

For the run folder RUN (a chunked record), in one process: the analysis every report shows
(its JSON form, which holds every number of it), the reference summary and every export table,
computed columnar (what the readers do) and per seed (the oracle: each seed decoded into
Python, checked as the readers checked it before, its rows walked one by one). Prints whether
each is equal, byte for byte or table for table, and the seconds each path took with their
ratio. The tests compare the two paths on small records; this is for a record of many seeds.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--skip-export", action="store_true")
    args = parser.parse_args()

    import pyarrow as pa

    from postlab.analysis.aggregate import analyse, oracle_facts, record_facts
    from postlab.export.columnar import columnar_batches
    from postlab.export.rows import arrow_batches
    from postlab.export.tables import TABLES, Source, arrow_schema, table_columns
    from postlab.records.metrics import summary_for, summary_of
    from postlab.records.opened import checked_tables, open_run
    from postlab.render.tables import to_json
    from postlab.tasks.contracts import contracts_for
    from postlab.tasks.registry import task_for

    opened = open_run(args.run)
    record, plan = opened.record, opened.plan.model
    seeds = len(record.seed_order())
    print(f"{args.run}: {seeds} seed-runs; {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}")
    # the checks first (a pass that proves every seed), so neither path pays for them below
    _, checking = timed(lambda: sum(1 for _ in checked_tables(opened)))
    print(f"  checks (columnar, every seed proven): {checking:.1f} s")

    def report(facts):
        return to_json(analyse(record, plan, facts=facts))

    results = [
        ("analysis (report JSON)",
         lambda: report(record_facts(record, plan, checked_tables(opened))),
         lambda: report(oracle_facts(record, plan))),
        ("summary",
         lambda: json.dumps(summary_of(record, plan, checked_tables(opened))),
         lambda: json.dumps(summary_for(record, plan))),
    ]
    if not args.skip_export:
        sources = [Source(record, plan, tables=lambda: checked_tables(opened))]
        contracts = contracts_for(task_for(plan).answer_kind)
        schemas = {name: arrow_schema(table_columns(name, sources, contracts))
                   for name in TABLES}

        def tables(build):
            batches: dict[str, list] = {name: [] for name in TABLES}
            for name, batch in build(sources, contracts, schemas, 65_536):
                batches[name].append(batch)
            return {name: pa.Table.from_batches(batches[name], schema=schemas[name])
                    for name in TABLES}

        results.append(("export tables", lambda: tables(columnar_batches),
                        lambda: tables(arrow_batches)))
    for name, columnar, oracle in results:
        ours, ours_s = timed(columnar)
        theirs, theirs_s = timed(oracle)
        if isinstance(ours, dict):
            same = all(ours[t].equals(theirs[t]) for t in ours)
        else:
            same = ours == theirs
        print(f"  {name:<24} {'equal' if same else 'DIFFERENT':<9} columnar {ours_s:8.1f} s,"
              f" per seed {theirs_s:8.1f} s (x{theirs_s / ours_s:.1f})", flush=True)


if __name__ == "__main__":
    main()
