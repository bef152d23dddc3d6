"""postlab's version, named in every record and exported table, and its source, file by file."""

from __future__ import annotations

import hashlib
from pathlib import Path

__version__ = "0.1.0"


def source_hashes() -> dict[str, str]:
    """sha256 of each of postlab's source files, so a record names the code that made it."""
    root = Path(__file__).resolve().parent  # the postlab package
    return {str(p.relative_to(root.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.py"))}
