"""Reading run records: strict parsing, structural checks, and the plan-hash link.

A record is the raw output of a run (every evaluation and rollout row). It is checked before
any number is computed from it, so that a damaged file fails with one line naming what is wrong
instead of a traceback or, worse, a quietly wrong table.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.jsonio import dump_json, parse_json, read_bytes, replace_bytes
from postlab.plan.frozen import LoadedPlan
from postlab.records.chunks import ROW_LIMITS, ChunkedRuns, check_manifest
from postlab.tasks.rows import Row, pairs_of

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

#: The most worker processes a record may name (and so a run may use).
MAX_WORKERS = 4096

BUNDLED_RUN = "teaching-run"
RECORD_NAMES = ("record.json", "record.json.gz")


def bundled_run_dir() -> Path | None:
    """The teaching plan's run folder shipped with the package (record, plan, checkpoints)."""
    path = Path(str(resources.files("postlab") / "data" / BUNDLED_RUN))
    return path if record_in(path).is_file() else None


def bundled_record_path() -> Path | None:
    """The bundled teaching record, or None if this build has none."""
    folder = bundled_run_dir()
    return None if folder is None else record_in(folder)


def record_in(folder: Path) -> Path:
    """A run folder's record: ``record.json``, or its compressed form. A folder holding both
    is refused unless they are the same record (the compressed file's data are the plain
    file's bytes): otherwise which one a reader took would decide what it read."""
    found = [folder / name for name in RECORD_NAMES if (folder / name).is_file()]
    if len(found) == 2:
        plain, packed = (read_bytes(path, "record") for path in found)
        if _gunzip(packed, str(found[1])) != plain:
            raise UserError(f"{folder}: holds both {RECORD_NAMES[0]} and {RECORD_NAMES[1]}, "
                            "and they are different records; remove the one that is not "
                            "the run's")
    return found[0] if found else folder / RECORD_NAMES[0]


GZIP_MAGIC = b"\x1f\x8b"


def record_data(raw: bytes, source: str) -> bytes:
    """A record file's JSON bytes: its bytes must be what its name says, gzip data for a
    name ending .gz and plain JSON otherwise (a copy that kept gzip data under a plain name
    would be hashed as one thing and read as another)."""
    if source.endswith(".gz"):
        return _gunzip(raw, source)
    if raw[:2] == GZIP_MAGIC:
        raise UserError(f"{source}: gzip data under a name without .gz (name it "
                        f"{Path(source).name}.gz, or decompress it)")
    return raw


def _gunzip(raw: bytes, source: str) -> bytes:
    """A .gz record file's data: its bytes must be gzip's."""
    if raw[:2] != GZIP_MAGIC:
        raise UserError(f"{source}: named .gz but not gzip data")
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError) as exc:
        raise UserError(f"{source}: damaged gzip data ({exc})") from None


@dataclass(frozen=True)
class RunFiles:
    """Where a run's files are: given a run folder, a record file, or nothing (bundled)."""

    record: Path
    folder: Path | None  # None when only a record file was named

    @property
    def plan(self) -> Path:
        return self.record.parent / "plan.json"


def locate_run(target: Path | None) -> RunFiles:
    if target is None:
        folder = bundled_run_dir()
        if folder is None:
            raise UserError("no bundled record exists in this build of postlab; "
                            "name a record or run folder")
        return RunFiles(record=record_in(folder), folder=folder)
    if target.is_dir():
        return RunFiles(record=record_in(target), folder=target)
    return RunFiles(record=target, folder=None)


#: Names of stages, splits and arms: the plan's name pattern.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SHA256 = re.compile(r"[0-9a-f]{64}")
#: A checkpoint's file name: plain characters, in the run folder itself.
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,254}")
#: Devices and dtypes a record may name: weights are float32 on CPU or CUDA; a bf16 plan's
#: forward passes compute in bfloat16 (``numerics.dtype``).
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16")
MAX_SEED = 2**62
#: Generous bounds on counts no real run reaches; beyond them a field is damaged, not large.
MAX_COUNT = 10**15
#: A row's answer text and operands (chunks check their columns against the same limits).
MAX_TEXT = ROW_LIMITS["text"]


def _where(where: str, key: str | int) -> str:
    return f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}"


def _object(value: Any, where: str, fields: dict[str, Callable[[Any, str], None]],
            required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object with only the known ``fields``, each checked; ``required`` must be there."""
    if not isinstance(value, dict):
        raise UserError(f"{where}: wrong type {_kind(value)}, expected a JSON object")
    for key in required:
        if key not in value:
            raise UserError(f"{where}: missing field {key!r}")
    for key, item in value.items():
        if key not in fields:
            raise UserError(f"{where}: unknown field {key!r}")
        fields[key](item, _where(where, key))
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _named(value: Any, where: str, each: Callable[[Any, str], None]) -> None:
    """An object keyed by stage, split or arm names."""
    if not isinstance(value, dict):
        raise UserError(f"{where}: wrong type {_kind(value)}, expected a JSON object")
    for key, item in value.items():
        if not NAME.fullmatch(key):
            raise UserError(f"{where}: {key!r} is not a valid name")
        each(item, _where(where, key))


def _list(value: Any, where: str, each: Callable[[Any, str], None], *,
          non_empty: bool = False) -> None:
    if not isinstance(value, list):
        raise UserError(f"{where}: wrong type {_kind(value)}, expected a list")
    if non_empty and not value:
        raise UserError(f"{where}: expected a non-empty list")
    for index, item in enumerate(value):
        each(item, _where(where, index))


def _integer(low: int, high: int) -> Callable[[Any, str], None]:
    def check(value: Any, where: str) -> None:
        if type(value) is not int:
            raise UserError(f"{where}: wrong type {_kind(value)}, expected an integer")
        if not low <= value <= high:
            raise UserError(f"{where}: {value} is outside {low}..{high}")
    return check


def _number(low: float = -math.inf, high: float = math.inf) -> Callable[[Any, str], None]:
    def check(value: Any, where: str) -> None:
        if type(value) not in (int, float):
            raise UserError(f"{where}: wrong type {_kind(value)}, expected a number")
        if not (math.isfinite(value) and low <= value <= high):
            raise UserError(f"{where}: {value!r} is outside {low}..{high}")
    return check


def _text(pattern: re.Pattern[str] | None = None, *,
          limit: int = MAX_TEXT) -> Callable[[Any, str], None]:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, str):
            raise UserError(f"{where}: wrong type {_kind(value)}, expected a string")
        if len(value) > limit or (pattern is not None and not pattern.fullmatch(value)):
            raise UserError(f"{where}: {value!r:.80} is not a valid value here")
    return check


def _choice(options: tuple[Any, ...]) -> Callable[[Any, str], None]:
    def check(value: Any, where: str) -> None:
        if type(value) not in {type(o) for o in options} or value not in options:
            raise UserError(f"{where}: {value!r:.80} is not one of "
                            f"{', '.join(map(str, options))}")
    return check


def _boolean(value: Any, where: str) -> None:
    if type(value) is not bool:
        raise UserError(f"{where}: wrong type {_kind(value)}, expected true or false")


_count = _integer(0, MAX_COUNT)
_operand = _integer(0, ROW_LIMITS["operand"])
_sha = _text(SHA256)
_name = _text(NAME)
_finite = _number()


def _row(row: Any, where: str) -> None:
    if (not isinstance(row, list) or len(row) != 4 or type(row[0]) is not int
            or type(row[1]) is not int or not isinstance(row[2], str)
            or type(row[3]) is not bool):
        raise UserError(f"{where}: expected a row [a, b, text, terminated], got {row!r:.80}")
    typed = Row.of(row)
    _operand(typed.a, where)
    _operand(typed.b, where)
    if len(typed.text) > MAX_TEXT:
        raise UserError(f"{where}: the answer text is longer than any plan allows")


def _rows(rows: Any, where: str) -> None:
    _list(rows, where, _row, non_empty=True)


def _checked_rows(rows: Any, where: str) -> None:
    """Rows a chunk reader has already checked column by column (records.chunks)."""
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{where}: expected a non-empty list of rows")


def _update(value: Any, where: str) -> None:
    _object(value, where, {
        "loss": _finite, "kl": _finite, "entropy": _number(0.0),
        "gradient_norm_before_clip": _number(0.0),
        "ratio_outside_clip": _number(0.0, 1.0),
    }, required=("loss", "kl", "entropy", "gradient_norm_before_clip", "ratio_outside_clip"))


def _parts(rows: Callable[[Any, str], None]) -> tuple[Callable[[Any, str], None], ...]:
    """The checks of a seed's splits and steps, with ``rows`` for each list of rows."""
    def decodings(value: Any, where: str) -> None:
        _object(value, where, {"greedy": rows, "sampled": rows},
                required=("greedy", "sampled"))

    def splits(value: Any, where: str) -> None:
        if not value:
            raise UserError(f"{where}: expected splits")
        _named(value, where, decodings)

    def sampling(value: Any, where: str) -> None:
        _object(value, where, {"drawn": _count, "kept": _count, "dropped": _count,
                               "replaced": _count,
                               "dropped_rows": lambda v, w: _list(v, w, _row)},
                required=("drawn", "kept", "dropped", "replaced", "dropped_rows"))

    def step(value: Any, where: str) -> None:
        _object(value, where, {
            "step": _integer(1, MAX_COUNT), "rows": rows, "zero_variance_groups": _count,
            # empty only where DAPO's dynamic sampling left a step no group with signal; how
            # many a step must have is the plan's to say (run_plan_problems)
            "updates": lambda v, w: _list(v, w, _update), "sampling": sampling,
        }, required=("step", "rows", "zero_variance_groups", "updates"))

    return splits, step


def _checkpoint(value: Any, where: str) -> None:
    _object(value, where, {"file": _text(FILE_NAME), "sha256": _sha,
                           "reload_equal": _boolean},
            required=("file", "sha256", "reload_equal"))


def _compute(value: Any, where: str) -> None:
    _object(value, where, {key: _count for key in COMPUTE_FIELDS}, required=COMPUTE_FIELDS)


COMPUTE_FIELDS = ("completions", "tokens_generated", "gradient_steps", "examples_seen")


def _losses(value: Any, where: str) -> None:
    _list(value, where, _finite)


def _step_digests(value: Any, where: str) -> None:
    _object(value, where, {"rows": _sha, "statistics": _sha, "sampling": _sha},
            required=("rows", "statistics"))


def _digests(value: Any, where: str) -> None:
    _object(value, where, {
        "sft_loss": _sha, "arm_sft_loss": _sha, "compute": _sha,
        "evaluations": lambda v, w: _named(v, w, lambda s, ws: _named(s, ws, _sha)),
        "training": lambda v, w: _named(v, w, lambda h, wh: _list(h, wh, _step_digests)),
    }, required=("sft_loss", "evaluations", "training"))


def _run_check(rows: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
    splits, step = _parts(rows)

    def run(value: Any, where: str) -> None:
        _object(value, where, {
            "seed": _integer(0, MAX_SEED),
            "sft_loss": _losses,
            "evaluations": lambda v, w: _named(v, w, splits),
            "training": lambda v, w: _named(v, w, lambda h, wh: _list(h, wh, step)),
            "checkpoints": lambda v, w: _named(v, w, _checkpoint),
            "arm_sft_loss": lambda v, w: _named(v, w, _losses),
            "compute": lambda v, w: _named(v, w, _compute),
            "digests": _digests,
        }, required=("seed", "evaluations"))
    return run


#: A seed's entry checked whole; and one read from a chunk, whose rows the reader checked.
_run = _run_check(_rows)
_chunk_run = _run_check(_checked_rows)


def _numerics(value: Any, where: str) -> None:
    from postlab.machine.numerics import CODE_PATHS, NATIVE, PIN_VARIABLES

    plain = _text(limit=200)
    _object(value, where, {
        "code_path": _choice((NATIVE, *CODE_PATHS.names())),
        "pinned": lambda v, w: _object(v, w, {k: plain for k in PIN_VARIABLES}),
        "cpu_capability": plain, "cpu_model": plain, "machine": plain,
        "cpu_supports": lambda v, w: _list(v, w, _choice(tuple(CODE_PATHS.names()))),
        "blas": plain, "blas_code_path": plain, "onednn_isa": plain,
        "threads": _integer(1, 256), "deterministic": _boolean,
        "device": _choice(DEVICES), "dtype": _choice(DTYPES),
        "cuda": _cuda,
    }, required=NUMERICS_FIELDS)
    if value["device"] == "cuda" and "cuda" not in value:
        raise UserError(f"{where}: device cuda without its 'cuda' settings")
    if value["device"] != "cuda" and "cuda" in value:
        raise UserError(f"{where}: 'cuda' settings on device {value['device']}")


def _cuda(value: Any, where: str) -> None:
    """The GPU, its libraries and the determinism settings a CUDA run was made with."""
    from postlab.machine.device import CUDA_FIELDS

    plain = _text(limit=200)
    flags = ("cudnn_deterministic", "cudnn_benchmark", "tf32_matmul", "tf32_cudnn")
    _object(value, where, {key: _boolean if key in flags else plain for key in CUDA_FIELDS},
            required=tuple(CUDA_FIELDS))


NUMERICS_FIELDS = ("code_path", "pinned", "cpu_capability", "cpu_model", "machine",
                   "cpu_supports", "blas", "blas_code_path", "onednn_isa", "threads",
                   "deterministic", "device", "dtype")

#: Provenance fields: the reference program writes the first group, postlab all of them.
REFERENCE_FIELDS = ("plan_sha256", "source_sha256", "python", "torch", "platform", "device",
                    "dtype", "runs", "parameters", "wall_seconds")
POSTLAB_FIELDS = (*REFERENCE_FIELDS, "postlab_version", "threads", "workers", "numerics")


def check_record(record: Any, source: str) -> None:
    """Check every field's type and range and refuse unknown ones; raise UserError naming the
    first problem. Completeness (what a verified record must hold) is ``verify``'s concern."""
    plain = _text(limit=200)
    _object(record, source, {
        "plan_sha256": _sha,
        "engine": _engine_name,
        "tokenizer_sha256": _sha,
        "source_sha256": lambda v, w: _object(v, w, dict.fromkeys(v, _sha)
                                              if isinstance(v, dict) and all(
                                                  FILE_PATH.fullmatch(k) for k in v)
                                              else {}),
        "python": plain, "torch": plain, "platform": plain, "postlab_version": plain,
        "device": _choice(DEVICES), "dtype": _choice(DTYPES),
        "threads": _integer(1, 256), "workers": _integer(1, MAX_WORKERS),
        "parameters": _integer(1, MAX_COUNT),
        "wall_seconds": _number(0.0, 10.0**9),
        "numerics": _numerics,
        "registration": _registration,
        "runs": lambda v, w: _list(v, w, _run),
        "chunks": lambda v, w: None, "seeds": lambda v, w: None,
    }, required=("plan_sha256",))
    layouts = [key for key in ("runs", "chunks") if key in record]
    if not layouts:
        raise UserError(f"{source}: missing field 'runs'")
    if len(layouts) == 2:
        raise UserError(f"{source}: mixes two layouts: seeds inline ('runs') and in chunk "
                        "files ('chunks'); a record has one or the other")
    if "chunks" in record:
        check_manifest(record["chunks"], record.get("seeds"), source)
    elif "seeds" in record:
        raise UserError(f"{source}: unknown field 'seeds' (only a chunked record lists them)")


#: A time as registrations and records write it (UTC, to the second).
UTC_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def _registration(value: Any, where: str) -> None:
    """The run folder's registration named by hash, with when it was made and when training
    began (``postlab.plan.registration``); the file itself is checked by reading it."""
    time = _text(UTC_TIME, limit=20)
    _object(value, where, {"sha256": _sha, "hypotheses_sha256": _sha, "registered_at": time,
                           "training_started_at": time},
            required=("sha256", "hypotheses_sha256", "registered_at", "training_started_at"))


def _engine_name(value: Any, where: str) -> None:
    """An engine's name (a record made by the default engine names none, so records written
    before engines existed keep their form). Whether this postlab has that engine is asked
    where one is needed, to re-evaluate or retrain."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise UserError(f"{where}: {value!r:.80} is not an engine name")


#: A source file named in ``source_sha256``: a relative path of plain characters to a .py file.
FILE_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,251}\.py")


def summary_bytes(summary: list[dict[str, Any]]) -> bytes:
    """A summary file's exact bytes (the reference's layout: ``json.dumps(summary,
    indent=2)`` and a newline); ``verify`` compares bytes, so a value changed only in type
    (63 to 63.0, 0.0 to -0.0) is a difference too."""
    return b"".join(summary_piece(entry, index) for index, entry in enumerate(summary)
                    ) + summary_closing(len(summary))


def summary_piece(entry: dict[str, Any], index: int) -> bytes:
    """The bytes entry ``index`` of a summary adds to its file (its separator first), so a
    summary can be written, or compared, an entry at a time."""
    text = json.dumps(entry, indent=2).replace("\n", "\n  ")
    return (("[\n  " if index == 0 else ",\n  ") + text).encode()


def summary_closing(count: int) -> bytes:
    """The bytes that end a summary file of ``count`` entries."""
    return b"\n]\n" if count else b"[]\n"


def decode_record_bytes(raw: bytes, source: str, folder: Path | None = None) -> dict[str, Any]:
    """A record from its file's bytes, checked. A chunked record's ``runs`` become a lazy
    sequence over the chunk files in ``folder`` (the record file's folder)."""
    record = parse_json(record_data(raw, source), source)
    check_record(record, source)
    if "chunks" in record:
        if folder is None:
            raise UserError(f"{source}: a chunked record is read from its run folder")
        attach_runs(record, folder)
    return record


def load_record(path: Path) -> dict[str, Any]:
    return decode_record_bytes(read_bytes(path, "record"), str(path), path.parent)


def attach_runs(record: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A chunked record's header with its seeds' entries readable as ``record["runs"]``."""
    record["runs"] = ChunkedRuns(folder, record["chunks"], record["seeds"], _chunk_run,
                                 str(folder / RECORD_NAMES[0]))
    return record


def seeds_of(record: dict[str, Any]) -> list[int]:
    """The record's seeds in order, without reading a chunked record's rows."""
    runs = record["runs"]
    return list(runs.seeds) if isinstance(runs, ChunkedRuns) else [r["seed"] for r in runs]


def one_document(record: dict[str, Any]) -> dict[str, Any]:
    """A record in the one-document layout earlier versions wrote (and the reference reads):
    every seed inline as ``runs``, where a chunked record has its manifest."""
    document: dict[str, Any] = {}
    for key, value in record.items():
        if key == "chunks":
            document["runs"] = list(record["runs"])
        elif key not in ("seeds", "runs"):
            document[key] = value
    if "runs" not in document:
        document["runs"] = list(record["runs"])
    return document


def is_chunked(record: dict[str, Any]) -> bool:
    return "chunks" in record


def header_of(record: dict[str, Any]) -> dict[str, Any]:
    """What ``record.json`` holds of a chunked record: everything but the seeds' entries."""
    return {key: value for key, value in record.items() if key != "runs"}


def check_plan_link(record: dict[str, Any], plan: LoadedPlan, source: str) -> None:
    """Refuse to report a record against a plan other than the one it was trained under."""
    if record["plan_sha256"] != plan.sha256:
        raise UserError(f"{source}: record was made under plan sha256 {record['plan_sha256']}, "
                        f"but {plan.path} has sha256 {plan.sha256}")


def reading_problems(record: dict[str, Any], plan: Plan) -> list[str]:
    """Where a record cannot be read under its plan: stages, splits, arms or checkpoint
    entries the plan does not name, or sampled rows that do not form groups of
    ``eval_samples`` answers to one question. A record may hold fewer parts than the plan
    (a hand-made or partial record is still readable); ``verify`` asks for all of them."""
    return [p for run in record["runs"] for p in run_reading_problems(run, plan)]


def run_reading_problems(run: dict[str, Any], plan: Plan) -> list[str]:
    """:func:`reading_problems` of one seed."""
    from postlab.plan.arms import arm_names, rl_contracts
    from postlab.records.metrics import question_groups

    stages = ["initial", *arm_names(plan)]
    rl_arms = set(rl_contracts(plan))
    problems = []
    seed = run["seed"]
    for part, names, known in (("stage", run["evaluations"], stages),
                               ("checkpoint entry", run.get("checkpoints", {}), stages),
                               ("compute entry", run.get("compute", {}), stages),
                               ("RL arm", run.get("training", {}), rl_arms)):
        problems += [f"seed {seed}: {part} {name!r} is not in the plan"
                     for name in names if name not in known]
    for stage, splits in run["evaluations"].items():
        for split, decoded in splits.items():
            where = f"seed {seed}, stage {stage}, split {split}"
            if split not in plan.split:
                problems.append(f"{where}: the plan has no such split")
                continue
            try:
                question_groups(decoded["sampled"], plan.eval_samples)
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
    return problems


def run_missing_parts(run: dict[str, Any], stages: list[str] | None) -> list[str]:
    """What one seed's entry of a postlab record lacks of the parts every one carries
    (``stages``: the plan's; None: the entry's own), and checkpoint entries that name
    another file than the stage's or a stage the plan does not have."""
    from postlab.policies.checkpoint import checkpoint_name

    seed = run["seed"]
    missing = [f"seed {seed}: {key}" for key in
               ("sft_loss", "training", "checkpoints", "compute", "digests") if key not in run]
    checkpoints = run.get("checkpoints", {})
    for stage in stages or list(run["evaluations"]):
        info = checkpoints.get(stage)
        if info is None:
            missing.append(f"seed {seed}: checkpoint entry of stage {stage}")
        elif info["file"] != checkpoint_name(seed, stage):
            missing.append(f"seed {seed}, stage {stage}: checkpoint file {info['file']!r} "
                           f"is not {checkpoint_name(seed, stage)!r}")
    for stage in checkpoints:
        if stages is not None and stage not in stages:
            missing.append(f"seed {seed}: checkpoint entry of unknown stage {stage}")
    return missing


def changed_parts(record: dict[str, Any]) -> list[str]:
    """Parts of a postlab record that no longer match the digests taken when they were made
    (none for a record that carries no digests, such as the reference's)."""
    return [p for run in record["runs"] for p in run_changed_parts(run)]


def run_changed_parts(run: dict[str, Any]) -> list[str]:
    """:func:`changed_parts` of one seed."""
    from postlab.records.integrity import compare_digests

    return compare_digests(run, run["digests"]) if "digests" in run else []


def each_seed(record: dict[str, Any], problems_of: Callable[[dict[str, Any]], list[str]],
              fail: Callable[[list[str]], None]) -> None:
    """Check every seed of a record, ``fail`` given the problems found (it raises).

    A record in memory is checked at once, all seeds together. A chunked record's seeds are
    checked as the reader's own walk first reaches each, before the walk sees it, so a
    reader's checks cost no walk of their own; such a reader must walk every seed before it
    writes or prints anything (each reader computes first and publishes last).
    """
    runs = record["runs"]
    if isinstance(runs, ChunkedRuns):
        runs.on_each(functools.partial(_fail_on, problems_of, fail))
        return
    problems = [p for run in runs for p in problems_of(run)]
    if problems:
        fail(problems)


def settle(record: dict[str, Any], seeds: list[int] | None = None) -> None:
    """Read the given seeds (None: all) so that their :func:`each_seed` checks run now, for a
    reader that prints as it goes."""
    wanted = None if seeds is None else set(seeds)
    for index, seed in enumerate(seeds_of(record)):
        if wanted is None or seed in wanted:
            record["runs"][index]


def _fail_on(problems_of: Callable[[dict[str, Any]], list[str]],
             fail: Callable[[list[str]], None], run: dict[str, Any]) -> None:
    problems = problems_of(run)
    if problems:
        fail(problems)


def _sampling_problem(step: dict[str, Any], plan: Plan) -> bool:
    """A step's dynamic-sampling record is there exactly when the plan samples dynamically,
    and its counts agree with its rows: groups kept fill the step, every group drawn beyond
    them was dropped (its rows kept), within the plan's budget."""
    dynamic = plan.dynamic_sampling
    if ("sampling" in step) != (dynamic is not None):
        return True
    if dynamic is None:
        return False
    sampling, size = step["sampling"], plan.group_size
    return (sampling["kept"] * size != len(step["rows"])
            or sampling["drawn"] != sampling["kept"] + sampling["dropped"]
            or len(sampling["dropped_rows"]) != sampling["dropped"] * size
            or not sampling["replaced"] <= sampling["dropped"] <= dynamic.max_extra_groups)


def _updates_expected(step: dict[str, Any], plan: Plan) -> int:
    """A step's updates: the plan's, or none where dynamic sampling drops the groups whose
    rewards are all equal from the update and every group of the step was such a group."""
    dynamic = plan.dynamic_sampling
    if dynamic is not None and dynamic.constant_groups == "drop" and \
            step["zero_variance_groups"] * plan.group_size == len(step["rows"]):
        return 0
    return plan.updates_per_rollout


def record_plan_problems(record: dict[str, Any], plan: Plan) -> list[str]:
    """Where a (structurally valid) record does not fit its plan: seeds, stages, splits,
    questions, samples per question, RL steps, rows per step, groups and updates."""
    return [*seed_list_problems(record, plan),
            *(p for run in record["runs"] for p in run_plan_problems(run, plan))]


def seed_list_problems(record: dict[str, Any], plan: Plan) -> list[str]:
    """The record's seeds against the plan's (without reading a chunked record's rows)."""
    seeds = seeds_of(record)
    return [] if seeds == plan.seeds else [f"seeds {seeds}, plan has {plan.seeds}"]


def run_plan_problems(run: dict[str, Any], plan: Plan) -> list[str]:
    """:func:`record_plan_problems` of one seed, less the seed list."""
    from postlab.plan.arms import arm_names, arm_specs

    problems: list[str] = []
    stages = ["initial", *arm_names(plan)]
    rl_arms = [arm.name for arm in arm_specs(plan) if arm.is_rl]
    per_step = plan.prompts_per_step * plan.group_size
    seed = run["seed"]
    if len(run.get("sft_loss", [])) != plan.sft_steps:
        problems.append(f"seed {seed}: {len(run.get('sft_loss', []))} SFT losses, plan "
                        f"has {plan.sft_steps} steps")
    if list(run["evaluations"]) != stages:
        problems.append(f"seed {seed}: stages {list(run['evaluations'])}, expected {stages}")
    for stage, splits in run["evaluations"].items():
        if list(splits) != list(plan.split):
            problems.append(f"seed {seed}, stage {stage}: splits {list(splits)}")
            continue
        for split, pairs in plan.split.items():
            greedy = pairs_of(splits[split]["greedy"])
            wanted = [(a, b) for a, b in pairs]
            sampled = pairs_of(splits[split]["sampled"])
            expected = [p for p in wanted for _ in range(plan.eval_samples)]
            if greedy != wanted or sampled != expected:
                problems.append(f"seed {seed}, stage {stage}, split {split}: questions or "
                                f"samples per question differ from the plan")
    if "compute" in run and list(run["compute"]) != stages:
        problems.append(f"seed {seed}: compute for stages {list(run['compute'])}, "
                        f"expected {stages}")
    sft_only = {arm.name: arm.own_sft_steps(plan) for arm in arm_specs(plan)
                if not arm.is_rl}
    extra_sft = run.get("arm_sft_loss", {})
    if list(extra_sft) != list(sft_only) or any(
            len(extra_sft[name]) != steps for name, steps in sft_only.items()):
        problems.append(f"seed {seed}: SFT-only arms' losses "
                        f"{ {k: len(v) for k, v in extra_sft.items()} }, plan has "
                        f"{sft_only}")
    training = run.get("training", {})
    if list(training) != rl_arms:
        problems.append(f"seed {seed}: RL arms {list(training)}, plan has {rl_arms}")
        return problems
    for arm, history in training.items():
        if [step.get("step") for step in history] != list(range(1, plan.rl_steps + 1)):
            problems.append(f"seed {seed}, arm {arm}: {len(history)} RL steps, plan has "
                            f"{plan.rl_steps}")
            continue
        for step in history:
            rows = step["rows"]
            questions = pairs_of(rows)
            bad_rows = len(rows) != per_step or _sampling_problem(step, plan)
            bad_groups = any(len(set(questions[i:i + plan.group_size])) != 1
                             for i in range(0, len(questions), plan.group_size))
            if bad_rows or bad_groups or len(step["updates"]) != _updates_expected(step, plan):
                problems.append(f"seed {seed}, arm {arm}, step {step['step']}: rows, "
                                "groups or updates do not fit the plan")
                break
    return problems


#: A run folder's subfolder holding finished tasks' results until their seed is recorded, and
#: the settings they were computed under (so a resume before the first recorded seed can pin
#: the same ones, and refuses others).
KEPT_DIR = "tasks"
KEPT_SETTINGS = "settings.json"


def kept_result_path(out_dir: Path, seed: int, stage: str) -> Path:
    """Where a finished (seed, stage) result waits for its seed to be recorded."""
    return out_dir / KEPT_DIR / f"seed-{seed}-{stage}.json"


def keep_results(results: dict[tuple[str, int, str], dict[str, Any]]) -> None:
    """Write finished stages' results, (run folder, seed, stage) -> result, into their run
    folders' kept results, so an interrupted run resumes without training them again."""
    for (out_dir, seed, stage), result in results.items():
        replace_bytes(kept_result_path(Path(out_dir), seed, stage), dump_json(result))


def resume_settings(out_dir: Path) -> dict[str, Any] | None:
    """What a resumed run must be computed under: its record (``numerics``, ``device``) if it
    has one, else the settings its kept task results were computed under, else None. Reads
    no torch, so the command line can pin a code path from it."""
    record_path = out_dir / "record.json"
    if record_path.is_file():
        return load_record(record_path)
    kept = out_dir / KEPT_DIR / KEPT_SETTINGS
    if kept.is_file():
        data = parse_json(read_bytes(kept, "kept settings"), str(kept))
        if isinstance(data, dict) and isinstance(data.get("numerics"), dict):
            return data
        raise UserError(f"{kept}: malformed; remove the folder {kept.parent} to train its "
                        "tasks again")
    return None
