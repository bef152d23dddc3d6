"""The record writer: a run's record begun with its provenance, each seed's entry assembled
from its stages' results, published in chunks under a manifest that is replaced atomically,
and finished with the summary and the fingerprint.

Orchestration (:mod:`postlab.runs.orchestration`) decides when: after each completed seed,
so a crash loses at most the seeds in flight. This module decides what is written and how,
for every engine and executor alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from postlab.jsonio import dump_json, publish_bytes, replace_bytes
from postlab.machine.provenance import run_provenance
from postlab.plan.frozen import LoadedPlan
from postlab.policies import policy_placement
from postlab.policies.tokenizers import tokenizer_sha256, uses_bpe
from postlab.records.chunks import CHUNK_DIR, MAX_CHUNK_SEEDS, chunk_bytes, chunk_entry, chunk_name
from postlab.records.fingerprint import (
    FINGERPRINT_FILE,
    fingerprint_file_bytes,
    named_checkpoints,
    read_fingerprint_file,
    results_fingerprint,
    run_fingerprint,
    seed_results_sha256,
)
from postlab.records.integrity import run_digests
from postlab.records.kept import remove_kept
from postlab.records.layout import RECORD_FILE, SUMMARY_FILE, UNNAMED_ENGINE
from postlab.records.metrics import run_summary_for
from postlab.records.models import Record, SeedEntry
from postlab.records.record import summary_bytes
from postlab.tasks.tools import tool_for


def new_record(plan: LoadedPlan, workers: int, device: str = "cpu",
               engine: str = UNNAMED_ENGINE) -> dict[str, Any]:
    """A run's record before its first seed: the plan's hash, the engine (named only when it
    is not the exact one), the tokenizer a BPE plan trained, an agent plan's tools' versions,
    and the code and machine
    (:func:`postlab.machine.provenance.run_provenance`); no chunk and no seed yet."""
    dtype, compute_dtype = policy_placement(plan.model)
    named = {} if engine == UNNAMED_ENGINE else {"engine": engine}
    if uses_bpe(plan.model):
        named["tokenizer_sha256"] = tokenizer_sha256(plan.model)
    if plan.model.agent is not None:
        named["tools"] = {name: tool_for(name).version for name in plan.model.agent.tools}
    return {"plan_sha256": plan.sha256, **named,
            **run_provenance(threads=plan.model.threads, device=device, dtype=dtype,
                             compute_dtype=compute_dtype, workers=workers),
            "chunks": [], "seeds": []}


class SeedAssembly:
    """Collects one seed's stage results and builds its record entry in the plan's order."""

    def __init__(self, arms: list[str]) -> None:
        self.arms = arms  # names, in the plan's order
        self.sft: dict[str, Any] | None = None
        self.arm_results: dict[str, dict[str, Any]] = {}
        self.recorded = False

    def add(self, stage: str, result: dict[str, Any]) -> None:
        if stage == "initial":
            self.sft = result
        else:
            self.arm_results[stage] = result

    def complete(self) -> bool:
        return self.recorded or (self.sft is not None
                                 and len(self.arm_results) == len(self.arms))

    def release(self) -> None:
        """Forget the results once the record holds the seed: a run's main process then
        holds the seeds in flight, not every seed it has trained (about 5 MB each for a
        teaching seed; 150 ensemble seeds held 1.2 GB)."""
        self.recorded = True
        self.sft, self.arm_results = None, {}

    def entry(self) -> dict[str, Any]:
        assert self.sft is not None
        evaluations = {"initial": self.sft["evaluation"]}
        checkpoints = {"initial": self.sft["checkpoint"]}
        compute = {"initial": self.sft["compute"]}
        training, extra_sft = {}, {}
        for arm in self.arms:
            result = self.arm_results[arm]
            if "history" in result:
                training[arm] = result["history"]
            else:
                extra_sft[arm] = result["sft_loss"]
            evaluations[arm] = result["evaluation"]
            checkpoints[arm] = result["checkpoint"]
            compute[arm] = result["compute"]
        entry = {"seed": self.sft["seed"], "sft_loss": self.sft["sft_loss"],
                 "evaluations": evaluations, "training": training, "checkpoints": checkpoints}
        if extra_sft:
            entry["arm_sft_loss"] = extra_sft
        entry["compute"] = compute
        entry["digests"] = run_digests(entry)
        # the writer writes only what the record's models read: an entry that does not fit
        # them is a bug of the engine (a traceback, not bad input), caught before it is kept.
        # Its rows are checked as columns when the chunk is read; checking them here too took
        # a teaching seed 19 ms against 4.7 ms without (35,820 rows).
        SeedEntry.model_validate(entry, context={"rows_checked": True})
        return entry


def write_record(out_dir: Path, record: dict[str, Any], entries: Sequence[dict[str, Any]],
                 seeds: Sequence[int]) -> None:
    """Publish ``entries`` (complete seeds not yet written) as new chunks of at most
    ``MAX_CHUNK_SEEDS`` seeds each, in the plan's order of ``seeds``, then replace
    ``record.json`` with the manifest naming them: a crash between the two leaves chunks no
    record names, removed on resume."""
    order = {seed: i for i, seed in enumerate(seeds)}
    ordered = sorted(entries, key=lambda entry: order[entry["seed"]])
    for first in range(0, len(ordered), MAX_CHUNK_SEEDS):
        part = ordered[first:first + MAX_CHUNK_SEEDS]
        name = chunk_name(len(record["chunks"]))
        data = chunk_bytes(part)
        (out_dir / CHUNK_DIR).mkdir(exist_ok=True)
        publish_bytes(out_dir / name, data)
        record["chunks"].append(chunk_entry(name, data, [entry["seed"] for entry in part]))
    record["seeds"] = sorted([*record["seeds"], *(e["seed"] for e in ordered)],
                             key=order.__getitem__)
    replace_bytes(out_dir / RECORD_FILE, dump_json(record))


def finish_record(out_dir: Path, header: dict[str, Any], plan: Any,
                  say: Callable[[str], None]) -> Record:
    """Write the summary and the fingerprint of a written record (``header``: what
    ``record.json`` holds) whose seeds are all in (each only if not there yet: a finished run
    finishes again unchanged); the record as readers see it."""
    record = Record.of(header, str(out_dir / RECORD_FILE), out_dir)
    summary_path = out_dir / SUMMARY_FILE
    summarise = not summary_path.exists()
    fingerprint = read_fingerprint_file(out_dir) is None
    # One walk over the recorded seeds for both: the summary's entries and the checkpoint
    # files the fingerprint hashes (a chunked record decodes each seed on every walk; two
    # walks took minutes at 1,000 teaching seeds).
    summary: list[dict[str, Any]] = []
    names: set[str] = set()
    seeds: list[tuple[int, str]] = []
    for entry in record.runs if summarise or fingerprint else []:
        if summarise:
            summary += run_summary_for(entry, plan)
        names |= named_checkpoints([entry])
        # the digests were taken from the rows as this run made them
        # (a seed an earlier version recorded without digests: taken from its rows now)
        digests = entry.data().get("digests") or run_digests(entry.data())
        seeds.append((entry.seed, seed_results_sha256(entry.seed, digests)))
    if not summarise:
        say("the run was already complete; nothing to do")
    else:
        publish_bytes(summary_path, summary_bytes(summary))
    remove_kept(out_dir)
    return record if not fingerprint else _fingerprinted(out_dir, record, names, seeds)


def _fingerprinted(out_dir: Path, record: Record, names: set[str],
                   seeds: list[tuple[int, str]]) -> Record:
    """Last, over the finished files: the one hash a reader notes to check the run later."""
    value = run_fingerprint(out_dir, out_dir / RECORD_FILE, record,
                            checkpoint_files=names).value
    results = results_fingerprint(out_dir, record, seeds=seeds, checkpoint_files=names).value
    publish_bytes(out_dir / FINGERPRINT_FILE, fingerprint_file_bytes(value, results))
    return record
