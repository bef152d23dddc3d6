"""Reward contracts: pure checkers ``(pair, text, terminated, expected) -> reward``.

``text`` is what the policy emitted before EOS (EOS itself excluded) and ``terminated`` says
whether EOS was emitted within the token budget. ``expected`` is the task's answer for the
question; it defaults to a+b, the teaching task. A contract is the verifiable rule that RL
optimises, so its exact semantics are part of the frozen plan. Most contracts pay 0 or 1; a
dataset's own scorer may pay partial credit in between (``rg-score``), which training uses as
the reward and reports count as fractional acceptances.

Each contract judges one kind of answer (:func:`contract_answers`): the arithmetic contracts
read integers, the reasoning-gym ones (``postlab.tasks.gym``, imported when first used) read a
generated item, so a plan cannot train an arithmetic task on an item contract or the reverse.

Each contract may also register the words reports use for it (:data:`CONTRACT_WORDS`), so
renderers name any contract without knowing it; one without words is named by its own name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from postlab.registry import Registry
from postlab.tasks.rows import Row

Contract = Callable[..., float]
#: The task's answer for an operand pair; the teaching task's is the sum.
Answer = Callable[[Sequence[int]], int]

CONTRACTS: Registry[Contract] = Registry("reward contract")
#: Contract name -> the kind of answer it reads, for contracts that read something other than
#: an integer (a task's ``answer_kind``); unnamed contracts read integers.
CONTRACT_ANSWERS: Registry[str] = Registry("contract answer kind")


#: Contracts whose reward may lie between 0 and 1 (a scorer's partial credit); the rest pay
#: 0 or 1, and tables show them as accepted or not.
PARTIAL_CREDIT: Registry[bool] = Registry("partial-credit contract")


def contract_answers(contract: str) -> str:
    """The kind of answer ``contract`` reads: "integer" unless it registered another."""
    if contract in CONTRACT_ANSWERS:
        return CONTRACT_ANSWERS[contract]
    return "integer"


def contracts_for(answer_kind: str) -> list[str]:
    """Every registered contract that judges ``answer_kind`` answers, in registry order (a
    contract paid at random, :data:`DRAWN`, judges none)."""
    return [name for name in CONTRACTS.names()
            if name not in DRAWN and contract_answers(name) == answer_kind]


def fits(contract: str, answer_kind: str) -> bool:
    """Whether ``contract`` can pay on a task whose answers are ``answer_kind``."""
    return contract_answers(contract) in (answer_kind, "any")



@dataclass(frozen=True)
class ContractWords:
    """How reports name one contract in one language."""

    name: str    # the contract itself, as in "pass@k (..., strict contract)"
    rate: str    # the share of outputs it accepts: "strict success"
    reward: str  # its rollout reward series: "strict reward rate"
    column: str  # its column in the held-out text table: "correct"


#: Contract name -> language -> words.
CONTRACT_WORDS: Registry[dict[str, ContractWords]] = Registry("contract description")


def describe(contract: str, lang: str) -> ContractWords:
    """The contract's registered words, or plain ones made from its name."""
    if contract in CONTRACT_WORDS and lang in CONTRACT_WORDS[contract]:
        return CONTRACT_WORDS[contract][lang]
    if lang == "zh":
        return ContractWords(contract, f"{contract} 接受率", f"{contract} 奖励率",
                             f"{contract} 接受")
    return ContractWords(contract, f"{contract} acceptance", f"{contract} reward rate",
                         f"{contract} accepted")


def score(row: Row, contract: str, answer: Answer = sum) -> float:
    """The one place a row meets a contract: 1 if ``contract`` accepts the row's output for
    the task's ``answer`` to its pair, 0 if not, or the partial credit a scorer gives
    (KeyError lists the known contracts)."""
    return scored(CONTRACTS[contract], answer, row)


@functools.lru_cache(maxsize=1 << 16)
def scored(scorer: Contract, answer: Answer, row: Row) -> float:
    """:func:`score` with the contract looked up: contracts are pure, so a row's score is
    kept and an answer seen again (most are, in rollouts and sampled evaluations) costs a
    lookup. A 16-seed teaching report scored 1.4 million rows, 34% of its time, before."""
    pair = row.pair
    return scorer(pair, row.text, row.terminated, answer(pair))


_DIGITS = frozenset("0123456789")


@CONTRACTS.register("strict")
def strict(pair: Sequence[int], text: str, terminated: bool, expected: int | None = None) -> int:
    """Terminated, non-empty, ASCII digits only, and the integer value equals the answer.

    Leading zeros are accepted ("007" for 3+4): the rule checks the value, not the spelling.
    """
    if not terminated or not text or not set(text) <= _DIGITS:
        return 0
    return int(int(text) == (sum(pair) if expected is None else expected))


@CONTRACTS.register("substring")
def substring(pair: Sequence[int], text: str, terminated: bool,
              expected: int | None = None) -> int:
    """The decimal answer appears anywhere in the text, terminated or not.

    Deliberately gameable: "1010" passes for 5+5, so a policy can be paid for hedging.
    """
    return int(str(sum(pair) if expected is None else expected) in text)


@CONTRACTS.register("exact")
def exact(pair: Sequence[int], text: str, terminated: bool, expected: int | None = None) -> int:
    """Terminated and the text is exactly the answer's decimal form: strict without leading
    zeros (answer 10)."""
    return int(terminated and text == str(sum(pair) if expected is None else expected))


@CONTRACTS.register("format")
def well_formed(pair: Sequence[int], text: str, terminated: bool,
                expected: int | None = None) -> int:
    """Terminated, non-empty, ASCII digits only, whatever the value: strict's form without its
    answer. A control arm (the field's format-only reward, as in Shao et al. 2025, Spurious
    Rewards, arXiv:2506.10947): an RL arm whose gain it matches did not need the answer."""
    return int(terminated and bool(text) and set(text) <= _DIGITS)


@CONTRACTS.register("random")
def paid_at_random(pair: Sequence[int], text: str, terminated: bool,
                   expected: int | None = None) -> int:
    """Never called: the random contract pays from the run's random stream, not from a row
    (:data:`DRAWN`); reaching here is a bug in the caller."""
    raise TypeError("the random contract judges no row; its rewards come from random_rewards")


#: Contracts that pay from the run's own random stream, independent of the answer: a row's
#: reward is a function of (seed, step, the row's place in the step's batch) and the plan's
#: rate, so both engines pay the same rows and any reader recomputes the payments, but no
#: text is paid for what it says. They judge no row, so reports neither evaluate nor
#: re-score under them.
DRAWN: Registry[bool] = Registry("random-stream contract")
DRAWN.register("random")(True)
#: Contracts that read no answer at all, usable on any task.
CONTRACT_ANSWERS.register("random")("any")


def random_rewards(seed: Any, step: Any, count: int, rate: float) -> Any:
    """The random contract's payments for one step's ``count`` rollout rows, in batch order:
    1 where the run's counter draw (:mod:`postlab.counter`, stream ``RANDOM_REWARD``) at
    (seed, step, row) falls below ``rate`` (compared in float32), else 0; float32, shaped
    ``seed``'s shape plus ``[count]``. Spurious Rewards (Shao et al. 2025,
    arXiv:2506.10947) pays at random like this to ask whether RL needed the answer."""
    import torch

    seed = torch.as_tensor(seed, dtype=torch.int64)
    rows = torch.arange(count, dtype=torch.int64, device=seed.device)
    return random_payments(seed[..., None], step, rows, rate)


def random_payments(seed: Any, step: Any, place: Any, rate: float) -> Any:
    """The random contract's payment of each row at (seed, step, place in the step's batch),
    the arguments broadcast together (tensors or array-likes): the one draw every reader of
    a random arm's payments makes (float32 0/1 tensor)."""
    import torch

    from postlab import counter

    seed = torch.as_tensor(seed, dtype=torch.int64)
    step = torch.as_tensor(step, dtype=torch.int64, device=seed.device)
    place = torch.as_tensor(place, dtype=torch.int64, device=seed.device)
    draws = counter.uniform(seed, counter.RANDOM_REWARD, step, place)
    return (draws < rate).to(torch.float32)


def random_paid(seed: int, steps: Sequence[int], rows: Sequence[int], rate: float) -> Any:
    """How many rows the random contract paid at each of a seed's ``steps`` (``rows`` of
    them each), recomputed from the stream as training drew them: int64 numpy, one count
    a step. What reports show as a random arm's training reward."""
    import numpy as np
    import torch

    if not steps:
        return np.zeros(0, dtype=np.int64)
    step = torch.as_tensor(list(steps), dtype=torch.int64)[:, None]
    paid = random_rewards(torch.tensor(seed), step, max(rows), rate)  # [steps, most rows]
    kept = torch.arange(max(rows))[None, :] < torch.as_tensor(list(rows))[:, None]
    return (paid * kept).sum(1).to(torch.int64).numpy()


CONTRACT_WORDS.register("strict")({
    "en": ContractWords("strict", "strict success", "strict reward rate", "correct"),
    "zh": ContractWords("严格", "严格正确率", "严格奖励率", "正确"),
})
CONTRACT_WORDS.register("substring")({
    "en": ContractWords("substring", "substring acceptance", "substring reward rate",
                        "substring accepted"),
    "zh": ContractWords("子串", "子串接受率", "子串奖励率", "子串接受"),
})
CONTRACT_WORDS.register("exact")({
    "en": ContractWords("exact", "exact success", "exact reward rate", "exact"),
    "zh": ContractWords("精确", "精确正确率", "精确奖励率", "精确"),
})
CONTRACT_WORDS.register("format")({
    "en": ContractWords("format", "well-formed share", "format reward rate", "well-formed"),
    "zh": ContractWords("格式", "格式合格率", "格式奖励率", "格式合格"),
})
CONTRACT_WORDS.register("random")({
    "en": ContractWords("random", "random payment rate", "random reward rate", "paid"),
    "zh": ContractWords("随机", "随机支付率", "随机奖励率", "支付"),
})

# The reasoning-gym contracts read generated items; their module imports reasoning-gym and
# math-verify only when a contract is first called.
for _name, _where in (("rg-strict", "strict_format"), ("rg-substring", "answer_anywhere"),
                      ("rg-score", "dataset_score"), ("rg-final", "final_number")):
    CONTRACTS.register_lazy(_name, f"postlab.tasks.gym:{_where}")
    CONTRACT_ANSWERS.register(_name)("item")
PARTIAL_CREDIT.register("rg-score")(True)
# Episodes' contracts read a whole transcript (``postlab.tasks.episodes``).
for _name, _where in (("episode-strict", "final_answer_strict"),
                      ("episode-anywhere", "answer_anywhere"), ("per-call", "per_successful_call")):
    CONTRACTS.register_lazy(_name, f"postlab.tasks.episodes:{_where}")
    CONTRACT_ANSWERS.register(_name)("episode")
PARTIAL_CREDIT.register("per-call")(True)
CONTRACT_WORDS.register("rg-strict")({
    "en": ContractWords("rg-strict", "strict-format success", "strict-format reward rate",
                        "correct"),
    "zh": ContractWords("严格格式", "严格格式正确率", "严格格式奖励率", "正确"),
})
CONTRACT_WORDS.register("rg-final")({
    "en": ContractWords("rg-final", "final-number success", "final-number reward rate",
                        "correct"),
    "zh": ContractWords("最后数字", "最后数字正确率", "最后数字奖励率", "正确"),
})
CONTRACT_WORDS.register("rg-substring")({
    "en": ContractWords("rg-substring", "answer-anywhere acceptance",
                        "answer-anywhere reward rate", "answer anywhere"),
    "zh": ContractWords("答案子串", "答案子串接受率", "答案子串奖励率", "答案子串接受"),
})
CONTRACT_WORDS.register("episode-strict")({
    "en": ContractWords("episode-strict", "final-answer success", "final-answer reward rate",
                        "correct"),
    "zh": ContractWords("最终答案", "最终答案正确率", "最终答案奖励率", "正确"),
})
CONTRACT_WORDS.register("episode-anywhere")({
    "en": ContractWords("episode-anywhere", "answer-in-episode acceptance",
                        "answer-in-episode reward rate", "answer in episode"),
    "zh": ContractWords("回合含答案", "回合含答案接受率", "回合含答案奖励率", "回合含答案"),
})
CONTRACT_WORDS.register("per-call")({
    "en": ContractWords("per-call", "paid tool calls", "per-call reward", "paid calls"),
    "zh": ContractWords("按调用", "按调用支付", "按调用奖励", "支付调用"),
})
CONTRACT_WORDS.register("rg-score")({
    "en": ContractWords("rg-score", "dataset score", "dataset score reward", "dataset score"),
    "zh": ContractWords("数据集评分", "数据集评分均值", "数据集评分奖励", "数据集评分"),
})
