"""Named algorithm options of the RL update, each a registry entry with its source.

Every option is a pure tensor function. The teaching plan's choice of each is the first entry
and is written with exactly the floating-point operations the reference uses, so the teaching
plan stays bit-identical. The teaching plan names its choices in words; ``TEACHING_ALIASES``
maps those words to the entries here.

Shapes: ``rewards`` (groups, group_size); ``per_token``, ``mask``, log-probabilities and KL
results (sequences, response_length); advantages (sequences); log-distributions (sequences,
response_length, vocab). Every function also takes a leading member dimension (the ensemble
engine's stacked models) and then computes each member's result from its own slice alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from postlab.registry import Registry
from postlab.rl.groups import STD_EPSILON
from postlab.rl.objective import (
    Algorithm,
    PolicySettings,
    Surrogate,
    broadcast_members,
    clipped_gain,
    outside_clip,
    ratio_bounds,
    token_log_probs,
)


@dataclass(frozen=True)
class Option:
    """A registered variant: the function, what it does, and where it comes from."""

    fn: Callable
    summary: str
    source: str


ADVANTAGES: Registry[Option] = Registry("advantage estimator")
REDUCTIONS: Registry[Option] = Registry("loss reduction")
KL_ESTIMATORS: Registry[Option] = Registry("KL estimator")
POLICY_LOSSES: Registry[Option] = Registry("policy loss")


def _option(registry: Registry[Option], name: str, summary: str, source: str):
    def add(fn: Callable) -> Callable:
        registry.register(name)(Option(fn=fn, summary=summary, source=source))
        return fn

    return add


# --- advantages: rewards (groups, G) -> advantages (groups, G) ------------------------------

@_option(ADVANTAGES, "group-std", "(r - group mean) / (group population std + 1e-8)",
         "GRPO: Shao et al. 2024, DeepSeekMath (arXiv:2402.03300)")
def group_std(rewards: torch.Tensor) -> torch.Tensor:
    std = rewards.std(-1, unbiased=False, keepdim=True)
    return (rewards - rewards.mean(-1, keepdim=True)) / (std + STD_EPSILON)


@_option(ADVANTAGES, "mean-only", "r - group mean, not divided by the std",
         "Dr. GRPO: Liu et al. 2025, Understanding R1-Zero-Like Training (arXiv:2503.20783)")
def mean_only(rewards: torch.Tensor) -> torch.Tensor:
    return rewards - rewards.mean(-1, keepdim=True)


@_option(ADVANTAGES, "leave-one-out", "r_i - mean of the other G-1 rewards of the group",
         "RLOO: Ahmadian et al. 2024, Back to Basics (arXiv:2402.14740); Kool et al. 2019")
def leave_one_out(rewards: torch.Tensor) -> torch.Tensor:
    size = rewards.shape[-1]
    others = (rewards.sum(-1, keepdim=True) - rewards) / (size - 1)
    return rewards - others


@_option(ADVANTAGES, "group-mean-batch-std",
         "(r - group mean), then divided by the batch's population std of those centred "
         "values + 1e-8", "REINFORCE++-baseline: Hu et al. 2025 (arXiv:2501.03262)")
def group_mean_batch_std(rewards: torch.Tensor) -> torch.Tensor:
    centred = rewards - rewards.mean(-1, keepdim=True)
    return centred / (centred.std((-2, -1), unbiased=False, keepdim=True) + STD_EPSILON)


# --- loss reductions: per-token loss and mask -> scalar (per member) ------------------------

@_option(REDUCTIONS, "token-mean", "sum over valid tokens / number of valid tokens in the batch",
         "DAPO: Yu et al. 2025 (arXiv:2503.14476), token-level policy-gradient loss")
def token_mean(per_token: torch.Tensor, mask: torch.Tensor, max_tokens: int) -> torch.Tensor:
    return (per_token * mask).sum((-2, -1)) / mask.sum((-2, -1))


@_option(REDUCTIONS, "seq-mean-token-mean",
         "mean over each sequence's valid tokens, then mean over sequences",
         "GRPO as first published: Shao et al. 2024 (arXiv:2402.03300)")
def seq_mean_token_mean(per_token: torch.Tensor, mask: torch.Tensor,
                        max_tokens: int) -> torch.Tensor:
    per_sequence = (per_token * mask).sum(-1) / mask.sum(-1)
    return per_sequence.mean(-1)


@_option(REDUCTIONS, "constant-normaliser",
         "sum over valid tokens / (sequences x max_new_tokens): no length-dependent weight",
         "Dr. GRPO: Liu et al. 2025 (arXiv:2503.20783)")
def constant_normaliser(per_token: torch.Tensor, mask: torch.Tensor,
                        max_tokens: int) -> torch.Tensor:
    return (per_token * mask).sum((-2, -1)) / (mask.shape[-2] * max_tokens)


# --- KL to the reference: per-token estimates (sequences, length) --------------------------

@_option(KL_ESTIMATORS, "exact", "sum over the vocabulary of p (log p - log q) at each visited "
         "prefix", "exact categorical KL, as in the teaching plan")
def exact_kl(log_dist: torch.Tensor, ref_log_dist: torch.Tensor,
             tokens: torch.Tensor) -> torch.Tensor:
    return (log_dist.exp() * (log_dist - ref_log_dist)).sum(-1)


@_option(KL_ESTIMATORS, "k1", "log p(x) - log q(x) at the sampled token (unbiased, "
         "high variance)", "Schulman 2020, Approximating KL Divergence (k1)")
def k1_kl(log_dist: torch.Tensor, ref_log_dist: torch.Tensor,
          tokens: torch.Tensor) -> torch.Tensor:
    return token_log_probs(log_dist, tokens) - token_log_probs(ref_log_dist, tokens)


@_option(KL_ESTIMATORS, "k3", "q/p - 1 - log(q/p) at the sampled token (unbiased, "
         "low variance, never negative)", "Schulman 2020 (k3); used by GRPO, Shao et al. 2024")
def k3_kl(log_dist: torch.Tensor, ref_log_dist: torch.Tensor,
          tokens: torch.Tensor) -> torch.Tensor:
    log_ratio = token_log_probs(ref_log_dist, tokens) - token_log_probs(log_dist, tokens)
    return log_ratio.exp() - 1 - log_ratio


@_option(KL_ESTIMATORS, "none", "no KL term (the penalty and its statistic are zero)",
         "DAPO: Yu et al. 2025 (arXiv:2503.14476) drops the KL penalty")
def no_kl(log_dist: torch.Tensor, ref_log_dist: torch.Tensor,
          tokens: torch.Tensor) -> torch.Tensor:
    return torch.zeros(tokens.shape, dtype=log_dist.dtype, device=log_dist.device)


# --- policy losses: (log pi, log pi_old, advantage, mask, settings) -> per-token surrogate --
# Each returns the per-token objective the update maximises; the plan's loss reduction then
# turns its negative (plus the KL penalty) into the loss, for every policy loss alike (as TRL
# applies its loss_type to any importance-sampling level; verl fixes GSPO's and SAPO's
# reduction to seq-mean-token-mean, the reduction their papers state and this library's
# documentation recommends with them).

@_option(POLICY_LOSSES, "ppo-clip",
         "min(r A, clip(r, 1-clip, 1+clip_high) A) per token, r = pi / pi_old",
         "PPO: Schulman et al. 2017 (arXiv:1707.06347); clip-higher: DAPO, Yu et al. 2025 "
         "(arXiv:2503.14476)")
def ppo_clip(logp: torch.Tensor, old_logp: torch.Tensor, advantage: torch.Tensor,
             mask: torch.Tensor, settings: PolicySettings) -> Surrogate:
    ratio = (logp - old_logp).exp()
    return Surrogate(clipped_gain(ratio, advantage, settings.clip_low, settings.clip_high),
                     _outside(ratio, settings))


def _outside(ratio: torch.Tensor, settings: PolicySettings) -> torch.Tensor:
    """Where a ratio lies outside the plan's clip range: the statistic every loss records."""
    return outside_clip(ratio.detach(), settings.clip_low, settings.clip_high)


@_option(POLICY_LOSSES, "gspo",
         "PPO's clip on the sequence's length-normalised ratio s = (pi(y) / pi_old(y))^(1/|y|); "
         "each token carries s, with gradient s times its log-probability's, so a sequence's "
         "mean over its tokens is s's gradient",
         "GSPO: Zheng et al. 2025, Group Sequence Policy Optimization (arXiv:2507.18071)")
def gspo(logp: torch.Tensor, old_logp: torch.Tensor, advantage: torch.Tensor,
         mask: torch.Tensor, settings: PolicySettings) -> Surrogate:
    # the paper's token form (GSPO-token with one advantage per sequence): its value is s at
    # every token and its gradient s times the token's log-probability gradient, so a
    # sequence's tokens averaged give exactly the gradient of the sequence-level objective
    valid = mask.to(logp.dtype)
    lengths = valid.sum(-1).clamp(min=1.0)
    log_s = ((logp - old_logp) * valid).sum(-1) / lengths
    ratio = (logp - logp.detach() + log_s.detach()[..., None]).exp()
    return Surrogate(clipped_gain(ratio, advantage, settings.clip_low, settings.clip_high),
                     _outside(ratio, settings))


@_option(POLICY_LOSSES, "cispo",
         "sg(clip(r, 1-clip, 1+clip_high)) A log pi per token: the clipped importance weight "
         "scales a REINFORCE term and no token's gradient is cut",
         "CISPO: MiniMax-M1, MiniMax 2025 (arXiv:2506.13585)")
def cispo(logp: torch.Tensor, old_logp: torch.Tensor, advantage: torch.Tensor,
          mask: torch.Tensor, settings: PolicySettings) -> Surrogate:
    ratio = (logp - old_logp).exp()
    lower, upper = ratio_bounds(settings.clip_low, settings.clip_high, ratio.dtype)
    weight = ratio.detach().clamp(broadcast_members(lower, ratio),
                                  broadcast_members(upper, ratio))
    return Surrogate(weight * advantage[..., None] * logp,
                     _outside(ratio, settings))


@_option(POLICY_LOSSES, "sapo",
         "sigmoid(tau (r - 1)) 4/tau A per token, tau the positive or negative advantages' "
         "temperature: a soft gate in place of the hard clip",
         "SAPO: Gao et al. 2025, Soft Adaptive Policy Optimization (arXiv:2511.20347)")
def sapo(logp: torch.Tensor, old_logp: torch.Tensor, advantage: torch.Tensor,
         mask: torch.Tensor, settings: PolicySettings) -> Surrogate:
    ratio = (logp - old_logp).exp()
    per_token = advantage[..., None]
    # each temperature in the ratio's dtype, so a lone model's Python float and a member's
    # setting round alike
    positive, negative = (broadcast_members(torch.as_tensor(tau, dtype=ratio.dtype,
                                                            device=ratio.device), ratio)
                          for tau in (settings.tau_positive, settings.tau_negative))
    tau = torch.where(per_token > 0, positive, negative)
    gate = torch.sigmoid(tau * (ratio - 1)) * (4 / tau)
    # no clip acts: the statistic is the share of ratios outside the plan's clip range, how
    # far off the sampling policy the update went
    return Surrogate(gate * per_token,
                     _outside(ratio, settings))


#: The teaching plan states its choices in words; these are the entries they mean.
TEACHING_ALIASES: dict[str, dict[str, str]] = {
    "loss_reduction": {"mean over all valid response tokens, including EOS": "token-mean"},
    "advantage": {"group population std + 1e-8; no dynamic resampling": "group-std"},
    "kl": {"exact categorical KL at old-policy sampled histories": "exact"},
    "policy_loss": {},
}

REGISTRIES = {"loss_reduction": REDUCTIONS, "advantage": ADVANTAGES, "kl": KL_ESTIMATORS,
              "policy_loss": POLICY_LOSSES}


def resolve(field: str, value: str) -> str:
    """The registry name a plan field means (an entry's name, or the teaching plan's words)."""
    name = TEACHING_ALIASES[field].get(value, value)
    REGISTRIES[field][name]  # KeyError listing the known names
    return name


def algorithm(*, advantage: str, loss_reduction: str, kl: str,
              policy_loss: str = "ppo-clip") -> Algorithm:
    """The functions a plan's option fields name (entry names or the teaching words)."""
    return Algorithm(advantage=ADVANTAGES[resolve("advantage", advantage)].fn,
                     reduce=REDUCTIONS[resolve("loss_reduction", loss_reduction)].fn,
                     kl=KL_ESTIMATORS[resolve("kl", kl)].fn,
                     policy=POLICY_LOSSES[resolve("policy_loss", policy_loss)].fn)
