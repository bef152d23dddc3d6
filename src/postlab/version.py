"""postlab's version, named in every record and exported table (its source, file by file, is
:func:`postlab.machine.provenance.source_hashes`)."""

from __future__ import annotations

__version__ = "0.1.0"
