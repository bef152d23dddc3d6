"""A record's raw rows in Parquet chunks, read one seed at a time.

A record written by this version keeps its provenance in ``record.json`` and its seeds' raw
parts (evaluation and rollout rows, update statistics, SFT losses, checkpoint entries, digests)
in compressed Parquet files under ``rows/``, one row group per seed, so a reader holds one
seed's rows at a time whatever the number of seeds: about 6 MB of Python objects for a
teaching seed, where the whole JSON record of 10,000 seeds would need about 10 GB.
``record.json`` names every chunk with its sha256 and seeds (the manifest), so the fingerprint,
which covers ``record.json``, covers the chunks too; a chunk is hashed before it is parsed.

Records written before (one JSON document, ``runs`` inline) stay readable as they are; a record
never mixes the two layouts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from postlab.errors import UserError
from postlab.jsonio import parse_json, read_bytes

#: The folder of a run that holds its chunks, and how a chunk is named there.
CHUNK_DIR = "rows"
CHUNK_FILE = re.compile(r"rows/chunk-[0-9]{5,9}\.parquet")
#: Chunks written at once hold at most this many seeds (a reader holds one chunk's bytes).
MAX_CHUNK_SEEDS = 256
#: Entries a reader keeps once decoded (the first ones read): about 6 MB of Python objects
#: each for a teaching seed (measured with tracemalloc), so at most about 50 MB.
KEPT_SEEDS = 8
#: zstd at its default level: the teaching seed's rows take about 1/10 of their JSON.
COMPRESSION = "zstd"
#: The chunk format, kept in each file's metadata so a later layout cannot be misread.
FORMAT_KEY = b"postlab.chunk"
FORMAT = b"1"


def chunk_name(index: int) -> str:
    return f"{CHUNK_DIR}/chunk-{index:05d}.parquet"


def _schema() -> Any:
    import pyarrow as pa

    row = pa.struct([("a", pa.int64()), ("b", pa.int64()), ("text", pa.string()),
                     ("terminated", pa.bool_())])
    rows = pa.list_(row)
    update = pa.struct([(name, pa.float64()) for name in UPDATE_KEYS])
    sampling = pa.struct([*((name, pa.int64()) for name in SAMPLING_COUNTS),
                          ("dropped_rows", rows)])
    return pa.schema([
        ("seed", pa.int64()),
        # key orders of the run entry and its steps, so a seed reads back as the same JSON
        ("layout", pa.string()),
        ("sft_loss", pa.list_(pa.float64())),
        ("evaluations", pa.list_(pa.struct([("stage", pa.string()), ("split", pa.string()),
                                            ("decoding", pa.string()), ("rows", rows)]))),
        ("arms", pa.list_(pa.string())),
        ("training", pa.list_(pa.struct([
            ("arm", pa.string()), ("step", pa.int64()), ("rows", rows),
            ("zero_variance_groups", pa.int64()), ("updates", pa.list_(update)),
            ("sampling", sampling)]))),
        ("checkpoints", pa.list_(pa.struct([("stage", pa.string()), ("file", pa.string()),
                                            ("sha256", pa.string()),
                                            ("reload_equal", pa.bool_())]))),
        ("arm_sft_loss", pa.list_(pa.struct([("arm", pa.string()),
                                             ("losses", pa.list_(pa.float64()))]))),
        ("compute", pa.list_(pa.struct([("stage", pa.string()),
                                        *((name, pa.int64()) for name in COMPUTE_KEYS)]))),
        ("digests", pa.string()),
    ], metadata={FORMAT_KEY: FORMAT})


UPDATE_KEYS = ("loss", "gradient_norm_before_clip", "kl", "entropy", "ratio_outside_clip")
SAMPLING_COUNTS = ("drawn", "kept", "dropped", "replaced")
COMPUTE_KEYS = ("completions", "tokens_generated", "gradient_steps", "examples_seen")
#: Parts of a seed's entry a chunk stores; every entry postlab writes has exactly these.
RUN_KEYS = frozenset({"seed", "sft_loss", "evaluations", "training", "checkpoints",
                      "arm_sft_loss", "compute", "digests"})


def _row_struct(row: Sequence[Any]) -> dict[str, Any]:
    a, b, text, terminated = row
    return {"a": a, "b": b, "text": text, "terminated": terminated}


def _floats(values: Sequence[Any], where: str, *, lenient: bool = False) -> list[float]:
    # a double column keeps a float exactly; an int would come back a float, another JSON
    if lenient:  # read only (a one-document record as columns): the same values as floats
        return [float(v) if type(v) is int else v for v in values]
    if any(type(v) is not float for v in values):
        raise ValueError(f"{where}: a chunk stores floats only")
    return list(values)


def _flat(entry: dict[str, Any], *, lenient: bool = False) -> dict[str, Any]:
    """One seed's entry as a chunk row (the inverse of :func:`_entry`). ``lenient``: for
    reading an entry as columns, never for writing: integers where floats belong (a record
    another program wrote) become floats of the same value."""
    floats = functools.partial(_floats, lenient=lenient)
    extra = set(entry) - RUN_KEYS
    if extra:
        raise ValueError(f"a chunk cannot store the entry parts {sorted(extra)}")
    steps = [step for history in entry.get("training", {}).values() for step in history]
    step_keys = list(steps[0]) if steps else []
    # a step may have no update (DAPO's dynamic sampling, no group with signal)
    update_keys = next((list(step["updates"][0]) for step in steps if step["updates"]), [])
    sampling_keys = list(steps[0]["sampling"]) if steps and "sampling" in steps[0] else []
    for step in steps:
        if (list(step) != step_keys or any(list(u) != update_keys for u in step["updates"])
                or list(step.get("sampling", {})) != sampling_keys):
            raise ValueError("the steps of one seed differ in layout")
    layout = {"run": list(entry), "step": step_keys, "update": update_keys,
              "sampling": sampling_keys}
    return {
        "seed": entry["seed"],
        "layout": json.dumps(layout, separators=(",", ":")),
        "sft_loss": floats(entry.get("sft_loss", []), "sft_loss"),
        "evaluations": [{"stage": stage, "split": split, "decoding": decoding,
                         "rows": [_row_struct(r) for r in rows]}
                        for stage, splits in entry["evaluations"].items()
                        for split, decoded in splits.items()
                        for decoding, rows in decoded.items()],
        "arms": list(entry.get("training", {})),
        "training": [{"arm": arm, "step": step["step"],
                      "rows": [_row_struct(r) for r in step["rows"]],
                      "zero_variance_groups": step["zero_variance_groups"],
                      "updates": [{k: floats([u[k]], "updates")[0] for k in UPDATE_KEYS}
                                  for u in step["updates"]],
                      "sampling": None if "sampling" not in step else {
                          **{k: step["sampling"][k] for k in SAMPLING_COUNTS},
                          "dropped_rows": [_row_struct(r)
                                           for r in step["sampling"]["dropped_rows"]]}}
                     for arm, history in entry.get("training", {}).items() for step in history],
        "checkpoints": [{"stage": stage, **info}
                        for stage, info in entry.get("checkpoints", {}).items()],
        "arm_sft_loss": [{"arm": arm, "losses": floats(losses, "arm_sft_loss")}
                         for arm, losses in entry.get("arm_sft_loss", {}).items()],
        "compute": [{"stage": stage, **counts}
                    for stage, counts in entry.get("compute", {}).items()],
        "digests": json.dumps(entry["digests"], separators=(",", ":"))
        if "digests" in entry else None,
    }


def _rows(structs: list[dict[str, Any]]) -> list[list[Any]]:
    return [[r["a"], r["b"], r["text"], r["terminated"]] for r in structs]


#: The largest operand and answer text a row may hold (the record's limits).
ROW_LIMITS = {"operand": 10**9, "text": 1024}


def _row_lists(lists: Any, where: str) -> list[list[list[Any]]]:
    """A column of row lists as Python lists of ``[a, b, text, terminated]``, checked column
    by column first (no nulls, operands and text lengths in range), which is what the record's
    row check asks of each row. Building rows from columns, checked this way once per seed,
    took a 16-seed report from 33 s (rows from nested dicts, checked row by row on every
    read) to 16 s."""
    import pyarrow.compute as pc

    if lists.null_count:
        raise UserError(f"{where}: a list of rows is missing")
    fields = lists.flatten().flatten()
    if any(field.null_count for field in fields):
        raise UserError(f"{where}: a row has a missing value")
    a, b, text, terminated = fields
    for operand in (a, b):
        if len(operand) and not (pc.min(operand).as_py() >= 0
                                 and pc.max(operand).as_py() <= ROW_LIMITS["operand"]):
            raise UserError(f"{where}: an operand is outside 0..{ROW_LIMITS['operand']}")
    if len(text) and pc.max(pc.utf8_length(text)).as_py() > ROW_LIMITS["text"]:
        raise UserError(f"{where}: the answer text is longer than any plan allows")
    rows = list(map(list, zip(a.to_pylist(), b.to_pylist(), text.to_pylist(),
                              terminated.to_pylist(), strict=True)))
    out, start = [], 0
    for length in lists.value_lengths().to_pylist():
        out.append(rows[start:start + length])
        start += length
    return out


def _one(table: Any, name: str) -> Any:
    """A column of a one-seed table as one array (a row group reads as one chunk)."""
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _flat_of(table: Any, where: str) -> dict[str, Any]:
    """A one-seed row group as :func:`_flat` made it, its rows already Python lists."""
    flat = table.drop_columns(["evaluations", "training"]).to_pylist()[0]
    blocks = _one(table, "evaluations").flatten()
    stage, split, decoding, rows = blocks.flatten()
    flat["evaluations"] = [
        {"stage": st, "split": sp, "decoding": de, "rows": ro}
        for st, sp, de, ro in zip(stage.to_pylist(), split.to_pylist(), decoding.to_pylist(),
                                  _row_lists(rows, where), strict=True)]
    steps = _one(table, "training").flatten()
    arm, step, rows, zero_variance, updates, sampling = steps.flatten()
    flat["training"] = [
        {"arm": ar, "step": st, "rows": ro, "zero_variance_groups": zv, "updates": up,
         "sampling": sa}
        for ar, st, ro, zv, up, sa in zip(arm.to_pylist(), step.to_pylist(),
                                          _row_lists(rows, where), zero_variance.to_pylist(),
                                          updates.to_pylist(), sampling.to_pylist(),
                                          strict=True)]
    for step_entry in flat["training"]:
        if step_entry["sampling"] is not None:
            step_entry["sampling"]["dropped_rows"] = _rows(step_entry["sampling"]["dropped_rows"])
    return flat


def _entry(flat: dict[str, Any], source: str) -> dict[str, Any]:
    """A chunk row back as the seed's entry, its keys in the order they were written."""
    layout = parse_json(flat["layout"], source)
    evaluations: dict[str, Any] = {}
    for block in flat["evaluations"]:
        place = evaluations.setdefault(block["stage"], {}).setdefault(block["split"], {})
        place[block["decoding"]] = block["rows"]
    training: dict[str, list[dict[str, Any]]] = {arm: [] for arm in flat["arms"]}
    for step in flat["training"]:
        values = {"step": step["step"], "rows": step["rows"],
                  "zero_variance_groups": step["zero_variance_groups"],
                  "updates": [{k: u[k] for k in layout["update"]} for u in step["updates"]]}
        if step["sampling"] is not None:
            values["sampling"] = {k: step["sampling"][k] for k in layout["sampling"]}
        training.setdefault(step["arm"], []).append({k: values[k] for k in layout["step"]})
    parts = {
        "seed": flat["seed"], "sft_loss": flat["sft_loss"], "evaluations": evaluations,
        "training": training,
        "checkpoints": {c.pop("stage"): c for c in flat["checkpoints"]},
        "arm_sft_loss": {a["arm"]: a["losses"] for a in flat["arm_sft_loss"]},
        "compute": {c.pop("stage"): c for c in flat["compute"]},
    }
    if flat["digests"] is not None:
        parts["digests"] = parse_json(flat["digests"], source)
    return {key: parts[key] for key in layout["run"]}


def chunk_bytes(entries: Sequence[dict[str, Any]]) -> bytes:
    """Seeds' entries as one Parquet file's bytes, a row group per seed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _schema()
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, compression=COMPRESSION) as writer:
        for entry in entries:
            writer.write_table(pa.Table.from_pylist([_flat(entry)], schema=schema))
    return sink.getvalue().to_pybytes()


def chunk_entry(name: str, data: bytes, seeds: Sequence[int]) -> dict[str, Any]:
    """The manifest's line for a chunk: its file, sha256, size and seeds in file order."""
    return {"file": name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "seeds": list(seeds)}


def read_chunk(folder: Path, chunk: dict[str, Any]) -> Any:
    """A chunk's Parquet file, hashed against the manifest before it is parsed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = folder / chunk["file"]
    data = read_bytes(path, "record chunk")
    actual = hashlib.sha256(data).hexdigest()
    if actual != chunk["sha256"]:
        raise UserError(f"{path}: sha256 {actual[:16]}…, the record's manifest names "
                        f"{chunk['sha256'][:16]}…: changed or damaged since it was written")
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        metadata = parquet.schema_arrow.metadata or {}
    except (pa.ArrowException, OSError) as exc:
        raise UserError(f"{path}: not a readable Parquet file "
                        f"({str(exc).splitlines()[0][:120]})") from None
    if metadata.get(FORMAT_KEY) != FORMAT or parquet.num_row_groups != len(chunk["seeds"]):
        raise UserError(f"{path}: not a postlab record chunk of {len(chunk['seeds'])} seeds")
    problem = schema_problem(parquet.schema_arrow)
    if problem is not None:
        raise UserError(f"{path}: {problem}")
    return parquet


def schema_problem(schema: Any) -> str | None:
    """How a chunk's columns depart from the schema its format names (the manifest names
    the format through each chunk's ``postlab.chunk`` key, and the format fixes every column),
    or None. Checked on the file's footer before any column is read, so a chunk without its
    ``seed`` column, say, is refused in one line instead of failing where the column is read."""
    expected = _schema()
    names, wanted = list(schema.names), list(expected.names)
    missing = [name for name in wanted if name not in names]
    extra = [name for name in names if name not in wanted]
    if missing or extra:
        said = [f"missing {', '.join(missing)}" if missing else "",
                f"not in the format {', '.join(extra)}" if extra else ""]
        return (f"its columns differ from chunk format {FORMAT.decode()}'s: "
                + "; ".join(part for part in said if part))
    for field in expected:
        found = schema.field(field.name)
        if not found.type.equals(field.type):
            return (f"column {field.name!r} is {found.type}, chunk format "
                    f"{FORMAT.decode()} has {field.type}")
    if names != wanted:
        return f"its columns are in another order than chunk format {FORMAT.decode()}'s"
    return None


class ChunkedRuns(Sequence[dict[str, Any]]):
    """A chunked record's seed entries, in record order, read from disk on each access.

    A walk over all seeds holds one seed's entry and one chunk's bytes at a time, plus the
    first :data:`KEPT_SEEDS` entries read, which are kept: a command may walk the seeds several
    times (verify about five; a report's checks ride on its one walk, :meth:`on_each`), and a
    record of a few seeds then decodes each once (decoding a teaching seed takes about 30 ms;
    verify of 16 teaching seeds went from 17.8 s to 11.6 s, the one-document layout's 7.9 s).
    Callers treat entries as read-only. Each entry is
    checked as a JSON record's are (``check``) the first time it is read.
    """

    def __init__(self, folder: Path, chunks: list[dict[str, Any]], seeds: list[int],
                 check: Callable[[Any, str], None], source: str) -> None:
        self.folder, self.chunks, self.seeds = folder, chunks, seeds
        self._place = {seed: (index, group) for index, chunk in enumerate(chunks)
                       for group, seed in enumerate(chunk["seeds"])}
        self._open: tuple[int, Any] | None = None
        # (check, seeds it has seen): the structural check first, then those readers add
        self._checks: list[tuple[Callable[[dict[str, Any]], None], set[int]]] = [
            (functools.partial(_structural, check, source), set())]
        self._kept: dict[int, dict[str, Any]] = {}
        #: seeds a columnar pass proved pass every per-seed check (``records.opened``)
        self.proven: set[int] = set()
        # a reader's next batch is proven in a thread (``columns.read_ahead``), which may
        # read an unproven seed's entry while the reader reads another
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self.seeds)

    def __getstate__(self) -> dict[str, Any]:
        # a copy (or pickle) reads the same files afresh; the open chunk is not state
        state = {**self.__dict__, "_open": None, "_kept": {}, "proven": set(self.proven),
                 "_checks": [(check, set(seen)) for check, seen in self._checks]}
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __deepcopy__(self, memo: dict[int, Any]) -> ChunkedRuns:
        # the entries are read from files their digests fix, so a deep copy shares nothing
        # mutable: each access builds new objects
        copied = ChunkedRuns.__new__(ChunkedRuns)
        copied.__setstate__(self.__getstate__())
        return copied

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self.entry(seed) for seed in self.seeds[index]]
        return self.entry(self.seeds[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for seed in self.seeds:
            yield self.entry(seed)

    def on_each(self, check: Callable[[dict[str, Any]], None]) -> None:
        """Run ``check`` on each seed's entry the first time a walk reaches it from now on,
        before the walk sees it: a reader's checks then ride on its own walk instead of each
        reading every seed again (a 64-seed report read each seed about six times)."""
        self._checks.append((check, set()))

    def entry(self, seed: int) -> dict[str, Any]:
        with self._lock:
            return self._entry(seed)

    def _entry(self, seed: int) -> dict[str, Any]:
        entry = self._kept.get(seed)
        if entry is None:
            entry = self._read(seed)
            if len(self._kept) < KEPT_SEEDS:
                self._kept[seed] = entry
        # the chunk was hashed against the manifest on this read, so an entry read again is
        # the bytes already checked: each check runs once per seed
        for check, seen in self._checks:
            if seed not in seen:
                check(entry)
                seen.add(seed)
        return entry

    def _read(self, seed: int) -> dict[str, Any]:
        import pyarrow as pa

        index, group = self._place[seed]
        if self._open is None or self._open[0] != index:
            self._open = None  # the old chunk's bytes go before the next are read
            self._open = (index, read_chunk(self.folder, self.chunks[index]))
        chunk = self.chunks[index]
        where = f"{self.folder / chunk['file']}, seed {seed}"
        try:
            table = self._open[1].read_row_group(group)
        except (pa.ArrowException, OSError) as exc:
            raise UserError(f"{where}: not readable ({str(exc).splitlines()[0][:120]})"
                            ) from None
        if table.num_rows != 1 or table.column("seed")[0].as_py() != seed:
            raise UserError(f"{where}: the chunk holds another seed there")
        try:
            return _entry(_flat_of(table, where), where)
        except (KeyError, TypeError, AttributeError, ValueError, pa.ArrowException) as exc:
            raise UserError(f"{where}: damaged entry ({exc!r:.80})") from None


def _structural(check: Callable[[Any, str], None], source: str, entry: dict[str, Any]) -> None:
    check(entry, f"{source}: seed {entry['seed']}")


def check_manifest(chunks: Any, seeds: Any, where: str) -> None:
    """The manifest's own shape: chunk files of the expected names, each seed in exactly one
    chunk, and the record's seed order a permutation of the chunks' seeds."""
    if not isinstance(chunks, list) or not isinstance(seeds, list):
        raise UserError(f"{where}: 'chunks' and 'seeds' must be lists")
    held: list[Any] = []
    names = set()
    for index, chunk in enumerate(chunks):
        at = f"{where}.chunks[{index}]"
        if (not isinstance(chunk, dict) or set(chunk) != {"file", "sha256", "bytes", "seeds"}
                or not isinstance(chunk["file"], str) or not CHUNK_FILE.fullmatch(chunk["file"])
                or not isinstance(chunk["sha256"], str)
                or not re.fullmatch(r"[0-9a-f]{64}", chunk["sha256"])
                or type(chunk["bytes"]) is not int or chunk["bytes"] < 0
                or not isinstance(chunk["seeds"], list) or not chunk["seeds"]
                or any(type(s) is not int for s in chunk["seeds"])):
            raise UserError(f"{at}: expected {{file: rows/chunk-N.parquet, sha256, bytes, "
                            f"seeds}}, got {chunk!r:.100}")
        if chunk["file"] in names:
            raise UserError(f"{at}: {chunk['file']} is named twice")
        names.add(chunk["file"])
        held += chunk["seeds"]
    if len(set(held)) != len(held):
        raise UserError(f"{where}: a seed is in more than one chunk")
    if any(type(s) is not int for s in seeds) or sorted(seeds) != sorted(held):
        raise UserError(f"{where}: 'seeds' must list exactly the seeds the chunks hold")


def unlisted_chunks(folder: Path, chunks: Sequence[dict[str, Any]]) -> list[str]:
    """Entries in the run's ``rows/`` folder that its manifest does not name (files, or
    anything else: a folder there is no chunk either)."""
    listed = {chunk["file"] for chunk in chunks}
    where = folder / CHUNK_DIR
    if not where.is_dir():
        return []
    return sorted(f"{CHUNK_DIR}/{p.name}" for p in where.iterdir()
                  if f"{CHUNK_DIR}/{p.name}" not in listed)


#: What follows a chunk no manifest names, in every message about one.
UNLISTED = ("in the run folder but not in the record's manifest; an interrupted run leaves "
            "one ('postlab run --resume' removes it), else remove it")


def chunk_layout_problems(folder: Path, chunks: Sequence[dict[str, Any]], *,
                          unlisted_ok: bool = False) -> list[str]:
    """Where a chunked record's ``rows/`` differs from its manifest, read from the file
    system alone (no file is opened): a file missing or of another size than the manifest
    names, or one it does not name (``unlisted_ok``: a run being resumed, which removes
    them). Every command runs these; readers hash each chunk as they read it."""
    problems = [] if unlisted_ok else [f"{name}: {UNLISTED}"
                                       for name in unlisted_chunks(folder, chunks)]
    for chunk in chunks:
        path = folder / chunk["file"]
        if not path.is_file():
            problems.append(f"{chunk['file']}: missing")
            continue
        size = path.stat().st_size
        if size != chunk["bytes"]:
            problems.append(f"{chunk['file']}: {size} bytes, the manifest names "
                            f"{chunk['bytes']}")
    return problems


def chunk_problems(folder: Path, chunks: Sequence[dict[str, Any]]) -> list[str]:
    """Every way a chunked record's files differ from its manifest, file by file: those of
    :func:`chunk_layout_problems`, then, for each file of the right size, a digest other than
    the manifest's or a file that is not a readable chunk of its seeds and format."""
    problems = chunk_layout_problems(folder, chunks)
    named = {problem.split(":")[0] for problem in problems}
    for chunk in chunks:
        if chunk["file"] in named:
            continue
        try:
            read_chunk(folder, chunk)
        except UserError as exc:
            problems.append(str(exc).replace(f"{folder}/", "", 1))
    return problems
