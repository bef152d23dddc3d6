"""What the analysis keeps of one seed, computed from its rows two ways.

A seed's facts are the few numbers every report figure is made from: per evaluation block
(stage, split, decoding) each question's accepted count under each contract; per RL arm each
step's series (rewards, update statistics, lengths) and accepted counts; its SFT losses and
compute. :mod:`postlab.analysis.aggregate` turns the facts of all seeds into the analysis.

:func:`table_facts` computes them for a batch of seeds at once from flat Arrow tables
(:mod:`postlab.records.columns`): each distinct row (operands, text, EOS) is scored once
under each contract, joined back, and summed per question and per step by Arrow's hash
aggregation, so no Python object is made per row. That is the path every reader takes.
:func:`run_facts` computes the same facts from one seed's Python rows with plain loops; it
is kept as the oracle the columnar path is tested against, as the RL core keeps its float64
loops. Both give the same numbers bit for bit, partial credits (``rg-score``) included: their
sums are taken over rows in record order, which Arrow's grouped sum adds one by one.

Why pyarrow's compute and not DuckDB or polars: on 64 teaching seeds (2.3 million rows) the
distinct-score-join-aggregate queries took 0.12 s in pyarrow and 0.10 s in DuckDB, beside
0.27 s that both spend reading and flattening the chunks; pyarrow is already a core
dependency, DuckDB would have become one for a saving of about 1%.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from postlab.records.metrics import (
    STEP_SERIES,
    Answer,
    count_under,
    question_groups,
    step_series,
)
from postlab.tasks.contracts import CONTRACTS, PARTIAL_CREDIT, scored

if TYPE_CHECKING:
    from postlab.records.models import SeedEntry

#: The update statistics a step's series averages, by series name (``STEP_SERIES``).
UPDATE_SERIES = ("kl", "entropy", "ratio_outside_clip", "gradient_norm_before_clip", "loss")
#: Answers per question in an evaluation block, by decoding (sampled: the plan's samples).
GREEDY, SAMPLED = "greedy", "sampled"


@dataclass(frozen=True)
class Evaluated:
    """One evaluation block: its questions in order and, per contract, each one's accepted
    count among its answers (1 greedy, ``eval_samples`` sampled)."""

    questions: tuple[tuple[int, int], ...]
    accepted: dict[str, list[Any]]
    rows: int


@dataclass(frozen=True)
class Trained:
    """One RL arm of one seed: its steps, each step's series (``dynamics_series`` names,
    one value per step) and, per contract, each step's accepted count among its rows."""

    steps: tuple[int, ...]
    series: dict[str, np.ndarray]
    accepted: dict[str, np.ndarray]
    rows: np.ndarray
    #: per partial-credit contract, every row's reward in order (a window's sum is then
    #: added row by row, as the oracle adds it; a sum of step sums may round otherwise)
    row_scores: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def window_sum(self, contract: str, window: int) -> Any:
        """The contract's rewards over the last ``window`` steps' rows, added in order
        (integers exact)."""
        if contract in self.row_scores:
            first = int(self.rows[:-window].sum())
            return sum(self.row_scores[contract][first:].tolist())
        return sum(self.accepted[contract][-window:].tolist())


@dataclass(frozen=True)
class SeedFacts:
    seed: int
    #: per (stage, split, decoding), in record order
    evaluations: dict[tuple[str, str, str], Evaluated]
    #: per RL arm, in record order
    training: dict[str, Trained]
    sft_loss: list[float]
    #: per stage, its counts; None in a record made before compute was recorded
    compute: dict[str, dict[str, int]] | None


def _per_question(decoding: str, samples: int) -> int | None:
    return {GREEDY: 1, SAMPLED: samples}.get(decoding)


def run_facts(run: SeedEntry, samples: int, answer: Answer,
              contracts: Sequence[str]) -> SeedFacts:
    """The oracle: one seed's facts from its rows, row by row."""
    evaluations = {}
    for stage, splits in run.evaluations.items():
        for split, decoded in splits.items():
            for decoding, raw, per in ((GREEDY, decoded.greedy, 1),
                                       (SAMPLED, decoded.sampled, samples)):
                groups = question_groups(raw, per)
                evaluations[(stage, split, decoding)] = Evaluated(
                    questions=tuple(tuple(group[0].pair) for group in groups),
                    accepted={name: [count_under(group, name, answer) for group in groups]
                              for name in contracts},
                    rows=len(raw))
    training = {}
    for arm, history in run.arms.items():
        rows = [list(step.rows) for step in history]
        accepted = {name: [count_under(block, name, answer) for block in rows]
                    for name in contracts}
        per_step = [step_series(step, block, answer, contracts)
                    for step, block in zip(history, rows, strict=True)]
        names = (*(f"{name}_reward" for name in contracts), *STEP_SERIES)
        series = {name: [values[name] for values in per_step] for name in names}
        training[arm] = Trained(
            steps=tuple(step.step for step in history),
            series={name: np.array(values, dtype=np.float64) for name, values in series.items()},
            accepted={name: np.array(values) for name, values in accepted.items()},
            rows=np.array([len(block) for block in rows], dtype=np.int64),
            row_scores={name: np.array([scored(CONTRACTS[name], answer, row)
                                        for block in rows for row in block], dtype=np.float64)
                        for name in contracts if name in PARTIAL_CREDIT})
    compute = (None if run.compute is None else
               {stage: counts.model_dump() for stage, counts in run.compute.items()})
    return SeedFacts(seed=run.seed, evaluations=evaluations, training=training,
                     sft_loss=list(run.sft_loss or []), compute=compute)


def _bounds(values: np.ndarray) -> list[tuple[int, int]]:
    """Runs of equal consecutive values as (start, stop)."""
    if not len(values):
        return []
    cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
    edges = [0, *cuts.tolist(), len(values)]
    return list(itertools.pairwise(edges))


def _ints_or_floats(values: np.ndarray, name: str) -> list[Any]:
    return values.tolist() if name in PARTIAL_CREDIT else values.astype(np.int64).tolist()


def _sequential_mean(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each list's mean, its values summed first to last as Python's ``sum`` does (numpy's
    own sum pairs them, which may round otherwise); NaN for an empty list."""
    lengths = np.diff(offsets)
    starts = offsets[:-1]
    total = np.zeros(len(lengths))
    for place in range(int(lengths.max()) if len(lengths) else 0):
        reach = lengths > place
        total[reach] += values[starts[reach] + place]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(lengths > 0, total / np.maximum(lengths, 1), np.nan)


def table_facts(tables: Any, samples: int, answer: Answer,
                contracts: Sequence[str]) -> list[SeedFacts]:
    """The facts of a batch of seeds (:class:`~postlab.records.columns.RowTables`), in the
    batch's seed order, computed columnar."""
    from postlab.records.columns import scores_table

    scores = scores_table(tables, answer, contracts)
    order = {seed: index for index, seed in enumerate(tables.seeds)}
    evaluations = _evaluation_facts(tables, scores, order, samples, contracts)
    steps = _StepColumns.of(tables, scores, contracts)
    arm_places = _arm_places(tables.steps, order, len(tables.seeds))

    facts = []
    for index, run in enumerate(tables.runs.select(
            ["seed", "arms", "sft_loss", "compute", "layout"]).to_pylist()):
        training = {arm: steps.trained(*arm_places[index][arm]) for arm in run["arms"]}
        layout = json.loads(run["layout"])
        compute = ({c["stage"]: {k: v for k, v in c.items() if k != "stage"}
                    for c in run["compute"]} if "compute" in layout["run"] else None)
        facts.append(SeedFacts(seed=run["seed"], evaluations=evaluations[index],
                               training=training, sft_loss=run["sft_loss"],
                               compute=compute))
    return facts


def _partial(contracts: Sequence[str]) -> list[str]:
    """The partial-credit contracts among ``contracts``: their sums are added in row order,
    as the oracle adds them (Arrow's grouped sum adds each group's values in the order it is
    given them)."""
    return [name for name in contracts if name in PARTIAL_CREDIT]


def _evaluation_facts(tables: Any, scores: Any, order: dict[int, int], samples: int,
                      contracts: Sequence[str]
                      ) -> list[dict[tuple[str, str, str], Evaluated]]:
    """Per seed of the batch, its evaluation blocks: per (block, question) the accepted sums
    and the question's pair; a block's rows are in record order, so the block number orders
    them."""
    from postlab.records.columns import answers_per_question, judged, with_questions

    sums = [(f"score:{name}", "sum") for name in contracts]
    blocks = tables.blocks
    decodings = blocks.column("decoding").to_pylist()
    evaluated = with_questions(judged(tables.evaluations, scores,
                                      ordered=bool(_partial(contracts))),
                               answers_per_question(tables, samples))
    grouped = evaluated.group_by(["block_id", "question"], use_threads=False).aggregate(
        [*sums, ("a", "min"), ("a", "max"), ("b", "min"), ("b", "max"),
         ("position", "count")]).sort_by([("block_id", "ascending"),
                                          ("question", "ascending")])
    columns = {name: grouped.column(name).to_numpy(zero_copy_only=False)
               for name in ("block_id", "a_min", "a_max", "b_min", "b_max",
                            "position_count", *(f"score:{n}_sum" for n in contracts))}
    labels = {name: blocks.column(name).to_pylist() for name in ("seed", "stage", "split")}
    evaluations: list[dict[tuple[str, str, str], Evaluated]] = [{} for _ in tables.seeds]
    for start, stop in _bounds(columns["block_id"]):
        block = int(columns["block_id"][start])
        place = (labels["stage"][block], labels["split"][block], decodings[block])
        size = _per_question(place[2], samples)
        if size is None:
            continue
        counts = columns["position_count"][start:stop]
        if np.any(counts != size):
            raise ValueError(f"{int(counts.sum())} rows do not form groups of {size}")
        a, b = columns["a_min"][start:stop], columns["b_min"][start:stop]
        if np.any(a != columns["a_max"][start:stop]) or np.any(
                b != columns["b_max"][start:stop]):
            raise ValueError(f"a group of {size} rows mixes questions")
        evaluations[order[labels["seed"][block]]][place] = Evaluated(
            questions=tuple(zip(a.tolist(), b.tolist(), strict=True)),
            accepted={name: _ints_or_floats(columns[f"score:{name}_sum"][start:stop], name)
                      for name in contracts},
            rows=int(counts.sum()))
    return evaluations


@dataclass(frozen=True)
class _StepColumns:
    """The batch's RL steps, one value per step row of ``tables.steps``: the accepted sums,
    tokens and truncations, the update statistics' means, and where each step's rollout rows
    start (for partial-credit windows)."""

    contracts: Sequence[str]
    columns: dict[str, np.ndarray]
    means: dict[str, np.ndarray]
    row_starts: np.ndarray
    row_scores: dict[str, np.ndarray]

    @classmethod
    def of(cls, tables: Any, scores: Any, contracts: Sequence[str]) -> _StepColumns:
        """Per step the accepted sums, tokens and truncations, placed by step number."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from postlab.records.columns import judged

        sums = [(f"score:{name}", "sum") for name in contracts]
        partial = _partial(contracts)
        steps = tables.steps
        rolled = judged(tables.rollouts, scores, ordered=bool(partial))
        rolled = rolled.append_column("open", pc.cast(pc.invert(rolled.column("terminated")),
                                                      pa.int64()))
        stepped = rolled.group_by(["step_id"], use_threads=False).aggregate(
            [*sums, ("tokens", "sum"), ("open", "sum"), ("position", "count")])
        step_id = stepped.column("step_id").to_numpy()

        def by_step(name: str) -> np.ndarray:
            values = stepped.column(name).to_numpy(zero_copy_only=False)
            placed = np.zeros(steps.num_rows, dtype=values.dtype)
            placed[step_id] = values
            return placed

        # each step's first row among the (ordered) rollout rows, for partial-credit windows
        row_starts = np.concatenate([[0], np.cumsum(np.bincount(
            tables.rollouts.column("step_id").to_numpy(), minlength=steps.num_rows))])
        row_scores = {name: rolled.column(f"score:{name}").to_numpy(zero_copy_only=False)
                      for name in partial}
        step_columns = {name: by_step(name) for name in (
            "tokens_sum", "open_sum", "position_count", *(f"score:{n}_sum" for n in contracts))}
        step_columns |= {name: steps.column(name).to_numpy() for name in (
            "step", "zero_variance_groups")}
        updates = steps.column("updates").combine_chunks()
        offsets = updates.offsets.to_numpy()
        offsets = offsets - offsets[0]
        flat_updates = updates.flatten()
        means = {key: _sequential_mean(flat_updates.field(key).to_numpy(zero_copy_only=False),
                                       offsets) for key in UPDATE_SERIES}
        return cls(contracts=contracts, columns=step_columns, means=means,
                   row_starts=row_starts, row_scores=row_scores)

    def trained(self, start: int, stop: int) -> Trained:
        """One arm of one seed: the step rows from ``start`` to ``stop``."""
        contracts, step_columns, means = self.contracts, self.columns, self.means
        n = step_columns["position_count"][start:stop].astype(np.int64)
        accepted = {name: step_columns[f"score:{name}_sum"][start:stop]
                    for name in contracts}
        series = {f"{name}_reward": accepted[name] / n for name in contracts}
        series["zero_variance_groups"] = step_columns["zero_variance_groups"][
            start:stop].astype(np.float64)
        series |= {key: means[key][start:stop] for key in UPDATE_SERIES}
        series["mean_tokens"] = step_columns["tokens_sum"][start:stop] / n
        series["truncated"] = step_columns["open_sum"][start:stop] / n
        return Trained(
            steps=tuple(step_columns["step"][start:stop].tolist()),
            series={name: series[name] for name in (*(f"{c}_reward" for c in contracts),
                                                    *STEP_SERIES)},
            accepted=accepted, rows=n,
            row_scores={name: self.row_scores[name][self.row_starts[start]:
                                                    self.row_starts[stop]]
                        for name in _partial(contracts)})


def _arm_places(steps: Any, order: dict[int, int], seeds: int
                ) -> list[dict[str, tuple[int, int]]]:
    """Per seed of the batch, each arm's run of consecutive step rows as (start, stop)."""
    arm_of = steps.column("arm").to_pylist()
    seed_of = steps.column("seed").to_pylist()
    arm_places: list[dict[str, tuple[int, int]]] = [{} for _ in range(seeds)]
    start = 0
    for stop in range(1, len(arm_of) + 1):
        if stop == len(arm_of) or (arm_of[stop], seed_of[stop]) != (arm_of[start],
                                                                    seed_of[start]):
            arm_places[order[seed_of[start]]][arm_of[start]] = (start, stop)
            start = stop
    return arm_places
