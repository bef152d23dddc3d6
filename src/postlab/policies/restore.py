"""A stage's policy from its checkpoint: the one way every reader rebuilds a trained model.

A full checkpoint holds every weight. An adapter checkpoint (an RL arm of a plan with ``lora``)
holds the adapters and names its base: the seed's ``initial`` (SFT) checkpoint or its untrained
weights, with the digest of those weights; the base is read (by hash) or rebuilt, checked
against the digest, and the adapters go on top. Training, verify and the analyses all come
through :func:`policy_from_checkpoint`, so they cannot disagree on what a checkpoint means.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from postlab.policies.base import Policy, build_policy, policy_kind
from postlab.policies.checkpoint import CheckpointError, load_checkpoint
from postlab.policies.lora import ADAPTER_SEED_OFFSET, lora_section, weights_sha256

if TYPE_CHECKING:
    from postlab.policies.base import PolicyPlan

#: The base an RL-only arm's adapters train on: the seed's untrained weights (no file).
UNTRAINED = "untrained"


def untrained_weights(plan: PolicyPlan, seed: int) -> dict[str, Any]:
    """The weights SFT starts from: the model built right after seeding torch with ``seed``."""
    torch.manual_seed(seed)
    return build_policy(plan).state_dict()


def attach_plan_adapters(policy: Policy, plan: PolicyPlan, seed: int) -> str:
    """Put the plan's adapters on ``policy`` (on CPU, before it is placed), their initial
    values drawn from the seed's adapter stream; returns the digest of the base weights."""
    section = lora_section(plan)
    if section is None:
        raise ValueError("the plan has no lora section")
    base = weights_sha256(policy.state_dict())
    torch.manual_seed(seed + ADAPTER_SEED_OFFSET)
    policy.attach_adapters(section)
    return base


def policy_from_checkpoint(plan: PolicyPlan, payload: Mapping[str, Any], seed: int,
                           folder: Path, checkpoints: Mapping[str, Mapping[str, Any]]) -> Policy:
    """The policy a loaded checkpoint payload holds, on CPU; an adapter checkpoint's base is
    ``checkpoints[stage]`` in ``folder`` (read by sha256) or the seed's untrained weights.

    Torch's global random state is left as it was: rebuilding draws numbers that the loaded
    weights then replace."""
    with torch.random.fork_rng(devices=[]):
        model = build_policy(plan)
        base = payload.get("base")
        if base is None:
            model.load_state_dict(payload["state_dict"])
            return model
        if not isinstance(base, dict) or not isinstance(base.get("stage"), str) \
                or not isinstance(base.get("weights_sha256"), str):
            raise CheckpointError(f"seed {seed}: an adapter checkpoint whose base is not "
                                  "named by stage and weights_sha256")
        if base["stage"] == UNTRAINED:
            weights = untrained_weights(plan, seed)
        elif base["stage"] in checkpoints:
            info = checkpoints[base["stage"]]
            weights = load_checkpoint(folder / info["file"], info["sha256"],
                                      kind=policy_kind(plan))["state_dict"]
        else:
            raise CheckpointError(f"seed {seed}: the adapters' base stage "
                                  f"{base['stage']!r:.80} has no checkpoint in the record")
        if weights_sha256(weights) != base["weights_sha256"]:
            raise CheckpointError(f"seed {seed}: the base weights ({base['stage']:.80}) are "
                                  "not those the adapters were trained on")
        model.load_state_dict(weights)
        attach_plan_adapters(model, plan, seed)
        load_adapters(model, payload["state_dict"])
    return model


def load_adapters(model: Policy, adapters: Mapping[str, torch.Tensor]) -> None:
    """Load exactly the adapter tensors the model has, no more and no fewer."""
    expected = set(model.checkpoint_state())
    given = set(adapters)
    if given != expected:
        extra, missing = sorted(given - expected), sorted(expected - given)
        raise CheckpointError("adapter tensors do not fit the plan's adapters ("
                              + (f"unexpected {extra[0]!r:.80}" if extra else
                                 f"missing {missing[0]!r:.80}") + ")")
    result = model.load_state_dict(dict(adapters), strict=False)
    assert not result.unexpected_keys
