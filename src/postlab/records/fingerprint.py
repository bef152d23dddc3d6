"""Two sha256 for a run: its results, and every file of it.

The **results fingerprint** covers what the run computed: ``plan.json``, ``summary.json``,
``tokenizer.json`` where the record names a trained tokenizer, each seed's raw rows and
statistics (the sha256 of the digests recomputed from them, so it does not depend on how the
record lays them out), and the checkpoint files, sorted by name. Two runs of the same plan on
the same code path have the same one, wherever and whenever they ran; ``postlab verify
--expect`` and ``postlab reproduce`` use it. The **run fingerprint** below covers every file
of the run byte for byte, provenance included (wall time, machine, registration), so it differs
between two runs of the same plan.

The per-part digests inside a record find accidents and careless edits, but someone who edits
a row can recompute them, and the checkpoint hashes with them. The fingerprint is the answer:
a hash over the bytes of every file of the run, noted by whoever trusts the run (in a paper, a
log, a message) when it finishes. ``postlab verify --expect FINGERPRINT`` recomputes it, so
any change to any of those files is found, however carefully the inner hashes were rewritten.

The fingerprint covers ``plan.json``, the record's JSON (decompressed, so a gzipped copy keeps
the fingerprint), ``summary.json``, ``tokenizer.json`` where the record names a trained
tokenizer, ``registration.json`` where the record names a registration, the record's chunk
files (``rows/``) where it has them, and the checkpoint files
the record names, sorted by name.
Nothing else in the folder is evidence: live training logs (``logs/``, ``engines.steplog``) are
a view of numbers the record holds, and are neither hashed nor verified.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postlab.errors import UserError
from postlab.jsonio import read_bytes
from postlab.records.models import Record, SeedEntry
from postlab.records.record import record_data

#: The file beside a run that keeps its fingerprint (a convenience; ``--expect`` is the check).
FINGERPRINT_FILE = "fingerprint.txt"
#: Versions the manifest layout, so a later layout cannot collide with this one.
MANIFEST_HEADER = "postlab run fingerprint v1\n"
RESULTS_HEADER = "postlab results fingerprint v1\n"
#: How fingerprint.txt marks its results line (the run fingerprint stands alone on the first,
#: as files written before results fingerprints have it).
RESULTS_MARK = "results"


@dataclass(frozen=True, kw_only=True)
class Fingerprint:
    value: str
    parts: tuple[tuple[str, str], ...]  # (file name, sha256), in manifest order


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_fingerprint(folder: Path, record_path: Path, record: Record, *,
                    checkpoint_files: Iterable[str] | None = None) -> Fingerprint:
    """Hash every file of a run; UserError if one of them cannot be read.

    ``checkpoint_files``: the checkpoint files the record's seeds name, when the caller has
    already gathered them on its own walk (a chunked record's seeds are then not decoded
    again just for their names)."""
    raw = record_data(read_bytes(record_path, "record"), str(record_path))
    parts = [("plan.json", _sha256(read_bytes(folder / "plan.json", "plan"))),
             ("record.json", _sha256(raw)),
             ("summary.json", _sha256(read_bytes(folder / "summary.json", "summary")))]
    if record.tokenizer_sha256 is not None:
        parts.append(("tokenizer.json", _sha256(read_bytes(folder / "tokenizer.json",
                                                           "tokenizer"))))
    if record.registration is not None:
        parts.append(("registration.json", _sha256(read_bytes(folder / "registration.json",
                                                              "registration"))))
    # a chunked record's chunks: named with their digests in record.json, hashed here too
    parts += [(chunk["file"], _sha256(read_bytes(folder / chunk["file"], "record chunk")))
              for chunk in sorted(record.chunks or [], key=lambda c: c["file"])]
    if checkpoint_files is None:
        checkpoint_files = named_checkpoints(record.runs)
    names = sorted(set(checkpoint_files))
    parts += [(name, _sha256(read_bytes(folder / name, "checkpoint"))) for name in names]
    manifest = MANIFEST_HEADER + "".join(f"{digest}  {name}\n" for name, digest in parts)
    return Fingerprint(value=_sha256(manifest.encode()), parts=tuple(parts))


def seed_results_sha256(seed: int, digests: dict[str, Any]) -> str:
    """One seed's results: the sha256 of the digests of its rows and statistics
    (``records.integrity``; ones known to be the rows': taken as the rows were made, checked
    against them, or recomputed from them), so equal rows give equal hashes in either
    layout."""
    text = json.dumps({"seed": seed, "digests": digests}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return _sha256(text.encode())


def results_fingerprint(folder: Path, record: Record, *,
                        seeds: list[tuple[int, str]] | None = None,
                        checkpoint_files: Iterable[str] | None = None) -> Fingerprint:
    """The results fingerprint (see the module docstring). ``seeds``: each seed's
    :func:`seed_results_sha256`, in record order, where a caller's walk already took them;
    ``checkpoint_files`` likewise."""
    if seeds is None:
        # one walk, one seed at a time: a chunked record's seeds are never all held at once
        seeds, named = [], set()
        from postlab.records.integrity import run_digests

        for run in record.runs:
            seeds.append((run.seed, seed_results_sha256(run.seed, run_digests(run.data()))))
            named |= named_checkpoints([run])
        if checkpoint_files is None:
            checkpoint_files = named
    parts = [("plan.json", _sha256(read_bytes(folder / "plan.json", "plan"))),
             ("summary.json", _sha256(read_bytes(folder / "summary.json", "summary")))]
    if record.tokenizer_sha256 is not None:
        parts.append(("tokenizer.json", _sha256(read_bytes(folder / "tokenizer.json",
                                                           "tokenizer"))))
    parts += [(f"seed {seed}", digest) for seed, digest in seeds]
    if checkpoint_files is None:
        checkpoint_files = named_checkpoints(record.runs)
    parts += [(name, _sha256(read_bytes(folder / name, "checkpoint")))
              for name in sorted(set(checkpoint_files))]
    manifest = RESULTS_HEADER + "".join(f"{digest}  {name}\n" for name, digest in parts)
    return Fingerprint(value=_sha256(manifest.encode()), parts=tuple(parts))


def named_checkpoints(runs: Iterable[SeedEntry]) -> set[str]:
    """The checkpoint files the given seeds' entries name."""
    return {info.file for run in runs for info in (run.checkpoints or {}).values()}


def read_fingerprint_file(folder: Path) -> str | None:
    """The run fingerprint kept beside a run, or None if there is none."""
    kept = read_fingerprints(folder)
    return None if kept is None else kept[0]


def read_fingerprints(folder: Path) -> tuple[str, str | None] | None:
    """The run and results fingerprints kept beside a run (the results one None in a file
    written before there were two), or None if there is no file."""
    path = folder / FINGERPRINT_FILE
    if not path.exists() and not path.is_symlink():
        return None
    raw = read_bytes(path, "fingerprint")
    lines = [line.split() for line in raw.decode("ascii", errors="replace").splitlines()]
    run = lines[0][0] if lines and lines[0] else ""
    results = next((line[0] for line in lines[1:] if line[1:] == [RESULTS_MARK]), None)
    # exactly what postlab writes, or refused: a file read leniently could lose its results
    # line to an edit (a newline made a space) and then match as a file of the older form
    if raw != fingerprint_file_bytes(run, results):
        raise UserError(f"{path}: not a fingerprint file as postlab writes it (the run "
                        "fingerprint on the first line, the results one marked on the next)")
    return run, results


def fingerprint_file_bytes(value: str, results: str | None = None) -> bytes:
    """fingerprint.txt: the run fingerprint, then the results one marked as such."""
    return (f"{value}\n" + (f"{results} {RESULTS_MARK}\n" if results else "")).encode()


def check_expected(text: str) -> str:
    """A fingerprint as given on the command line: 64 hexadecimal digits."""
    value = text.strip().lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise UserError(f"--expect {text!r}: a fingerprint is 64 hexadecimal digits")
    return value
