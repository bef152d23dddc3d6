"""An estimate in words: counts, bytes and durations written for a person, and the two lines
``postlab run`` and ``postlab estimate`` print."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from postlab.runs.counts import ComputeEstimate


def format_count(n: float) -> str:
    """Thousands separators up to ten million, then a short form."""
    if n < 10_000_000:
        return f"{round(n):,}"
    for size, suffix in ((1e15, " P"), (1e12, " T"), (1e9, " G"), (1e6, " M")):
        if n >= size:
            value = n / size
            return f"{value:,.1f}{suffix}" if value < 1000 else f"{n:.2e}"
    return f"{n:,.0f}"  # pragma: no cover - the loop always returns


def format_bytes(n: float) -> str:
    for size, unit in ((2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"),
                       (2**10, "KiB")):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:,.0f} {unit}"
    return f"{n:.0f} B"


def format_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.1f} days"


def batch_text(est: ComputeEstimate) -> str:
    """The largest batch in one phrase, as refusals and estimates name it."""
    return (f"{est.batch_kind} {format_count(est.batch_sequences)} x {est.batch_positions} "
            f"positions, ~{format_bytes(est.batch_bytes)}")


def render_estimate(est: ComputeEstimate) -> str:
    """Two lines for a person: what the run does, and what it needs here."""
    arms = "arm" if est.arms == 1 else "arms"
    seeds = "seed" if est.seeds == 1 else "seeds"
    first = (f"estimate: {est.seeds} {seeds} x {est.arms} {arms}; "
             f"{format_count(est.completions)} completions, <= {format_count(est.tokens)} "
             f"tokens, {format_count(est.gradient_steps)} gradient steps, "
             f"{format_count(est.parameters)} parameters")
    second = f"largest batch {batch_text(est)}; memory ~{format_bytes(est.memory_bytes)}"
    if est.base_bytes is not None:
        second += f" ({format_bytes(est.base_bytes)} of it before training)"
    if est.seconds is None:
        second += "; time not calibrated"
    elif est.calibration_reused_from is not None:
        second += (f"; about {format_seconds(est.seconds)} on one worker here (calibration of "
                   f"{est.calibration_reused_from} reused; --recalibrate measures again)")
    else:
        second += (f"; about {format_seconds(est.seconds)} on one worker here (calibrated in "
                   f"{est.calibration_seconds or 0:.1f} s)")
    return f"{first}\n{second}"
