"""One walk over a record's seeds gathering what every check of ``postlab verify`` needs: a
chunked record decodes each seed once, and checkpoints are hashed, reloaded and re-evaluated
on the way, a batch at a time."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.engines.registry import engine_for
from postlab.errors import UserError
from postlab.jsonio import read_bytes
from postlab.plan.arms import arm_names, plan_contracts
from postlab.policies import place_policy, policy_kind
from postlab.policies.checkpoint import (
    CheckpointError,
    check_checkpoint_bytes,
    check_kind,
    load_checkpoint,
)
from postlab.policies.restore import policy_from_checkpoint
from postlab.records.chunks import ChunkedRuns
from postlab.records.columns import not_proven, read_ahead, row_tables, seed_evaluations
from postlab.records.conformance import (
    run_missing_parts,
    run_plan_problems,
    run_reading_problems,
    seed_list_problems,
)
from postlab.records.fingerprint import named_checkpoints, seed_results_sha256
from postlab.records.integrity import compare_digests, run_digests
from postlab.records.metrics import run_summary_for, table_summary
from postlab.records.models import Checkpoint, Decodings, Record, SeedEntry
from postlab.runs.summary_stream import SummaryStream
from postlab.tasks.registry import answer_function

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.records.columns import RowTables


@dataclass(kw_only=True)
class Walk:
    """What the checks need from each seed, gathered on one walk over the seeds: a chunked
    record decodes each seed once, where a walk per check decoded it nine times (1.6 s a
    teaching seed-run on 2 cores, 2026-12-03)."""

    missing: list[str] = field(default_factory=list)
    checkpoints: int = 0
    reloaded: int = 0
    hash_problems: list[str] = field(default_factory=list)
    eval_problems: list[str] = field(default_factory=list)
    unfit: list[str] = field(default_factory=list)
    summary: SummaryStream = field(default_factory=lambda: SummaryStream(None))
    plan_problems: list[str] = field(default_factory=list)
    digest_problems: list[str] = field(default_factory=list)
    without_digests: int = 0
    checkpoint_files: set[str] = field(default_factory=set)
    #: (seed, sha256 of its results) in record order, for the results fingerprint
    seed_results: list[tuple[int, str]] = field(default_factory=list)
    #: seeds walked, and the seconds their checkpoints' hashing, reloading and re-evaluation took
    seeds: int = 0
    evaluation_seconds: float = 0.0


def _first_row_difference(recorded: dict, fresh: dict) -> str:
    """Where re-evaluated rows first differ from the recorded ones, for the check's line."""
    for split, decoded in recorded.items():
        for decoding, rows in decoded.items():
            new = fresh.get(split, {}).get(decoding, [])
            for index, (a, b) in enumerate(zip(rows, new, strict=False)):
                if a != b:
                    return f"split {split}, {decoding} row {index}: recorded {a}, now {b}"
            if len(rows) != len(new):
                return f"split {split}, {decoding}: {len(rows)} rows recorded, {len(new)} now"
    return "rows differ"


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


def _recorded_rows(splits: dict[str, Decodings] | None) -> dict[str, Any] | None:
    """A stage's recorded evaluation rows as re-evaluation gives them (split -> decoding ->
    rows ``[a, b, text, terminated]``); None for a stage the seed has none of."""
    if splits is None:
        return None
    return {split: {"greedy": decoded.greedy.stored, "sampled": decoded.sampled.stored}
            for split, decoded in splits.items()}


def _seed_checkpoints(seed: int, checkpoints: dict[str, Checkpoint], plan: Plan | None,
                      folder: Path, device: str, seen: Walk, waiting: list[_Loaded], *,
                      quick: bool = False,
                      recorded: Callable[[str], dict[str, Any] | None]) -> None:
    """One seed's checkpoints: each hashed before loading, then loaded into ``waiting`` for
    re-evaluation (``quick``: hashed only); ``recorded`` gives a stage's recorded evaluation
    rows, which re-evaluation must give."""
    # the policies' layer reads a base checkpoint's entry as the record's JSON holds it
    named = {stage: info.model_dump() for stage, info in checkpoints.items()}
    for stage, info in checkpoints.items():
        seen.checkpoints += 1
        path = folder / info.file
        try:
            if quick:  # hashed, not deserialised
                check_checkpoint_bytes(read_bytes(path, "checkpoint"), info.sha256, path)
                continue
            payload = load_checkpoint(path, info.sha256)
        except UserError as exc:  # CheckpointError among them
            seen.hash_problems.append(str(exc))
            continue
        if plan is None:
            continue
        try:
            check_kind(payload, policy_kind(plan), f"seed {seed}, stage {stage}")
        except CheckpointError as exc:
            seen.eval_problems.append(str(exc))
            continue
        try:
            model = place_policy(policy_from_checkpoint(
                plan, payload, seed, folder, named), device)
        except CheckpointError as exc:
            seen.eval_problems.append(f"seed {seed}, stage {stage}: {exc}")
            continue
        except (RuntimeError, KeyError) as exc:
            seen.eval_problems.append(f"seed {seed}, stage {stage}: weights do not "
                                      f"fit the plan's model ({str(exc).splitlines()[0]})")
            continue
        waiting.append(_Loaded(seed=seed, stage=stage, model=model, recorded=recorded(stage),
                               reload_equal=info.reload_equal))


def _reevaluate(waiting: list[_Loaded], plan: Plan, device: str, engine: Any,
                seen: Walk) -> None:
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


@dataclass(kw_only=True)
class _Walker:
    """The walk's fixed inputs, what it has gathered, and the checkpoints loaded and waiting
    for their re-evaluation (a batch at a time, together where the engine can)."""

    plan: Plan | None
    folder: Path
    device: str
    quick: bool
    engine: Any
    stages: list[str] | None
    seen: Walk
    waiting: list[_Loaded] = field(default_factory=list)

    def reevaluate(self) -> None:
        """Re-evaluate the checkpoints waiting, timed with the seeds' checkpoints."""
        started = time.perf_counter()
        if self.plan is not None:
            _reevaluate(self.waiting, self.plan, self.device, self.engine, self.seen)
        self.waiting.clear()
        self.seen.evaluation_seconds += time.perf_counter() - started

    def checkpoints(self, seed: int, checkpoints: dict[str, Checkpoint],
                    recorded: Callable[[str], dict[str, Any] | None]) -> None:
        """One seed's checkpoints hashed and loaded (timed), re-evaluated once a batch waits;
        ``recorded`` gives a stage's recorded evaluation rows."""
        started = time.perf_counter()
        _seed_checkpoints(seed, checkpoints, self.plan, self.folder, self.device, self.seen,
                          self.waiting, quick=self.quick, recorded=recorded)
        self.seen.evaluation_seconds += time.perf_counter() - started
        self.seen.seeds += 1
        if len(self.waiting) >= EVALUATION_BATCH:
            self.reevaluate()

    def entry(self, run: SeedEntry) -> None:
        """One seed checked from its entry, part by part (what each check says names it)."""
        seen, plan = self.seen, self.plan
        seen.missing += run_missing_parts(run, self.stages)
        seen.checkpoint_files |= named_checkpoints([run])
        self.checkpoints(run.seed, run.checkpoints or {},
                         lambda stage: _recorded_rows(run.evaluations.get(stage)))
        if plan is not None:
            seen.unfit += run_reading_problems(run, plan)
            if not seen.unfit:  # rows that do not fit the plan cannot be summarised
                seen.summary.add(run_summary_for(run, plan))
            seen.plan_problems += run_plan_problems(run, plan)
        if run.digests is not None:
            # digests are taken, and compared, from the entry's JSON
            digests = run.data()["digests"]
            problems = compare_digests(run.data(), digests)
            seen.digest_problems += problems
            # digests just checked against the rows stand for them; else recomputed
            known = None if problems else digests
        else:
            seen.without_digests += 1
            known = None
        # a seed missing parts has no results to hash (other checks say what is missing); a
        # mark stands in, so the results fingerprint matches no complete run
        complete = run.sft_loss is not None and run.training is not None
        if not complete:
            seen.seed_results.append((run.seed, "incomplete"))
        else:
            seen.seed_results.append((run.seed, seed_results_sha256(
                run.seed, run_digests(run.data()) if known is None else known)))

    def proven(self, seed: int, named: dict[str, Checkpoint],
               recorded: Callable[[str], dict[str, Any] | None],
               summary: dict[int, list[dict[str, Any]]], digests: dict[str, Any]) -> None:
        """A seed the columnar checks proved passes every per-seed check: only its
        checkpoints and its summary remain (``digests``: its rows', recomputed from them)."""
        seen = self.seen
        seen.checkpoint_files |= {info.file for info in named.values()}
        self.checkpoints(seed, named, recorded)
        if not seen.unfit:
            seen.summary.add(summary[seed])
        seen.seed_results.append((seed, seed_results_sha256(seed, digests)))


def walk_seeds(record: Record, plan: Plan | None, folder: Path,
               device: str, *, quick: bool = False) -> Walk:
    """Walk the record's seeds once for every check (``quick``: checkpoints hashed, not
    re-evaluated); a chunked record with its plan is read from its flat tables."""
    try:  # compared with the summary as it is recomputed, so that is never held whole
        stored_summary: bytes | None = read_bytes(folder / "summary.json", "summary")
    except UserError:
        stored_summary = None  # the summary check says why
    seen = Walk(summary=SummaryStream(stored_summary))
    stages = ["initial", *arm_names(plan)] if plan is not None else None
    engine = engine_for(record)  # its evaluation recomputes the rows as they were made
    if plan is not None:
        seen.plan_problems += seed_list_problems(record, plan)
    walker = _Walker(plan=plan, folder=folder, device=device, quick=quick, engine=engine,
                     stages=stages, seen=seen)
    runs = record.runs
    if plan is None or not isinstance(runs, ChunkedRuns):
        for run in runs:
            walker.entry(run)
        walker.reevaluate()
        return seen
    _walk_chunked(walker, record, plan, folder)
    return seen


def _walk_chunked(walker: _Walker, record: Record, plan: Plan, folder: Path) -> None:
    """A chunked record checked a batch of seeds at a time from its flat tables: a seed the
    columnar checks prove (fits its plan, digests recomputed equal) passes every per-seed
    check, so only its checkpoints and summary remain; any other seed is read and checked
    part by part, which names what is wrong."""
    from postlab.records import proofs as remembered_proofs

    runs = record.runs
    assert isinstance(runs, ChunkedRuns)
    answer, contracts = answer_function(plan), plan_contracts(plan)
    # the state proven, named before the walk: remembered only if it is the same after
    proof_key = remembered_proofs.proof_key(record, plan, folder)
    # the next batch is read and proven while this one's checkpoints are re-evaluated
    proofs = read_ahead((tables, *not_proven(tables, plan, folder))
                        for tables in row_tables(record))
    proven_all = True
    for tables, unproven, digests in proofs:
        proven_all = proven_all and not unproven
        _walk_batch(walker, runs, plan, tables, unproven, digests, answer, contracts)
    walker.reevaluate()
    if proven_all:  # the record's readers need not prove its seeds again
        remembered_proofs.remember_if_unchanged(proof_key, record, plan, folder,
                                                len(runs.seeds))


def _walk_batch(walker: _Walker, runs: ChunkedRuns, plan: Plan, tables: RowTables,
                unproven: set[int], digests: list[dict[str, Any] | None],
                answer: Callable[..., Any], contracts: tuple[str, ...]) -> None:
    """One batch of a chunked record's seeds: those proven from the flat tables, the others
    from their entries."""
    summary: dict[int, list[dict[str, Any]]] = {}
    if len(unproven) < len(tables.seeds):
        for entry in table_summary(tables, plan.eval_samples, answer, contracts):
            summary.setdefault(entry["seed"], []).append(entry)
    checkpoints = tables.runs.column("checkpoints").to_pylist()
    for index, seed in enumerate(tables.seeds):
        if seed in unproven:
            walker.entry(runs.entry(seed))
            continue
        named = {info["stage"]: Checkpoint.model_validate(
                     {k: v for k, v in info.items() if k != "stage"})
                 for info in checkpoints[index]}
        found = digests[index]
        assert found is not None  # a seed is proven only with its digests recomputed
        walker.proven(seed, named, functools.partial(seed_evaluations, tables, seed), summary,
                      found)
