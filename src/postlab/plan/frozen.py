"""The frozen experiment plan: the teaching plan, its exact bytes, and a typed loaded form.

A plan is written once, before training, and identified by the sha256 of its file's bytes; a
record names the plan it was trained under by that hash. The teaching plan's bytes must equal
the reference's, so its field order and layout are part of the contract.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError
from postlab.jsonio import (
    MalformedJSON,
    dump_json,
    parse_json,
    printable,
    publish_bytes,
    read_bytes,
)

if TYPE_CHECKING:
    from postlab.plan.schema import PlanModel

Pair = tuple[int, int]

#: Seed of the shuffle that assigns unordered operand pairs to train, dev and test.
SPLIT_SHUFFLE_SEED = 20261020
#: How many unordered pairs go to train and dev; the rest are test.
SPLIT_SIZES = (35, 10)


def unordered_pairs(digits: int = 10) -> list[Pair]:
    """All {a, b} with a <= b, in the order the split shuffle expects."""
    return [(a, b) for a in range(digits) for b in range(a, digits)]


def split_by_unordered_pair(seed: int = SPLIT_SHUFFLE_SEED,
                            sizes: tuple[int, ...] = SPLIT_SIZES,
                            pairs: list[Pair] | None = None) -> dict[str, list[list[int]]]:
    """Assign each unordered pair, with both of its orders, to exactly one split.

    Splitting by unordered pair keeps 3+4 out of train when 4+3 is in test, so held-out
    accuracy measures combination, not recall of a commuted question (answer 6).
    ``sizes`` gives the unordered pairs of train and dev, and optionally of test (default: all
    the rest); ``pairs`` defaults to the single-digit pairs of the teaching task.
    """
    groups = unordered_pairs() if pairs is None else list(pairs)
    random.Random(seed).shuffle(groups)
    n_train, n_dev = sizes[0], sizes[1]
    end = n_train + n_dev + sizes[2] if len(sizes) > 2 else len(groups)
    chosen = {"train": groups[:n_train], "dev": groups[n_train:n_train + n_dev],
              "test": groups[n_train + n_dev:end]}
    split: dict[str, list[list[int]]] = {}
    for name, selected in chosen.items():
        ordered = [[a, b] for a, b in selected] + [[b, a] for a, b in selected if a != b]
        split[name] = sorted(ordered)
    return split


def teaching_plan() -> dict[str, Any]:
    """The teaching plan as an ordered dict; its serialisation is the frozen file."""
    return {
        "version": 1, "date": "2026-10-20", "task": "single_digit_addition",
        "split": split_by_unordered_pair(), "seeds": [11, 22, 33],
        "vocab": "0123456789+=~_", "eos": "~", "pad": "_",
        "embedding": 24, "hidden": 48, "threads": 1,
        "sft_steps": 200, "sft_batch": 16, "sft_lr": 0.003,
        "rl_steps": 240, "prompts_per_step": 8, "group_size": 8,
        "updates_per_rollout": 2, "rl_lr": 0.0005, "clip": 0.2,
        "kl_beta": 0.03, "max_new_tokens": 6, "temperature": 1.0,
        "eval_samples": 16, "gradient_clip": 1.0,
        "arms": ["strict", "substring"],
        "loss_reduction": "mean over all valid response tokens, including EOS",
        "advantage": "group population std + 1e-8; no dynamic resampling",
        "kl": "exact categorical KL at old-policy sampled histories",
        "selection": "fixed last checkpoint; no tuning or seed selection",
        "rewards": {
            "strict": "terminated, nonempty ASCII digits, integer equals a+b; "
                      "leading zeros allowed",
            "substring": "decimal str(a+b) occurs anywhere, even without EOS",
        },
    }


def plan_bytes(plan: dict[str, Any]) -> bytes:
    """The frozen layout: 2-space indent, keys in plan order, non-ASCII kept, final newline."""
    return dump_json(plan, indent=2)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class LoadedPlan:
    """A plan as read from disk: the typed fields, the raw dict, and the hash of its bytes."""

    path: Path
    model: PlanModel
    data: dict[str, Any]
    sha256: str
    raw: bytes = b""  # the file's exact bytes, copied into a run folder as they are


def describe_problems(problems: list[tuple[str, str]]) -> str:
    """All problems on one line, each with its field path."""
    return "; ".join(f"{path}: {message}" for path, message in problems)


def parse_plan(raw: bytes, source: str, path: Path | None = None) -> LoadedPlan:
    from postlab.plan.schema import PlanModel
    from postlab.plan.validation import validate_plan

    data = parse_json(raw, source)
    problems = validate_plan(data)
    if problems:
        raise UserError(f"{source}: invalid plan: {describe_problems(problems)}")
    return LoadedPlan(path=path or Path(source), model=PlanModel.of(data),
                      data=data, sha256=sha256_hex(raw), raw=raw)


def load_plan(path: Path) -> LoadedPlan:
    return parse_plan(read_bytes(path, "plan"), str(path), path)


def teaching_plan_loaded() -> LoadedPlan:
    """The teaching plan as if read from its frozen file."""
    raw = plan_bytes(teaching_plan())
    return parse_plan(raw, "teaching plan", Path("teaching-plan.json"))


def freeze(path: Path, plan: dict[str, Any] | None = None) -> str:
    """Write a plan file once (never over an existing one) and return its sha256."""
    raw = plan_bytes(teaching_plan() if plan is None else plan)
    publish_bytes(path, raw)
    return sha256_hex(raw)


def read_draft(path: Path) -> dict[str, Any]:
    """A draft plan file: a JSON object, read by the plan files' strict parser."""
    data = parse_json(read_bytes(path, "draft plan"), str(path))
    if not isinstance(data, dict):
        raise UserError(f"{path}: a draft plan must be a JSON object")
    return data


def complete_draft(draft: dict[str, Any]) -> dict[str, Any]:
    """The plan a draft stands for: a ``reasoning_gym`` task's items generated and pinned,
    its split written and, when the draft gives none, the vocab (the characters of every
    prompt and demonstration, then eos and pad). Refuses an incomplete or invalid result."""
    from postlab.plan.schema import GymSection
    from postlab.plan.validation import validate_plan
    from postlab.tasks.gym import draft_fields

    if draft.get("task") != "reasoning_gym":
        raise UserError("a draft is for the reasoning_gym task (its items are generated); "
                        "other plans are written whole, or derived with --from and --set")
    section = draft.get("reasoning_gym")
    if not isinstance(section, dict):
        raise UserError("draft: reasoning_gym: needs the dataset, config, seed and sizes")
    if "split" in draft:
        raise UserError("draft: split: freeze writes the split from reasoning_gym.sizes; "
                        "leave it out")
    pins = [key for key in ("version", "items_sha256") if key in section]
    if pins:
        raise UserError(f"draft: reasoning_gym.{pins[0]}: freeze writes the pins; leave "
                        "them out")
    from pydantic import ValidationError

    try:
        GymSection.model_validate(section)
    except ValidationError as exc:
        raise UserError("draft: " + describe_problems(
            [("reasoning_gym." + ".".join(map(str, e["loc"])), e["msg"])
             for e in exc.errors()])) from None
    fields = draft_fields(section)
    written: dict[str, Any] = {}
    for key, value in draft.items():
        written[key] = value
        if key == "reasoning_gym":
            written[key] = fields["reasoning_gym"]
            written["split"] = fields["split"]
    if "vocab" not in draft:
        eos, pad = draft.get("eos"), draft.get("pad")
        if not (isinstance(eos, str) and isinstance(pad, str)):
            raise UserError("draft: eos and pad: give both (one character each, not used by "
                            "the task's questions), so freeze can write the vocab")
        characters = _agent_characters(written, fields["characters"], eos + pad)
        extra = "".join(dict.fromkeys(c for c in eos + pad if c not in characters))
        vocab = characters + extra
        ordered: dict[str, Any] = {}
        for key, value in written.items():
            ordered[key] = value
            if key == "seeds":
                ordered["vocab"] = vocab
        written = ordered if "vocab" in ordered else {**written, "vocab": vocab}
    problems = validate_plan(written)
    if problems:
        raise UserError(f"draft: the frozen plan would be invalid: {describe_problems(problems)}")
    return written


def _agent_characters(written: dict[str, Any], characters: str, special: str) -> str:
    """The task's characters, and with an ``agent`` section also the tools' (their tags,
    arguments and outputs) in sorted order after them; a section too wrong to build the
    task with adds none (the plan's check then says what is wrong)."""
    if "agent" not in written:
        return characters
    from pydantic import ValidationError

    from postlab.plan.schema import Plan
    from postlab.tasks.registry import task_for

    trial = characters + "".join(dict.fromkeys(c for c in special if c not in characters))
    try:
        needed = task_for(Plan.of({**written, "vocab": trial})).required_characters
    except (ValidationError, KeyError, ValueError):
        return characters
    return characters + "".join(sorted(set(needed) - set(characters)))


#: Keys a derived plan sets itself; ``--set`` may not change them.
AUTOMATIC_KEYS = ("version", "date", "parent")


def parse_setting(setting: str) -> tuple[str, Any]:
    """``key=value``; the value is read as JSON when it parses (numbers, lists), else text.

    The JSON is read by the same strict parser as plan files (no duplicate keys, NaN, huge
    integers or deep nesting), so a value that is refused in a file is refused here too.
    """
    key, sep, text = setting.partition("=")
    if not sep or not key:
        raise UserError(f"--set {printable(setting):.80}: expected key=value")
    try:
        setting.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"--set {printable(key):.80}: not valid Unicode (a lone surrogate, "
                        "as from bytes that are not UTF-8)") from None
    try:
        value = parse_json(text, f"--set {printable(key):.80}")
    except MalformedJSON:
        value = text
    return key, value


def derive_plan(parent: LoadedPlan, settings: list[str], today: str) -> dict[str, Any]:
    """A new plan version: ``settings`` applied, version + 1, today's date, parent recorded."""
    from postlab.plan.schema import PlanModel
    from postlab.plan.validation import validate_plan

    data = {k: v for k, v in parent.data.items() if k != "parent"}
    changes: list[str] = []
    for setting in settings:
        key, value = parse_setting(setting)
        if key in AUTOMATIC_KEYS:
            raise UserError(f"--set {key}: set automatically for a new version")
        if key not in PlanModel.model_fields:
            known = [k for k in PlanModel.model_fields if k not in AUTOMATIC_KEYS]
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UserError(f"--set {printable(key):.80}: unknown plan key{hint}; "
                            f"known: {', '.join(known)}")
        if key in changes:
            raise UserError(f"--set {key}: given twice")
        if data.get(key) == value:
            raise UserError(f"--set {key}: the parent plan already has this value")
        data[key] = value
        changes.append(key)
    if not changes:
        raise UserError("a new plan version needs at least one --set key=value")
    data["version"] = parent.model.version + 1
    data["date"] = today
    data["parent"] = {"sha256": parent.sha256, "changes": changes}
    problems = validate_plan(data)
    if problems:
        raise UserError(f"new plan: invalid: {describe_problems(problems)}")
    return data


def plan_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human lines naming each changed key; splits are compared by pair."""
    lines = []
    for key in list(old) + [k for k in new if k not in old]:
        if old.get(key) == new.get(key):
            continue
        if key == "split" and isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
            for name in list(old[key]) + [n for n in new[key] if n not in old[key]]:
                before = {tuple(p) for p in old[key].get(name, [])}
                after = {tuple(p) for p in new[key].get(name, [])}
                if before != after:
                    lines.append(f"split.{name}: added {sorted(after - before)}, removed "
                                 f"{sorted(before - after)}")
            continue
        lines.append(f"{key}: {json.dumps(old.get(key), ensure_ascii=False)} -> "
                     f"{json.dumps(new.get(key), ensure_ascii=False)}")
    return lines
