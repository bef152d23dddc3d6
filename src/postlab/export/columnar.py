"""The export tables built columnar, a batch of seeds at a time from the record's flat
Arrow tables: each distinct answer scored once, never a Python value per row, so an export
of many seeds takes seconds (:mod:`postlab.export.rows` is its oracle).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from postlab.export.rows import arrow_batches
from postlab.export.tables import SAMPLING_COUNTS, UPDATE_STATISTICS, Source

if TYPE_CHECKING:
    import pyarrow as pa


def columnar_batches(sources: Sequence[Source], contracts: Sequence[str],
                     schemas: dict[str, pa.Schema], batch_rows: int
                     ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """:func:`~postlab.export.rows.arrow_batches`, built columnar: a batch of seeds' flat
    tables at a time, each distinct answer scored once under every contract and joined back,
    every table's columns made by Arrow, never a Python value per row. The same tables, value
    for value (the row-by-row builders of :mod:`postlab.export.rows` are its oracle). A source
    whose plan samples dynamically (its dropped rows are not in the flat tables) is built row
    by row."""
    sweep = any(source.version is not None for source in sources)
    pending: dict[str, list[pa.Table]] = {name: [] for name in schemas}
    held = dict.fromkeys(schemas, 0)
    for source in sources:
        if source.plan.dynamic_sampling is not None:
            built = arrow_batches([source], contracts, schemas, batch_rows, sweep=sweep)
            for name, batch in built:
                pending[name].append(_as_table(batch))
                held[name] += batch.num_rows
                yield from _full_batches(name, pending, held, schemas[name], batch_rows)
            continue
        for tables in source.row_tables():
            for name, table in _batch_tables(source, tables, contracts, schemas).items():
                if sweep:
                    table = table.add_column(0, "version", _strings(
                        [source.version] * table.num_rows))
                pending[name].append(table.select(schemas[name].names).cast(schemas[name]))
                held[name] += table.num_rows
                yield from _full_batches(name, pending, held, schemas[name], batch_rows)
    for name, schema in schemas.items():
        yield from _full_batches(name, pending, held, schema, batch_rows, last=True)


def _strings(values: list[Any]) -> Any:
    """A string column (a sweep version's name on every row)."""
    import pyarrow as pa

    return pa.array(values, pa.string())


def _as_table(batch: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_batches([batch])


def _full_batches(name: str, pending: dict[str, list[Any]], held: dict[str, int],
                  schema: pa.Schema, batch_rows: int, *, last: bool = False
                  ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Record batches of exactly ``batch_rows`` rows while that many are held (``last``:
    then the rest, the table's last batch), as the row-by-row builder cuts them."""
    import pyarrow as pa

    if held[name] < batch_rows and not (last and held[name]):
        return
    table = pa.concat_tables(pending[name]).combine_chunks()
    start = 0
    while table.num_rows - start >= batch_rows or (last and start < table.num_rows):
        size = min(batch_rows, table.num_rows - start)
        (batch,) = table.slice(start, size).combine_chunks().to_batches()
        yield name, batch.cast(schema)
        start += size
    rest = table.slice(start)
    pending[name] = [rest] if rest.num_rows else []
    held[name] = rest.num_rows



def _batch_tables(source: Source, tables: Any, contracts: Sequence[str],
                  schemas: dict[str, pa.Schema]) -> dict[str, Any]:
    """One batch of seeds' rows of every table in ``schemas``, as Arrow tables whose columns
    bear the tables' names (in any order; the caller orders and types them)."""
    from postlab.records.columns import scores_table
    from postlab.tasks.registry import task_for

    plan = source.plan
    task = task_for(plan)
    scores = scores_table(tables, task.answer, contracts, task.answer_value)
    built: dict[str, Any] = {}
    if "eval_samples" in schemas:
        built["eval_samples"] = _eval_table(tables, scores, plan, contracts)
    if "rollout_samples" in schemas:
        built["rollout_samples"] = _rollout_table(tables, scores, plan, contracts)
    steps = tables.steps
    updates = steps.column("updates").combine_chunks()
    if "updates" in schemas:
        built["updates"] = _updates_table(steps, updates)
    if "steps" in schemas:
        built["steps"] = _steps_table(tables, updates)
    if "sft_losses" in schemas:
        built["sft_losses"] = _sft_table(tables)
    if "summary" in schemas:
        built["summary"] = _summary_table(tables, plan, task, contracts, schemas["summary"])
    return built


def _judgements(rows: Any, contracts: Sequence[str]) -> dict[str, Any]:
    """Each contract's column of ``rows``: its reward for a partial-credit contract, else
    whether it accepts the answer."""
    import pyarrow.compute as pc

    from postlab.tasks.contracts import PARTIAL_CREDIT

    return {name: rows.column(f"score:{name}") if name in PARTIAL_CREDIT
            else pc.not_equal(rows.column(f"score:{name}"), 0) for name in contracts}


def _eval_table(tables: Any, scores: Any, plan: Any, contracts: Sequence[str]) -> Any:
    """The ``eval_samples`` rows of a batch of seeds."""
    import pyarrow as pa

    from postlab.records.columns import labelled_evaluations

    rows = labelled_evaluations(tables, scores, plan.eval_samples)
    return pa.table({
        **{name: rows.column(name) for name in (
            "seed", "stage", "split", "decoding", "question", "sample", "a", "b",
            "answer", "text", "terminated", "tokens")},
        **_judgements(rows, contracts)})


def _rollout_table(tables: Any, scores: Any, plan: Any, contracts: Sequence[str]) -> Any:
    """The ``rollout_samples`` rows of a batch of seeds (all kept: a plan with dynamic
    sampling is built row by row)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from postlab.plan.arms import rl_contracts
    from postlab.records.columns import labelled_rollouts

    rows = labelled_rollouts(tables, scores)
    size = plan.group_size
    position = rows.column("position")
    rewarded_by = rl_contracts(plan)
    return pa.table({
        **{name: rows.column(name) for name in ("seed", "arm", "step")},
        "kept": pa.array(np.ones(rows.num_rows, dtype=bool)),
        "group": pc.divide(position, size),
        "sample": pc.subtract(position, pc.multiply(pc.divide(position, size), size)),
        **{name: rows.column(name) for name in (
            "a", "b", "answer", "text", "terminated", "tokens")},
        "rewarded_by": pc.take(pa.array([rewarded_by[arm] for arm in
                                         rows.column("arm").unique().to_pylist()],
                                        pa.string()),
                               pc.index_in(rows.column("arm"),
                                           rows.column("arm").unique())),
        "paid": _paid(rows, rewarded_by, plan, contracts),
        **_judgements(rows, contracts)})


def _paid(rows: Any, rewarded_by: dict[str, str], plan: Any, contracts: Sequence[str]) -> Any:
    """What training paid each rollout row: its arm's contract's score, or the random
    contract's draw at the row's seed, step and place (one vectorised draw for them all)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from postlab.tasks.contracts import DRAWN, random_payments

    column = rows.column("arm")
    paid = np.zeros(rows.num_rows, dtype=np.float64)
    for arm in column.unique().to_pylist():
        chosen = pc.equal(column, arm).to_numpy(zero_copy_only=False)
        contract = rewarded_by[arm]
        if contract in DRAWN:
            seed, step, place = (rows.column(name).to_numpy()[chosen]
                                 for name in ("seed", "step", "position"))
            paid[chosen] = random_payments(seed, step, place, plan.random_rate).numpy()
        elif contract in contracts:
            paid[chosen] = rows.column(f"score:{contract}").to_numpy(
                zero_copy_only=False)[chosen]
        else:  # an export of other contracts: this one's scores, row by row
            from postlab.tasks.contracts import score
            from postlab.tasks.registry import task_for
            from postlab.tasks.rows import Row

            answer = task_for(plan).answer
            picked = rows.filter(pa.array(chosen))
            paid[chosen] = [score(Row(*values), contract, answer) for values in zip(
                *(picked.column(k).to_pylist() for k in ("a", "b", "text", "terminated")),
                strict=True)]
    return pa.array(paid, pa.float64())


def _updates_table(steps: Any, updates: Any) -> Any:
    """The ``updates`` rows: each step's updates, flattened, with their statistics."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    lengths = updates.value_lengths().to_numpy(zero_copy_only=False)
    owner = np.repeat(np.arange(steps.num_rows), lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = updates.flatten()
    return pa.table({
        "seed": pc.take(steps.column("seed"), owner),
        "arm": pc.take(steps.column("arm"), owner),
        "step": pc.take(steps.column("step"), owner),
        "update": pa.array(np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], lengths)),
        **{name: flat.field(name) for name in UPDATE_STATISTICS}})


def _steps_table(tables: Any, updates: Any) -> Any:
    """The ``steps`` rows: each RL step's rows, groups and updates (no dynamic sampling)."""
    import numpy as np
    import pyarrow as pa

    steps = tables.steps
    counts = np.bincount(tables.rollouts.column("step_id").to_numpy(),
                         minlength=steps.num_rows)
    return pa.table({
        **{name: steps.column(name) for name in ("seed", "arm", "step")},
        "rows": pa.array(counts.astype(np.int64)),
        "zero_variance_groups": steps.column("zero_variance_groups"),
        "updates": updates.value_lengths(),
        **{f"groups_{name}": pa.nulls(steps.num_rows, pa.int64())
           for name in SAMPLING_COUNTS}})


def _sft_table(tables: Any) -> Any:
    """The ``sft_losses`` rows: each seed's SFT losses, then each arm's own SFT's."""
    import pyarrow as pa

    found: dict[str, list[Any]] = {"seed": [], "stage": [], "step": [], "loss": []}
    for run in tables.runs.select(["seed", "sft_loss", "arm_sft_loss"]).to_pylist():
        for stage, values in (("initial", run["sft_loss"]),
                              *((e["arm"], e["losses"]) for e in run["arm_sft_loss"])):
            found["seed"] += [run["seed"]] * len(values)
            found["stage"] += [stage] * len(values)
            found["step"] += range(1, len(values) + 1)
            found["loss"] += values
    return pa.table({"seed": pa.array(found["seed"], pa.int64()),
                     "stage": pa.array(found["stage"], pa.string()),
                     "step": pa.array(found["step"], pa.int64()),
                     "loss": pa.array(found["loss"], pa.float64())})


def _summary_table(tables: Any, plan: Any, task: Any, contracts: Sequence[str],
                   schema: pa.Schema) -> Any:
    """The ``summary`` rows: per seed, stage, split and decoding, as ``summary.json`` holds
    them, typed by the table's schema."""
    import pyarrow as pa

    from postlab.plan.arms import plan_contracts
    from postlab.records.metrics import table_summary

    first = plan_contracts(plan)[0]
    scored = [first, *(name for name in contracts if name != first)]
    summary: dict[str, list[Any]] = {}
    for entry in table_summary(tables, plan.eval_samples, task.answer, scored):
        for split, decoded in entry.items():
            if split in ("seed", "stage"):
                continue
            for decoding, m in decoded.items():
                values = {"seed": entry["seed"], "stage": entry["stage"], "split": split,
                          "decoding": decoding, "covered_under": first,
                          **{key: m[key] for key in ("n", "mean_tokens", "truncated",
                                                     "covered", "questions")},
                          **{name: m[name] for name in contracts},
                          **{f"{name}_rate": m[f"{name}_rate"] for name in contracts}}
                for key, value in values.items():
                    summary.setdefault(key, []).append(value)
    names = [field.name for field in schema if field.name != "version"]
    return pa.table({name: pa.array(summary.get(name, []), schema.field(name).type)
                     for name in names})
