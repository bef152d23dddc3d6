"""The size limits a plan must keep unless confirmed with ``--allow-large``: each guards
against a valid plan that would train for days or exhaust memory hours in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from postlab.runs.estimate_text import batch_text, format_bytes, format_count, format_seconds

if TYPE_CHECKING:
    from postlab.runs.counts import ComputeEstimate

GIB = 2**30

#: Rough peak memory of one worker: the process, the largest batch, the model's copies and one
#: seed's entry. Half of a 16 GB laptop; beyond it the machine swaps or the out-of-memory
#: killer ends the run, often hours in.
MAX_MEMORY_BYTES = 8 * GIB
#: Tokens generated (upper bound). Decoding is one Python step per token and every completion
#: becomes a record row, so 1e9 tokens is days of one core whatever the model.
MAX_TOKENS = 10**9
#: Rows the record keeps (RL rollouts and one evaluation per stage). They are written once,
#: in compressed chunks (about 3 bytes a row), and every reader walks them all in Python,
#: seed by seed: 5 million rows, 140 teaching seed-runs, take about a minute of each
#: report's time, so more is refused unless confirmed.
MAX_RECORD_ROWS = 5_000_000
#: Gradient steps, all seeds and arms. About 300 times the teaching plan's; even the smallest
#: model needs about a millisecond a step here, and each step's loss or statistics is recorded.
MAX_GRADIENT_STEPS = 1_000_000
#: Model parameters. Each worker holds about eight float32 copies (weights, gradients, Adam's
#: two moments, the KL reference, starting weights, the checkpoint being written), and a run
#: starts one worker per core by default: 25 million parameters are ~0.8 GB per worker. Every
#: token trained or generated also costs about this many multiply-adds.
MAX_PARAMETERS = 25_000_000
#: Estimated wall time on one worker: a day. Longer plans rarely finish on a laptop (sleep,
#: updates, battery) and are usually a mistyped count; confirm them explicitly.
MAX_SECONDS = 24 * 3600

ALLOW_FLAG = "--allow-large"


def size_problems(est: ComputeEstimate) -> list[str]:
    """What exceeds a limit, with the figures; the time limit only once calibrated."""
    problems = []
    if est.memory_bytes > MAX_MEMORY_BYTES:
        problems.append(f"memory ~{format_bytes(est.memory_bytes)} (largest batch: "
                        f"{batch_text(est)}) exceeds {format_bytes(MAX_MEMORY_BYTES)}")
    if est.tokens > MAX_TOKENS:
        problems.append(f"up to {format_count(est.tokens)} tokens generated exceeds "
                        f"{format_count(MAX_TOKENS)}")
    if est.record_rows > MAX_RECORD_ROWS:
        problems.append(f"{format_count(est.record_rows)} record rows exceeds "
                        f"{format_count(MAX_RECORD_ROWS)}")
    if est.gradient_steps > MAX_GRADIENT_STEPS:
        problems.append(f"{format_count(est.gradient_steps)} gradient steps exceeds "
                        f"{format_count(MAX_GRADIENT_STEPS)}")
    if est.parameters > MAX_PARAMETERS and not est.size_from_file:
        problems.append(f"{format_count(est.parameters)} model parameters exceeds "
                        f"{format_count(MAX_PARAMETERS)}")
    if est.seconds is not None and est.seconds > MAX_SECONDS:
        problems.append(f"about {format_seconds(est.seconds)} on one worker exceeds "
                        f"{format_seconds(MAX_SECONDS)}")
    return problems
