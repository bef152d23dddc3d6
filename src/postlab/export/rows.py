"""The export tables built row by row from a record's Python rows.

Slow but plain: the oracle :mod:`postlab.export.columnar` is tested against, value for value,
and the builder of a plan with dynamic sampling, whose dropped rows the flat tables do not
hold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from postlab.export.tables import SAMPLING_COUNTS, UPDATE_STATISTICS, Source
from postlab.records.blocks import ROLLOUT, iter_rows
from postlab.records.models import Record, Step
from postlab.tasks.contracts import DRAWN, random_payments, score
from postlab.tasks.rows import Row

if TYPE_CHECKING:
    import pyarrow as pa


def _answer_values(row: Row, task: Any, contracts: Sequence[str]) -> tuple[Any, ...]:
    """The answer columns of a row, then whether each contract accepts it (a partial-credit
    contract: its reward)."""
    from postlab.tasks.contracts import PARTIAL_CREDIT

    return (row.a, row.b, task.answer_value(row.pair), row.text, row.terminated, row.tokens,
            *(float(score(row, name, task.answer)) if name in PARTIAL_CREDIT
              else bool(score(row, name, task.answer)) for name in contracts))


def _eval_rows(source: Source, contracts: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    from postlab.tasks.registry import task_for

    task = task_for(source.plan)
    per_question = {"greedy": 1, "sampled": source.plan.eval_samples}
    last, position = None, 0
    for place, row in iter_rows(source.record, training=False):
        position = position + 1 if place == last else 0
        last = place
        samples = per_question[place.decoding]
        yield (place.seed, place.stage, place.split, place.decoding, position // samples,
               position % samples, *_answer_values(row, task, contracts))


def _rollout_rows(source: Source, contracts: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    from postlab.plan.arms import rl_contracts
    from postlab.tasks.registry import task_for

    task = task_for(source.plan)
    size = source.plan.group_size
    rewarded_by = rl_contracts(source.plan)
    last, position = None, 0
    for place, row in iter_rows(source.record, evaluations=False):
        position = position + 1 if place == last else 0
        last = place
        values = _answer_values(row, task, contracts)
        contract = rewarded_by[place.stage]
        if contract in DRAWN:
            paid = float(random_payments(place.seed, place.step, position,
                                         source.plan.random_rate))
        else:
            paid = float(score(row, contract, task.answer))
        yield (place.seed, place.stage, place.step, place.decoding == ROLLOUT,
               position // size, position % size, *values[:6], contract, paid, *values[6:])


def _steps_of(record: Record) -> Iterator[tuple[int, str, Step]]:
    for run in record.runs:
        for arm, history in run.arms.items():
            for step in history:
                yield run.seed, arm, step


def _update_rows(source: Source, contracts: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    for seed, arm, step in _steps_of(source.record):
        for index, update in enumerate(step.updates):
            yield (seed, arm, step.step, index,
                   *(float(getattr(update, name)) for name in UPDATE_STATISTICS))


def _step_rows(source: Source, contracts: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    for seed, arm, step in _steps_of(source.record):
        sampling = step.sampling
        yield (seed, arm, step.step, len(step.rows), step.zero_variance_groups,
               len(step.updates),
               *(None if sampling is None else getattr(sampling, name)
                 for name in SAMPLING_COUNTS))


def _sft_rows(source: Source, contracts: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    for run in source.record.runs:
        losses = {"initial": run.sft_loss or [], **(run.arm_sft_loss or {})}
        for stage, values in losses.items():
            for index, loss in enumerate(values):
                yield run.seed, stage, index + 1, float(loss)


def _summary_rows(source: Source, contracts: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    from postlab.plan.arms import plan_contracts
    from postlab.records.metrics import summarize
    from postlab.tasks.registry import answer_function

    first = plan_contracts(source.plan)[0]
    scored = [first, *(name for name in contracts if name != first)]
    entries = summarize(source.record, source.plan.eval_samples,
                        answer_function(source.plan), scored)
    for entry in entries:
        for split, decoded in entry.items():
            if split in ("seed", "stage"):
                continue
            for decoding, m in decoded.items():
                yield (entry["seed"], entry["stage"], split, decoding, m["n"],
                       m["mean_tokens"], m["truncated"], m["covered"], m["questions"], first,
                       *(m[name] for name in contracts),
                       *(m[f"{name}_rate"] for name in contracts))


_BUILDERS: dict[str, Callable[[Source, Sequence[str]], Iterator[tuple[Any, ...]]]] = {
    "eval_samples": _eval_rows, "rollout_samples": _rollout_rows, "updates": _update_rows,
    "steps": _step_rows, "sft_losses": _sft_rows, "summary": _summary_rows,
}


def table_rows(name: str, sources: Sequence[Source], contracts: Sequence[str],
               sweep: bool | None = None) -> Iterator[tuple[Any, ...]]:
    """One table's rows over every source, in record order, as
    :func:`~postlab.export.tables.table_columns` orders them; a generator, so a caller may
    hold a batch at a time (a chunked record's seeds are read one by one). ``sweep``:
    whether rows lead with a version column (default: whether any of ``sources`` is a sweep
    version)."""
    if sweep is None:
        sweep = any(source.version is not None for source in sources)
    for source in sources:
        prefix = (source.version,) if sweep else ()
        for row in _BUILDERS[name](source, contracts):
            yield (*prefix, *row)


def seed_sources(sources: Sequence[Source]) -> Iterator[Source]:
    """Each source's seeds one at a time, as one-seed sources: tables built from them, in this
    order, hold the rows :func:`table_rows` gives over the whole sources."""
    for source in sources:
        for entry in source.record.runs:
            yield dataclasses.replace(source, record=source.record.with_runs([entry]))


def arrow_batches(sources: Sequence[Source], contracts: Sequence[str],
                  schemas: dict[str, pa.Schema], batch_rows: int, *,
                  sweep: bool | None = None) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Every table of ``schemas`` as Arrow record batches of exactly ``batch_rows`` rows (the
    last of each table fewer), from one walk over the seeds: an export holds one seed and a
    batch per table, and reads each seed once, not once a table (a 50-seed export read each
    seed eight times, 45% of its time). ``sweep``: whether rows lead with a version column
    (default: whether any source is a sweep version)."""
    if sweep is None:
        sweep = any(source.version is not None for source in sources)
    columns = {name: tuple([] for _ in schema) for name, schema in schemas.items()}
    for one in seed_sources(sources):
        for name, schema in schemas.items():
            held = columns[name]
            for row in table_rows(name, [one], contracts, sweep):
                for column, value in zip(held, row, strict=True):
                    column.append(value)
                if len(held[0]) >= batch_rows:
                    yield name, _batch(held, schema)
                    held = columns[name] = tuple([] for _ in schema)
    for name, schema in schemas.items():
        if columns[name][0]:
            yield name, _batch(columns[name], schema)


def _batch(columns: tuple[list[Any], ...], schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays(
        [pa.array(values, type=field.type) for values, field in zip(columns, schema,
                                                                     strict=True)],
        schema=schema)
