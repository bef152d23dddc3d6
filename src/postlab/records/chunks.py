"""A record's raw rows in Parquet chunks, read one seed at a time.

A record written by this version keeps its provenance in ``record.json`` and its seeds' raw
parts (evaluation and rollout rows, update statistics, SFT losses, checkpoint entries, digests)
in compressed Parquet files under ``rows/``, one row group per seed, so a reader holds one
seed's rows at a time whatever the number of seeds: about 6 MB of Python objects for a
teaching seed, where the whole JSON record of 10,000 seeds would need about 10 GB.
``record.json`` names every chunk with its sha256 and seeds (the manifest), so the fingerprint,
which covers ``record.json``, covers the chunks too; a chunk is hashed before it is parsed.

Records written before (one JSON document, ``runs`` inline) stay readable as they are; a record
never mixes the two layouts. The format of a chunk's table (its schema, and an entry as a row)
is ``records.chunk_codec``; here are the files and the manifest that names them.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from postlab.errors import UserError
from postlab.jsonio import read_bytes
from postlab.records.chunk_codec import (
    FORMAT,
    FORMAT_KEY,
    chunk_schema,
    entry_of,
    flat_entry,
    flat_of_group,
    schema_problem,
)

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


def chunk_name(index: int) -> str:
    return f"{CHUNK_DIR}/chunk-{index:05d}.parquet"


def chunk_bytes(entries: Sequence[dict[str, Any]]) -> bytes:
    """Seeds' entries as one Parquet file's bytes, a row group per seed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = chunk_schema()
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, compression=COMPRESSION) as writer:
        for entry in entries:
            writer.write_table(pa.Table.from_pylist([flat_entry(entry)], schema=schema))
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



class ChunkedRuns(Sequence[Any]):
    """A chunked record's seed entries, in record order, read from disk on each access and
    typed by ``typed`` (``records.models``: a ``SeedEntry``, or a UserError naming what is
    wrong with the entry).

    A walk over all seeds holds one seed's entry and one chunk's bytes at a time, plus the
    first :data:`KEPT_SEEDS` entries read, which are kept: a command may walk the seeds several
    times (verify about five; a report's checks ride on its one walk, :meth:`on_each`), and a
    record of a few seeds then decodes each once (decoding a teaching seed takes about 30 ms;
    verify of 16 teaching seeds went from 17.8 s to 11.6 s, the one-document layout's 7.9 s).
    Callers treat entries as read-only.
    """

    def __init__(self, folder: Path, chunks: list[dict[str, Any]], seeds: list[int],
                 typed: Callable[[dict[str, Any], str], Any], source: str) -> None:
        self.folder, self.chunks, self.seeds = folder, chunks, seeds
        self._typed, self._source = typed, source
        self._place = {seed: (index, group) for index, chunk in enumerate(chunks)
                       for group, seed in enumerate(chunk["seeds"])}
        self._open: tuple[int, Any] | None = None
        # (check, seeds it has seen): those readers add
        self._checks: list[tuple[Callable[[Any], None], set[int]]] = []
        self._kept: dict[int, Any] = {}
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
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self.entry(seed) for seed in self.seeds[index]]
        return self.entry(self.seeds[index])

    def __iter__(self) -> Iterator[Any]:
        for seed in self.seeds:
            yield self.entry(seed)

    def on_each(self, check: Callable[[Any], None]) -> None:
        """Run ``check`` on each seed's entry the first time a walk reaches it from now on,
        before the walk sees it: a reader's checks then ride on its own walk instead of each
        reading every seed again (a 64-seed report read each seed about six times)."""
        self._checks.append((check, set()))

    def entry(self, seed: int) -> Any:
        with self._lock:
            return self._entry(seed)

    def _entry(self, seed: int) -> Any:
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

    def _read(self, seed: int) -> Any:
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
            data = entry_of(flat_of_group(table, where), where)
        except (KeyError, TypeError, AttributeError, ValueError, pa.ArrowException) as exc:
            raise UserError(f"{where}: damaged entry ({exc!r:.80})") from None
        return self._typed(data, f"{self._source}: seed {data['seed']}")


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
