"""The checks of ``postlab verify``, each a function registered under the name its line
shows: checks are listed in the order registered, and run in it too except that those
read before the walk over the seeds (``before_walk``, e.g. the model file) run first; a new
check is one registration. Each reads the :class:`Verifying` context: the record, its plan
and the walk over its seeds (:mod:`.seed_walk`)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from postlab.errors import UserError
from postlab.jsonio import read_bytes
from postlab.machine import numerics
from postlab.policies import build_policy, policy_kind
from postlab.records.fingerprint import read_fingerprints, results_fingerprint, run_fingerprint
from postlab.records.models import POSTLAB_FIELDS, Record
from postlab.records.record import RunFiles
from postlab.registry import Registry
from postlab.runs.numeric_environment import environment_check, pin_problems
from postlab.runs.seed_walk import Walk
from postlab.runs.summary_stream import first_summary_difference
from postlab.runs.verdicts import QUICK, Check

if TYPE_CHECKING:
    from postlab.plan.frozen import LoadedPlan
    from postlab.plan.schema import Plan


@dataclass(frozen=True, kw_only=True)
class Verifying:
    """What every check may read: the run, its plan (None where the record's is not found),
    the checks made before the others, and the walk over the seeds."""

    files: RunFiles
    record: Record
    folder: Path
    plan: LoadedPlan | None
    #: the plan file against the record, made first: the other checks need its plan
    plan_check: Check
    #: a chunked record's row files against its manifest; None for a record without chunks
    row_files: Check | None
    device: str
    expect: str | None
    quick: bool
    #: empty for the checks made before the walk
    seen: Walk = field(default_factory=Walk)

    @property
    def typed(self) -> Plan | None:
        return self.plan.model if self.plan is not None else None


@dataclass(frozen=True, kw_only=True)
class CheckKind:
    """A registered check: its function (None: no line for this run) and when it runs."""

    run: Callable[[Verifying], Check | None]
    #: made before the walk over the seeds, which may rebuild what it checks
    before_walk: bool = False
    #: reads the run's own files: skipped, saying why, when the folder's layout or its row
    #: files are not the ones the record names
    gated: bool = False


#: Every check, in the order ``postlab verify`` lists them.
CHECKS: Registry[CheckKind] = Registry("verify check")


def check(name: str, *, before_walk: bool = False, gated: bool = False
          ) -> Callable[[Callable[[Verifying], Check | None]],
                        Callable[[Verifying], Check | None]]:
    """Register a check under ``name``, listed after those registered before it."""

    def add(run: Callable[[Verifying], Check | None]) -> Callable[[Verifying], Check | None]:
        CHECKS.register(name)(CheckKind(run=run, before_walk=before_walk, gated=gated))
        return run

    return add


@check("record", gated=True)
def _completeness(v: Verifying) -> Check:
    """Everything a postlab record must carry is there; a foreign record is named as such."""
    record, seen = v.record, v.seen
    if not record.made_by_postlab:
        return Check(name="record", status="fail",
                     detail="made by another program (no postlab_version): it carries no "
                            "digests, numeric environment or fingerprint, so it cannot be "
                            "verified; what can be checked is checked below")
    # a record never holds null: a field it lacks reads as None (its seeds are always there,
    # inline or named by its manifest)
    missing = [f"field {key}" for key in POSTLAB_FIELDS if getattr(record, key) is None]
    missing += seen.missing
    if missing:
        shown = "; ".join(missing[:6]) + (f"; and {len(missing) - 6} more"
                                          if len(missing) > 6 else "")
        return Check(name="record", status="fail", detail=f"incomplete: {shown}")
    return Check(name="record", status="pass",
                 detail="a complete postlab record: provenance, digests and a checkpoint "
                        "entry for every stage of every seed")


@check("plan")
def _plan(v: Verifying) -> Check:
    """The plan beside the record (or the teaching plan) is the one it names."""
    return v.plan_check


@check("model file", before_walk=True)
def _model_file(v: Verifying) -> Check | None:
    """A pretrained plan's GGUF file has the sha256 the plan pins (a file that differs is
    refused in one line, as a run refuses it); None (no line) for other policies. Made before
    the walk, which rebuilds the model from it."""
    typed = v.typed
    if typed is None or policy_kind(typed) != "pretrained":
        return None
    from postlab.policies.pretrained import gguf_file, pretrained_fields

    if pretrained_fields(typed).gguf is None:
        return None
    path = gguf_file(typed)
    assert path is not None
    return Check(name="model file", status="pass", detail=(
        f"{path.name} has the plan's sha256 {pretrained_fields(typed).sha256[:16]}…; its "
        "dequantised weights are the base every adapter checkpoint names"))


@check("row files")
def _row_files(v: Verifying) -> Check | None:
    """A chunked record's row files are its manifest's (None, no line, without chunks)."""
    return v.row_files


@check("tokenizer")
def _tokenizer(v: Verifying) -> Check | None:
    """A trained tokenizer's file is the one the record names and the plan trains; None (no
    line) for a run that reads characters."""
    record, typed, folder = v.record, v.typed, v.folder
    from postlab.policies.tokenizers import TOKENIZER_FILE, tokenizer_sha256, uses_bpe

    recorded = record.tokenizer_sha256
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


@check("registration")
def _registration(v: Verifying) -> Check | None:
    """The registration the record names is the file beside it, sound for the plan, and made
    before training began; None (no line) where there is neither."""
    record, plan, folder = v.record, v.plan, v.folder
    from postlab.plan.registration import REGISTRATION_FILE
    from postlab.records.opened import registration_of

    named = record.registration
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
        f"{named.registered_at}, before training began {named.training_started_at}; "
        f"{REGISTRATION_FILE} has the recorded sha256 {named.sha256[:16]}…"))


@check("checkpoint hashes", gated=True)
def _checkpoint_hashes(v: Verifying) -> Check:
    """Each checkpoint has its recorded sha256, checked before it is loaded."""
    seen = v.seen
    total = seen.checkpoints
    return Check(name="checkpoint hashes",
                 status="fail" if seen.hash_problems or not total else "pass",
                 detail="; ".join(seen.hash_problems) if seen.hash_problems else
                 (f"{total} checkpoints match their recorded sha256 (checked before loading)"
                  if total else "the record lists no checkpoints"))


@check("checkpoint re-evaluation", gated=True)
def _checkpoint_reevaluation(v: Verifying) -> Check:
    """Each checkpoint, reloaded and evaluated again, gives its recorded rows."""
    seen = v.seen
    if v.quick:
        return Check(name="checkpoint re-evaluation", status="skip", detail=QUICK)
    if v.typed is None:
        return Check(name="checkpoint re-evaluation", status="skip",
                     detail="needs the record's plan")
    return Check(name="checkpoint re-evaluation",
                 status="fail" if seen.eval_problems else "pass",
                 detail="; ".join(seen.eval_problems) if seen.eval_problems else
                 f"{seen.reloaded} checkpoints reloaded and re-evaluated: every row "
                 f"equal{_cost(seen)}")


def _cost(seen: Walk) -> str:
    """What re-evaluation cost a seed, so a user can price verifying a larger run (and
    choose --quick)."""
    if not seen.seeds:
        return ""
    return (f" (reloading and re-evaluating took {seen.evaluation_seconds / seen.seeds:.2f} s "
            "a seed)")


@check("summary", gated=True)
def _summary(v: Verifying) -> Check:
    """summary.json is, byte for byte, the summary of the raw rows."""
    seen, plan, folder = v.seen, v.typed, v.folder
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
                        + first_summary_difference(stored, seen.summary))


@check("counts", gated=True)
def _counts(v: Verifying) -> Check:
    """Seeds, arms, steps and rows fit the plan."""
    if v.typed is None:
        return Check(name="counts", status="skip", detail="needs the record's plan")
    problems = v.seen.plan_problems
    return Check(name="counts", status="fail" if problems else "pass",
                 detail="; ".join(problems[:5]) if problems else
                 "seeds, arms, steps, rows per step and samples per question fit the plan")


@check("provenance")
def _provenance(v: Verifying) -> Check:
    """Provenance values must be the ones this plan can produce."""
    record, plan = v.record, v.typed
    if plan is None:
        return Check(name="provenance", status="skip", detail="needs the record's plan")
    problems = []
    if record.threads is not None and record.threads != plan.threads:
        problems.append(f"threads {record.threads}, the plan sets {plan.threads}")
    recorded = record.numerics
    if recorded is not None and recorded.threads != plan.threads:
        problems.append(f"numerics.threads {recorded.threads}, the plan sets "
                        f"{plan.threads}")
    if recorded is not None and not recorded.deterministic:
        problems.append("deterministic algorithms were off, which postlab never does")
    if record.parameters is not None:
        expected = build_policy(plan).parameter_count()
        if record.parameters != expected:
            problems.append(f"parameters {record.parameters}, the plan's model has "
                            f"{expected}")
    if recorded is not None:
        problems += pin_problems(recorded)
    if record.workers is not None and record.wall_seconds is not None \
            and record.wall_seconds <= 0:
        problems.append(f"wall_seconds {record.wall_seconds} is not a duration")
    if problems:
        return Check(name="provenance", status="fail", detail="; ".join(problems))
    return Check(name="provenance", status="pass",
                 detail="threads, parameter count and determinism fit the plan")


@check("raw rows", gated=True)
def _digests(v: Verifying) -> Check:
    """Every SFT loss, evaluation split and RL step matches its digest."""
    record, seen = v.record, v.seen
    problems, absent = seen.digest_problems, seen.without_digests
    if absent and not record.made_by_postlab:
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


@check("tools", gated=True)
def _tools(v: Verifying) -> Check | None:
    """An agent run's every tool call is run again with fresh tools (their budgets, the
    question's answer) and must answer what the record holds; None (no line) for runs
    without tools. The record names the version of each tool that answered; a tool
    installed at another version is named beside it (a warning while every output is
    still the same, a failure where one differs)."""
    plan = v.typed
    if plan is None or plan.agent is None:
        return None
    from postlab.records.blocks import iter_run_rows
    from postlab.tasks.episodes import OUTPUT_OPEN, rerun_tools
    from postlab.tasks.registry import task_for
    from postlab.tasks.tools import tool_for

    task = task_for(plan)
    tools = list(plan.agent.tools)
    budgets = dict(plan.agent.tool_budgets or {})
    recorded = v.record.tools or {}
    versions = ", ".join(f"{name} {tool_for(name).version}" for name in tools)
    moved = [f"{name} {recorded[name]} recorded, {tool_for(name).version} installed"
             for name in tools if name in recorded and recorded[name] != tool_for(name).version]
    unnamed = [name for name in tools if name not in recorded]
    calls, problems, index, last = 0, [], 0, None
    for run in v.record.runs:
        for place, row in iter_run_rows(run):
            index, last = (index + 1 if place == last else 0), place  # its place in its block
            calls += row.text.count(OUTPUT_OPEN)
            where = (f"{place.stage} {place.split} {place.decoding}" if place.step is None
                     else f"{place.stage} step {place.step}")
            problems += [f"seed {place.seed}, {where} row {index}, {problem}" for problem in
                         rerun_tools(row.text, task.question(row.pair), tools, budgets)]
    if problems:
        return Check(name="tools", status="fail", detail="; ".join(moved + problems[:3]) + (
            f"; and {len(problems) - 3} more" if len(problems) > 3 else ""))
    detail = f"{calls} tool calls run again ({versions}): every output is the tool's"
    if moved or unnamed:
        named = moved + ([f"the record names no version of {', '.join(unnamed)}"]
                         if unnamed else [])
        return Check(name="tools", status="warn", detail=f"{detail}; {'; '.join(named)}")
    return Check(name="tools", status="pass", detail=detail)


@check("fingerprint", gated=True)
def _fingerprint(v: Verifying) -> Check:
    """Both fingerprints, against the one the user noted (``expect``: the results
    fingerprint, or the run fingerprint) or else against fingerprint.txt."""
    files, record, folder, expect, seen = v.files, v.record, v.folder, v.expect, v.seen
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


@check("environment")
def _environment(v: Verifying) -> Check:
    """The numeric environment then and now (the plan's threads and precision, here)."""
    typed = v.typed
    threads = typed.threads if typed is not None else 1
    bf16 = typed is not None and typed.precision == "bf16"
    dtype = "bfloat16" if bf16 else "float32"
    return environment_check(v.record, numerics.describe(
        threads, numerics.current_pin(), device=v.device, dtype=dtype))


@check("source")
def _source(v: Verifying) -> Check:
    """postlab's source is the one that recorded the run, file by file."""
    from postlab.machine.provenance import source_hashes

    record = v.record
    recorded = record.source_sha256
    if recorded is None:
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
        version = "?" if record.postlab_version is None else record.postlab_version
        return Check(name="source", status="warn",
                     detail=f"postlab source differs from the recording version {version}: "
                            + "; ".join(parts))
    return Check(name="source", status="pass", detail="postlab's source is the recording one")
