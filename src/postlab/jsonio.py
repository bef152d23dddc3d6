"""Strict JSON reading and atomic, never-overwriting file publication.

Every file postlab writes (plans, records, checkpoints) goes through :func:`publish_bytes`: the
bytes are written and synced under a temporary name in the target's folder, then hard-linked to
the final name, which fails if the name exists. A crash at any point leaves either nothing at
the target or the complete file, and an existing file is never replaced.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from postlab.errors import UserError


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Published files get the usual mode (0666 less the umask), not mkstemp's private 0600.
FILE_MODE = 0o666 & ~_current_umask()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON literal {name}")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} overflows a float")
    return value


def parse_json(text: str | bytes, source: str) -> Any:
    """Parse JSON, refusing what Python's json accepts but JSON does not (NaN, duplicate keys,
    numbers too large for a float)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant,
                          parse_float=_finite_float)
    except UnicodeDecodeError as exc:
        raise UserError(f"{source}: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}: malformed JSON at line {exc.lineno} column {exc.colno}: "
                        f"{exc.msg}") from None
    except ValueError as exc:
        raise UserError(f"{source}: {exc}") from None


def read_bytes(path: Path, what: str) -> bytes:
    """Read a whole file, turning OS errors into one-line user errors."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: {what} is a directory, expected a file") from None
    except PermissionError:
        raise UserError(f"{path}: {what} is not readable (permission denied)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read {what}: {exc.strerror}") from None


def read_json(path: Path, what: str) -> tuple[Any, bytes]:
    """Return the parsed value and the exact bytes it came from (hashes are over the bytes)."""
    raw = read_bytes(path, what)
    return parse_json(raw, f"{path}"), raw


def dump_json(value: Any, *, indent: int | None = None) -> bytes:
    """Serialise the way postlab's files are laid out: UTF-8, non-ASCII kept, final newline."""
    return (json.dumps(value, ensure_ascii=False, indent=indent, allow_nan=False) + "\n").encode()


def _write_aside(path: Path, data: bytes) -> Path:
    """Write and sync ``data`` under a temporary name beside ``path``; return that name."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UserError(f"{path}: folder {folder} does not exist")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=folder)
    except PermissionError:
        raise UserError(f"{path}: folder {folder} is not writable (permission denied)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror}") from None
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def publish_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; refuse (UserError) if ``path`` already exists."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        raise UserError(f"{path}: already exists; postlab never overwrites an output")
    tmp = _write_aside(path, data)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise UserError(f"{path}: already exists; postlab never overwrites an output") from None
        except OSError:
            if path.exists():
                raise
            # Creating the temporary file worked, so a failing link means a filesystem without
            # hard links: rename is atomic but could replace a file that appeared since the
            # check above, so this path is only taken when linking is absent.
            os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    _sync_folder(tmp.parent)


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def replace_bytes(path: Path, data: bytes) -> None:
    """Atomically replace a file that a run owns and grows step by step (its record).

    Unlike :func:`publish_bytes` this may replace ``path``; it is used only for a run's own
    record, rewritten after each completed seed, never for a user's file.
    """
    path = Path(path)
    tmp = _write_aside(path, data)
    try:
        os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    _sync_folder(tmp.parent)
