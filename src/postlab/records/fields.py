"""The field types of the record's models and their one-line errors: counts, hashes, names,
finite numbers kept as written, blocks of rows typed as read, and how a pydantic error becomes
the record's first problem named by its path (``record.json.runs[0].seed: ...``).

Kept apart from the models (:mod:`.models`) so that what a field may hold reads as one table.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

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
    model_validator,
)
from pydantic_core import PydanticCustomError

from postlab.errors import UserError
from postlab.records.chunk_codec import ROW_LIMITS
from postlab.tasks.rows import RowList

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


def number(value: Any) -> float:
    """A finite JSON number (an integer or a float, not a boolean), kept as written."""
    if type(value) not in (int, float):
        raise ValueError(f"wrong type {kind_of(value)}, expected a number")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        finite = False
    if not finite:
        raise ValueError(f"{value!r} is not a finite number")
    return value


def between(low: float, high: float) -> AfterValidator:
    def check(value: float) -> float:
        if not low <= value <= high:
            raise ValueError(f"{value!r} is outside {low}..{high}")
        return value
    return AfterValidator(check)


Finite = Annotated[Any, PlainValidator(number)]
NonNegative = Annotated[Any, PlainValidator(number), between(0.0, math.inf)]
Share = Annotated[Any, PlainValidator(number), between(0.0, 1.0)]

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


def _rows(value: Any, info: ValidationInfo, *, empty: bool = False) -> RowList:
    """A non-empty list of rows (``empty``: or none), each checked unless a chunk reader
    checked them already, typed as it is read."""
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
    return RowList(value)


Rows = Annotated[RowList, PlainValidator(lambda v, info: _rows(v, info))]
#: Rows a step's dynamic sampling dropped: checked as rows, and there may be none.
DroppedRows = Annotated[RowList, PlainValidator(lambda v, info: _rows(v, info, empty=True))]


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


def kind_of(value: Any) -> str:
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
        return f"{place}: wrong type {kind_of(value)}, expected {expected}"
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
