"""Tokenizers a plan can name: the plan's characters (the teaching lab's) or a byte-level BPE
trained on the plan's training questions.

A plan without a ``tokenizer`` section uses one token per character of its ``vocab``. With
``{"kind": "bpe", "vocab_size": N}`` a byte-level BPE is trained with Hugging Face
``tokenizers`` on the prompts and demonstrations of the ``train`` split, in split order, with
``pad`` and ``eos`` as its two special tokens (ids 0 and 1), so the same plan always gives the
same tokenizer bytes (a test trains it in separate processes and compares). A run writes those
bytes beside its plan as ``tokenizer.json``; the record names their sha256, the fingerprint
covers them, and ``postlab verify`` trains the tokenizer again and compares.

What a policy may emit is decided per token: EOS, and every token whose text uses only the
task's answer characters (for characters, exactly the teaching rule: digits and EOS).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.policies.base import CharTokenizer, Tokenizer, plan_prompt_width

if TYPE_CHECKING:
    from postlab.policies.base import PolicyPlan

#: The file a run keeps a trained tokenizer in, beside its plan.
TOKENIZER_FILE = "tokenizer.json"


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise UserError("a plan's bpe tokenizer needs the tokenizers library: pip install "
                        "'postlab[bpe]'") from None
    return tokenizers


class BPETokenizer:
    """A trained ``tokenizers.Tokenizer`` seen through postlab's interface."""

    def __init__(self, serialised: str, eos: str, pad: str) -> None:
        self.inner = _tokenizers().Tokenizer.from_str(serialised)
        self.eos_id = self.inner.token_to_id(eos)
        self.pad_id = self.inner.token_to_id(pad)
        self.vocab_size = self.inner.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return list(self.inner.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode(list(ids), skip_special_tokens=False)

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for (a byte-level token may be part of a character)."""
        piece = self.inner.id_to_token(token) or ""
        table = _byte_level_table()
        return bytes(table[c] for c in piece if c in table)


@functools.cache
def _byte_level_table() -> dict[str, int]:
    """Byte-level BPE's printable stand-in for each byte -> the byte (the GPT-2 layout that
    ``tokenizers``' ByteLevel uses: printable Latin-1 bytes stand for themselves, the other
    bytes take the code points from 256 up, in byte order)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in kept}
    extra = 0
    for b in range(256):
        if b not in kept:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def bpe_corpus(plan: PolicyPlan) -> list[str]:
    """What the BPE is trained on: each training question's prompt, then its demonstration,
    as separate texts (they are encoded separately)."""
    from postlab.tasks.registry import task_for

    task = task_for(plan)
    texts = []
    for key in plan.split["train"]:
        texts += [task.prompt(key), task.demonstration(key)]
    return texts


@functools.lru_cache(maxsize=8)
def _train(corpus: tuple[str, ...], vocab_size: int, eos: str, pad: str) -> str:
    lib = _tokenizers()
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = lib.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[pad, eos],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(list(corpus), trainer=trainer)
    return tokenizer.to_str()


def trained_bytes(plan: PolicyPlan) -> bytes:
    """The plan's BPE tokenizer as the JSON a run keeps (trained once per process)."""
    section = plan.tokenizer
    serialised = _train(tuple(bpe_corpus(plan)), section.vocab_size, plan.eos,
                        plan.pad)
    return serialised.encode("utf-8")


def tokenizer_sha256(plan: PolicyPlan) -> str | None:
    """sha256 of the tokenizer file a run of the plan keeps; None for character plans."""
    if uses_bpe(plan):
        return hashlib.sha256(trained_bytes(plan)).hexdigest()
    return None


def uses_bpe(plan: PolicyPlan) -> bool:
    section = plan.tokenizer
    return section is not None and section.kind == "bpe"


def plan_tokenizer(plan: PolicyPlan) -> Tokenizer:
    """The tokenizer a plan's policy built from a configuration reads and writes with."""
    if uses_bpe(plan):
        return BPETokenizer(trained_bytes(plan).decode("utf-8"), plan.eos, plan.pad)
    return CharTokenizer(plan.vocab, plan.eos, plan.pad)


def vocab_size(plan: PolicyPlan) -> int:
    """The plan's token count before anything is trained: the characters, or the BPE's
    requested size (an upper bound; a small corpus may give fewer merges)."""
    return plan.tokenizer.vocab_size if uses_bpe(plan) else len(plan.vocab)


def allowed_tokens(tokenizer: Tokenizer, answer_characters: str) -> list[bool]:
    """Per token id: may the policy emit it? EOS, and tokens whose text is made only of
    answer characters; for a byte-level token that is part of a character (its text alone is
    not one), the bytes must all occur in the answer characters' UTF-8 (so ``°`` can be
    written from two byte tokens when no merge joins them)."""
    allowed_set = set(answer_characters)
    answer_bytes = set(answer_characters.encode("utf-8"))
    byte_level = getattr(tokenizer, "token_bytes", None)
    flags = []
    for token in range(tokenizer.vocab_size):
        text = tokenizer.decode([token])
        if token == tokenizer.eos_id or (bool(text) and set(text) <= allowed_set):
            flags.append(True)
        elif byte_level is not None and "\ufffd" in text and token != tokenizer.pad_id:
            raw = byte_level(token)
            flags.append(bool(raw) and set(raw) <= answer_bytes)
        else:
            flags.append(False)
    return flags


def longest_in_tokens(plan: PolicyPlan) -> tuple[int, int]:
    """(longest prompt, longest demonstration) of the plan's questions in its tokenizer's
    tokens: characters for the character tokenizer, fewer or more for a BPE (a character
    outside ASCII is several bytes)."""
    from postlab.tasks.registry import task_for

    task = task_for(plan)
    if not uses_bpe(plan):
        return task.longest_prompt, task.longest_answer
    tokenizer = plan_tokenizer(plan)
    keys = [key for keys in plan.split.values() for key in keys]
    parts = getattr(task, "demonstration_parts", None)
    if parts is not None:  # an episode's turns: the longest one the policy writes
        longest = max(len(tokenizer.encode(text)) for key in keys
                      for text, written in parts(key) if written)
    else:
        longest = max(len(tokenizer.encode(task.demonstration(key))) for key in keys)
    return plan_prompt_width(plan, tokenizer), longest
