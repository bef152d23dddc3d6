"""Named algorithm options of the RL update, each a registry entry with its source.

Every option is a pure tensor function. The teaching plan's choice of each is the first entry
and is written with exactly the floating-point operations the reference uses, so the teaching
plan stays bit-identical. The teaching plan names its choices in words; ``TEACHING_ALIASES``
maps those words to the entries here.

Shapes: ``rewards`` (groups, group_size); ``per_token``, ``mask`` and KL results
(sequences, response_length); log-distributions (sequences, response_length, vocab). Every
function also takes a leading member dimension (the ensemble engine's stacked models) and then
computes each member's result from its own slice alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from postlab.registry import Registry
from postlab.rl.groups import STD_EPSILON
from postlab.rl.objective import Algorithm, token_log_probs


@dataclass(frozen=True)
class Option:
    """A registered variant: the function, what it does, and where it comes from."""

    fn: Callable
    summary: str
    source: str


ADVANTAGES: Registry[Option] = Registry("advantage estimator")
REDUCTIONS: Registry[Option] = Registry("loss reduction")
KL_ESTIMATORS: Registry[Option] = Registry("KL estimator")


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


#: The teaching plan states its choices in words; these are the entries they mean.
TEACHING_ALIASES = {
    "loss_reduction": {"mean over all valid response tokens, including EOS": "token-mean"},
    "advantage": {"group population std + 1e-8; no dynamic resampling": "group-std"},
    "kl": {"exact categorical KL at old-policy sampled histories": "exact"},
}

REGISTRIES = {"loss_reduction": REDUCTIONS, "advantage": ADVANTAGES, "kl": KL_ESTIMATORS}


def resolve(field: str, value: str) -> str:
    """The registry name a plan field means (an entry's name, or the teaching plan's words)."""
    name = TEACHING_ALIASES[field].get(value, value)
    REGISTRIES[field][name]  # KeyError listing the known names
    return name


def algorithm(*, advantage: str, loss_reduction: str, kl: str) -> Algorithm:
    """The functions a plan's three option fields name (entry names or the teaching words)."""
    return Algorithm(advantage=ADVANTAGES[resolve("advantage", advantage)].fn,
                     reduce=REDUCTIONS[resolve("loss_reduction", loss_reduction)].fn,
                     kl=KL_ESTIMATORS[resolve("kl", kl)].fn)
