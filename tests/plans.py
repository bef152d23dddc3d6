"""Small plans for engine tests: each trains in a second or two."""

from __future__ import annotations

from pathlib import Path

from postlab.plan.frozen import freeze, split_by_unordered_pair, teaching_plan
from postlab.plan.schema import Plan

#: Fast but complete: every stage runs, every arm trains.
SMALL = {"seeds": [3, 4], "embedding": 12, "hidden": 16, "sft_steps": 30, "sft_batch": 8,
         "rl_steps": 6, "prompts_per_step": 3, "group_size": 4, "eval_samples": 3}

#: Two plans that change every numeric field of the teaching plan (and the split).
VARIANT_A = {
    "version": 2, "date": "2026-11-01", "split": split_by_unordered_pair(seed=7),
    "seeds": [5, 8], "embedding": 16, "hidden": 20, "threads": 1,
    "sft_steps": 40, "sft_batch": 12, "sft_lr": 0.01, "rl_steps": 10,
    "prompts_per_step": 4, "group_size": 4, "updates_per_rollout": 3, "rl_lr": 0.002,
    "clip": 0.3, "kl_beta": 0.1, "max_new_tokens": 4, "temperature": 0.7,
    "eval_samples": 4, "gradient_clip": 0.5,
}
VARIANT_B = {
    "version": 3, "date": "2026-11-02", "split": split_by_unordered_pair(seed=99, sizes=(30, 12)),
    "seeds": [1], "embedding": 8, "hidden": 12, "threads": 2,
    "sft_steps": 25, "sft_batch": 20, "sft_lr": 0.02, "rl_steps": 8,
    "prompts_per_step": 3, "group_size": 5, "updates_per_rollout": 1, "rl_lr": 0.003,
    "clip": 0.1, "kl_beta": 0.0, "max_new_tokens": 5, "temperature": 1.3,
    "eval_samples": 3, "gradient_clip": 2.0, "arms": ["substring", "strict"],
}


def typed(plan: dict | None = None, **changes) -> Plan:
    """The typed plan of ``plan`` (default: the teaching plan) with ``changes``."""
    return Plan.of((teaching_plan() if plan is None else plan) | changes)


def write_plan(path: Path, **changes) -> Path:
    freeze(path, teaching_plan() | changes)
    return path


def trained_with_the_cli(folder: Path, *extra: str, **changes) -> Path:
    """``folder/plan.json`` (the teaching plan with ``changes``) trained by ``postlab run``
    into ``folder/run`` with one worker, quietly, plus any ``extra`` arguments."""
    from postlab.cli import main

    plan = write_plan(folder / "plan.json", **changes)
    out = folder / "run"
    assert main(["run", "--plan", str(plan), "--out-dir", str(out), "--workers", "1",
                 "--quiet", *extra]) == 0
    return out


def rows(record) -> list[dict]:
    """Everything a run computed, without provenance and timing, as its record's JSON holds
    it (``record``: a typed Record, or the JSON of one from ``recordfiles.read_record``)."""
    from postlab.records.models import Record

    runs = [run.data() for run in record.runs] if isinstance(record, Record) else record["runs"]
    return [{key: run[key] for key in ("seed", "sft_loss", "evaluations", "training")}
            | {"reload_equal": {k: v["reload_equal"] for k, v in run["checkpoints"].items()}}
            for run in runs]


def check_example(plan: dict, out: Path, capsys) -> dict:
    """A trained example plan: it verifies, and its report renders as text (a line per stage
    of every seed), JSON (compute per stage) and markdown. Returns the JSON report."""
    import json

    from postlab.cli import main

    capsys.readouterr()
    assert main(["verify", str(out)]) == 0, capsys.readouterr().out
    capsys.readouterr()
    assert main(["report", str(out), "--lang", "en"]) == 0
    text = capsys.readouterr().out
    assert text.count("\n") >= 5 + (1 + len(plan["arms"])) * len(plan["seeds"])
    assert main(["report", str(out), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["compute"]) == 1 + len(plan["arms"])
    assert main(["report", str(out), "--format", "markdown", "--lang", "en"]) == 0
    assert "## Compute per seed" in capsys.readouterr().out
    check_columnar_against_oracle(out)
    return data


def assert_same(one, two, path: str = "value") -> None:
    """Equal in value and type, NaN equal to NaN, a zero's sign kept, arrays equal in dtype
    and content, dataclasses field by field."""
    import dataclasses
    import math

    import numpy as np

    if dataclasses.is_dataclass(one):
        assert type(one) is type(two), path
        for field in dataclasses.fields(one):
            assert_same(getattr(one, field.name), getattr(two, field.name),
                        f"{path}.{field.name}")
    elif isinstance(one, dict):
        assert list(one) == list(two), path
        for key in one:
            assert_same(one[key], two[key], f"{path}[{key!r}]")
    elif isinstance(one, (list, tuple)):
        assert len(one) == len(two), path
        for index, (a, b) in enumerate(zip(one, two, strict=True)):
            assert_same(a, b, f"{path}[{index}]")
    elif isinstance(one, np.ndarray):
        assert one.dtype == two.dtype and np.array_equal(one, two, equal_nan=True), path
    elif isinstance(one, float):
        assert type(two) is float, path
        assert (one == two and math.copysign(1, one) == math.copysign(1, two)) or (
            math.isnan(one) and math.isnan(two)), (path, one, two)
    else:
        assert one == two and type(one) is type(two), (path, one, two)


def check_columnar_against_oracle(out: Path) -> None:
    """A trained run read columnar (the readers' path) gives the numbers the per-seed path
    (kept as the oracle) gives: its analysis, summary and every export table."""
    from postlab.analysis.aggregate import analyse, oracle_facts, record_facts
    from postlab.export.tables import Source
    from postlab.records.metrics import summary_for, summary_of
    from postlab.records.opened import checked_tables, open_run
    from postlab.tasks.contracts import contracts_for
    from postlab.tasks.registry import task_for

    opened = open_run(out)
    record, plan = opened.record, opened.plan.model
    assert_same(analyse(record, plan, facts=record_facts(record, plan, checked_tables(opened))),
                analyse(record, plan, facts=oracle_facts(record, plan)))
    assert_same(summary_of(record, plan, checked_tables(opened)), summary_for(record, plan))
    sources = [Source(record, plan, tables=lambda: checked_tables(opened))]
    assert_export_as_oracle(sources, contracts_for(task_for(plan).answer_kind), 4096)


def assert_export_as_oracle(sources: list, contracts: list[str], batch_rows: int) -> None:
    """Every export table built columnar equals the row-by-row builder's, cut into the same
    record batches."""
    import pyarrow as pa

    from postlab.export.columnar import columnar_batches
    from postlab.export.rows import arrow_batches
    from postlab.export.tables import TABLES, arrow_schema, table_columns

    schemas = {name: arrow_schema(table_columns(name, sources, contracts)) for name in TABLES}
    for name in TABLES:
        one = {name: schemas[name]}
        columnar = [b for _, b in columnar_batches(sources, contracts, one, batch_rows)]
        oracle = [b for _, b in arrow_batches(sources, contracts, one, batch_rows)]
        assert [b.num_rows for b in columnar] == [b.num_rows for b in oracle], name
        built = pa.Table.from_batches(columnar, schema=schemas[name])
        expected = pa.Table.from_batches(oracle, schema=schemas[name])
        if not built.equals(expected):  # Arrow's equality never holds where a value is NaN
            assert_same(built.to_pylist(), expected.to_pylist(), name)


def write_pretrained(folder: Path, *, characters: list[str] | None = None,
                     extra_outputs: int = 0, **config) -> str:
    """A small randomly initialised GPT-2 (seed 0) and a tokenizer of one token per character
    (``characters``, default the teaching plan's vocab, numbered in that order), saved as a
    user would with ``save_pretrained``; the model's output is ``extra_outputs`` wider than
    the tokenizer. ``config`` overrides the GPT-2 configuration. Returns the folder's hash."""
    import torch
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from postlab.policies.pretrained import folder_sha256

    plan = teaching_plan()
    characters = list(characters or plan["vocab"])
    inner = Tokenizer(WordLevel({c: i for i, c in enumerate(characters)}))
    inner.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=inner, eos_token=plan["eos"],
                                        pad_token=plan["pad"])
    shape = {"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 16} | config
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(characters) + extra_outputs, **shape))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder_sha256(folder)
