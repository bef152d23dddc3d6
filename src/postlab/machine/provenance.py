"""What made a result: postlab's source, file by file, and the software and machine around it.

A record names them so a reader knows what produced it, and the memos that skip repeated work
(a verification's, a calibration's, a proof's) key on them, so a change of code or library
makes the work run again. Kept here, beside the numeric settings (:mod:`.numerics`), so every
layer above reads them one way.
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path
from typing import Any

from postlab.jsonio import dump_json
from postlab.machine import numerics
from postlab.version import __version__


def source_hashes() -> dict[str, str]:
    """sha256 of each of postlab's source files, so a record names the code that made it."""
    root = Path(__file__).resolve().parent.parent  # the postlab package
    return {str(p.relative_to(root.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.py"))}


def source_digest() -> str:
    """One sha256 over :func:`source_hashes`: the code, for a memo's key."""
    return hashlib.sha256(dump_json(source_hashes())).hexdigest()


def software() -> dict[str, str]:
    """The interpreter, torch and the platform: what a memo of computed results keys on."""
    import torch

    return {"torch": torch.__version__, "python": platform.python_version(),
            "platform": platform.platform()}


def run_provenance(*, threads: int, device: str, dtype: str, compute_dtype: str,
                   workers: int) -> dict[str, Any]:
    """The record's description of the code and machine that train a run, in the record's
    order: the device is the run's, ``dtype`` the weights', ``numerics.dtype`` what forward
    passes compute in (bfloat16 under a bf16 plan)."""
    import torch

    return {"source_sha256": source_hashes(),
            "python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(), "device": device, "dtype": dtype,
            "postlab_version": __version__, "threads": threads, "workers": workers,
            "numerics": numerics.describe(threads, numerics.current_pin(), device=device,
                                          dtype=compute_dtype)}
