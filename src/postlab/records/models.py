"""The run record as typed, frozen models: every field's type and range, unknown fields
refused, checked by one validator (pydantic) before any number is computed from a record.

A damaged file then fails with one line naming the first field that is wrong (its path in
the record, as ``record.json.runs[0].seed: wrong type str, expected an integer``) instead of
a traceback or, worse, a quietly wrong table. Completeness (what a verified record must
hold) and fit to the plan are checked elsewhere (``verify``, :mod:`.conformance`).

Rows ``[a, b, text, terminated]`` read from a Parquet chunk were checked column by column as
the chunk was decoded (:mod:`.chunk_codec`); a seed read from a chunk is validated with
``context={"rows_checked": True}``, which checks its rows' lists but not each row again.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from postlab.errors import UserError
from postlab.records.chunk_codec import ROW_LIMITS

#: The most worker processes a record may name (and so a run may use).
MAX_WORKERS = 4096
MAX_SEED = 2**62
#: Generous bounds on counts no real run reaches; beyond them a field is damaged, not large.
MAX_COUNT = 10**15
#: A row's answer text and operands (chunks check their columns against the same limits).
MAX_TEXT = ROW_LIMITS["text"]

#: Names of stages, splits and arms: the plan's name pattern.
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
SHA256 = r"^[0-9a-f]{64}$"
#: A checkpoint's file name: plain characters, in the run folder itself.
FILE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,254}$"
#: A source file named in ``source_sha256``: a relative path of plain characters to a .py file.
FILE_PATH = r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,251}\.py$"
#: A time as registrations and records write it (UTC, to the second).
UTC_TIME = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"

Count = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
Operand = Annotated[StrictInt, Field(ge=0, le=ROW_LIMITS["operand"])]
Sha = Annotated[StrictStr, Field(pattern=SHA256)]
Name = Annotated[StrictStr, Field(pattern=NAME)]
Plain = Annotated[StrictStr, Field(max_length=200)]
Time = Annotated[StrictStr, Field(pattern=UTC_TIME)]


def _number(value: Any) -> float:
    """A finite JSON number (an integer or a float, not a boolean), kept as written."""
    if type(value) not in (int, float):
        raise ValueError(f"wrong type {_kind(value)}, expected a number")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        finite = False
    if not finite:
        raise ValueError(f"{value!r} is not a finite number")
    return value


def _between(low: float, high: float) -> AfterValidator:
    def check(value: float) -> float:
        if not low <= value <= high:
            raise ValueError(f"{value!r} is outside {low}..{high}")
        return value
    return AfterValidator(check)


Finite = Annotated[Any, PlainValidator(_number)]
NonNegative = Annotated[Any, PlainValidator(_number), _between(0.0, math.inf)]
Share = Annotated[Any, PlainValidator(_number), _between(0.0, 1.0)]

def _json_list(value: Any) -> Any:
    """A row as JSON writes it: a list (a tuple would pass the tuple type, and no record
    parsed from a file holds one)."""
    if not isinstance(value, list):
        raise ValueError("not a list")
    return value


#: A row ``[a, b, text, terminated]``.
RowItem = Annotated[
    tuple[Operand, Operand, Annotated[StrictStr, Field(max_length=MAX_TEXT)], StrictBool],
    BeforeValidator(_json_list)]
_ROWS = TypeAdapter(list[RowItem])


def _rows(value: Any, info: ValidationInfo, *, empty: bool = False) -> Any:
    """A non-empty list of rows (``empty``: or none), each checked unless a chunk reader
    checked them already."""
    if not isinstance(value, list) or not (value or empty):
        raise ValueError("expected a non-empty list of rows")
    if not (info.context or {}).get("rows_checked"):
        try:
            _ROWS.validate_python(value)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            index = first["loc"][0]
            if first["type"] in ("greater_than_equal", "less_than_equal"):
                problem = f"operand {first['input']!r} is outside 0..{ROW_LIMITS['operand']}"
            elif first["type"] == "string_too_long":
                problem = "the answer text is longer than any plan allows"
            else:
                problem = f"expected a row [a, b, text, terminated], got {value[index]!r:.80}"
            raise PydanticCustomError("record_part", "{problem}",
                                      {"part": f"[{index}]", "problem": problem}) from None
    return value


Rows = Annotated[Any, AfterValidator(_rows)]
#: Rows a step's dynamic sampling dropped: checked as rows, and there may be none.
DroppedRows = Annotated[Any, AfterValidator(lambda v, info: _rows(v, info, empty=True))]


class Strict(BaseModel):
    """Unknown fields refused, and so is an explicit null (postlab leaves a field out where
    it has no value); frozen once built."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_null(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, value in data.items():
                if value is None:
                    raise PydanticCustomError("record_part", "wrong type null",
                                              {"part": f".{key}", "problem": "wrong type null"})
        return data


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
                    "problem": f"wrong type {_kind(item)}, expected true or false"})
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


class Record(Strict):
    """A record's header and, in the one-document layout, its seeds (``runs``); a chunked
    record lists its chunk files and seeds instead (the chunks are read and checked seed by
    seed, :mod:`.chunks`)."""

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
    wall_seconds: Annotated[Any, PlainValidator(_number), _between(0.0, 10.0**9)] | None = None
    numerics: Numerics | None = None
    registration: Registration | None = None
    #: each a :class:`SeedEntry`, checked one at a time by :func:`check_record` (a model tree
    #: of every seed at once would hold about 1.4 MB per seed)
    runs: list[Any] | None = None
    chunks: Any = None
    seeds: Any = None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


_EXPECTED = {"int": "an integer", "string": "a string", "bool": "true or false",
             "dict": "a JSON object", "model": "a JSON object",
             "model_attributes": "a JSON object", "list": "a list"}


def _place(where: str, loc: tuple[Any, ...]) -> str:
    for key in loc:
        where = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}"
    return where


def _one_line(error: dict[str, Any], where: str) -> str:
    """A pydantic error as the record's first problem, named by its path."""
    kind, loc, value = error["type"], tuple(error["loc"]), error.get("input")
    loc = tuple(key for key in loc if not (isinstance(key, str) and key.startswith(
        ("function-", "json-or-python", "is-instance", "tagged-union"))))
    if loc and loc[-1] == "[key]":
        what = "source file path" if "source_sha256" in loc else "name"
        return f"{_place(where, loc[:-2])}: {loc[-2]!r} is not a valid {what}"
    if kind == "missing":
        return f"{_place(where, loc[:-1])}: missing field {loc[-1]!r}"
    if kind == "extra_forbidden":
        return f"{_place(where, loc[:-1])}: unknown field {loc[-1]!r}"
    place = _place(where, loc)
    if kind.endswith("_type"):
        expected = _EXPECTED.get(kind.removesuffix("_type"), "another type")
        return f"{place}: wrong type {_kind(value)}, expected {expected}"
    if kind in ("greater_than_equal", "less_than_equal"):
        bound = error.get("ctx", {})
        limit = f"at least {bound['ge']}" if "ge" in bound else f"at most {bound.get('le')}"
        return f"{place}: {value!r:.80} is outside the range a record allows ({limit})"
    if kind == "record_part":  # a row of a list of rows, a field of an object
        context = error["ctx"]
        return f"{place}{context['part']}: {context['problem']}"
    if kind == "value_error":
        return f"{place}: {str(error['msg']).removeprefix('Value error, ')}"
    return f"{place}: {value!r:.80} is not a valid value here"


def validated(model: type[BaseModel], value: Any, source: str, *,
              rows_checked: bool = False) -> BaseModel:
    """``value`` as ``model``, or a UserError naming its first problem in one line."""
    try:
        return model.model_validate(value, context={"rows_checked": rows_checked})
    except ValidationError as exc:
        raise UserError(_one_line(exc.errors(include_url=False)[0], source)) from None


def check_record(record: Any, source: str) -> None:
    """Check every field's type and range and refuse unknown ones (:class:`Record`), and that
    the record has one layout; raise UserError naming the first problem. Completeness (what a
    verified record must hold) is ``verify``'s concern."""
    from postlab.records.chunks import check_manifest

    validated(Record, record, source)
    for index, run in enumerate(record.get("runs") or ()):
        validated(SeedEntry, run, f"{source}.runs[{index}]")
    if "runs" not in record and "chunks" not in record:
        # the reference's records and postlab's first ones are of the one-document layout
        raise UserError(f"{source}: missing field 'runs'")
    if "runs" in record and "chunks" in record:
        raise UserError(f"{source}: mixes two layouts: seeds inline ('runs') and in chunk "
                        "files ('chunks'); a record has one or the other")
    if "chunks" in record:
        check_manifest(record["chunks"], record.get("seeds"), source)
    elif "seeds" in record:
        raise UserError(f"{source}: unknown field 'seeds' (only a chunked record lists them)")


def check_chunk_run(run: Any, where: str) -> None:
    """A seed's entry read from a chunk, whose rows the chunk reader checked column by
    column: every other field checked as :func:`check_record` checks an inline seed."""
    validated(SeedEntry, run, where, rows_checked=True)
