"""What decides the bits of a CPU run, and how to pin it so another machine gets the same bits.

On CPU, float32 results depend on which vectorised kernels compute them. Three libraries pick
their kernels once, when they load, from the CPU and from environment variables:

- PyTorch's ATen dispatch (``ATEN_CPU_CAPABILITY``: DEFAULT, AVX2 or AVX512 on x86-64): the
  softmax, log-softmax, reductions and element-wise kernels;
- the BLAS behind matrix products: Intel MKL, whose conditional-reproducibility branch
  (``MKL_CBWR``) fixes its code path so that every CPU able to run that branch gives the same
  results;
- oneDNN (``ONEDNN_MAX_CPU_ISA``), where an operator uses it.

The thread count and torch's deterministic-algorithms switch decide the rest. A *code path*
names one choice for all three libraries. Pinning it means setting those variables before
torch is imported: worker processes inherit them, so every process of a run computes the same
way. A machine whose CPU lacks the instructions of a path cannot run it, and a record made on
that path can then only be compared, not reproduced bit for bit.

This module imports torch only inside :func:`describe`, so the command line can pin a path
first.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postlab.errors import UserError
from postlab.registry import Registry

#: The environment variables a pin sets; a pinned run records their values.
PIN_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")

#: ``--cpu-path`` choices besides the registered path names.
PORTABLE = "portable"  # the widest-supported vector path of this architecture (the default)
NATIVE = "native"  # whatever this machine's libraries pick; nothing is pinned


@dataclass(frozen=True, kw_only=True)
class CodePath:
    """One choice of kernels for ATen, MKL and oneDNN, and the CPU flags it needs."""

    name: str
    architecture: str  # platform.machine() where it exists
    capability: str  # what torch.backends.cpu.get_cpu_capability() reports under it
    environment: dict[str, str]  # the variables that pin it
    cpu_flags: tuple[str, ...]  # /proc/cpuinfo flags the instructions need


CODE_PATHS: Registry[CodePath] = Registry("CPU code path")


def _register(path: CodePath) -> None:
    CODE_PATHS.register(path.name)(path)


_register(CodePath(name="default", architecture="x86_64", capability="DEFAULT",
                   environment={"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                                "ONEDNN_MAX_CPU_ISA": "SSE41"},
                   cpu_flags=()))
_register(CodePath(name="avx2", architecture="x86_64", capability="AVX2",
                   environment={"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2",
                                "ONEDNN_MAX_CPU_ISA": "AVX2"},
                   cpu_flags=("avx2", "fma")))
_register(CodePath(name="avx512", architecture="x86_64", capability="AVX512",
                   environment={"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512",
                                "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
                   cpu_flags=("avx512f", "avx512bw", "avx512vl", "avx512dq")))
_register(CodePath(name="aarch64-default", architecture="aarch64", capability="DEFAULT",
                   environment={"ATEN_CPU_CAPABILITY": "default"}, cpu_flags=()))
_register(CodePath(name="sve256", architecture="aarch64", capability="SVE256",
                   environment={"ATEN_CPU_CAPABILITY": "sve256"}, cpu_flags=("sve",)))

#: The path ``portable`` means on each architecture: the widest one that current servers of
#: that architecture all run (measured in bench/bench_code_paths.py to cost nothing here).
PORTABLE_PATHS = {"x86_64": "avx2", "aarch64": "aarch64-default"}


def machine() -> str:
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""


def cpu_model() -> str:
    """The CPU's marketing name, as the kernel reports it (for the record, not for decisions)."""
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    return platform.processor() or "unknown"


def cpu_flags() -> frozenset[str] | None:
    """The CPU's instruction-set flags, or None where the system does not say."""
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def supported_paths() -> list[str] | None:
    """Registered paths this machine's CPU can run, or None if its flags are unknown."""
    flags = cpu_flags()
    if flags is None:
        return None
    here = machine()
    return [p.name for p in CODE_PATHS.values()
            if p.architecture == here and all(f in flags for f in p.cpu_flags)]


def portable_path() -> str | None:
    """The path ``portable`` pins here: the architecture's portable path if this CPU runs it,
    else the architecture's plain path; None on an architecture with no registered path."""
    here = machine()
    wanted = PORTABLE_PATHS.get(here)
    if wanted is None:
        return None
    supported = supported_paths()
    if supported is None or wanted in supported:
        return wanted
    plain = [p.name for p in CODE_PATHS.values() if p.architecture == here and not p.cpu_flags]
    return plain[0] if plain else None


def resolve_choice(choice: str) -> str | None:
    """The registered path a ``--cpu-path`` choice means; None for ``native``."""
    if choice == NATIVE:
        return None
    if choice == PORTABLE:
        return portable_path()
    if choice not in CODE_PATHS:
        known = ", ".join([PORTABLE, NATIVE, *CODE_PATHS.names()])
        raise UserError(f"--cpu-path {choice}: unknown; choose one of {known}")
    return choice


def cannot_run(name: str) -> str | None:
    """Why this machine cannot run a registered path, or None if it can (or cannot tell)."""
    path = CODE_PATHS[name]
    here = machine()
    if path.architecture != here:
        return f"it is for {path.architecture} CPUs and this machine is {here}"
    flags = cpu_flags()
    if flags is None:
        return None
    missing = [f for f in path.cpu_flags if f not in flags]
    if missing:
        return f"this CPU lacks {', '.join(missing)}"
    return None


def describe_supported() -> str:
    supported = supported_paths()
    return ", ".join(supported) if supported else "none that postlab knows"


def pin(name: str | None) -> dict[str, str]:
    """Pin a registered path (None: pin nothing) for this process and every worker it starts.

    Must run before torch is imported; if torch is already loaded, the pin is accepted only
    when it is already in force. Returns the variables set.
    """
    if name is None:
        return {}
    why = cannot_run(name)
    if why is not None:
        raise UserError(f"CPU code path {name} cannot run here: {why}; this machine can run "
                        f"{describe_supported()}")
    path = CODE_PATHS[name]
    if "torch" in sys.modules:
        current = _loaded_capability()
        mismatched = current != path.capability or any(
            os.environ.get(k) != v for k, v in path.environment.items())
        if mismatched:
            raise UserError(f"CPU code path {name} must be chosen before torch loads, and this "
                            f"process already runs {current} with "
                            + ", ".join(f"{k}={os.environ.get(k, 'unset')}"
                                        for k in PIN_VARIABLES)
                            + "; run postlab in a new process")
        return dict(path.environment)
    for key in PIN_VARIABLES:
        os.environ.pop(key, None)
    os.environ.update(path.environment)
    return dict(path.environment)


def current_pin() -> str | None:
    """The registered path this process's environment pins, or None (native)."""
    for path in CODE_PATHS.values():
        if path.architecture == machine() and all(
                os.environ.get(key) == path.environment.get(key) for key in PIN_VARIABLES):
            return path.name
    return None


def _loaded_capability() -> str:
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def _blas() -> tuple[str, str]:
    """The BLAS torch was built with and its version, from torch's build description."""
    import torch

    config = torch.__config__.show()
    match = re.search(r"BLAS_INFO=(\w+)", config)
    blas = match.group(1) if match else "unknown"
    version = re.search(r"Math Kernel Library Version ([\d.]+)", config)
    return blas, (version.group(1) if version else "")


def describe(threads: int, pinned: str | None, *, device: str = "cpu",
             dtype: str = "float32") -> dict[str, Any]:
    """The numeric environment of this process, as a record stores it: on CUDA also the GPU,
    its libraries and the determinism settings in force (``cuda``)."""
    import torch

    blas, blas_version = _blas()
    described: dict[str, Any] = {
        "code_path": pinned if pinned is not None else NATIVE,
        "pinned": {k: os.environ[k] for k in PIN_VARIABLES if k in os.environ}
        if pinned is not None else {},
        "cpu_capability": _loaded_capability(),
        "cpu_model": cpu_model(),
        "machine": machine(),
        "cpu_supports": supported_paths() or [],
        "blas": f"{blas} {blas_version}".strip(),
        "blas_code_path": os.environ.get("MKL_CBWR", "auto") if blas == "mkl" else "auto",
        "onednn_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "auto"),
        "threads": threads,
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "device": device,
        "dtype": dtype,
    }
    if device == "cuda":
        from postlab.machine.device import describe_cuda

        described["cuda"] = describe_cuda()
    return described


#: Numerics fields that decide the bits, with their names in messages.
DECIDING = {"cpu_capability": "torch CPU capability", "blas": "BLAS",
            "blas_code_path": "BLAS code path (MKL_CBWR)", "onednn_isa": "oneDNN ISA",
            "threads": "threads", "deterministic": "deterministic algorithms",
            "device": "device", "dtype": "dtype"}
#: Numerics fields recorded for the reader that do not by themselves change a bit.
INFORMATIVE = {"cpu_model": "CPU model", "machine": "architecture"}


def differences(then: dict[str, Any], now: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(bit-deciding differences, other differences) between two numerics entries."""
    from postlab.machine.device import CUDA_FIELDS

    def lines(fields: dict[str, str], a: dict[str, Any], b: dict[str, Any]) -> list[str]:
        return [f"{label} {a.get(key)!s} then, {b.get(key)!s} now"
                for key, label in fields.items() if a.get(key) != b.get(key)]

    deciding = lines(DECIDING, then, now)
    cuda_then, cuda_now = then.get("cuda"), now.get("cuda")
    if isinstance(cuda_then, dict) and isinstance(cuda_now, dict):
        deciding += lines(CUDA_FIELDS, cuda_then, cuda_now)
    return deciding, lines(INFORMATIVE, then, now)


def recorded_path(numerics: dict[str, Any] | None) -> str | None:
    """The registered path a record was pinned to, or None (native, or not recorded)."""
    if not numerics:
        return None
    name = numerics.get("code_path")
    return name if isinstance(name, str) and name in CODE_PATHS else None


def pin_native_like(numerics: dict[str, Any]) -> dict[str, str]:
    """Re-create a native (unpinned) record's settings: its capability and library choices.

    A native record names the capability torch picked and what MKL and oneDNN were left at;
    setting exactly those reproduces it on a machine that can run that capability.
    """
    capability = str(numerics.get("cpu_capability", ""))
    matches = [p for p in CODE_PATHS.values()
               if p.capability == capability and p.architecture == numerics.get("machine")]
    if not matches:
        raise UserError(f"the record was made with torch CPU capability {capability!r} on "
                        f"{numerics.get('machine')}, which postlab cannot pin")
    path = matches[0]
    why = cannot_run(path.name)
    if why is not None:
        raise UserError(f"the record needs torch CPU capability {capability} ({why}); this "
                        f"machine can run {describe_supported()}")
    wanted = {"ATEN_CPU_CAPABILITY": path.environment["ATEN_CPU_CAPABILITY"]}
    for key, field in (("MKL_CBWR", "blas_code_path"), ("ONEDNN_MAX_CPU_ISA", "onednn_isa")):
        value = numerics.get(field, "auto")
        if value != "auto":
            wanted[key] = str(value)
    if "torch" in sys.modules:
        current = _loaded_capability()
        if current != capability or any(os.environ.get(k) != wanted.get(k)
                                        for k in PIN_VARIABLES):
            raise UserError(f"the record's settings must be chosen before torch loads, and "
                            f"this process already runs {current}; run postlab in a new "
                            "process")
        return wanted
    for key in PIN_VARIABLES:
        os.environ.pop(key, None)
    os.environ.update(wanted)
    return wanted
