"""LoRA adapters (``peft``) on a transformer policy's linear layers, for RL arms.

The plan's ``lora`` section makes every RL arm train low-rank adapters on its start weights
(the seed's SFT model, or the untrained one for an RL-only arm) while those weights stay frozen.
Three consequences shape this module:

* The KL reference is the same network with its adapters switched off (:class:`AdaptersOff`),
  not a second copy: its log-probabilities are the frozen base's, bit for bit, because a
  disabled ``peft`` layer calls only the layer it wraps.
* A checkpoint holds the adapters and the digest of the base weights they were trained on
  (:func:`weights_sha256`); restoring one needs that base (see :mod:`postlab.policies.restore`).
* Adapters are injected into the ``transformers`` model itself
  (``peft.inject_adapter_in_model``), so the model keeps its own attributes and the compact
  forward passes, which call the projection modules, run the adapters with them.

``peft`` is imported only when adapters are attached, so the core runs without that extra.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import nn

from postlab.errors import UserError

if TYPE_CHECKING:
    from postlab.policies.base import Policy

#: Where the adapters' initial random weights come from: torch's global generator seeded
#: with the run's seed plus this, right before they are attached (see ``engines.train`` for the
#: other streams), so each arm of a seed starts from the same adapters.
ADAPTER_SEED_OFFSET = 6000
#: The ``peft`` adapter name; it appears in every adapter tensor's name.
ADAPTER = "default"
#: What marks an adapter tensor's name in a state dict.
ADAPTER_MARK = "lora_"


class LoraSection(BaseModel):
    """The plan's ``lora`` section: the adapters every RL arm trains."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    rank: int = Field(ge=1, le=1024, description="rank r of each adapter (A is r x in, B out x r)")
    alpha: float = Field(gt=0, le=4096, description=(
        "scale numerator: an adapter adds (alpha / rank) B A x to its layer's output"))
    dropout: float = Field(ge=0, lt=1, description=(
        "dropout on an adapter's input during gradient steps only (rollouts, the reference "
        "and evaluation run without it); its draws come from torch's global generator, seeded "
        "per arm"))
    target_modules: list[str] = Field(min_length=1, description=(
        "names of the linear layers that get adapters (the last part of a module's name, "
        "e.g. c_attn, c_proj, c_fc for gpt2; q_proj, k_proj, v_proj, o_proj, gate_proj, "
        "up_proj, down_proj for llama)"))

    @field_validator("alpha", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        """An integer alpha (16) is as good as 16.0 in a hand-written plan."""
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("target_modules")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("names a module twice")
        return value


def lora_section(plan: Mapping[str, Any]) -> LoraSection | None:
    return plan.lora


def require_peft() -> None:
    """One line telling how to install the extra, instead of an ImportError traceback."""
    try:
        import peft  # noqa: F401
    except ImportError:
        raise UserError("this plan's lora section needs the lora extra: "
                        "pip install 'postlab[lora]'") from None


def _linear_kind(module: nn.Module) -> str | None:
    """"linear" for ``nn.Linear``, "conv1d" for GPT-2's transposed ``Conv1D``, else None."""
    if isinstance(module, nn.Linear):
        return "linear"
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf"):
        return "conv1d"
    return None


def adapter_targets(model: nn.Module) -> dict[str, str]:
    """The names ``target_modules`` may use for ``model``: the last part of each linear
    layer's name, with its kind. A head tied to the token embedding is left out: an adapter
    there would change the embedding's meaning too."""
    tied = None
    if getattr(model.config, "tie_word_embeddings", False):
        head = model.get_output_embeddings()
        tied = id(head) if head is not None else None
    targets: dict[str, str] = {}
    for name, module in model.named_modules():
        kind = _linear_kind(module)
        if kind is None or id(module) == tied or not name:
            continue
        short = name.rsplit(".", 1)[-1]
        if targets.setdefault(short, kind) != kind:
            targets[short] = "mixed"
    return targets


def target_problems(section: LoraSection, targets: Mapping[str, str]) -> list[str]:
    """What is wrong with the section's target modules for a model with ``targets``."""
    import difflib

    problems = []
    for name in section.target_modules:
        if name not in targets:
            close = difflib.get_close_matches(name, list(targets), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"{name!r} is not a linear layer of this model{hint}; its linear "
                            f"layers: {', '.join(sorted(targets))}")
    kinds = {targets[name] for name in section.target_modules if name in targets}
    if not problems and (len(kinds) > 1 or "mixed" in kinds):
        problems.append("mixes nn.Linear and GPT-2 Conv1D layers, whose weights are stored "
                        "transposed to each other; target one kind")
    return problems


def attach(model: nn.Module, section: LoraSection) -> None:
    """Inject the section's adapters into ``model`` in place (drawing A's initial values from
    torch's global generator; B starts at zero, so the model computes what it did) and freeze
    every other weight."""
    require_peft()
    from peft import LoraConfig, inject_adapter_in_model

    targets = adapter_targets(model)
    problems = target_problems(section, targets)
    if problems:
        raise UserError(f"lora.target_modules: {problems[0]}")
    conv1d = targets[section.target_modules[0]] == "conv1d"
    config = LoraConfig(r=section.rank, lora_alpha=section.alpha, lora_dropout=section.dropout,
                        target_modules=list(section.target_modules), fan_in_fan_out=conv1d,
                        bias="none")
    inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(ADAPTER_MARK in name)


def _tuner_layers(model: nn.Module) -> Iterator[nn.Module]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return (module for module in model.modules() if isinstance(module, BaseTunerLayer))


@contextlib.contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """Within the block every adapter layer computes only the layer it wraps."""
    layers = list(_tuner_layers(model))
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def set_dropout(model: nn.Module, training: bool) -> None:
    """Adapter dropout on (gradient steps) or off (everything else); the rest of the network
    stays in evaluation mode."""
    for layer in _tuner_layers(model):
        for dropout in layer.lora_dropout.values():
            dropout.train(training)


def adapter_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter tensors of a policy's state dict: what an adapter checkpoint holds."""
    return {name: value for name, value in state.items() if ADAPTER_MARK in name}


def base_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The frozen weights of a state dict with adapters, under the names they had before."""
    return {name.replace(".base_layer.", "."): value for name, value in state.items()
            if ADAPTER_MARK not in name}


def weights_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order: the digest an
    adapter checkpoint keeps of the base weights, independent of how they were serialised."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        header = f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode()
        digest.update(len(header).to_bytes(8, "big") + header)
        data = tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


class AdaptersOff:
    """The KL reference of a LoRA arm: the trained policy's own network with its adapters
    switched off while it scores, so the base weights are held once.

    It offers what the RL loop asks of a reference (``continuation`` under ``autocast``, and
    ``start``/``advance`` for episodes);
    it is no module of its own, so nothing can train or freeze the policy through it.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    @property
    def device(self) -> torch.device:
        return self.policy.device

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return self.policy.autocast()

    def continuation(self, prompts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        with adapters_disabled(self.policy):
            return self.policy.continuation(prompts, tokens)

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        with adapters_disabled(self.policy):
            return self.policy(tokens)

    def start(self, prompt_tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Episodes are scored through the decoding calls (``engines.episodes``)."""
        with adapters_disabled(self.policy):
            return self.policy.start(prompt_tokens)

    def advance(self, tokens: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
        with adapters_disabled(self.policy):
            return self.policy.advance(tokens, cache)
