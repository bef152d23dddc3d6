"""Tidy tables of a record: one row per observation, every column declared once.

Records and plans in, columns out; nothing here writes a file. Each table's columns are
declared in :data:`TABLES` with their type and meaning, so the Arrow schema, ``schema.json``
and docs/export.md say the same thing (a test holds the document to them). Answers are scored
under every registered contract, not only the plan's, so one export answers "what would
contract X have said" without re-running anything. :func:`columnar_batches` builds the tables
a batch of seeds at a time from the record's flat tables (each distinct answer scored once);
the row-by-row builders (:func:`arrow_batches`) are its oracle, and build a plan with dynamic
sampling, whose dropped rows the flat tables do not hold.

Tables: ``eval_samples`` (one evaluation answer per row), ``rollout_samples`` (one RL rollout
answer), ``updates`` (one optimiser update), ``steps`` (one RL step: its groups),
``sft_losses`` (one SFT step) and ``summary`` (one seed, stage, split and decoding, as
``summary.json`` holds it). A sweep's tables have a leading ``version`` column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.tasks.contracts import score
from postlab.tasks.rows import ROLLOUT, Row, iter_rows

if TYPE_CHECKING:
    import pyarrow as pa

    from postlab.plan.schema import Plan

#: The exported tables' schema version: within one version columns are only ever added.
SCHEMA = "postlab.export/1"
#: Column types, named as Arrow names them.
TYPES = ("int64", "float64", "bool", "string")
#: The statistics a record holds per update, in the record's order.
UPDATE_STATISTICS = ("loss", "gradient_norm_before_clip", "kl", "entropy",
                     "ratio_outside_clip")
#: A dynamic-sampling step's counts of groups, as the record names them, and their meaning.
SAMPLING_COUNTS = {
    "drawn": "groups sampled for the step, its own and the extra ones",
    "kept": "groups in the step's batch (with dynamic_sampling.constant_groups 'drop', those "
            "whose rewards are all equal stay in the batch but the update leaves them out; "
            "the step's zero_variance_groups counts them)",
    "dropped": "groups sampled but not trained on (extra groups whose rewards were all "
               "equal, and the step's own such groups that extra ones replaced)",
    "replaced": "the step's groups whose rewards were all equal, replaced by an extra group",
}


@dataclass(frozen=True)
class Column:
    """One column: its name, Arrow type (one of :data:`TYPES`), and what a value means."""

    name: str
    type: str
    meaning: str
    nullable: bool = False


@dataclass(frozen=True)
class TableSpec:
    """A table's fixed columns; contract columns are added per registry (:func:`columns_of`)."""

    name: str
    meaning: str
    columns: tuple[Column, ...]


VERSION = Column("version", "string", "the sweep version (its folder name); sweep exports only")
_SEED = Column("seed", "int64", "the run's seed")
_ARM = Column("arm", "string", "the RL arm")
_STEP = Column("step", "int64", "the RL step, from 1")
_A = Column("a", "int64", "the question's first operand")
_B = Column("b", "int64", "the question's second operand")
_ANSWER = Column("answer", "int64", "the task's answer to (a, b), which contracts compare with")
#: The answer column of a task whose answers are text (reasoning-gym items).
_ITEM_ANSWER = Column("answer", "string", "the item's reference answer, which contracts compare "
                                          "with ((a, b) is (0, the item's index))")
_TEXT = Column("text", "string", "the visible output, EOS excluded")
_TERMINATED = Column("terminated", "bool", "whether EOS was emitted within the token budget")
_TOKENS = Column("tokens", "int64", "tokens the answer used: its characters, plus 1 for EOS")
_ANSWER_COLUMNS = (_A, _B, _ANSWER, _TEXT, _TERMINATED, _TOKENS)

TABLES: dict[str, TableSpec] = {spec.name: spec for spec in (
    TableSpec("eval_samples", "one evaluation answer: every split, greedy and sampled, of "
              "every stage", (
                  _SEED,
                  Column("stage", "string", "initial (the SFT model) or an arm's name"),
                  Column("split", "string", "the plan's split: train, dev, test, ..."),
                  Column("decoding", "string", "greedy (one answer per question) or sampled "
                                               "(eval_samples answers per question)"),
                  Column("question", "int64", "the question's position in the split, from 0 "
                                              "(the plan's order)"),
                  Column("sample", "int64", "the answer's position among the question's "
                                            "answers, from 0 (always 0 for greedy)"),
                  *_ANSWER_COLUMNS)),
    TableSpec("rollout_samples", "one RL rollout answer: the rows a step trained on, then the "
              "groups dynamic sampling dropped", (
                  _SEED,
                  _ARM,
                  _STEP,
                  Column("kept", "bool", "true: the step trained on it; false: dynamic "
                                         "sampling dropped its group (rewards all equal)"),
                  Column("group", "int64", "the group's position among the step's kept (or "
                                           "dropped) groups, from 0; a group shares a question"),
                  Column("sample", "int64", "the answer's position in its group, from 0"),
                  *_ANSWER_COLUMNS,
                  Column("rewarded_by", "string", "the contract the arm's reward came from"))),
    TableSpec("updates", "one optimiser update of an RL step, with every statistic the record "
              "holds for it", (
                  _SEED,
                  _ARM,
                  _STEP,
                  Column("update", "int64", "the update's position in the step, from 0"),
                  Column("loss", "float64", "the loss minimised (clipped objective and KL "
                                            "penalty, reduced as the plan's loss_reduction "
                                            "says)"),
                  Column("gradient_norm_before_clip", "float64",
                         "the gradient's global norm before clipping"),
                  Column("kl", "float64", "mean per-token KL to the reference over response "
                                          "tokens, by the plan's kl estimator"),
                  Column("entropy", "float64", "mean per-token entropy of the policy over "
                                               "response tokens"),
                  Column("ratio_outside_clip", "float64", "share of response tokens whose "
                                                          "probability ratio was outside the "
                                                          "clip range"))),
    TableSpec("steps", "one RL step: its rows, groups and updates", (
        _SEED,
        _ARM,
        _STEP,
        Column("rows", "int64", "rollout answers the step trained on"),
        Column("zero_variance_groups", "int64", "kept groups whose rewards were all equal "
                                                "(no learning signal)"),
        Column("updates", "int64", "optimiser updates made on the step's rows"),
        *(Column(f"groups_{count}", "int64", f"dynamic sampling: {meaning}; null when the "
                                             "plan does not sample dynamically", nullable=True)
          for count, meaning in SAMPLING_COUNTS.items()))),
    TableSpec("sft_losses", "one SFT step's loss", (
        _SEED,
        Column("stage", "string", "initial (the SFT every arm starts from), an sft-only "
                                  "arm's extra SFT, or an sft-selected arm's own SFT"),
        Column("step", "int64", "the SFT step, from 1"),
        Column("loss", "float64", "the step's cross-entropy loss"))),
    TableSpec("summary", "one seed, stage, split and decoding, as summary.json holds it, under "
              "every registered contract", (
                  _SEED,
                  Column("stage", "string", "initial or an arm's name"),
                  Column("split", "string", "the plan's split"),
                  Column("decoding", "string", "greedy or sampled"),
                  Column("n", "int64", "answers"),
                  Column("mean_tokens", "float64", "mean tokens per answer, EOS counted"),
                  Column("truncated", "int64", "answers without EOS"),
                  Column("covered", "int64", "questions with at least one answer accepted "
                                             "under covered_under"),
                  Column("questions", "int64", "questions"),
                  Column("covered_under", "string", "the contract coverage is counted under: "
                                                    "the task's first (reference) contract"))),
)}


def contract_columns(table: str, contracts: Sequence[str]) -> tuple[Column, ...]:
    """The columns a table gets for each registered contract (a partial-credit contract's
    are its rewards and their sums)."""
    from postlab.tasks.contracts import PARTIAL_CREDIT

    if table in ("eval_samples", "rollout_samples"):
        return tuple(Column(name, "float64", f"the {name} contract's reward (partial credit)")
                     if name in PARTIAL_CREDIT else
                     Column(name, "bool", f"whether the {name} contract accepts the answer")
                     for name in contracts)
    if table == "summary":
        return (*(Column(name, "float64", f"the {name} contract's rewards, summed")
                  if name in PARTIAL_CREDIT else
                  Column(name, "int64", f"answers the {name} contract accepts")
                  for name in contracts),
                *(Column(f"{name}_rate", "float64", f"{name} / n") for name in contracts))
    return ()


def columns_of(table: str, contracts: Sequence[str], *, sweep: bool = False,
               text_answers: bool = False) -> tuple[Column, ...]:
    """A table's columns in order: ``version`` for a sweep, its own, then its contracts'.
    ``text_answers``: the task's answers are text (reasoning-gym items), not integers."""
    first = (VERSION,) if sweep else ()
    own = TABLES[table].columns
    if text_answers:
        own = tuple(_ITEM_ANSWER if column is _ANSWER else column for column in own)
    columns = first + own + contract_columns(table, contracts)
    names = [column.name for column in columns]
    clash = sorted({name for name in names if names.count(name) > 1})
    if clash:
        raise UserError(f"a registered contract's column clashes with the {table} table's "
                        f"column {', '.join(clash)}; rename the contract to export it")
    return columns


@dataclass(frozen=True)
class Source:
    """One run's inputs: its record, its plan, its sweep version (None for a lone run), and
    what makes its flat tables checked as a reader checks them (None: the record's own, each
    seed checked first, :func:`~postlab.records.columns.record_tables`)."""

    record: dict[str, Any]
    plan: Plan
    version: str | None = None
    tables: Callable[[], Iterable[Any]] | None = None

    def row_tables(self) -> Iterable[Any]:
        from postlab.records.columns import record_tables

        return record_tables(self.record, self.plan) if self.tables is None else self.tables()


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
        yield (place.seed, place.stage, place.step, place.decoding == ROLLOUT,
               position // size, position % size, *values[:6], rewarded_by[place.stage],
               *values[6:])


def _steps_of(record: dict[str, Any]) -> Iterator[tuple[int, str, dict[str, Any]]]:
    for run in record["runs"]:
        for arm, history in run.get("training", {}).items():
            for step in history:
                yield run["seed"], arm, step


def _update_rows(source: Source, contracts: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    for seed, arm, step in _steps_of(source.record):
        for index, update in enumerate(step["updates"]):
            yield (seed, arm, step["step"], index,
                   *(float(update[name]) for name in UPDATE_STATISTICS))


def _step_rows(source: Source, contracts: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    for seed, arm, step in _steps_of(source.record):
        sampling = step.get("sampling")
        yield (seed, arm, step["step"], len(step["rows"]), step["zero_variance_groups"],
               len(step["updates"]),
               *(None if sampling is None else sampling[name] for name in SAMPLING_COUNTS))


def _sft_rows(source: Source, contracts: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    for run in source.record["runs"]:
        losses = {"initial": run.get("sft_loss", []), **run.get("arm_sft_loss", {})}
        for stage, values in losses.items():
            for index, loss in enumerate(values):
                yield run["seed"], stage, index + 1, float(loss)


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


def table_columns(name: str, sources: Sequence[Source], contracts: Sequence[str]
                  ) -> tuple[Column, ...]:
    """The columns of one table over ``sources``: a ``version`` column when any source is a
    sweep version; refused when the contracts cannot read these runs' answers."""
    from postlab.tasks.contracts import contract_answers
    from postlab.tasks.registry import task_for

    sweep = any(source.version is not None for source in sources)
    kinds = {task_for(source.plan).answer_kind for source in sources}
    misfits = [name for name in contracts if kinds and contract_answers(name) not in kinds]
    if len(kinds) > 1 or misfits:
        raise UserError(f"the {name} table needs contracts that read these runs' answers "
                        f"({', '.join(sorted(kinds))}); "
                        + (f"{', '.join(misfits)} read others" if misfits else
                           "the runs' tasks differ"))
    text_answers = bool(kinds) and kinds != {"integer"}
    return columns_of(name, contracts, sweep=sweep, text_answers=text_answers)


def table_rows(name: str, sources: Sequence[Source], contracts: Sequence[str],
               sweep: bool | None = None) -> Iterator[tuple[Any, ...]]:
    """One table's rows over every source, in record order, as :func:`table_columns` orders
    them; a generator, so a caller may hold a batch at a time (a chunked record's seeds are
    read one by one). ``sweep``: whether rows lead with a version column (default: whether
    any of ``sources`` is a sweep version)."""
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
        for entry in source.record["runs"]:
            yield dataclasses.replace(source, record={**source.record, "runs": [entry]})


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


def columnar_batches(sources: Sequence[Source], contracts: Sequence[str],
                     schemas: dict[str, pa.Schema], batch_rows: int
                     ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """:func:`arrow_batches`, built columnar: a batch of seeds' flat tables at a time, each
    distinct answer scored once under every contract and joined back, every table's columns
    made by Arrow, never a Python value per row. The same tables, value for value (the
    row-by-row builders above are its oracle). A source whose plan samples dynamically (its
    dropped rows are not in the flat tables) is built row by row."""
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
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from postlab.plan.arms import plan_contracts, rl_contracts
    from postlab.records.columns import (
        labelled_evaluations,
        labelled_rollouts,
        scores_table,
    )
    from postlab.records.metrics import table_summary
    from postlab.tasks.contracts import PARTIAL_CREDIT
    from postlab.tasks.registry import task_for

    plan = source.plan
    task = task_for(plan)
    scores = scores_table(tables, task.answer, contracts, task.answer_value)

    def judgements(rows: Any) -> dict[str, Any]:
        return {name: rows.column(f"score:{name}") if name in PARTIAL_CREDIT
                else pc.not_equal(rows.column(f"score:{name}"), 0) for name in contracts}

    built: dict[str, Any] = {}
    if "eval_samples" in schemas:
        rows = labelled_evaluations(tables, scores, plan.eval_samples)
        built["eval_samples"] = pa.table({
            **{name: rows.column(name) for name in (
                "seed", "stage", "split", "decoding", "question", "sample", "a", "b",
                "answer", "text", "terminated", "tokens")},
            **judgements(rows)})
    if "rollout_samples" in schemas:
        rows = labelled_rollouts(tables, scores)
        size = plan.group_size
        position = rows.column("position")
        rewarded_by = rl_contracts(plan)
        built["rollout_samples"] = pa.table({
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
            **judgements(rows)})
    steps = tables.steps
    updates = steps.column("updates").combine_chunks()
    if "updates" in schemas:
        lengths = updates.value_lengths().to_numpy(zero_copy_only=False)
        owner = np.repeat(np.arange(steps.num_rows), lengths)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        flat = updates.flatten()
        built["updates"] = pa.table({
            "seed": pc.take(steps.column("seed"), owner),
            "arm": pc.take(steps.column("arm"), owner),
            "step": pc.take(steps.column("step"), owner),
            "update": pa.array(np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], lengths)),
            **{name: flat.field(name) for name in UPDATE_STATISTICS}})
    if "steps" in schemas:
        counts = np.bincount(tables.rollouts.column("step_id").to_numpy(),
                             minlength=steps.num_rows)
        built["steps"] = pa.table({
            **{name: steps.column(name) for name in ("seed", "arm", "step")},
            "rows": pa.array(counts.astype(np.int64)),
            "zero_variance_groups": steps.column("zero_variance_groups"),
            "updates": updates.value_lengths(),
            **{f"groups_{name}": pa.nulls(steps.num_rows, pa.int64())
               for name in SAMPLING_COUNTS}})
    if "sft_losses" in schemas:
        found: dict[str, list[Any]] = {"seed": [], "stage": [], "step": [], "loss": []}
        for run in tables.runs.select(["seed", "sft_loss", "arm_sft_loss"]).to_pylist():
            for stage, values in (("initial", run["sft_loss"]),
                                  *((e["arm"], e["losses"]) for e in run["arm_sft_loss"])):
                found["seed"] += [run["seed"]] * len(values)
                found["stage"] += [stage] * len(values)
                found["step"] += range(1, len(values) + 1)
                found["loss"] += values
        built["sft_losses"] = pa.table({"seed": pa.array(found["seed"], pa.int64()),
                                        "stage": pa.array(found["stage"], pa.string()),
                                        "step": pa.array(found["step"], pa.int64()),
                                        "loss": pa.array(found["loss"], pa.float64())})
    if "summary" in schemas:
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
        names = [field.name for field in schemas["summary"] if field.name != "version"]
        built["summary"] = pa.table({name: pa.array(summary.get(name, []),
                                                    schemas["summary"].field(name).type)
                                     for name in names})
    return built


def _batch(columns: tuple[list[Any], ...], schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays(
        [pa.array(values, type=field.type) for values, field in zip(columns, schema,
                                                                     strict=True)],
        schema=schema)


def arrow_schema(columns: Sequence[Column], metadata: dict[str, str] | None = None
                 ) -> pa.Schema:
    """The Arrow schema of declared columns (pyarrow is imported only here)."""
    import pyarrow as pa

    types = {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
             "string": pa.string()}
    return pa.schema([pa.field(c.name, types[c.type], nullable=c.nullable) for c in columns],
                     metadata=metadata)


