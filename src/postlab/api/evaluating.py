"""Evaluation without training: ``evaluate`` measures the model a plan starts from.

Every study of a pretrained model starts from its baseline: its held-out success, coverage and
pass@k before any step. ``evaluate`` builds each seed's starting model exactly as a run of the
plan builds it, evaluates it as a run's stages are evaluated (greedy and sampled answers on
every split, the seed's generators), and returns the figures with their intervals
(:mod:`postlab.analysis.baseline`). With ``out_dir``, a new folder keeps the plan's bytes and
``evaluation.json``: every answer, the model's digest and the figures, so each number can be
traced to the outputs it came from.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.api import environment
from postlab.errors import UserError

if TYPE_CHECKING:
    from postlab.plan.schema import Plan

#: The file an evaluation folder keeps its answers and figures in, beside ``plan.json``.
EVALUATION_FILE = "evaluation.json"


def _silent(_: str) -> None:
    """The default ``say``: a script that wants the lines passes ``print``."""


@dataclass(frozen=True, kw_only=True)
class EvaluationResult:
    """The figures (``analysis.baseline.Figure``), per seed's answers, and where they went."""

    plan_sha256: str
    plan: Plan
    figures: list[Any]
    evaluations: list[dict[str, Any]]
    out_dir: Path | None
    seconds: float


def evaluate(plan: str | Path, out_dir: str | Path | None = None, *,
             cpu_path: str | None = None, device: str | None = None,
             say: Any = _silent) -> EvaluationResult:
    """Evaluate the starting model of every seed of ``plan`` on every split; figures for
    the held-out ones. Nothing trains; with ``out_dir`` (a new folder) the answers are
    kept."""
    out = None if out_dir is None else Path(out_dir)
    if out is not None:
        _check_new_folder(out)
    note = environment.pin_for_run(out or Path("."), cpu_path, False)  # before torch loads
    chosen, device_note = environment.device_for_run(out or Path("."), device, False)
    from postlab.plan.frozen import load_plan

    loaded = load_plan(Path(plan))
    typed = loaded.model
    from postlab.policies import build_policy, place_policy

    say(note)
    say(device_note)
    import torch

    from postlab.engines.rollout import evaluate_model
    from postlab.plan.arms import plan_contracts
    from postlab.tasks.registry import answer_function

    start = time.monotonic()
    torch.set_num_threads(typed.threads)
    from postlab.policies.lora import weights_sha256

    evaluations, digests = [], []
    for seed in typed.seeds:
        torch.manual_seed(seed)  # as a run builds the seed's model
        policy = build_policy(typed)
        digests.append(weights_sha256(policy.state_dict()))
        evaluations.append(evaluate_model(place_policy(policy, chosen), typed, seed))
        say(f"seed {seed}: evaluated")
    from postlab.analysis.baseline import baseline_figures

    held_out = [split for split in typed.split if split != "train"]
    figures = baseline_figures(evaluations, held_out, plan_contracts(typed),
                               typed.eval_samples, answer_function(typed))
    if out is not None:
        _keep(out, loaded.raw, typed, evaluations, figures, digests)
    return EvaluationResult(plan_sha256=loaded.sha256, plan=typed, figures=figures,
                            evaluations=evaluations, out_dir=out,
                            seconds=time.monotonic() - start)


def _check_new_folder(out: Path) -> None:
    """Refused before anything is evaluated: an existing path (a dangling link included), or
    a parent folder that is missing or cannot be written."""
    if out.exists() or out.is_symlink():
        raise UserError(f"{out}: already exists; choose a new --out-dir")
    parent = out.absolute().parent
    if not parent.is_dir():
        raise UserError(f"{out}: its parent {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{out}: cannot write in {parent}")


def _keep(out: Path, raw_plan: bytes, plan: Plan, evaluations: list[dict[str, Any]],
          figures: list[Any], digests: list[str]) -> None:
    """The new folder, whole or not at all: written beside it under a hidden name, then
    renamed into place."""
    staging = out.absolute().parent / f".{out.name}.partial-{os.getpid()}"
    try:
        staging.mkdir()
    except OSError as exc:
        raise UserError(f"{out}: cannot create the folder: {exc.strerror}") from None
    try:
        _write(staging, raw_plan, plan, evaluations, figures, digests)
        if out.exists() or out.is_symlink():
            raise UserError(f"{out}: appeared while evaluating; the evaluation is not kept")
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def _write(folder: Path, raw_plan: bytes, plan: Plan,
           evaluations: list[dict[str, Any]], figures: list[Any], digests: list[str]) -> None:
    """The plan's bytes, and the answers with their figures."""
    from postlab.jsonio import dump_json, publish_bytes
    from postlab.version import __version__

    publish_bytes(folder / "plan.json", raw_plan)
    document = {
        "kind": "postlab evaluation", "postlab": __version__,
        "plan_sha256": hashlib.sha256(raw_plan).hexdigest(),
        "seeds": [{"seed": seed, "weights_sha256": digest, "evaluation": evaluation}
                  for seed, digest, evaluation in zip(plan.seeds, digests, evaluations,
                                                      strict=True)],
        "figures": [figure.as_json() for figure in figures],
    }
    publish_bytes(folder / EVALUATION_FILE, dump_json(document, indent=1))
