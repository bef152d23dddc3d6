"""Policies: the models that answer, with their tokenizer, decoding and checkpoints.

:mod:`~postlab.policies.base` is the interface the engines use and the ``POLICIES`` registry of
kinds; ``gru`` (the teaching lab's character GRU) is the first kind;
:mod:`~postlab.policies.transformer` adds ``transformer`` and
:mod:`~postlab.policies.pretrained` adds ``pretrained`` (with ``compact``, their forward
pass); ``decoding`` is the one token-by-token loop; ``checkpoint`` writes weights and reads
them back only after their hash is checked.
"""

from postlab.policies import gru as _gru  # noqa: F401  (registers the "gru" kind)
from postlab.policies import pretrained as _pretrained  # noqa: F401  (after transformer)
from postlab.policies import transformer as _transformer  # noqa: F401  (lazy import)
from postlab.policies.base import (
    DEFAULT_KIND,
    POLICIES,
    CharTokenizer,
    Policy,
    PolicyKind,
    Tokenizer,
    build_policy,
    place_policy,
    policy_kind,
    policy_placement,
    section_problems,
)

__all__ = ["DEFAULT_KIND", "POLICIES", "CharTokenizer", "Policy", "PolicyKind", "Tokenizer",
           "build_policy", "place_policy", "policy_kind", "policy_placement", "section_problems"]
