"""reasoning-gym datasets as tasks, and the three contracts that judge their answers.

A plan's ``reasoning_gym`` section names a dataset, its configuration (difficulty settings
included), a generator seed and the number of distinct questions per split. ``postlab freeze
--draft`` generates the items once, writes the split (question ``[0, i]`` is item ``i``, the
splits taking consecutive items in the order the sizes list them) and pins the items by
sha256 together with the library's version; a run regenerates them and refuses a plan whose
items differ, naming the version that made them.

Items are the dataset's own entries, de-duplicated by question (first occurrence kept), so no
question appears in two splits. Every prompt follows one template, :data:`TEMPLATE` (the
question, then a newline), and SFT demonstrates the reference answer in the answer format,
``<answer>ANSWER</answer>``, then EOS.

The contracts (registered lazily in :mod:`postlab.tasks.contracts`):

- ``rg-strict``: EOS emitted, exactly one ``<answer>…</answer>`` with nothing but white space
  after it, and the answer inside judged right: full credit from the dataset's scorer, or,
  where reference and answer are both plain numbers, equal by ``math-verify`` (``1/2`` and
  ``0.5``). Only plain numbers go to math-verify: an expression answer (countdown's
  ``94*4 - 61 - 6``) must satisfy the dataset's rules, not merely have the reference's value.
- ``rg-substring``: the reference answer appears anywhere in the output, EOS or not: the
  deliberately gameable rule.
- ``rg-score``: the dataset's scorer on the last tagged answer (or, with no tags, the whole
  output), its partial credit kept as the reward (countdown pays 0.05 for a well-formed wrong
  expression).
- ``rg-final``: EOS emitted, and the last number the output writes is the answer (judged as
  ``rg-strict`` judges a tagged one): how a chat model that answers in a sentence ("58 + 26 =
  84.") is graded. It is the reference rule of a section whose ``answer_format`` is
  ``final-number``, which also demonstrates the bare answer; every item's answer must then be
  a plain number.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.metadata
import json
import logging
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError

if TYPE_CHECKING:
    from postlab.tasks.registry import TaskPlan

#: The prompt template every reasoning-gym question is asked in.
TEMPLATE = "{question}\n"
OPEN, CLOSE = "<answer>", "</answer>"
#: The extra that installs what this module needs.
EXTRA = "gym"
#: How far past the requested total the generator may go to find distinct questions.
MAX_OVERSAMPLING = 64
#: How a section's answers are written: in tags (the default), or as the output's last number.
ANSWER_FORMATS = ("tagged", "final-number")
#: A number as a sentence writes it, for ``rg-final``: sign, digits (thousands may be
#: separated by commas), a decimal part, a fraction bar.
_WRITTEN_NUMBER = re.compile(r"[+-]?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
#: Plain numbers (sign, digits, decimal point, a fraction bar), the only strings compared by
#: value with math-verify: short, so parsing them cannot run away.
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)(/\d+)?")
#: A number written with thousands separators ("1,000,000"), whose commas may go.
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")
_NUMBER_LENGTH = 40


def _missing(what: str) -> UserError:
    return UserError(f"the reasoning_gym task needs {what}: pip install 'postlab[{EXTRA}]'")


def _library() -> Any:
    try:
        with warnings.catch_warnings():
            # one of reasoning-gym's dependencies compiles with SyntaxWarnings on Python 3.11
            warnings.simplefilter("ignore", SyntaxWarning)
            import reasoning_gym
    except ImportError:
        raise _missing("reasoning-gym") from None
    return reasoning_gym


def library_version() -> str:
    """The installed reasoning-gym's version, as its package metadata gives it (the module's
    own ``__version__`` lags behind the release)."""
    _library()
    return importlib.metadata.version("reasoning-gym")


def dataset_names() -> list[str]:
    _library()
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


@dataclass(frozen=True)
class GymItem:
    """One generated question: its position among the task's items, the dataset's entry and
    the scorer that judges answers to it."""

    source: str  # dataset and configuration, so equal questions of two datasets differ
    index: int
    question: str
    answer: str
    entry: Mapping[str, Any] = field(compare=False, repr=False)
    scorer: Callable[[str | None, Mapping[str, Any]], float] = field(compare=False,
                                                                     repr=False)

    def __str__(self) -> str:
        return self.answer


def _canonical(value: Any) -> Any:
    """A JSON form of an entry's metadata: tuples as lists, sets sorted, the rest by repr."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_canonical(v) for v in value), key=repr)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else repr(value)
    return repr(value)


def items_sha256(items: Sequence[GymItem]) -> str:
    """sha256 over every item's question, answer and metadata, in order (canonical JSON)."""
    data = [{"question": item.question, "answer": item.answer,
             "metadata": _canonical(item.entry.get("metadata", {}))} for item in items]
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _one_line(text: str) -> str:
    return " ".join(str(text).split()) or "no message"


@functools.lru_cache(maxsize=8)
def _generate(dataset: str, config_json: str, seed: int, total: int) -> tuple[GymItem, ...]:
    library = _library()
    names = dataset_names()
    if dataset not in names:
        close = difflib.get_close_matches(dataset, names, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(f"reasoning_gym.dataset: unknown dataset {dataset!r}{hint}; "
                        f"reasoning-gym {library_version()} has {len(names)} datasets")
    config = json.loads(config_json)
    size = total
    while True:
        try:
            generated = library.create_dataset(dataset, seed=seed, size=size, **config)
            entries = [generated[i] for i in range(size)]
        except Exception as exc:  # the library's own checks raise what they like
            raise UserError(f"reasoning_gym.config: {dataset} refuses this configuration: "
                            f"{type(exc).__name__}: {_one_line(exc)}") from None
        unique: dict[str, Mapping[str, Any]] = {}
        for entry in entries:
            unique.setdefault(str(entry["question"]), entry)
        if len(unique) >= total or size >= MAX_OVERSAMPLING * total:
            break
        size *= 2
    if len(unique) < total:
        raise UserError(f"reasoning_gym.sizes: {dataset} with this configuration gave "
                        f"{len(unique)} distinct questions in {size} items; the sizes ask "
                        f"for {total}")
    source = f"{dataset} {config_json} seed {seed}"
    return tuple(GymItem(source, index, question, str(entry["answer"]), entry,
                         generated.score_answer)
                 for index, (question, entry) in enumerate(list(unique.items())[:total]))


def generate_items(section: Mapping[str, Any]) -> tuple[GymItem, ...]:
    """The section's items, generated (and kept for the process) from dataset, configuration,
    seed and sizes."""
    config = json.dumps(section.get("config", {}), sort_keys=True)
    return _generate(section["dataset"], config, section["seed"], sum(section["sizes"].values()))


def split_keys(sizes: Mapping[str, int]) -> dict[str, list[list[int]]]:
    """Question keys per split: consecutive items in the order the sizes list the splits."""
    split, start = {}, 0
    for name, count in sizes.items():
        split[name] = [[0, index] for index in range(start, start + count)]
        start += count
    return split


def prompt_of(item: GymItem) -> str:
    return TEMPLATE.format(question=item.question)


def demonstration_of(item: GymItem, answer_format: str = "tagged") -> str:
    """What SFT demonstrates: the answer in tags, or alone for ``final-number``."""
    return item.answer if answer_format == "final-number" else f"{OPEN}{item.answer}{CLOSE}"


@dataclass(frozen=True)
class GymTask:
    """A reasoning-gym dataset's items as a task (see the module docstring)."""

    section: Mapping[str, Any] = field(compare=False)
    items: tuple[GymItem, ...]
    name = "reasoning_gym"
    answer_kind = "item"
    operand_limit = None

    @property
    def answer_format(self) -> str:
        return str(self.section.get("answer_format") or "tagged")

    @property
    def contracts(self) -> tuple[str, ...]:
        """The reference rule first: tags, or the final number."""
        if self.answer_format == "final-number":
            return ("rg-final", "rg-substring", "rg-score")
        return ("rg-strict", "rg-substring", "rg-score")

    def item(self, key: Sequence[int]) -> GymItem:
        return self.items[key[1]]

    def prompt(self, key: Sequence[int]) -> str:
        return prompt_of(self.item(key))

    def answer(self, key: Sequence[int]) -> GymItem:
        return self.item(key)

    def answer_value(self, key: Sequence[int]) -> str:
        return self.item(key).answer

    def demonstration(self, key: Sequence[int]) -> str:
        return demonstration_of(self.item(key), self.answer_format)

    def expression(self, key: Sequence[int]) -> str | None:
        """The item's arithmetic as its dataset writes it (chain_sum's and
        basic_arithmetic's ``metadata["expression"]``), for a calculator; None without one."""
        written = self.item(key).entry.get("metadata", {}).get("expression")
        return written if isinstance(written, str) else None

    def difficulty(self, key: Sequence[int]) -> tuple[float, ...]:
        """The item's own values of its dataset's difficulty settings (reasoning-gym's
        ``metadata["difficulty"]`` names them, e.g. chain_sum's ``num_terms`` and
        ``num_digits``), in the settings' name order; () where the dataset names none, so
        every item is as hard as every other."""
        metadata = self.item(key).entry.get("metadata", {})
        settings = sorted(metadata.get("difficulty", {}))
        return tuple(float(metadata[name]) for name in settings
                     if isinstance(metadata.get(name), int | float)
                     and not isinstance(metadata.get(name), bool))

    @functools.cached_property
    def answer_characters(self) -> str:
        """Every character of every demonstration: what the policy may write."""
        return "".join(sorted({c for item in self.items
                               for c in demonstration_of(item, self.answer_format)}))

    @functools.cached_property
    def required_characters(self) -> str:
        text = {c for item in self.items
                for c in prompt_of(item) + demonstration_of(item, self.answer_format)}
        return "".join(sorted(text))

    @functools.cached_property
    def longest_answer(self) -> int:
        return max(len(demonstration_of(item, self.answer_format)) for item in self.items)

    @functools.cached_property
    def longest_prompt(self) -> int:
        return max(len(prompt_of(item)) for item in self.items)

    def plan_problems(self, plan: TaskPlan) -> list[tuple[str, str]]:
        """The pins match the regenerated items, and the split is the one freeze writes."""
        section = self.section
        if plan.operand_digits is not None:
            return [("operand_digits", "only multi_digit_addition has operand_digits")]
        if section.get("items_sha256") is None or section.get("version") is None:
            return [("reasoning_gym", "not frozen: `postlab freeze PLAN --draft DRAFT` "
                                      "generates the items and writes their pins")]
        found = items_sha256(self.items)
        if found != section["items_sha256"] and section["version"] == library_version():
            return [("reasoning_gym.items_sha256",
                     f"the dataset, configuration, seed and sizes give other items than the "
                     f"plan pins (sha256 {found[:16]}…, pinned {section['items_sha256'][:16]}…)"
                     "; a changed section needs `postlab freeze --draft` again")]
        if found != section["items_sha256"]:
            return [("reasoning_gym.items_sha256",
                     f"the items were made by reasoning-gym {section['version']}; "
                     f"reasoning-gym {library_version()} regenerates different ones (sha256 "
                     f"{found[:16]}…, the plan pins {section['items_sha256'][:16]}…)")]
        if plan.split != split_keys(section["sizes"]):
            return [("split", "differs from the items' split (train, dev, test as "
                              "`postlab freeze --draft` writes them from the sizes)")]
        if self.answer_format == "final-number":
            worded = next((item for item in self.items
                           if not _plain_number(_without_separators(item.answer))), None)
            if worded is not None:
                return [("reasoning_gym.answer_format",
                         f"final-number needs plain-number answers; item {worded.index}'s is "
                         f"{worded.answer[:40]!r}")]
        return []


def reasoning_gym(plan: TaskPlan) -> GymTask:
    """The plan's reasoning-gym dataset as a task (its items generated once per process)."""
    # The section as its file gave it: generated items and their pins are of this content.
    section = plan.reasoning_gym.model_dump(mode="json", exclude_unset=True)
    return GymTask(section, generate_items(section))


def draft_fields(section: Mapping[str, Any]) -> dict[str, Any]:
    """What ``freeze --draft`` writes for a section: the pinned section, the split and the
    characters the task's questions and demonstrations use."""
    items = generate_items(section)
    pinned = {key: value for key, value in section.items()
              if key not in ("version", "items_sha256")}
    pinned.update(version=library_version(), items_sha256=items_sha256(items))
    task = GymTask(pinned, items)
    return {"reasoning_gym": pinned, "split": split_keys(section["sizes"]),
            "characters": task.required_characters}


# --- contracts --------------------------------------------------------------------------------

def _tagged_answer(text: str) -> str | None:
    """The answer inside the output's one ``<answer>…</answer>``, when that pair is the
    output's last content (only white space after it); None otherwise."""
    if text.count(OPEN) != 1 or text.count(CLOSE) != 1:
        return None
    start, end = text.index(OPEN) + len(OPEN), text.index(CLOSE)
    if end < start or text[end + len(CLOSE):].strip():
        return None
    return text[start:end].strip()


def _last_tagged(text: str) -> str | None:
    """The last ``<answer>…</answer>``'s content, as reasoning-gym's own extraction reads it."""
    found = re.findall(f"{re.escape(OPEN)}(.*?){re.escape(CLOSE)}", text, flags=re.DOTALL)
    return found[-1].strip() if found else None


@functools.lru_cache(maxsize=1 << 16)
def _scored(answer: str | None, item: GymItem) -> float:
    """The dataset's scorer on one answer, within [0, 1]; a scorer that raises on an output
    scores it 0 (policies write anything)."""
    try:
        value = float(item.scorer(answer, item.entry))
    except Exception:
        return 0.0
    return min(1.0, max(0.0, value)) if value == value else 0.0


def _plain_number(text: str) -> bool:
    return len(text) <= _NUMBER_LENGTH and _NUMBER.fullmatch(text) is not None


def _without_separators(text: str) -> str:
    """``1,000`` as ``1000``; any other comma stays (``3,4`` is no number)."""
    return text.replace(",", "") if _THOUSANDS.fullmatch(text) else text


@functools.lru_cache(maxsize=1 << 16)
def _numerically_equal(answer: str, reference: str) -> bool:
    answer, reference = _without_separators(answer), _without_separators(reference)
    if not (_plain_number(answer) and _plain_number(reference)):
        return False
    try:
        from math_verify import parse, verify
    except ImportError:
        raise _missing("math-verify") from None
    # Plain numbers only (see _NUMBER), so the timeouts, which use signals and work only in
    # a main thread, are not needed; they are off, and so is their warning.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return bool(verify(parse(reference, parsing_timeout=None),
                       parse(answer, parsing_timeout=None), timeout_seconds=None))


def judged_right(answer: str, item: GymItem) -> bool:
    """Full credit from the dataset's scorer, or equal to the reference as a plain number."""
    return _scored(answer, item) >= 1.0 or _numerically_equal(answer, item.answer)


def strict_format(pair: Sequence[int], text: str, terminated: bool, expected: GymItem) -> int:
    """EOS, exactly one ``<answer>…</answer>`` ending the output, and a right answer in it."""
    if not terminated:
        return 0
    answer = _tagged_answer(text)
    return int(answer is not None and judged_right(answer, expected))


def last_number(text: str) -> str | None:
    """The last number ``text`` writes (a sentence's full stop is not a decimal point)."""
    found = _WRITTEN_NUMBER.findall(text)
    return found[-1] if found else None


def final_number(pair: Sequence[int], text: str, terminated: bool, expected: GymItem) -> int:
    """EOS, and the last number the output writes judged right."""
    if not terminated:
        return 0
    number = last_number(text)
    return int(number is not None and judged_right(number, expected))


def answer_anywhere(pair: Sequence[int], text: str, terminated: bool,
                    expected: GymItem) -> int:
    """The reference answer appears anywhere, EOS or not: deliberately gameable."""
    return int(bool(expected.answer) and expected.answer in text)


def dataset_score(pair: Sequence[int], text: str, terminated: bool,
                  expected: GymItem) -> float:
    """The dataset's own scorer on the last tagged answer (the whole output when untagged),
    partial credit kept."""
    tagged = _last_tagged(text)
    return _scored(tagged if tagged is not None else text.strip(), expected)
