"""Checkpoints: weights only, hashed, loaded without executing code.

A checkpoint is ``{"plan": plan, "state_dict": weights, "kind": policy kind}`` saved with
``torch.save``: the reference's layout plus the kind of policy the weights belong to, so weights
are never loaded into a model of another kind. An adapter checkpoint holds only the adapters
and adds ``"base"``: the stage and digest of the weights they were trained on. The reference
writes no ``kind``; its checkpoints hold the GRU and load as ``gru``. Loading reads the bytes
once,
checks their sha256 against the expected one *before* deserialising, and deserialises with
``weights_only=True``, which refuses arbitrary pickled objects.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from postlab.errors import UserError
from postlab.jsonio import printable, publish_bytes, read_bytes

if TYPE_CHECKING:
    pass


def checkpoint_name(seed: int, stage: str) -> str:
    """A stage's checkpoint file in its run folder."""
    return f"seed-{seed}-{stage}.pt"


class CheckpointError(UserError):
    """A checkpoint file does not match its record or cannot be loaded safely."""


#: The kind of a checkpoint that names none: the reference's, which always holds the GRU.
UNNAMED_KIND = "gru"


def checkpoint_bytes(plan: dict[str, Any], state_dict: dict[str, torch.Tensor],
                     kind: str, base: dict[str, str] | None = None) -> bytes:
    """``plan``: the plan as its file holds it (``Plan.data()``). ``base``: for adapters,
    the stage whose weights they were trained on and those weights' digest
    (``policies.restore``); full checkpoints name none and keep their form."""
    if not isinstance(plan, dict):  # a typed plan would pickle as a model, not the file's form
        raise TypeError(f"checkpoint_bytes takes the plan's JSON object, not {type(plan)}")
    buffer = io.BytesIO()
    if any(value.device.type != "cpu" for value in state_dict.values()):
        # CPU copies, so the file names no device; a CPU state dict is saved as it is.
        state_dict = {name: value.cpu() for name, value in state_dict.items()}
    payload: dict[str, Any] = {"plan": plan, "state_dict": state_dict, "kind": kind}
    if base is not None:
        payload["base"] = dict(base)
    torch.save(payload, buffer)
    return buffer.getvalue()


def checkpoint_kind(payload: dict[str, Any], source: str) -> str:
    """The policy kind a loaded checkpoint holds."""
    kind = payload.get("kind", UNNAMED_KIND)
    if not isinstance(kind, str):
        raise CheckpointError(f"{source}: checkpoint kind is not a name but a "
                              f"{type(kind).__name__}")
    return kind


def check_kind(payload: dict[str, Any], expected: str, source: str) -> None:
    """Refuse weights of another policy kind than the plan's, before they meet its model."""
    kind = checkpoint_kind(payload, source)
    if kind != expected:
        raise CheckpointError(f"{source}: holds a {kind!r:.80} policy, the plan's "
                              f"policy is {expected!r}")


def publish_checkpoint(path: Path, data: bytes) -> str:
    """Write a checkpoint once; an existing file is accepted only if it holds the same bytes
    (a resumed run re-creating what an interrupted one already wrote). Returns its sha256."""
    try:
        publish_bytes(path, data)
    except UserError:
        if not path.is_file():
            raise
        if read_bytes(path, "checkpoint") != data:
            raise CheckpointError(f"{path}: already exists with other contents; postlab "
                                  "never overwrites an output (a resumed run must use the "
                                  "plan and --cpu-path it was started with)") from None
    return hashlib.sha256(data).hexdigest()


def load_checkpoint(path: Path, expected_sha256: str | None, *,
                    kind: str | None = None) -> dict[str, Any]:
    """Load a checkpoint's payload, refusing it before deserialisation if the hash differs,
    and after it if ``kind`` is given and the checkpoint holds another kind of policy."""
    raw = read_bytes(path, "checkpoint")
    if expected_sha256 is not None:
        check_checkpoint_bytes(raw, expected_sha256, path)
    payload = load_checkpoint_bytes(raw, printable(path))
    if kind is not None:
        check_kind(payload, kind, printable(path))
    return payload


def check_checkpoint_bytes(raw: bytes, expected_sha256: str, path: Path) -> None:
    """Refuse a checkpoint's bytes whose sha256 is not the recorded one (before anything
    deserialises them)."""
    digest = hashlib.sha256(raw).hexdigest()
    if digest != expected_sha256:
        raise CheckpointError(f"{path}: sha256 {digest} differs from the recorded "
                              f"{expected_sha256}; refusing to load it")


def load_checkpoint_bytes(raw: bytes, source: str) -> dict[str, Any]:
    """Deserialise weights only, then refuse any entry that is not a finite dense tensor:
    a NaN or infinite weight would only surface later as a sampling error deep in torch."""
    try:
        with warnings.catch_warnings():
            # torch warns on stderr about foreign pickles before refusing them; the refusal
            # below is the one line the user gets.
            warnings.simplefilter("ignore")
            payload = torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises many types for a foreign or damaged file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{source}: not a weights-only checkpoint "
                              f"({printable(first):.200})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("state_dict"), dict):
        raise CheckpointError(f"{source}: checkpoint has no state_dict")
    for name, value in payload["state_dict"].items():
        if not isinstance(name, str):
            raise CheckpointError(f"{source}: state_dict has a key that is not a name but a "
                                  f"{type(name).__name__}")
        shown = repr(name)
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{source}: state_dict entry {shown:.80} is not a tensor "
                                  f"but a {type(value).__name__}")
        if value.layout is not torch.strided:
            raise CheckpointError(f"{source}: tensor {shown:.80} is not a dense tensor "
                                  f"({value.layout})")
        numeric = value.is_floating_point() or value.is_complex()
        if numeric and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"{source}: tensor {shown:.80} holds NaN or infinite "
                                  "weights")
    return payload
