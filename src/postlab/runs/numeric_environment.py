"""The numeric environment a record names, compared with this machine's: what decides the
bits (torch, Python, the CPU code path and its pins) is told apart from what does not."""

from __future__ import annotations

import platform
from typing import Any

import torch

from postlab.machine import numerics
from postlab.records.models import Numerics, Record
from postlab.runs.verdicts import Check


def environment_check(record: Record, now: dict[str, Any]) -> Check:
    """What decides the bits, then and now: each difference named."""
    then = {"torch": record.torch, "python": record.python}
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    deciding = [f"{key} {then[key]} then, {value} now" for key, value in versions.items()
                if then[key] != value]
    if record.numerics is not None:
        # the machine layer compares the numerics as the record holds them
        more, other = numerics.differences(record.data()["numerics"], now)
        deciding += more
    else:
        other = []
        deciding.append("the record does not name its numeric environment (CPU capability, "
                        "BLAS code path), so a difference there cannot be ruled out")
    if record.platform != platform.platform():
        other.append(f"platform {record.platform} then, {platform.platform()} now")
    if deciding:
        return Check(name="environment", status="warn",
                     detail="; ".join(deciding) + " (this can legitimately change bits)"
                            + (f"; also {'; '.join(other)}" if other else ""))
    detail = (f"same torch, Python and numerics (code path {now['code_path']}, "
              f"{now['cpu_capability']}, BLAS {now['blas_code_path']})")
    if other:
        detail += f"; differs only in what does not decide bits: {'; '.join(other)}"
    return Check(name="environment", status="pass", detail=detail)


def pin_problems(recorded: Numerics) -> list[str]:
    """A pinned record names its path's exact settings and kernels; a native one pins none."""
    name = recorded.code_path
    if name == numerics.NATIVE:
        return [] if recorded.pinned == {} else ["a native record names pinned settings"]
    path = numerics.CODE_PATHS[name]
    problems = []
    if recorded.pinned != path.environment:
        problems.append(f"code path {name} is pinned by {path.environment}, the record says "
                        f"{recorded.pinned}")
    if recorded.cpu_capability != path.capability:
        problems.append(f"code path {name} runs {path.capability} kernels, the record says "
                        f"{recorded.cpu_capability}")
    return problems
