"""The outputs themselves: every answer a run recorded, judged and sorted so a reader can look.

Numbers say how often a policy is right; the outputs say how it is wrong. Each answer is
*correct* when the task's reference contract (its first) accepts it, *gamed* when the
reference refuses it but another contract of the plan accepts it (``1010`` for 5+5 under the
substring contract: paid, and wrong), and *wrong* otherwise. Nothing here reads files: the
record and plan come in, typed samples and per-pair rates go out.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from postlab.plan.arms import plan_contracts
from postlab.records.blocks import ROLLOUT, iter_run_rows
from postlab.tasks.contracts import score
from postlab.tasks.registry import answer_function, task_for

if TYPE_CHECKING:
    from postlab.plan.schema import Plan
    from postlab.records.models import Record

CORRECT, GAMED, WRONG = "correct", "gamed", "wrong"
#: The kinds of answer, in the order reports show them.
KINDS = (CORRECT, GAMED, WRONG)


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One recorded answer with where it sits and how every contract of the plan judged it."""

    seed: int
    stage: str
    split: str | None       # None for an RL rollout
    step: int | None        # the RL step of a rollout; None for an evaluation
    decoding: str           # greedy, sampled, or rollout
    a: int
    b: int
    prompt: str
    text: str
    terminated: bool
    expected: int | str  # the task's answer as shown (an integer, or an item's answer text)
    accepted: tuple[str, ...]  # the plan's contracts that accept it, in the plan's order
    kind: str
    #: what each of the plan's contracts pays it, in the plan's order (a partial-credit
    #: contract may pay a fraction without accepting); empty where not read
    scores: tuple[float, ...] = ()


def classify(accepted: Sequence[str], contracts: Sequence[str]) -> str:
    """correct, gamed or wrong, from the contracts that accept an answer (the first is the
    reference)."""
    if contracts[0] in accepted:
        return CORRECT
    return GAMED if accepted else WRONG


def iter_samples(record: Record, plan: Plan, *,
                 stages: Iterable[str] | None = None, split: str | None = None,
                 decoding: str | None = None, kinds: Iterable[str] | None = None,
                 seeds: Iterable[int] | None = None, rollouts: bool = False
                 ) -> Iterator[Sample]:
    """The record's answers in record order, judged; each filter left as None keeps all.

    Evaluation answers by default; with ``rollouts`` the RL arms' training rollouts instead
    (their ``split`` is None and ``decoding`` is ``rollout``)."""
    task = task_for(plan)
    answer = answer_function(plan)
    contracts = plan_contracts(plan)
    wanted_stages = None if stages is None else set(stages)
    wanted_kinds = None if kinds is None else set(kinds)
    wanted_seeds = None if seeds is None else set(seeds)
    for index, seed in enumerate(record.seed_order()):
        if wanted_seeds is not None and seed not in wanted_seeds:
            continue  # not read at all: a chunked record's other seeds stay on disk
        run = record.runs[index]
        for place, row in iter_run_rows(run, evaluations=not rollouts, training=rollouts):
            if rollouts and place.decoding != ROLLOUT:
                continue  # rows a dynamic-sampling step dropped were never trained on
            if wanted_stages is not None and place.stage not in wanted_stages:
                continue
            if split is not None and place.split != split:
                continue
            if decoding is not None and place.decoding != decoding:
                continue
            scores = tuple(score(row, c, answer) for c in contracts)
            accepted = tuple(c for c, paid in zip(contracts, scores, strict=True) if paid >= 1)
            kind = classify(accepted, contracts)
            if wanted_kinds is not None and kind not in wanted_kinds:
                continue
            yield Sample(seed=place.seed, stage=place.stage, split=place.split,
                         step=place.step, decoding=place.decoding, a=row.a, b=row.b,
                         prompt=task.prompt(row.pair), text=row.text,
                         terminated=row.terminated, expected=task.answer_value(row.pair),
                         accepted=accepted, kind=kind, scores=scores)


def judged_rows(record: Record, plan: Plan, tables: Iterable[Any] | None = None,
                *, rollouts: bool = False) -> Iterator[Any]:
    """The record's answers judged, a batch of seeds at a time, as Arrow tables in record
    order (columnar: each distinct answer judged once): the columns of a :class:`Sample`
    but ``prompt`` and ``expected`` (the few distinct answers make them), an ``accepted:<c>``
    flag per contract of the plan, its ``score:<c>`` (what it pays: a partial-credit
    contract's fraction), and ``ordinal``, the answer's place in the record's walk.
    ``tables``: the record's flat tables as a reader checked them (by default the record's
    own, each seed checked first: :func:`~postlab.records.columns.record_tables`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from postlab.records.columns import (
        labelled_evaluations,
        labelled_rollouts,
        record_tables,
        scores_table,
    )

    answer = answer_function(plan)
    contracts = plan_contracts(plan)
    offset = 0
    for batch in record_tables(record, plan) if tables is None else tables:
        scores = scores_table(batch, answer, contracts)
        if rollouts:
            rows = labelled_rollouts(batch, scores)
            rows = rows.append_column("split", pa.nulls(rows.num_rows, pa.string()))
            rows = rows.append_column("decoding", pa.array([ROLLOUT] * rows.num_rows))
            rows = rows.rename_columns(["stage" if n == "arm" else n for n in rows.column_names])
        else:
            rows = labelled_evaluations(batch, scores, plan.eval_samples)
            rows = rows.append_column("step", pa.nulls(rows.num_rows, pa.int64()))
        flags = {name: pc.greater_equal(rows.column(f"score:{name}"), 1) for name in contracts}
        others = [flags[name] for name in contracts[1:]]
        paid_elsewhere = functools.reduce(pc.or_, others) if others else pc.equal(
            rows.column("a"), -1)
        kind = pc.if_else(flags[contracts[0]], CORRECT,
                          pc.if_else(paid_elsewhere, GAMED, WRONG))
        columns = {name: rows.column(name) for name in ("seed", "stage", "split", "step",
                                                       "decoding", "a", "b", "text",
                                                       "terminated")}
        columns |= {f"accepted:{name}": flag for name, flag in flags.items()}
        columns |= {f"score:{name}": rows.column(f"score:{name}") for name in contracts}
        columns["kind"] = kind
        columns["ordinal"] = pc.add(rows.column("ordinal"), offset)
        offset += rows.num_rows
        yield pa.table(columns)


def _accepted_of(row: dict[str, Any], contracts: Sequence[str]) -> tuple[str, ...]:
    return tuple(name for name in contracts if row[f"accepted:{name}"])


@dataclass(frozen=True, kw_only=True)
class Example:
    """One distinct answer (same prompt, output and ending) and how often it was given."""

    prompt: str
    text: str
    terminated: bool
    expected: int | str
    accepted: tuple[str, ...]
    kind: str
    count: int
    seeds: tuple[int, ...]


class Tally:
    """Distinct answers counted as samples stream by: memory grows with the distinct answers
    and the seeds giving each, not with the samples."""

    def __init__(self) -> None:
        self.total = 0
        self.counts: Counter[tuple[str, str, bool]] = Counter()
        self.first: dict[tuple[str, str, bool], Sample] = {}
        self.seeds: dict[tuple[str, str, bool], set[int]] = {}

    def add(self, sample: Sample) -> None:
        key = (sample.prompt, sample.text, sample.terminated)
        self.total += 1
        self.counts[key] += 1
        self.first.setdefault(key, sample)
        self.seeds.setdefault(key, set()).add(sample.seed)

    def add_rows(self, rows: Any, plan: Plan) -> None:
        """:meth:`add` of every answer of a judged table (:func:`judged_rows`), grouped by
        answer in Arrow first: a distinct answer costs Python work, not each answer."""
        if not rows.num_rows:
            return
        task, contracts = task_for(plan), plan_contracts(plan)
        grouped = rows.group_by(["a", "b", "text", "terminated"], use_threads=False).aggregate(
            [("ordinal", "min"), ("ordinal", "count"), ("seed", "distinct")]
        ).sort_by("ordinal_min")
        # a filtered table keeps its ordinals increasing, not consecutive
        places = rows.column("ordinal").to_numpy()
        self.total += rows.num_rows
        for entry in grouped.to_pylist():
            pair = (entry["a"], entry["b"])
            key = (task.prompt(pair), entry["text"], entry["terminated"])
            if key not in self.counts:
                # the first answer of this kind: where it sits, from its row of the table
                index = int(np.searchsorted(places, entry["ordinal_min"]))
                row = rows.slice(index, 1).to_pylist()[0]
                self.first[key] = Sample(
                    seed=row["seed"], stage=row["stage"], split=row["split"],
                    step=row["step"], decoding=row["decoding"], a=row["a"], b=row["b"],
                    prompt=key[0], text=row["text"], terminated=row["terminated"],
                    expected=task.answer_value(pair), accepted=_accepted_of(row, contracts),
                    kind=row["kind"])
            self.counts[key] += entry["ordinal_count"]
            self.seeds.setdefault(key, set()).update(entry["seed_distinct"])

    def examples(self, limit: int | None = None) -> list[Example]:
        """The distinct answers, the most frequent first (ties in the order first seen)."""
        order = sorted(self.counts, key=lambda key: -self.counts[key])  # stable: ties keep order
        chosen = order if limit is None else order[:limit]
        return [Example(prompt=key[0], text=key[1], terminated=key[2],
                        expected=self.first[key].expected, accepted=self.first[key].accepted,
                        kind=self.first[key].kind, count=self.counts[key],
                        seeds=tuple(sorted(self.seeds[key])))
                for key in chosen]


def answer_tallies(record: Record, plan: Plan,
                   tables: Iterable[Any] | None = None, *,
                   stages: Iterable[str] | None = None, split: str | None = None,
                   decoding: str | None = None, kinds: Iterable[str] | None = None,
                   seeds: Iterable[int] | None = None, rollouts: bool = False
                   ) -> dict[tuple[str, str], Tally]:
    """The answers :func:`iter_samples` would give with these filters, tallied per stage
    and kind (stages and kinds in the order first met), columnar (:func:`judged_rows`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    grouped: dict[tuple[str, str], Tally] = {}
    for rows in judged_rows(record, plan, tables, rollouts=rollouts):
        keep = pc.equal(rows.column("a"), rows.column("a"))
        for name, wanted in (("stage", stages), ("kind", kinds), ("seed", seeds)):
            if wanted is not None:
                keep = pc.and_(keep, pc.is_in(rows.column(name), value_set=pa.array(
                    list(wanted), rows.schema.field(name).type)))
        for name, wanted in (("split", split), ("decoding", decoding)):
            if wanted is not None:
                keep = pc.and_(keep, pc.fill_null(pc.equal(rows.column(name), wanted), False))
        rows = rows.filter(keep)
        if not rows.num_rows:
            continue
        pairs = rows.group_by(["stage", "kind"], use_threads=False).aggregate(
            [("ordinal", "min")]).sort_by("ordinal_min").to_pylist()
        for pair in pairs:
            chosen = rows.filter(pc.and_(pc.equal(rows.column("stage"), pair["stage"]),
                                         pc.equal(rows.column("kind"), pair["kind"])))
            grouped.setdefault((pair["stage"], pair["kind"]), Tally()).add_rows(chosen, plan)
    return grouped


def examples(samples: Iterable[Sample], limit: int | None = None) -> list[Example]:
    """Distinct answers, the most frequent first (ties in the order first seen)."""
    tally = Tally()
    for sample in samples:
        tally.add(sample)
    return tally.examples(limit)


@dataclass(frozen=True, kw_only=True)
class PairGrid:
    """The reference contract's acceptance per operand pair (a, b) of one stage and split,
    mean over seeds; pairs outside the split are absent."""

    stage: str
    split: str
    decoding: str
    contract: str
    rates: dict[tuple[int, int], float]
    operands: tuple[int, ...]  # the operand values a grid's rows and columns run over


class PairCells:
    """The reference contract's acceptance per stage, split and operand pair, counted as
    samples stream by (one walk can feed it and other tallies)."""

    def __init__(self, plan: Plan, decoding: str = "sampled") -> None:
        self.plan, self.decoding = plan, decoding
        self.cells: dict[tuple[str, str], dict[tuple[int, int], list[int]]] = {}

    def add(self, sample: Sample) -> None:
        if sample.decoding != self.decoding:
            return
        assert sample.split is not None
        cell = self.cells.setdefault((sample.stage, sample.split), {}).setdefault(
            (sample.a, sample.b), [0, 0])
        cell[0] += sample.kind == CORRECT
        cell[1] += 1

    def add_rows(self, rows: Any) -> None:
        """:meth:`add` of every answer of a judged table, summed per pair in Arrow."""
        import pyarrow.compute as pc

        rows = rows.filter(pc.equal(rows.column("decoding"), self.decoding))
        if not rows.num_rows:
            return
        rows = rows.append_column("right", pc.cast(pc.equal(rows.column("kind"), CORRECT),
                                                   "int64"))
        grouped = rows.group_by(["stage", "split", "a", "b"], use_threads=False).aggregate(
            [("right", "sum"), ("ordinal", "count"), ("ordinal", "min")]
        ).sort_by("ordinal_min")
        for entry in grouped.to_pylist():
            cell = self.cells.setdefault((entry["stage"], entry["split"]), {}).setdefault(
                (entry["a"], entry["b"]), [0, 0])
            cell[0] += entry["right_sum"]
            cell[1] += entry["ordinal_count"]

    def grids(self) -> list[PairGrid]:
        # every seed answers every pair of a split equally often, so pooling the seeds'
        # answers is the mean of their per-seed rates
        limit = task_for(self.plan).operand_limit
        assert limit is not None
        contract = plan_contracts(self.plan)[0]
        return [PairGrid(stage=stage, split=split, decoding=self.decoding, contract=contract,
                         rates={pair: right / total for pair, (right, total) in cells.items()},
                         operands=tuple(range(limit)))
                for (stage, split), cells in self.cells.items()]


def pair_grids(record: Record, plan: Plan, decoding: str = "sampled",
               tables: Iterable[Any] | None = None) -> list[PairGrid]:
    """One grid per stage and split, from the evaluation answers of ``decoding``; none for a
    task whose questions are not operand pairs. ``tables``: as :func:`judged_rows` takes."""
    if task_for(plan).operand_limit is None:
        return []
    cells = PairCells(plan, decoding)
    for rows in judged_rows(record, plan, tables):
        cells.add_rows(rows)
    return cells.grids()


@dataclass(frozen=True, kw_only=True)
class KindExamples:
    """How many of a stage's answers are of one kind, and the most frequent of them."""

    stage: str
    kind: str
    count: int
    total: int
    examples: tuple[Example, ...]


class StageTallies:
    """Per stage and kind (correct, gamed, wrong) of one split's answers of one decoding: the
    counts and distinct answers, as samples stream by. A task judged by one contract has no
    gamed kind: nothing can be paid and wrong."""

    def __init__(self, plan: Plan, split: str, decoding: str = "sampled") -> None:
        self.split, self.decoding = split, decoding
        self.kinds = KINDS if len(plan_contracts(plan)) > 1 else (CORRECT, WRONG)
        self.by_stage: dict[str, dict[str, Tally]] = {}

    def add(self, sample: Sample) -> None:
        if sample.split != self.split or sample.decoding != self.decoding:
            return
        self.by_stage.setdefault(sample.stage, {kind: Tally() for kind in self.kinds})[
            sample.kind].add(sample)

    def add_rows(self, rows: Any, plan: Plan) -> None:
        """:meth:`add` of every answer of a judged table."""
        import pyarrow.compute as pc

        rows = rows.filter(pc.and_(pc.equal(rows.column("split"), self.split),
                                   pc.equal(rows.column("decoding"), self.decoding)))
        for stage in rows.column("stage").unique().to_pylist():
            of_stage = rows.filter(pc.equal(rows.column("stage"), stage))
            tallies = self.by_stage.setdefault(stage, {kind: Tally() for kind in self.kinds})
            for kind in self.kinds:
                tallies[kind].add_rows(of_stage.filter(pc.equal(of_stage.column("kind"),
                                                                kind)), plan)

    def result(self, per_kind: int = 4) -> list[KindExamples]:
        result = []
        for stage, kinds in self.by_stage.items():
            total = sum(found.total for found in kinds.values())
            for kind in self.kinds:
                result.append(KindExamples(stage=stage, kind=kind, count=kinds[kind].total,
                                           total=total,
                                           examples=tuple(kinds[kind].examples(per_kind))))
        return result


def stage_examples(record: Record, plan: Plan, split: str,
                   decoding: str = "sampled", per_kind: int = 4,
                   tables: Iterable[Any] | None = None) -> list[KindExamples]:
    """Per stage and kind (correct, gamed, wrong): counts and the commonest answers."""
    tallies = StageTallies(plan, split, decoding)
    for rows in judged_rows(record, plan, tables):
        tallies.add_rows(rows, plan)
    return tallies.result(per_kind)


def page_samples(record: Record, plan: Plan, split: str,
                 decoding: str = "sampled", per_kind: int = 4,
                 tables: Iterable[Any] | None = None
                 ) -> tuple[list[PairGrid], list[KindExamples]]:
    """:func:`pair_grids` and :func:`stage_examples` from one pass over the seeds' judged
    answers (:func:`judged_rows`; ``tables`` as it takes)."""
    grids = PairCells(plan, decoding) if task_for(plan).operand_limit is not None else None
    tallies = StageTallies(plan, split, decoding)
    for rows in judged_rows(record, plan, tables):
        if grids is not None:
            grids.add_rows(rows)
        tallies.add_rows(rows, plan)
    return ([] if grids is None else grids.grids()), tallies.result(per_kind)
