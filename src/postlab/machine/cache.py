"""The user's cache folder, where postlab keeps what it may recompute: remembered
verifications (:mod:`postlab.runs.remembered`) and calibrations
(:mod:`postlab.runs.calibrations`). Nothing in it is evidence; deleting it costs time only."""

from __future__ import annotations

import os
from pathlib import Path

#: Where the cache is kept, if set (tests point it at a folder of their own).
CACHE_VARIABLE = "POSTLAB_CACHE_DIR"


def cache_dir() -> Path | None:
    """``POSTLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/postlab``, else ``~/.cache/postlab``;
    None where no home folder can be found (then nothing is kept)."""
    explicit = os.environ.get(CACHE_VARIABLE)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:
            return None
    return Path(base) / "postlab"
