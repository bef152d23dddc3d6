"""The run record as typed, frozen models: every field's type and range, unknown fields
refused, checked by one validator (pydantic) before any number is computed from a record.

A damaged file then fails with one line naming the first field that is wrong (its path in
the record, as ``record.json.runs[0].seed: wrong type str, expected an integer``) instead of
a traceback or, worse, a quietly wrong table. Completeness (what a verified record must
hold) and fit to the plan are checked elsewhere (``verify``, :mod:`.conformance`).

Readers receive these models, never the JSON: :meth:`Record.of` is the one typed reader (a
record file's bytes are decoded by ``records.record``), and the record writer checks each
seed's entry against :class:`SeedEntry` before writing it. A block of rows is a
:class:`~postlab.tasks.rows.RowList` (each row a ``Row`` when read). Each model keeps the JSON
object it was read from (``data()``), which is what the digests taken in training, the
summary and the fingerprint hash: a model's dump orders fields its own way, and an earlier
record's bytes must keep hashing the same.

Rows ``[a, b, text, terminated]`` read from a Parquet chunk were checked column by column as
the chunk was decoded (:mod:`.chunk_codec`); a seed read from a chunk is validated with
``context={"rows_checked": True}``, which checks its rows' lists but not each row again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from postlab.errors import UserError
from postlab.records.chunks import ChunkedRuns, check_manifest
from postlab.records.fields import (
    FILE_NAME,
    FILE_PATH,
    MAX_COUNT,
    MAX_SEED,
    MAX_WORKERS,
    Count,
    DroppedRows,
    Finite,
    Name,
    NonNegative,
    Plain,
    Rows,
    Sha,
    Share,
    Strict,
    Time,
    between,
    kind_of,
    number,
    validated,
)


class Update(Strict):
    loss: Finite
    kl: Finite
    entropy: NonNegative
    gradient_norm_before_clip: NonNegative
    ratio_outside_clip: Share


class Sampling(Strict):
    """Dynamic sampling's accounting of one step (DAPO)."""

    drawn: Count
    kept: Count
    dropped: Count
    replaced: Count
    dropped_rows: DroppedRows


class Step(Strict):
    step: Annotated[StrictInt, Field(ge=1, le=MAX_COUNT)]
    rows: Rows
    zero_variance_groups: Count
    # empty only where DAPO's dynamic sampling left a step no group with signal; how many a
    # step must have is the plan's to say (conformance)
    updates: list[Update]
    sampling: Sampling | None = None


class Decodings(Strict):
    greedy: Rows
    sampled: Rows


def _splits(value: dict[str, Decodings]) -> dict[str, Decodings]:
    if not value:
        raise ValueError("expected splits")
    return value


Splits = Annotated[dict[Name, Decodings], AfterValidator(_splits)]


class Checkpoint(Strict):
    file: Annotated[StrictStr, Field(pattern=FILE_NAME)]
    sha256: Sha
    reload_equal: StrictBool


class Compute(Strict):
    completions: Count
    tokens_generated: Count
    gradient_steps: Count
    examples_seen: Count


class StepDigests(Strict):
    rows: Sha
    statistics: Sha
    sampling: Sha | None = None


class Digests(Strict):
    sft_loss: Sha
    arm_sft_loss: Sha | None = None
    compute: Sha | None = None
    evaluations: dict[Name, dict[Name, Sha]]
    training: dict[Name, list[StepDigests]]


class SeedEntry(Strict):
    """One seed's entry: its SFT losses, every stage's evaluations, every RL arm's steps,
    checkpoints, compute and the digests taken as its parts were produced."""

    seed: Annotated[StrictInt, Field(ge=0, le=MAX_SEED)]
    sft_loss: list[Finite] | None = None
    evaluations: dict[Name, Splits]
    training: dict[Name, list[Step]] | None = None
    checkpoints: dict[Name, Checkpoint] | None = None
    arm_sft_loss: dict[Name, list[Finite]] | None = None
    compute: dict[Name, Compute] | None = None
    digests: Digests | None = None
    _data: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def of(cls, data: Any, source: str = "record", *, rows_checked: bool = False
           ) -> SeedEntry:
        """The entry ``data`` (a seed's JSON object) typed, or a UserError naming its first
        problem at ``source``."""
        entry = validated(cls, data, source, rows_checked=rows_checked)
        entry._data = data
        return entry

    def data(self) -> dict[str, Any]:
        """The JSON object this entry was read from, which its digests and the summary are
        taken from. Shared with the record, not copied (a teaching seed's is about 6 MB):
        read it, never change it."""
        return self._data

    @property
    def arms(self) -> dict[str, list[Step]]:
        """The RL arms' steps (none for a record that trained no RL arm)."""
        return self.training or {}


class Numerics(Strict):
    """What decided the run's bits (:func:`postlab.machine.numerics.describe`)."""

    code_path: StrictStr
    pinned: dict[StrictStr, Plain]
    cpu_capability: Plain
    cpu_model: Plain
    machine: Plain
    cpu_supports: list[StrictStr]
    blas: Plain
    blas_code_path: Plain
    onednn_isa: Plain
    threads: Annotated[StrictInt, Field(ge=1, le=256)]
    deterministic: StrictBool
    device: Literal["cpu", "cuda"]
    dtype: Literal["float32", "bfloat16"]
    cuda: dict[StrictStr, Any] | None = None

    @field_validator("code_path")
    @classmethod
    def _code_path(cls, value: str) -> str:
        from postlab.machine.numerics import CODE_PATHS, NATIVE

        if value not in (NATIVE, *CODE_PATHS.names()):
            raise ValueError(f"{value!r:.80} is not one of "
                             f"{', '.join((NATIVE, *CODE_PATHS.names()))}")
        return value

    @field_validator("pinned")
    @classmethod
    def _pinned(cls, value: dict[str, str]) -> dict[str, str]:
        from postlab.machine.numerics import PIN_VARIABLES

        for key in value:
            if key not in PIN_VARIABLES:
                raise ValueError(f"unknown field {key!r}")
        return value

    @field_validator("cpu_supports")
    @classmethod
    def _supports(cls, value: list[str]) -> list[str]:
        from postlab.machine.numerics import CODE_PATHS

        for name in value:
            if name not in CODE_PATHS.names():
                raise ValueError(f"{name!r:.80} is not one of "
                                 f"{', '.join(CODE_PATHS.names())}")
        return value

    @field_validator("cuda")
    @classmethod
    def _cuda(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """The GPU, its libraries and the determinism settings a CUDA run was made with."""
        from postlab.machine.device import CUDA_FIELDS

        if value is None:
            return value
        flags = ("cudnn_deterministic", "cudnn_benchmark", "tf32_matmul", "tf32_cudnn")
        for key in CUDA_FIELDS:
            if key not in value:
                raise ValueError(f"missing field {key!r}")
        for key, item in value.items():
            if key not in CUDA_FIELDS:
                raise ValueError(f"unknown field {key!r}")
            if key in flags and type(item) is not bool:
                raise PydanticCustomError("record_part", "{problem}", {
                    "part": f".{key}",
                    "problem": f"wrong type {kind_of(item)}, expected true or false"})
            if key not in flags and (not isinstance(item, str) or len(item) > 200):
                raise PydanticCustomError("record_part", "{problem}", {
                    "part": f".{key}", "problem": f"{item!r:.80} is not a valid value here"})
        return value

    @model_validator(mode="after")
    def _device(self) -> Numerics:
        if self.device == "cuda" and self.cuda is None:
            raise ValueError("device cuda without its 'cuda' settings")
        if self.device != "cuda" and self.cuda is not None:
            raise ValueError(f"'cuda' settings on device {self.device}")
        return self


class Registration(Strict):
    """The run folder's registration named by hash, with when it was made and when training
    began (``postlab.plan.registration``); the file itself is checked by reading it."""

    sha256: Sha
    hypotheses_sha256: Sha
    registered_at: Time
    training_started_at: Time


#: Provenance fields: the reference program writes the first group, postlab all of them.
REFERENCE_FIELDS = ("plan_sha256", "source_sha256", "python", "torch", "platform", "device",
                    "dtype", "runs", "parameters", "wall_seconds")
POSTLAB_FIELDS = (*REFERENCE_FIELDS, "postlab_version", "threads", "workers", "numerics")


class _Header(Strict):
    """What a record's top level holds besides its seeds (or their manifest)."""

    plan_sha256: Sha
    #: absent: the exact engine (records written before there were engines keep their form)
    engine: Name | None = None
    tokenizer_sha256: Sha | None = None
    source_sha256: dict[Annotated[StrictStr, Field(pattern=FILE_PATH)], Sha] | None = None
    python: Plain | None = None
    torch: Plain | None = None
    platform: Plain | None = None
    postlab_version: Plain | None = None
    device: Literal["cpu", "cuda"] | None = None
    dtype: Literal["float32", "bfloat16"] | None = None
    threads: Annotated[StrictInt, Field(ge=1, le=256)] | None = None
    workers: Annotated[StrictInt, Field(ge=1, le=MAX_WORKERS)] | None = None
    parameters: Annotated[StrictInt, Field(ge=1, le=MAX_COUNT)] | None = None
    wall_seconds: Annotated[Any, PlainValidator(number), between(0.0, 10.0**9)] | None = None
    numerics: Numerics | None = None
    registration: Registration | None = None
    #: an agent plan's tools and the version of each that answered its calls (verify runs
    #: the calls again with the tools installed and names both versions where they differ)
    tools: dict[Name, Plain] | None = None


class Record(_Header):
    """A record's header, and its seeds' entries as :attr:`runs` (read from the record in the
    one-document layout, or chunk by chunk from the chunk files its manifest names)."""

    #: a chunked record's manifest: its chunk files and its seeds in record order (checked by
    #: :func:`~postlab.records.chunks.check_manifest`)
    chunks: list[dict[str, Any]] | None = None
    seeds: list[int] | None = None
    _runs: Sequence[SeedEntry] = PrivateAttr(default=())
    _data: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def of(cls, data: Any, source: str = "record.json", folder: Path | None = None
           ) -> Record:
        """The one typed reader of records: a record file's JSON (``data``) checked field by
        field and typed, its seeds' entries typed as :class:`SeedEntry` (a chunked record's
        as each is first read from its chunk files in ``folder``, the record file's folder),
        or a UserError naming the first problem. Completeness (what a verified record must
        hold) is ``verify``'s concern, fit to the plan ``records.conformance``'s."""
        validated(_RecordFile, data, source)
        if "runs" not in data and "chunks" not in data:
            # the reference's records and postlab's first ones are of the one-document layout
            raise UserError(f"{source}: missing field 'runs'")
        if "runs" in data and "chunks" in data:
            raise UserError(f"{source}: mixes two layouts: seeds inline ('runs') and in chunk "
                            "files ('chunks'); a record has one or the other")
        if "chunks" in data:
            check_manifest(data["chunks"], data.get("seeds"), source)
        elif "seeds" in data:
            raise UserError(f"{source}: unknown field 'seeds' (only a chunked record lists "
                            "them)")
        header = {key: value for key, value in data.items() if key != "runs"}
        record = cls.model_validate(header, context={"rows_checked": True})
        record._data = header
        if "runs" in data:
            record._runs = [SeedEntry.of(run, f"{source}.runs[{index}]")
                            for index, run in enumerate(data["runs"])]
        elif folder is None:
            raise UserError(f"{source}: a chunked record is read from its run folder")
        else:
            record._runs = ChunkedRuns(folder, data["chunks"], data["seeds"], _chunk_entry,
                                       source)
        return record

    @property
    def runs(self) -> Sequence[SeedEntry]:
        """The seeds' entries in record order (a chunked record's read on each access)."""
        return self._runs

    @property
    def chunked(self) -> bool:
        return self.chunks is not None

    @property
    def made_by_postlab(self) -> bool:
        """Whether postlab wrote the record (the reference program's lack postlab's fields)."""
        return self.postlab_version is not None

    def with_runs(self, runs: Sequence[SeedEntry]) -> Record:
        """This record's header with only the seeds' entries ``runs`` (a spot check's seeds,
        one seed of an export); a chunked record's seed list then names those alone."""
        seeds = [run.seed for run in runs]
        subset = self.model_copy(update=None if self.seeds is None else {"seeds": seeds})
        subset._runs = list(runs)
        subset._data = self._data if self.seeds is None else {**self._data, "seeds": seeds}
        return subset

    def seed_order(self) -> list[int]:
        """The record's seeds in order, without reading a chunked record's rows."""
        return list(self.seeds) if self.seeds is not None else [run.seed for run in self.runs]

    def data(self) -> dict[str, Any]:
        """The header's JSON object as read (the inline seeds left out: each seed's is its
        entry's ``data()``). Shared, not copied: read it, never change it."""
        return self._data


class _RecordFile(_Header):
    """A record file's top level: the header and, in the one-document layout, its seeds
    (each checked as a :class:`SeedEntry` on its own, so that only one error is built)."""

    runs: list[Any] | None = None
    # the manifest's own check names what is wrong with it
    chunks: Any = None
    seeds: Any = None


def _chunk_entry(data: Any, where: str) -> SeedEntry:
    """A seed's entry read from a chunk, whose rows the chunk reader checked column by
    column: every other field checked as an inline seed's."""
    return SeedEntry.of(data, where, rows_checked=True)
