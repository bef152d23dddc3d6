"""``postlab verify``: re-check everything a record claims, one line per check.

Checks are computed into plain results first and rendered after, so tests read the results.
A failed check means the record, plan or checkpoints do not say what they claim, or that a
part a postlab record must carry is missing: verification fails closed, so removing the
evidence (digests, checkpoint entries, the summary) never turns a failure into a pass. A
warning means something differs that can legitimately change bits (another torch, another
code path) or that a check needs input only the user can give (the expected fingerprint).
"""

from __future__ import annotations

import functools
import hashlib
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from postlab.engines.registry import engine_for
from postlab.errors import UserError
from postlab.jsonio import parse_json, read_bytes
from postlab.machine import numerics
from postlab.plan.arms import arm_names, plan_contracts
from postlab.plan.frozen import LoadedPlan, load_plan, teaching_plan_loaded
from postlab.policies import build_policy, place_policy, policy_kind
from postlab.policies.checkpoint import (
    CheckpointError,
    check_checkpoint_bytes,
    check_kind,
    load_checkpoint,
)
from postlab.policies.restore import policy_from_checkpoint
from postlab.records.chunks import ChunkedRuns, chunk_problems
from postlab.records.columns import not_proven, read_ahead, row_tables, seed_evaluations
from postlab.records.fingerprint import (
    named_checkpoints,
    read_fingerprints,
    results_fingerprint,
    run_fingerprint,
    seed_results_sha256,
)
from postlab.records.integrity import compare_digests
from postlab.records.layout import layout_problems, link_problems
from postlab.records.metrics import run_summary_for, table_summary
from postlab.records.opened import made_by_postlab
from postlab.records.record import (
    POSTLAB_FIELDS,
    RunFiles,
    run_missing_parts,
    run_plan_problems,
    run_reading_problems,
    seed_list_problems,
    summary_closing,
    summary_piece,
)
from postlab.tasks.registry import answer_function

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

Status = Literal["pass", "fail", "warn", "skip"]


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    status: Status
    detail: str


def _plan_for(files: RunFiles, record: dict[str, Any]) -> tuple[LoadedPlan | None, Check]:
    if files.plan.is_file():
        plan = load_plan(files.plan)
        where = str(files.plan)
    else:
        plan = teaching_plan_loaded()
        where = "the teaching plan (no plan.json beside the record)"
    if plan.sha256 == record["plan_sha256"]:
        return plan, Check(name="plan", status="pass", detail=f"{where} has the recorded "
                                                              f"sha256 {plan.sha256[:16]}…")
    return None, Check(name="plan", status="fail",
                       detail=f"{where} has sha256 {plan.sha256}, the record names "
                              f"{record['plan_sha256']}")


def _first_row_difference(recorded: dict, fresh: dict) -> str:
    for split, decoded in recorded.items():
        for decoding, rows in decoded.items():
            new = fresh.get(split, {}).get(decoding, [])
            for index, (a, b) in enumerate(zip(rows, new, strict=False)):
                if a != b:
                    return f"split {split}, {decoding} row {index}: recorded {a}, now {b}"
            if len(rows) != len(new):
                return f"split {split}, {decoding}: {len(rows)} rows recorded, {len(new)} now"
    return "rows differ"


def device_here(record: dict[str, Any]) -> str:
    """Re-evaluate on the record's device where this machine has it, else on CPU (and the
    environment check then names the difference)."""
    from postlab.machine.device import cuda_available

    return "cuda" if record.get("device") == "cuda" and cuda_available() else "cpu"


#: Checkpoints re-evaluated as one computation where the record's engine can (the ensemble
#: engine evaluates members together): each one's rows and weights are held until then, a
#: teaching seed's three checkpoints about 1 MB with their recorded rows.
EVALUATION_BATCH = 48


@dataclass(frozen=True)
class _Loaded:
    """A checkpoint hashed and loaded, waiting for its re-evaluation."""

    seed: int
    stage: str
    model: Any
    recorded: dict[str, Any] | None
    reload_equal: bool


def _seed_checkpoints(run: dict[str, Any], plan: Plan | None, folder: Path,
                     device: str, seen: _Walk, waiting: list[_Loaded], *,
                     quick: bool = False,
                     recorded: Callable[[str], dict[str, Any] | None] | None = None) -> None:
    """One seed's checkpoints: each hashed before loading, then loaded into ``waiting`` for
    re-evaluation (``quick``: hashed only). ``run`` needs its seed and checkpoints; its
    evaluations are what re-evaluation must give, unless ``recorded`` gives a stage's."""
    for stage, info in run.get("checkpoints", {}).items():
        seen.checkpoints += 1
        path = folder / info["file"]
        try:
            if quick:  # hashed, not deserialised
                check_checkpoint_bytes(read_bytes(path, "checkpoint"), info["sha256"], path)
                continue
            payload = load_checkpoint(path, info["sha256"])
        except UserError as exc:  # CheckpointError among them
            seen.hash_problems.append(str(exc))
            continue
        if plan is None:
            continue
        try:
            check_kind(payload, policy_kind(plan), f"seed {run['seed']}, stage {stage}")
        except CheckpointError as exc:
            seen.eval_problems.append(str(exc))
            continue
        try:
            model = place_policy(policy_from_checkpoint(
                plan, payload, run["seed"], folder, run.get("checkpoints", {})), device)
        except CheckpointError as exc:
            seen.eval_problems.append(f"seed {run['seed']}, stage {stage}: {exc}")
            continue
        except (RuntimeError, KeyError) as exc:
            seen.eval_problems.append(f"seed {run['seed']}, stage {stage}: weights do not "
                                      f"fit the plan's model ({str(exc).splitlines()[0]})")
            continue
        waiting.append(_Loaded(seed=run["seed"], stage=stage, model=model,
                               recorded=run["evaluations"].get(stage) if recorded is None
                               else recorded(stage),
                               reload_equal=info.get("reload_equal", False)))


def _reevaluate(waiting: list[_Loaded], plan: Plan, device: str, engine: Any,
                seen: _Walk) -> None:
    """Re-evaluate the loaded checkpoints, together where the engine can, and compare each
    one's rows with the recorded ones. Weights that cannot be evaluated (an overflow to inf,
    say) fail the computation they are in: then each is evaluated alone, so the failure is
    that checkpoint's, named, and not a crash."""
    if not waiting:
        return
    try:
        fresh = engine.evaluate_many([item.model for item in waiting], plan,
                                     [item.seed for item in waiting], device)
    except RuntimeError as exc:
        if len(waiting) > 1:
            for item in waiting:
                _reevaluate([item], plan, device, engine, seen)
            return
        seen.eval_problems.append(f"seed {waiting[0].seed}, stage {waiting[0].stage}: cannot "
                                  f"be evaluated ({str(exc).splitlines()[0][:120]})")
        return
    for item, rows in zip(waiting, fresh, strict=True):
        where = f"seed {item.seed}, stage {item.stage}"
        seen.reloaded += 1
        if rows != item.recorded:
            seen.eval_problems.append(f"{where}: "
                                      + _first_row_difference(item.recorded or {}, rows))
        if not item.reload_equal:
            seen.eval_problems.append(f"{where}: recorded reload_equal is not true")


#: What ``verify --quick`` says in place of the re-evaluation it did not do.
QUICK = ("--quick: no checkpoint was re-evaluated (verify without --quick reloads each and "
         "compares its rows)")


def _check_checkpoints(seen: _Walk, plan: Plan | None, *,
                       quick: bool = False) -> tuple[Check, Check]:
    total = seen.checkpoints
    hashes = Check(name="checkpoint hashes",
                   status="fail" if seen.hash_problems or not total else "pass",
                   detail="; ".join(seen.hash_problems) if seen.hash_problems else
                   (f"{total} checkpoints match their recorded sha256 (checked before loading)"
                    if total else "the record lists no checkpoints"))
    if quick:
        evaluation = Check(name="checkpoint re-evaluation", status="skip", detail=QUICK)
    elif plan is None:
        evaluation = Check(name="checkpoint re-evaluation", status="skip",
                           detail="needs the record's plan")
    else:
        evaluation = Check(name="checkpoint re-evaluation",
                           status="fail" if seen.eval_problems else "pass",
                           detail="; ".join(seen.eval_problems) if seen.eval_problems else
                           f"{seen.reloaded} checkpoints reloaded and re-evaluated: every row "
                           f"equal{_cost(seen)}")
    return hashes, evaluation


def _cost(seen: _Walk) -> str:
    """What re-evaluation cost a seed, so a user can price verifying a larger run (and
    choose --quick)."""
    if not seen.seeds:
        return ""
    return (f" (reloading and re-evaluating took {seen.evaluation_seconds / seen.seeds:.2f} s "
            "a seed)")


class _SummaryStream:
    """The summary recomputed from the rows, compared with ``summary.json`` entry by entry as
    the walk makes it, in the bytes :func:`~postlab.records.record.summary_bytes` writes:
    nothing is kept of an entry that matches (a 10,000-seed summary held whole took about
    50 MB), and only from the first that does not, to say where and how it differs."""

    def __init__(self, stored: bytes | None) -> None:
        self.stored = stored
        self.offset = 0  # how far the stored bytes matched
        self.count = 0
        self.kept: list[dict[str, Any]] | None = None  # entries from the first mismatch on
        self.first = 0  # the index of that entry

    def add(self, entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            if self.kept is None:
                piece = summary_piece(entry, self.count)
                if self.stored is not None and self.stored[
                        self.offset:self.offset + len(piece)] == piece:
                    self.offset += len(piece)
                else:
                    self.kept, self.first = [], self.count
            if self.kept is not None:
                self.kept.append(entry)
            self.count += 1

    def matches(self) -> bool:
        """summary.json is, byte for byte, the summary of the rows added."""
        return (self.kept is None and self.stored is not None
                and self.stored[self.offset:] == summary_closing(self.count))

    def expected(self) -> bytes:
        """The summary file the rows make (the stored bytes where they matched)."""
        stored = self.stored or b""
        rest = b"".join(summary_piece(entry, self.first + index)
                        for index, entry in enumerate(self.kept or []))
        return stored[:self.offset] + rest + summary_closing(self.count)


def _check_summary(seen: _Walk, plan: Plan | None, folder: Path) -> Check:
    path = folder / "summary.json"
    try:
        stored = read_bytes(path, "summary")
    except UserError as exc:
        return Check(name="summary", status="fail", detail=f"{exc} (a run's summary is part "
                                                             "of what is verified)")
    if plan is None:
        return Check(name="summary", status="skip", detail="needs the record's plan")
    if seen.unfit:
        return Check(name="summary", status="fail", detail="cannot recompute the summary: "
                                                             + seen.unfit[0])
    if seen.summary.stored == stored and seen.summary.matches():
        return Check(name="summary", status="pass",
                     detail="summary.json is, byte for byte, the summary of the raw rows")
    return Check(name="summary", status="fail",
                 detail="summary.json is not the summary of the raw rows"
                        + _first_summary_difference(stored, seen.summary))


def _first_summary_difference(stored: bytes, stream: _SummaryStream) -> str:
    """Where the stored summary first departs from the recomputed one: the first entry whose
    values differ, else how many entries there are, else the first line (equal values in
    other JSON: a changed type)."""
    try:
        values = parse_json(stored, "summary.json")
    except UserError as exc:
        return f" ({exc})"
    if isinstance(values, list):
        # entries before the first mismatch matched byte for byte
        for old, new in zip(values[stream.first:], stream.kept or [], strict=False):
            if old != new:
                return f" at seed {new['seed']}, stage {new['stage']}"
        if len(values) != stream.count:
            return f" ({len(values)} entries, expected {stream.count})"
    expected = stream.expected().decode().splitlines()
    actual = stored.decode("utf-8", errors="replace").splitlines()
    for number, (a, b) in enumerate(zip(actual, expected, strict=False), start=1):
        if a != b:
            return (f": its values are equal but their JSON is not (line {number}: "
                    f"{a.strip()[:60]!r}, expected {b.strip()[:60]!r}; a type change such as "
                    "63 to 63.0, 1 to true or 0.0 to -0.0)")

    return f" ({len(actual)} lines, expected {len(expected)})"


def _check_digests(record: dict[str, Any], seen: _Walk) -> Check:
    problems, absent = seen.digest_problems, seen.without_digests
    if absent and not made_by_postlab(record):
        return Check(name="raw rows", status="skip",
                     detail="a record made by another program carries no digests; rollout "
                            "rows cannot be checked without re-running (postlab reproduce)")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more"
                                           if len(problems) > 5 else "")
        return Check(name="raw rows", status="fail",
                     detail=f"changed since training: {shown}")
    if absent:
        return Check(name="raw rows", status="fail",
                     detail=f"{absent} seeds carry no digests, which every postlab record has")
    return Check(name="raw rows", status="pass",
                 detail="every SFT loss, evaluation split and RL step matches its digest")


def _check_environment(record: dict[str, Any], now: dict[str, Any]) -> Check:
    """What decides the bits, then and now: each difference named."""
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    deciding = [f"{key} {record.get(key)} then, {value} now" for key, value in versions.items()
                if record.get(key) != value]
    recorded = record.get("numerics")
    if isinstance(recorded, dict):
        more, other = numerics.differences(recorded, now)
        deciding += more
    else:
        other = []
        deciding.append("the record does not name its numeric environment (CPU capability, "
                        "BLAS code path), so a difference there cannot be ruled out")
    if record.get("platform") != platform.platform():
        other.append(f"platform {record.get('platform')} then, {platform.platform()} now")
    if deciding:
        return Check(name="environment", status="warn",
                     detail="; ".join(deciding) + " (this can legitimately change bits)"
                            + (f"; also {'; '.join(other)}" if other else ""))
    detail = (f"same torch, Python and numerics (code path {now['code_path']}, "
              f"{now['cpu_capability']}, BLAS {now['blas_code_path']})")
    if other:
        detail += f"; differs only in what does not decide bits: {'; '.join(other)}"
    return Check(name="environment", status="pass", detail=detail)


def _check_completeness(record: dict[str, Any], seen: _Walk) -> Check:
    """Everything a postlab record must carry is there; a foreign record is named as such."""
    if not made_by_postlab(record):
        return Check(name="record", status="fail",
                     detail="made by another program (no postlab_version): it carries no "
                            "digests, numeric environment or fingerprint, so it cannot be "
                            "verified; what can be checked is checked below")
    missing = [f"field {key}" for key in POSTLAB_FIELDS if key not in record]
    missing += seen.missing
    if missing:
        shown = "; ".join(missing[:6]) + (f"; and {len(missing) - 6} more"
                                          if len(missing) > 6 else "")
        return Check(name="record", status="fail", detail=f"incomplete: {shown}")
    return Check(name="record", status="pass",
                 detail="a complete postlab record: provenance, digests and a checkpoint "
                        "entry for every stage of every seed")


def _check_provenance(record: dict[str, Any], plan: Plan | None) -> Check:
    """Provenance values must be the ones this plan can produce."""
    if plan is None:
        return Check(name="provenance", status="skip", detail="needs the record's plan")
    problems = []
    if "threads" in record and record["threads"] != plan.threads:
        problems.append(f"threads {record['threads']}, the plan sets {plan.threads}")
    recorded = record.get("numerics")
    if isinstance(recorded, dict) and recorded["threads"] != plan.threads:
        problems.append(f"numerics.threads {recorded['threads']}, the plan sets "
                        f"{plan.threads}")
    if isinstance(recorded, dict) and not recorded["deterministic"]:
        problems.append("deterministic algorithms were off, which postlab never does")
    if "parameters" in record:
        expected = build_policy(plan).parameter_count()
        if record["parameters"] != expected:
            problems.append(f"parameters {record['parameters']}, the plan's model has "
                            f"{expected}")
    if isinstance(recorded, dict):
        problems += _pin_problems(recorded)
    if "workers" in record and "wall_seconds" in record and record["wall_seconds"] <= 0:
        problems.append(f"wall_seconds {record['wall_seconds']} is not a duration")
    if problems:
        return Check(name="provenance", status="fail", detail="; ".join(problems))
    return Check(name="provenance", status="pass",
                 detail="threads, parameter count and determinism fit the plan")


def _pin_problems(recorded: dict[str, Any]) -> list[str]:
    """A pinned record names its path's exact settings and kernels; a native one pins none."""
    name = recorded["code_path"]
    if name == numerics.NATIVE:
        return [] if recorded["pinned"] == {} else ["a native record names pinned settings"]
    path = numerics.CODE_PATHS[name]
    problems = []
    if recorded["pinned"] != path.environment:
        problems.append(f"code path {name} is pinned by {path.environment}, the record says "
                        f"{recorded['pinned']}")
    if recorded["cpu_capability"] != path.capability:
        problems.append(f"code path {name} runs {path.capability} kernels, the record says "
                        f"{recorded['cpu_capability']}")
    return problems


def _check_fingerprint(files: RunFiles, record: dict[str, Any], folder: Path,
                       expect: str | None, seen: _Walk) -> Check:
    """Both fingerprints, against the one the user noted (``expect``: the results
    fingerprint, or the run fingerprint) or else against fingerprint.txt."""
    try:
        value = run_fingerprint(folder, files.record, record,
                                checkpoint_files=seen.checkpoint_files).value
        results = results_fingerprint(folder, record, seeds=seen.seed_results,
                                      checkpoint_files=seen.checkpoint_files).value
    except UserError as exc:
        return Check(name="fingerprint", status="fail", detail=f"cannot compute: {exc}")
    both = f"results {results}, run {value}"
    if expect is not None:
        if expect == results:
            return Check(name="fingerprint", status="pass", detail=(
                f"results fingerprint {results} is the expected one: the same plan, rows, "
                f"summary and checkpoints (run fingerprint {value})"))
        if expect == value:
            return Check(name="fingerprint", status="pass", detail=(
                f"run fingerprint {value} is the expected one: every file the same, "
                f"provenance included (results fingerprint {results})"))
        return Check(name="fingerprint", status="fail", detail=(
            f"expected {expect}, but the {both}: the plan, rows, summary or a checkpoint "
            "differs (or the expected one is of another run)"))
    try:
        kept = read_fingerprints(folder)
    except UserError as exc:
        return Check(name="fingerprint", status="fail", detail=str(exc))
    if kept is None:
        return Check(name="fingerprint", status="warn",
                     detail=f"{both}; no fingerprint.txt beside the run: pass --expect "
                            "FINGERPRINT (the results one you noted) to check the run")
    if kept[0] != value or (kept[1] is not None and kept[1] != results):
        return Check(name="fingerprint", status="fail",
                     detail=f"{both}, but fingerprint.txt says {kept[0]}"
                            + (f" (results {kept[1]})" if kept[1] else ""))
    return Check(name="fingerprint", status="warn", detail=(
        f"{both} match fingerprint.txt, which an editor can rewrite too: pass --expect "
        "FINGERPRINT (the results one you noted) to check the run"))


def _check_source(record: dict[str, Any]) -> Check:
    from postlab.runs.orchestration import source_hashes

    recorded = record.get("source_sha256")
    if not isinstance(recorded, dict):
        return Check(name="source", status="warn", detail="the record names no source")
    now = source_hashes()
    if not any(name.startswith("postlab/") for name in recorded):
        return Check(name="source", status="warn",
                     detail="recorded by another implementation: "
                            + ", ".join(sorted(recorded)))
    changed = sorted(name for name in recorded.keys() & now.keys()
                     if recorded[name] != now[name])
    added = sorted(now.keys() - recorded.keys())
    removed = sorted(recorded.keys() - now.keys())
    parts = [f"{what} {', '.join(names)}" for what, names in
             (("changed", changed), ("new", added), ("gone", removed)) if names]
    if parts:
        version = record.get("postlab_version", "?")
        return Check(name="source", status="warn",
                     detail=f"postlab source differs from the recording version {version}: "
                            + "; ".join(parts))
    return Check(name="source", status="pass", detail="postlab's source is the recording one")


def _check_registration(record: dict[str, Any], plan: LoadedPlan | None,
                        folder: Path) -> Check | None:
    """The registration the record names is the file beside it, sound for the plan, and made
    before training began; None (no line) where there is neither."""
    from postlab.plan.registration import REGISTRATION_FILE
    from postlab.records.opened import registration_of

    named = record.get("registration")
    if named is None:
        if (folder / REGISTRATION_FILE).exists():
            return Check(name="registration", status="warn", detail=(
                f"{REGISTRATION_FILE} is in the folder but the record names none: it is not "
                "evidence, and reports do not call the hypotheses registered"))
        return None
    if plan is None:
        return Check(name="registration", status="skip", detail="needs the record's plan")
    registration, problems = registration_of(record, plan, folder)
    if problems:
        return Check(name="registration", status="fail", detail="; ".join(problems))
    assert registration is not None
    count = len(registration["hypotheses"]["tests"])
    return Check(name="registration", status="pass", detail=(
        f"{count} hypothes{'is' if count == 1 else 'es'} registered "
        f"{named['registered_at']}, before training began {named['training_started_at']}; "
        f"{REGISTRATION_FILE} has the recorded sha256 {named['sha256'][:16]}…"))


def _check_model_file(typed: Plan | None) -> Check | None:
    """A pretrained plan's GGUF file has the sha256 the plan pins (a file that differs is
    refused in one line, as a run refuses it); None (no line) for other policies."""
    if typed is None or policy_kind(typed) != "pretrained":
        return None
    from postlab.policies.transformer import gguf_file, pretrained_fields

    if pretrained_fields(typed).gguf is None:
        return None
    path = gguf_file(typed)
    assert path is not None
    return Check(name="model file", status="pass", detail=(
        f"{path.name} has the plan's sha256 {pretrained_fields(typed).sha256[:16]}…; its "
        "dequantised weights are the base every adapter checkpoint names"))


def _check_tokenizer(record: dict[str, Any], typed: Plan | None,
                     folder: Path) -> Check | None:
    """A trained tokenizer's file is the one the record names and the plan trains; None (no
    line) for a run that reads characters."""
    from postlab.policies.tokenizers import TOKENIZER_FILE, tokenizer_sha256, uses_bpe

    recorded = record.get("tokenizer_sha256")
    trains = typed is not None and uses_bpe(typed)
    if recorded is None and not trains:
        return None
    if typed is None:
        return Check(name="tokenizer", status="skip", detail="needs the record's plan")
    if recorded is None or not trains:
        return Check(name="tokenizer", status="fail", detail=(
            "the plan trains a BPE tokenizer and the record names none" if trains else
            "the record names a trained tokenizer and the plan trains none"))
    path = folder / TOKENIZER_FILE
    if not path.is_file():
        return Check(name="tokenizer", status="fail", detail=f"{TOKENIZER_FILE} is missing")
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != recorded:
        return Check(name="tokenizer", status="fail", detail=(
            f"{TOKENIZER_FILE} has sha256 {actual[:16]}…, the record names {recorded[:16]}…: "
            "changed after the run"))
    trained = tokenizer_sha256(typed)
    if trained != recorded:
        return Check(name="tokenizer", status="fail", detail=(
            f"the plan trains a tokenizer with sha256 {str(trained)[:16]}… here, not the "
            f"recorded {recorded[:16]}… (another tokenizers library?)"))
    return Check(name="tokenizer", status="pass", detail=(
        f"{TOKENIZER_FILE} is the one the plan trains (sha256 {recorded[:16]}…)"))


@dataclass(kw_only=True)
class _Walk:
    """What the checks need from each seed, gathered on one walk over the seeds: a chunked
    record decodes each seed once, where a walk per check decoded it nine times (1.6 s a
    teaching seed-run on 2 cores, 2026-12-03)."""

    missing: list[str] = field(default_factory=list)
    checkpoints: int = 0
    reloaded: int = 0
    hash_problems: list[str] = field(default_factory=list)
    eval_problems: list[str] = field(default_factory=list)
    unfit: list[str] = field(default_factory=list)
    summary: _SummaryStream = field(default_factory=lambda: _SummaryStream(None))
    plan_problems: list[str] = field(default_factory=list)
    digest_problems: list[str] = field(default_factory=list)
    without_digests: int = 0
    checkpoint_files: set[str] = field(default_factory=set)
    #: (seed, sha256 of its results) in record order, for the results fingerprint
    seed_results: list[tuple[int, str]] = field(default_factory=list)
    #: seeds walked, and the seconds their checkpoints' hashing, reloading and re-evaluation took
    seeds: int = 0
    evaluation_seconds: float = 0.0


def _walk(record: dict[str, Any], plan: Plan | None, folder: Path,
          device: str, *, quick: bool = False) -> _Walk:
    try:  # compared with the summary as it is recomputed, so that is never held whole
        stored_summary: bytes | None = read_bytes(folder / "summary.json", "summary")
    except UserError:
        stored_summary = None  # the summary check says why
    seen = _Walk(summary=_SummaryStream(stored_summary))
    stages = ["initial", *arm_names(plan)] if plan is not None else None
    engine = engine_for(record)  # its evaluation recomputes the rows as they were made
    if plan is not None:
        seen.plan_problems += seed_list_problems(record, plan)
    waiting: list[_Loaded] = []

    def reevaluate() -> None:
        started = time.perf_counter()
        if plan is not None:
            _reevaluate(waiting, plan, device, engine, seen)
        waiting.clear()
        seen.evaluation_seconds += time.perf_counter() - started

    def walk_entry(run: dict[str, Any]) -> None:
        """One seed checked from its entry, part by part (what each check says names it)."""
        seen.missing += run_missing_parts(run, stages)
        seen.checkpoint_files |= named_checkpoints([run])
        started = time.perf_counter()
        _seed_checkpoints(run, plan, folder, device, seen, waiting, quick=quick)
        seen.evaluation_seconds += time.perf_counter() - started
        seen.seeds += 1
        if len(waiting) >= EVALUATION_BATCH:
            reevaluate()
        if plan is not None:
            seen.unfit += run_reading_problems(run, plan)
            if not seen.unfit:  # rows that do not fit the plan cannot be summarised
                seen.summary.add(run_summary_for(run, plan))
            seen.plan_problems += run_plan_problems(run, plan)
        if "digests" in run:
            problems = compare_digests(run, run["digests"])
            seen.digest_problems += problems
            # digests just checked against the rows stand for them; else recomputed
            known = None if problems else run["digests"]
        else:
            seen.without_digests += 1
            known = None
        # a seed missing parts has no results to hash (other checks say what is missing); a
        # mark stands in, so the results fingerprint matches no complete run
        complete = all(key in run for key in ("sft_loss", "evaluations", "training"))
        seen.seed_results.append((run["seed"], seed_results_sha256(run, known) if complete
                                  else "incomplete"))

    runs = record["runs"]
    if plan is None or not isinstance(runs, ChunkedRuns):
        for run in runs:
            walk_entry(run)
        reevaluate()
        return seen
    # A chunked record is checked a batch of seeds at a time from its flat tables: a seed
    # the columnar checks prove (fits its plan, digests recomputed equal) passes every
    # per-seed check, so only its checkpoints and summary remain; any other seed is read
    # and checked part by part, which names what is wrong.
    from postlab.records import proofs as remembered_proofs

    answer, contracts = answer_function(plan), plan_contracts(plan)
    # the state proven, named before the walk: remembered only if it is the same after
    proof_key = remembered_proofs.proof_key(record, plan, folder)
    # the next batch is read and proven while this one's checkpoints are re-evaluated
    proofs = read_ahead((tables, *not_proven(tables, plan, folder))
                        for tables in row_tables(record))
    proven_all = True
    for tables, unproven, digests in proofs:
        proven_all = proven_all and not unproven
        summary: dict[int, list[dict[str, Any]]] = {}
        if len(unproven) < len(tables.seeds):
            for entry in table_summary(tables, plan.eval_samples, answer, contracts):
                summary.setdefault(entry["seed"], []).append(entry)
        checkpoints = tables.runs.column("checkpoints").to_pylist()
        for index, seed in enumerate(tables.seeds):
            if seed in unproven:
                walk_entry(runs.entry(seed))
                continue
            named = {info["stage"]: {k: v for k, v in info.items() if k != "stage"}
                     for info in checkpoints[index]}
            seen.checkpoint_files |= {info["file"] for info in named.values()}
            started = time.perf_counter()
            _seed_checkpoints({"seed": seed, "checkpoints": named}, plan, folder, device,
                              seen, waiting, quick=quick, recorded=functools.partial(
                                  seed_evaluations, tables, seed))
            seen.evaluation_seconds += time.perf_counter() - started
            seen.seeds += 1
            if len(waiting) >= EVALUATION_BATCH:
                reevaluate()
            if not seen.unfit:
                seen.summary.add(summary[seed])
            seen.seed_results.append((seed, seed_results_sha256({"seed": seed},
                                                                digests[index])))
    reevaluate()
    if proven_all:  # the record's readers need not prove its seeds again
        remembered_proofs.remember_if_unchanged(proof_key, record, plan, folder,
                                                len(runs.seeds))
    return seen


@dataclass(frozen=True, kw_only=True)
class Verified:
    """The checks, and the checkpoint files the record names (what its state covers)."""

    checks: list[Check]
    checkpoint_files: frozenset[str]


def verify_run(files: RunFiles, record: dict[str, Any], *,
               expect: str | None = None, quick: bool = False) -> list[Check]:
    """Run every check on a run folder or record (already strictly loaded); ``quick``: every
    check but the checkpoints' re-evaluation, which is said to be skipped."""
    return verify_walked(files, record, expect=expect, quick=quick).checks


def verify_walked(files: RunFiles, record: dict[str, Any], *,
                  expect: str | None = None, quick: bool = False) -> Verified:
    """:func:`verify_run`, with the checkpoint files its walk found."""
    from postlab.runs.orchestration import configure_torch

    folder = files.record.parent
    plan, plan_check = _plan_for(files, record)
    shape = link_problems(folder, whole=files.folder is not None) or ([] if "chunks" in record
                                      else layout_problems(folder, record))
    if shape:
        # a link makes the run depend on a file nobody hashed as part of it, and a second
        # layout is evidence no check reads: no other check can speak for this folder
        return Verified(checkpoint_files=frozenset(), checks=[plan_check, Check(
            name="run folder", status="fail", detail="; ".join(shape[:5]) + (
                f"; and {len(shape) - 5} more" if len(shape) > 5 else "")), *(
            Check(name=name, status="skip", detail="needs a run folder of its own files in "
                                                   "one layout")
            for name in ("record", "checkpoint hashes", "checkpoint re-evaluation", "summary",
                         "counts", "raw rows", "fingerprint"))])
    if "chunks" in record:
        problems = chunk_problems(folder, record["chunks"])
        row_files = Check(name="row files", status="fail" if problems else "pass", detail=(
            "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more"
                                       if len(problems) > 5 else "") if problems else
            f"{len(record['chunks'])} chunk files match the record's manifest (sha256, "
            "size, seeds) and no other file is in rows/"))
        if problems:
            # every other check reads the rows: none can run on files that are not the ones
            # the record names
            return Verified(checkpoint_files=frozenset(), checks=[plan_check, row_files, *(
                Check(name=name, status="skip", detail="needs the row files intact")
                for name in ("record", "checkpoint hashes", "checkpoint re-evaluation",
                             "summary", "counts", "raw rows", "fingerprint"))])
    typed = plan.model if plan is not None else None
    device = device_here(record)
    configure_torch(typed.threads if typed is not None else 1, device)
    model = _check_model_file(typed)  # before the walk rebuilds the model from it
    seen = _walk(record, typed, folder, device, quick=quick)
    checks = [_check_completeness(record, seen), plan_check]
    if model is not None:
        checks.append(model)
    if "chunks" in record:
        checks.append(row_files)
    tokenizer = _check_tokenizer(record, typed, folder)
    if tokenizer is not None:
        checks.append(tokenizer)
    registration = _check_registration(record, plan, folder)
    if registration is not None:
        checks.append(registration)
    checks += list(_check_checkpoints(seen, typed, quick=quick))
    checks.append(_check_summary(seen, typed, folder))
    if typed is None:
        checks.append(Check(name="counts", status="skip", detail="needs the record's plan"))
    else:
        problems = seen.plan_problems
        checks.append(Check(name="counts", status="fail" if problems else "pass",
                            detail="; ".join(problems[:5]) if problems else
                            "seeds, arms, steps, rows per step and samples per question "
                            "fit the plan"))
    checks.append(_check_provenance(record, typed))
    checks.append(_check_digests(record, seen))
    checks.append(_check_fingerprint(files, record, folder, expect, seen))
    threads = typed.threads if typed is not None else 1
    bf16 = typed is not None and typed.precision == "bf16"
    dtype = "bfloat16" if bf16 else "float32"
    environment = _check_environment(record, numerics.describe(
        threads, numerics.current_pin(), device=device, dtype=dtype))
    checks.append(environment)
    checks.append(_check_source(record))
    if environment.status == "warn":
        # Re-evaluation recomputes bits: a difference of environment may be why it differs.
        checks = [replace(c, detail=c.detail + " (the numeric environment differs, see "
                                               "'environment')")
                  if c.name == "checkpoint re-evaluation" and c.status == "fail" else c
                  for c in checks]
    return Verified(checks=checks, checkpoint_files=frozenset(seen.checkpoint_files))


def render_checks(checks: list[Check]) -> tuple[str, int]:
    lines = [f"{check.status.upper():4s}  {check.name}: {check.detail}" for check in checks]
    failed = [c for c in checks if c.status == "fail"]
    warned = [c for c in checks if c.status == "warn"]
    if failed:
        lines.append(f"NOT VERIFIED: {len(failed)} of {len(checks)} checks failed "
                     f"({', '.join(c.name for c in failed)})")
        return "\n".join(lines) + "\n", 1
    quick = any(c.detail == QUICK for c in checks)
    verdict = "VERIFIED (quick, no checkpoint re-evaluated)" if quick else "VERIFIED"
    if warned:  # each warning names its check, so a reader knows which line to read
        lines.append(f"{verdict}: no check failed ({len(warned)} "
                     f"warning{'s' if len(warned) > 1 else ''}: "
                     f"{', '.join(c.name for c in warned)})")
    else:
        lines.append(f"{verdict}: no check failed, no warnings")
    return "\n".join(lines) + "\n", 0
