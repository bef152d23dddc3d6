"""A record's rows as flat Arrow tables, many seeds at a time, for readers that compute over

all seeds in one columnar pass instead of walking each seed's rows in Python.

A chunk stores a seed's rows nested (evaluation blocks and RL steps, each holding a list of
rows). Flattening those lists is offset arithmetic on the Parquet columns, with no Python
object per row: 64 teaching seeds (2.3 million rows) read, hashed and flattened in 0.27 s
(measured on 2 cores), where decoding them into Python entries took 5.5 s. A record of the
one-document layout (earlier versions, the reference) is converted on read, through the
same chunk schema, so every reader has one path.

Chunks are hashed against the manifest as they are read (:func:`~postlab.records.chunks.
read_chunk`), so a table holds only bytes the record names.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from postlab.records.chunk_codec import chunk_schema, flat_entry
from postlab.records.chunks import ChunkedRuns, read_chunk

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.records.models import Record

#: Seeds flattened at once. A report of 64 teaching seeds took 2.4-2.5 s whether batches held
#: 4, 8, 16 or 64 seeds; its peak memory rose 23, 85, 123 and (when rows still carried their
#: labels as text) 575 MB above the 449 MB of a report of the bundled 3-seed run.
BATCH_SEEDS = 8
#: Chunk files held open (hashed once each) while a reader walks the record's order: workers
#: write their seeds into chunks of their own, so that order runs across as many chunks as a
#: run had workers (64 seeds of 2 workers: every next seed in the other chunk, each read and
#: hashed 32 times when one chunk was held). A chunk holds at most 256 seeds, 25 MB.
OPEN_CHUNKS = 8
T = TypeVar("T")
#: The columns of a row, in every table that holds rows.
ROW_COLUMNS = ("a", "b", "text", "terminated")


@dataclass(frozen=True)
class RowTables:
    """One batch of seeds' rows, flat, each table in record order.

    ``blocks``: each evaluation block's seed, block (its place among the seed's), stage,
    split and decoding. ``evaluations``: each evaluation row's block_id (its block's row in
    ``blocks``), position (in the block), a, b, text, terminated.
    ``steps``: each RL step's seed, arm, step, index (its place in its arm's history),
    zero_variance_groups, updates (a list of structs) and sampling (a struct, null where the
    plan samples plainly). ``rollouts``: the rows each step trained on (a dynamic-sampling
    step's dropped rows are not among them): step_id (its step's row in ``steps``),
    position, and the row columns.
    ``runs``: every other column of a chunk (seed, layout, sft_loss, arms, checkpoints,
    arm_sft_loss, compute, digests), a row per seed.
    """

    seeds: tuple[int, ...]
    blocks: pa.Table
    evaluations: pa.Table
    steps: pa.Table
    rollouts: pa.Table
    runs: pa.Table


def _single(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _positions(lists: pa.ListArray) -> np.ndarray:
    """Each flattened value's place in its own list."""
    offsets = lists.offsets.to_numpy()
    starts = offsets[:-1] - offsets[0]
    lengths = np.diff(offsets)
    return np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)


def _parents(lists: pa.ListArray) -> pa.Array:
    return pc.list_parent_indices(lists)


def _index_in_parent(lists: pa.ListArray) -> pa.Array:
    return pa.array(_positions(lists))


def flatten(table: pa.Table) -> RowTables:
    """Seeds' chunk rows (the chunk schema) as flat tables. A row carries only the number of
    its block or step (the tables of blocks and steps say where that is), which took a
    batch's peak memory from about 36 MB a teaching seed to 8."""
    seeds = _single(table, "seed")
    evaluations = _single(table, "evaluations")
    stage, split, decoding, rows = evaluations.flatten().flatten()
    blocks = pa.table({
        "seed": pc.take(seeds, _parents(evaluations)), "block": _index_in_parent(evaluations),
        "stage": stage, "split": split, "decoding": decoding})
    a, b, text, terminated = rows.flatten().flatten()
    evaluated = pa.table({"block_id": _parents(rows), "position": _index_in_parent(rows),
                          "a": a, "b": b, "text": text, "terminated": terminated})

    training = _single(table, "training")
    arm, step, rows, zero_variance, updates, sampling = training.flatten().flatten()
    owner = _parents(training)
    steps = pa.table({"seed": pc.take(seeds, owner), "arm": arm, "step": step,
                      "index": _index_in_parent(training),
                      "zero_variance_groups": zero_variance, "updates": updates,
                      "sampling": sampling})
    a, b, text, terminated = rows.flatten().flatten()
    rollouts = pa.table({"step_id": _parents(rows), "position": _index_in_parent(rows),
                         "a": a, "b": b, "text": text, "terminated": terminated})
    order = _history_order(owner.to_numpy(), arm.to_pylist(),
                           _single(table, "arms").to_pylist())
    if order is not None:
        steps, rollouts = _reordered(steps, rollouts, rows, order)
    runs = table.drop_columns(["evaluations", "training"])
    return RowTables(seeds=tuple(seeds.to_pylist()), blocks=blocks, evaluations=evaluated,
                     steps=steps, rollouts=rollouts, runs=runs)


def _history_order(owner: np.ndarray, arms: list[Any], arms_of: list[list[str]]
                   ) -> np.ndarray | None:
    """The order a seed's entry holds its steps in (its arms in the order it names them,
    each arm's steps in stored order, as the entry is rebuilt: ``chunk_codec.entry_of``), where a
    chunk stores them otherwise; None where it stores them so (postlab writes them so)."""
    ranks = np.empty(len(arms), dtype=np.int64)
    for place, (seed, name) in enumerate(zip(owner.tolist(), arms, strict=True)):
        named = arms_of[seed] or []
        ranks[place] = named.index(name) if name in named else len(named)
    order = np.lexsort((np.arange(len(arms)), ranks, owner))
    return None if np.array_equal(order, np.arange(len(arms))) else order


def _reordered(steps: pa.Table, rollouts: pa.Table, rows: pa.ListArray,
               order: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """Steps taken in ``order``, each keeping its rows, renumbered."""
    offsets = rows.offsets.to_numpy()
    offsets = offsets - offsets[0]
    taken = [np.arange(offsets[i], offsets[i + 1]) for i in order.tolist()]
    moved = np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)
    renumbered = np.repeat(np.arange(len(order)), np.diff(offsets)[order])
    steps = steps.take(pa.array(order))
    owner = steps.column("seed").to_numpy()
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]]) if len(owner) else []
    index = np.arange(len(owner)) - np.repeat(starts, np.diff(np.r_[starts, len(owner)]))
    steps = steps.set_column(steps.schema.get_field_index("index"), "index", pa.array(index))
    rollouts = rollouts.take(pa.array(moved)).set_column(0, "step_id", pa.array(renumbered))
    return steps, rollouts


def entries_table(entries: Sequence[dict[str, Any]]) -> pa.Table:
    """Seeds' entries of a one-document record in the chunk schema (how such a record is
    read columnar: converted on read, never written back)."""
    return pa.Table.from_pylist([flat_entry(entry, lenient=True) for entry in entries],
                                schema=chunk_schema())


def row_tables(record: Record, batch: int = BATCH_SEEDS) -> Iterator[RowTables]:
    """Every seed's rows, ``batch`` seeds at a time, in the record's seed order.

    A chunked record's chunks are hashed as each is opened; a batch may span chunks."""
    runs = record.runs
    if not isinstance(runs, ChunkedRuns):
        if not runs:
            return
        for start in range(0, len(runs), batch):
            yield flatten(entries_table([run.data() for run in runs[start:start + batch]]))
        return
    folder = runs.folder
    place = {seed: (index, group) for index, chunk in enumerate(runs.chunks)
             for group, seed in enumerate(chunk["seeds"])}
    opened: dict[int, Any] = {}  # chunk -> its file, hashed once, oldest first
    pending: list[pa.Table] = []
    count = 0
    for run in _runs_of_groups([place[seed] for seed in runs.seeds]):
        index, first, stop = run
        chunk = runs.chunks[index]
        if index not in opened:
            if len(opened) >= OPEN_CHUNKS:
                del opened[next(iter(opened))]  # its bytes go before the next are read
            opened[index] = read_chunk(folder, chunk)
        table = opened[index].read_row_groups(list(range(first, stop)))
        _check_seeds(table, chunk["seeds"][first:stop], folder / chunk["file"])
        pending.append(table)
        count += stop - first
        if count >= batch:
            yield flatten(pa.concat_tables(pending))
            pending, count = [], 0
    if pending:
        yield flatten(pa.concat_tables(pending))


def _runs_of_groups(places: Sequence[tuple[int, int]]) -> Iterator[tuple[int, int, int]]:
    """Seeds' (chunk, row group) places, in record order, as runs of consecutive row
    groups of one chunk: (chunk, first group, stop). A run of one worker is one chunk, one
    run; workers' chunks interleave in the record's order, in runs of a seed or a few."""
    start = 0
    while start < len(places):
        chunk, first = places[start]
        stop = start + 1
        while stop < len(places) and places[stop] == (chunk, first + stop - start):
            stop += 1
        yield chunk, first, first + stop - start
        start = stop


def _check_seeds(table: pa.Table, seeds: Sequence[int], path: Path) -> None:
    from postlab.errors import UserError

    if table.column("seed").to_pylist() != list(seeds):
        raise UserError(f"{path}: the chunk holds another seed than its manifest names there")


def scores_table(tables: RowTables, answer: Any, contracts: Sequence[str],
                 answer_value: Any = None) -> pa.Table:
    """Every distinct row of a batch (evaluations and rollouts) with its score under each
    contract (column ``score:<contract>``: an integer, or a float for a partial-credit one)
    and its tokens (and, given ``answer_value``, the task's answer to its question), each
    scored once, through the same cached
    :func:`~postlab.tasks.contracts.scored` every per-row reader uses. A teaching seed's
    36,000 rows hold about 500 distinct ones."""
    from postlab.tasks.contracts import CONTRACTS, PARTIAL_CREDIT, scored
    from postlab.tasks.rows import Row

    keys = list(ROW_COLUMNS)
    distinct = pa.concat_tables([tables.evaluations.select(keys),
                                 tables.rollouts.select(keys)]).group_by(keys).aggregate([])
    rows = [Row(*values) for values in zip(*(distinct.column(k).to_pylist() for k in keys),
                                           strict=True)]
    for name in contracts:
        scorer = CONTRACTS[name]
        values = [scored(scorer, answer, row) for row in rows]
        kind = pa.float64() if name in PARTIAL_CREDIT else pa.int64()
        distinct = distinct.append_column(f"score:{name}", pa.array(values, kind))
    distinct = distinct.append_column("tokens", pa.array([row.tokens for row in rows],
                                                         pa.int64()))
    if answer_value is not None:  # the task's answer as shown (an integer or a text)
        distinct = distinct.append_column("answer", pa.array(
            [answer_value(row.pair) for row in rows]))
    return distinct


def judged(rows: pa.Table, scores: pa.Table, *, ordered: bool = True) -> pa.Table:
    """``rows`` (evaluations or rollouts of a batch) with their scores and tokens, in their
    own order (a join keeps none, so rows carry their place through it; ``ordered`` False:
    in any order, for a caller that only sums them)."""
    placed = rows.append_column("ordinal", pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    joined = placed.join(scores, keys=list(ROW_COLUMNS))
    return joined.sort_by("ordinal") if ordered else joined


def answers_per_question(tables: RowTables, samples: int) -> np.ndarray:
    """Each evaluation block's answers per question: ``samples`` sampled, one greedy."""
    return np.array([samples if decoding == "sampled" else 1
                     for decoding in tables.blocks.column("decoding").to_pylist()],
                    dtype=np.int64)


def with_questions(rows: pa.Table, per_block: np.ndarray) -> pa.Table:
    """Evaluation rows with each one's question and sample within its block (its place
    in the block over and modulo its block's answers per question)."""
    position = rows.column("position").to_numpy()
    size = per_block[rows.column("block_id").to_numpy()]
    return rows.append_column("question", pa.array(position // size)).append_column(
        "sample", pa.array(position % size))


def labelled_evaluations(tables: RowTables, scores: pa.Table, samples: int) -> pa.Table:
    """A batch's evaluation rows judged (:func:`judged`), each with its block's seed,
    stage, split and decoding, and its question and sample within the block
    (:func:`with_questions`)."""
    rows = with_questions(judged(tables.evaluations, scores),
                          answers_per_question(tables, samples))
    block = rows.column("block_id")
    for name in ("seed", "stage", "split", "decoding"):
        rows = rows.append_column(name, pc.take(tables.blocks.column(name), block))
    return rows


def labelled_rollouts(tables: RowTables, scores: pa.Table) -> pa.Table:
    """A batch's rollout rows judged (:func:`judged`), each with its step's seed, arm and
    step."""
    rows = judged(tables.rollouts, scores)
    step = rows.column("step_id")
    for name in ("seed", "arm", "step"):
        rows = rows.append_column(name, pc.take(tables.steps.column(name), step))
    return rows


def seed_evaluations(tables: RowTables, seed: int, stage: str) -> dict[str, Any] | None:
    """One seed's evaluation rows of one stage as its entry holds them (split -> decoding
    -> rows ``[a, b, text, terminated]``), from a batch's flat tables; None if it has none.
    For comparing a checkpoint's re-evaluation with what was recorded."""
    blocks = tables.blocks
    mask = pc.and_(pc.equal(blocks.column("seed"), seed), pc.equal(blocks.column("stage"),
                                                                    stage))
    chosen = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    if not len(chosen):
        return None
    rows = tables.evaluations
    owner = rows.column("block_id").to_numpy()  # ascending: rows are in record order
    found: dict[str, Any] = {}
    splits = blocks.column("split").to_pylist()
    decodings = blocks.column("decoding").to_pylist()
    for block in chosen.tolist():
        start, stop = np.searchsorted(owner, [block, block + 1])
        part = rows.slice(int(start), int(stop - start))
        values = [part.column(name).to_pylist() for name in ROW_COLUMNS]
        found.setdefault(splits[block], {})[decodings[block]] = [
            list(row) for row in zip(*values, strict=True)]
    return found


def read_ahead(items: Iterator[T]) -> Iterator[T]:
    """``items`` in order, the next one made in a thread while the caller works on this one.

    A reader's batch is made (chunks read and hashed, rows flattened, seeds proven) mostly in
    Arrow's kernels and hashlib, which release the GIL, while the caller's work on the
    previous batch is mostly Python: on two cores the two overlap. At most two items wait
    beside the caller's (one queued, one made), so a reader holds up to three batches. An
    exception from the thread is raised to the caller where it asks for that item, as it
    would have been without the thread.

    The thread stops when this generator ends, however it ends (joined, so none outlives the
    reader), and when the main thread has finished, for a caller that stopped asking but
    still holds the generator at exit. It is not a daemon: a daemon thread killed at exit
    inside Arrow's C++ code can abort the process."""
    results: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()
    main = threading.main_thread()

    def wanted() -> bool:
        # the interpreter marks the main thread finished before it joins the others
        return not stop.is_set() and main.is_alive()

    def offer(kind: str, value: Any) -> bool:
        while wanted():
            try:
                results.put((kind, value), timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer("item", item):
                    return
        except BaseException as exc:  # handed to the caller, who raises it
            offer("error", exc)
            return
        offer("end", None)

    thread = threading.Thread(target=produce, name="postlab-read-ahead")
    try:
        thread.start()
        while True:
            kind, value = results.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        # the garbage collector may close an abandoned generator in the thread itself
        if thread.ident is not None and thread is not threading.current_thread():
            thread.join()
            close = getattr(items, "close", None)
            if close is not None:
                close()


def proven_tables(record: dict[str, Any], plan: Plan, folder: Path | None = None,
                  batch: int = BATCH_SEEDS) -> Iterator[RowTables]:
    """:func:`checked_batches`, each made while the caller works on the one before
    (:func:`read_ahead`)."""
    return read_ahead(checked_batches(record, plan, folder, batch))


def checked_batches(record: dict[str, Any], plan: Plan, folder: Path | None = None,
                    batch: int = BATCH_SEEDS) -> Iterator[RowTables]:
    """:func:`row_tables`, each seed checked first. A batch's seeds that the columnar checks
    prove fit their plan (:func:`~postlab.records.fits.unproven_seeds`; ``folder``: the run
    folder, whose checkpoint files must be there, None for a record read alone) and carry
    digests equal to those recomputed from their rows
    (:func:`~postlab.records.integrity.table_digests`) are not read one by one; any other is
    read through the per-seed checks the record's readers registered, which refuse it in one
    line naming what is wrong. A seed is proven once per opening: a reader's second pass (the
    page's answer tables after its analysis) reads the rows without checking them again. A
    record held in memory was checked whole when its checks were registered. A pass that
    proves every seed is remembered, and a later reader of the same record, plan, folder and
    postlab takes its seeds as proven (:mod:`~postlab.records.proofs`)."""
    from postlab.records import proofs

    runs = record.runs
    chunked = isinstance(runs, ChunkedRuns)
    # only a pass that proves every seed itself, under this plan, is remembered (a second
    # pass of one opening, the page's answer tables, needs no key: its seeds are proven)
    fresh = chunked and not runs.proven
    key = proofs.proof_key(record, plan, folder) if fresh else None
    if fresh and proofs.remembered(key):
        runs.proven.update(runs.seeds)
        fresh = False
    for tables in row_tables(record, batch):
        if chunked and not runs.proven.issuperset(tables.seeds):
            unproven, _ = not_proven(tables, plan, folder)
            for seed in tables.seeds:
                if seed in unproven:
                    runs.entry(seed)
            # a chunk is hashed on every read, so a proven seed's rows stay what was proven
            runs.proven.update(seed for seed in tables.seeds if seed not in unproven)
        yield tables
    if fresh and runs.proven.issuperset(runs.seeds):
        # the state proven is the one the key names only if nothing changed during the pass
        # (a checkpoint file removed after its seed was checked)
        proofs.remember_if_unchanged(key, record, plan, folder, len(runs.seeds))


def not_proven(tables: RowTables, plan: Plan, folder: Path | None
               ) -> tuple[set[int], list[dict[str, Any] | None]]:
    """The seeds of a batch the columnar checks do not prove: that they fit their plan
    (:func:`~postlab.records.fits.unproven_seeds`) and that their digests, recomputed from
    the rows (:func:`~postlab.records.integrity.table_digests`), are the ones they carry;
    and those recomputed digests, seed by seed (None where they could not be)."""
    from postlab.records.fits import unproven_seeds
    from postlab.records.integrity import digests_match, table_digests

    unproven = set(unproven_seeds(tables, plan, folder))
    digests = table_digests(tables)
    recorded = tables.runs.column("digests").to_pylist()
    unproven.update(seed for seed, found, carried in zip(tables.seeds, digests, recorded,
                                                          strict=True)
                    if not digests_match(found, carried))
    return unproven, digests


def record_tables(record: Record, plan: Plan) -> Iterator[RowTables]:
    """A record's flat tables checked as :func:`proven_tables` checks them, for a caller
    given no tables: a chunked record's seeds pass the checks its readers registered (in its
    run folder, if ``plan.json`` is beside it) before any number is computed from them."""
    runs = record.runs
    folder = None
    if isinstance(runs, ChunkedRuns) and (runs.folder / "plan.json").is_file():
        folder = runs.folder
    return proven_tables(record, plan, folder)
