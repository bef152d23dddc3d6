"""Strict JSON reading and atomic, never-overwriting file publication.

Every file postlab writes (plans, records, checkpoints) goes through :func:`publish_bytes`: the
bytes are written and synced under a temporary name in the target's folder, then hard-linked to
the final name, which fails if the name exists. A crash at any point leaves either nothing at
the target or the complete file, and an existing file is never replaced.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import re
import stat
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


#: Deepest nesting of arrays and objects accepted. postlab's own files nest about eight deep;
#: the bound keeps every later recursive walk (digests, reports, schema checks) far from
#: Python's recursion limit whatever a file contains.
MAX_DEPTH = 64
#: Integers must fit a signed 64-bit slot: seeds feed torch generators, counts feed tensors,
#: and Python refuses to even convert integers of more than 4300 digits.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1

#: Only the characters that decide nesting (and quotes, to drop strings) survive the scan.
_STRUCTURE = bytes.maketrans(b"{}", b"[]")
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')
#: For the integer scan: digits become "0"; what can sit right before an integer in JSON
#: (space, comma, colon, bracket, minus) becomes " "; everything else, including the quotes,
#: letters and dots that put a digit run inside a string, a digest or a float, becomes "a".
_DIGIT_CLASSES = bytes(ord("0") if chr(c).isdigit() and c < 128
                       else ord(" ") if c in b" \t\r\n,:[{-" else ord("a") for c in range(256))
#: An integer of 19 digits or more is the only kind that can leave the 64-bit range.
_LONG_RUN = b" " + b"0" * 19
#: An escape that can produce a surrogate; only then are strings walked.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class MalformedJSON(UserError):
    """The text is not JSON at all (as opposed to JSON with a refused value)."""


def printable(text: object) -> str:
    """``text`` as is when printable, else escaped, so a message stays one encodable line."""
    value = str(text)
    return value if value.isprintable() else repr(value)[1:-1]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid value (JSON has no NaN or infinities)")


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
        raise ValueError(f"number {text:.40} overflows a float")
    return value


def _bounded_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > 19 or not INT_MIN <= int(text) <= INT_MAX:
        shown = text if len(text) <= 40 else f"{text[:20]}…({len(digits)} digits)"
        raise ValueError(f"integer {shown} is outside the 64-bit range")
    return int(text)


def nesting_depth(raw: bytes, limit: int = MAX_DEPTH) -> int | None:
    """The deepest nesting of well-formed JSON ``raw``, or None beyond ``limit``.

    Works on bytes with C-speed operations only (about 50 ms for 20 MB): escapes and strings
    are dropped, braces become brackets, then each pass deletes the innermost pairs.
    """
    seq = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    seq = seq.translate(_STRUCTURE, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in seq:  # strings holding brackets
        seq = b"".join(seq.split(b'"')[::2])
    for depth in range(limit + 1):
        if not seq:
            return depth
        seq = seq.replace(b"[]", b"")
    return None


def _may_hold_long_integer(raw: bytes) -> bool:
    """Whether ``raw`` may hold an integer of 19 or more digits: two C-speed passes (about
    20 ms for 20 MB) instead of a regex (400 ms). A digit run that only looks like one costs
    the exact check during the parse, nothing more."""
    classes = raw.translate(_DIGIT_CLASSES)
    return classes.startswith(_LONG_RUN[1:]) or _LONG_RUN in classes


def _lone_surrogate(value: Any) -> str | None:
    """The first string (or key) holding a lone surrogate, searched depth-first."""
    if isinstance(value, str):
        return value if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _lone_surrogate(key) or _lone_surrogate(item)
            if found is not None:
                return found
    elif isinstance(value, list):
        for item in value:
            found = _lone_surrogate(item)
            if found is not None:
                return found
    return None


def _utf8(data: str | bytes, source: str) -> tuple[str, bytes]:
    """The text and its UTF-8 bytes; refuses bytes that are not UTF-8 and lone surrogates.

    Python's json.loads would decode bytes with ``surrogatepass``, letting encoded surrogates
    (ED A0 80) through to fail much later when written out again.
    """
    if isinstance(data, str):
        try:
            return data, data.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"{source}: not valid Unicode (a lone surrogate, as from bytes "
                            "that are not UTF-8)") from None
    raw = bytes(data)
    body = raw[3:] if raw.startswith(codecs.BOM_UTF8) else raw
    try:
        return body.decode("utf-8"), body
    except UnicodeDecodeError as exc:
        raise UserError(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def parse_json(data: str | bytes, source: str) -> Any:
    """Parse JSON strictly, refusing what Python's json accepts but postlab cannot use: NaN
    and infinities, duplicate keys, floats that overflow, integers outside 64 bits, lone
    surrogates, and nesting deeper than :data:`MAX_DEPTH`. Every refusal is one UserError."""
    text, raw = _utf8(data, source)
    hooks: dict[str, Any] = {"object_pairs_hook": _unique_keys,
                             "parse_constant": _reject_constant, "parse_float": _finite_float}
    if _may_hold_long_integer(raw):
        hooks["parse_int"] = _bounded_int  # only then: the hook costs a fifth of the parse
    try:
        value = json.loads(text, **hooks)
    except json.JSONDecodeError as exc:
        raise MalformedJSON(f"{source}: malformed JSON at line {exc.lineno} column "
                            f"{exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise UserError(f"{source}: nested too deeply (more than {MAX_DEPTH} levels of "
                        "arrays and objects)") from None
    except ValueError as exc:
        raise UserError(f"{source}: {exc}") from None
    if nesting_depth(raw) is None:
        raise UserError(f"{source}: nested too deeply (more than {MAX_DEPTH} levels of "
                        "arrays and objects)")
    if _SURROGATE_ESCAPE.search(text):
        found = _lone_surrogate(value)
        if found is not None:
            raise UserError(f"{source}: string {found[:40]!r} holds a lone surrogate; "
                            "not valid Unicode")
    return value


def read_bytes(path: Path, what: str) -> bytes:
    """Read a whole regular file, turning OS errors into one-line user errors.

    The file is opened without blocking and checked on the open descriptor, so a FIFO,
    socket or device put where a file is expected is refused instead of waited on, and no
    swap between a check and the read can slip one in.
    """
    shown = printable(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise UserError(f"{shown}: {what} not found") from None
    except PermissionError:
        raise UserError(f"{shown}: {what} is not readable (permission denied)") from None
    except ValueError:  # an embedded NUL byte
        raise UserError(f"{shown}: {what} file name contains a NUL byte") from None
    except OSError as exc:
        raise UserError(f"{shown}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UserError(f"{shown}: {what} is a directory, expected a file")
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{shown}: {what} is a {file_kind(info.st_mode)}, not a regular file")
        chunks = []
        while chunk := os.read(fd, max(info.st_size + 1, 1 << 16)):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise UserError(f"{shown}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for a message."""
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


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
