"""Tidy tables of a record: one row per observation, every column declared once.

Records and plans in, columns out; nothing here writes a file. Each table's columns are
declared in :data:`TABLES` with their type and meaning, so the Arrow schema, ``schema.json``
and docs/export.md say the same thing (a test holds the document to them). Answers are scored
under every registered contract, not only the plan's, so one export answers "what would
contract X have said" without re-running anything. The tables are built by
:func:`~postlab.export.columnar.columnar_batches`, a batch of seeds at a time from the
record's flat tables (each distinct answer scored once); the row-by-row builders
(:mod:`postlab.export.rows`) are its oracle, and build a plan with dynamic sampling, whose
dropped rows the flat tables do not hold.

Tables: ``eval_samples`` (one evaluation answer per row), ``rollout_samples`` (one RL rollout
answer), ``updates`` (one optimiser update), ``steps`` (one RL step: its groups),
``sft_losses`` (one SFT step) and ``summary`` (one seed, stage, split and decoding, as
``summary.json`` holds it). A sweep's tables have a leading ``version`` column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postlab.errors import UserError

if TYPE_CHECKING:
    import pyarrow as pa

    from postlab.plan.schema import Plan
    from postlab.records.models import Record

#: The exported tables' schema version: within one version columns are only ever added.
SCHEMA = "postlab.export/1"
#: Column types, named as Arrow names them.
TYPES = ("int64", "float64", "bool", "string")
#: The statistics a record holds per update, in the record's order.
UPDATE_STATISTICS = ("loss", "gradient_norm_before_clip", "kl", "entropy",
                     "ratio_outside_clip")
#: A dynamic-sampling step's counts of groups, as the record names them, and their meaning.
SAMPLING_COUNTS = {
    "drawn": "groups sampled for the step, its own and the extra ones",
    "kept": "groups in the step's batch (with dynamic_sampling.constant_groups 'drop', those "
            "whose rewards are all equal stay in the batch but the update leaves them out; "
            "the step's zero_variance_groups counts them)",
    "dropped": "groups sampled but not trained on (extra groups whose rewards were all "
               "equal, and the step's own such groups that extra ones replaced)",
    "replaced": "the step's groups whose rewards were all equal, replaced by an extra group",
}


@dataclass(frozen=True)
class Column:
    """One column: its name, Arrow type (one of :data:`TYPES`), and what a value means."""

    name: str
    type: str
    meaning: str
    nullable: bool = False


@dataclass(frozen=True)
class TableSpec:
    """A table's fixed columns; contract columns are added per registry (:func:`columns_of`)."""

    name: str
    meaning: str
    columns: tuple[Column, ...]


VERSION = Column("version", "string", "the sweep version (its folder name); sweep exports only")
_SEED = Column("seed", "int64", "the run's seed")
_ARM = Column("arm", "string", "the RL arm")
_STEP = Column("step", "int64", "the RL step, from 1")
_A = Column("a", "int64", "the question's first operand")
_B = Column("b", "int64", "the question's second operand")
_ANSWER = Column("answer", "int64", "the task's answer to (a, b), which contracts compare with")
#: The answer column of a task whose answers are text (reasoning-gym items).
_ITEM_ANSWER = Column("answer", "string", "the item's reference answer, which contracts compare "
                                          "with ((a, b) is (0, the item's index))")
_TEXT = Column("text", "string", "the visible output, EOS excluded")
_TERMINATED = Column("terminated", "bool", "whether EOS was emitted within the token budget")
_TOKENS = Column("tokens", "int64", "tokens the answer used: its characters, plus 1 for EOS")
_ANSWER_COLUMNS = (_A, _B, _ANSWER, _TEXT, _TERMINATED, _TOKENS)

TABLES: dict[str, TableSpec] = {spec.name: spec for spec in (
    TableSpec("eval_samples", "one evaluation answer: every split, greedy and sampled, of "
              "every stage", (
                  _SEED,
                  Column("stage", "string", "initial (the SFT model) or an arm's name"),
                  Column("split", "string", "the plan's split: train, dev, test, ..."),
                  Column("decoding", "string", "greedy (one answer per question) or sampled "
                                               "(eval_samples answers per question)"),
                  Column("question", "int64", "the question's position in the split, from 0 "
                                              "(the plan's order)"),
                  Column("sample", "int64", "the answer's position among the question's "
                                            "answers, from 0 (always 0 for greedy)"),
                  *_ANSWER_COLUMNS)),
    TableSpec("rollout_samples", "one RL rollout answer: the rows a step trained on, then the "
              "groups dynamic sampling dropped", (
                  _SEED,
                  _ARM,
                  _STEP,
                  Column("kept", "bool", "true: the step trained on it; false: dynamic "
                                         "sampling dropped its group (rewards all equal)"),
                  Column("group", "int64", "the group's position among the step's kept (or "
                                           "dropped) groups, from 0; a group shares a question"),
                  Column("sample", "int64", "the answer's position in its group, from 0"),
                  *_ANSWER_COLUMNS,
                  Column("rewarded_by", "string", "the contract the arm's reward came from"),
                  Column("paid", "float64", "the reward training paid this answer: the "
                                            "rewarded_by contract's (its partial credit "
                                            "included), or for the random contract the "
                                            "stream's draw at the row's seed, step and place"))),
    TableSpec("updates", "one optimiser update of an RL step, with every statistic the record "
              "holds for it", (
                  _SEED,
                  _ARM,
                  _STEP,
                  Column("update", "int64", "the update's position in the step, from 0"),
                  Column("loss", "float64", "the loss minimised (clipped objective and KL "
                                            "penalty, reduced as the plan's loss_reduction "
                                            "says)"),
                  Column("gradient_norm_before_clip", "float64",
                         "the gradient's global norm before clipping"),
                  Column("kl", "float64", "mean per-token KL to the reference over response "
                                          "tokens, by the plan's kl estimator"),
                  Column("entropy", "float64", "mean per-token entropy of the policy over "
                                               "response tokens"),
                  Column("ratio_outside_clip", "float64", "share of response tokens whose "
                                                          "probability ratio was outside the "
                                                          "clip range"))),
    TableSpec("steps", "one RL step: its rows, groups and updates", (
        _SEED,
        _ARM,
        _STEP,
        Column("rows", "int64", "rollout answers the step trained on"),
        Column("zero_variance_groups", "int64", "kept groups whose rewards were all equal "
                                                "(no learning signal)"),
        Column("updates", "int64", "optimiser updates made on the step's rows"),
        *(Column(f"groups_{count}", "int64", f"dynamic sampling: {meaning}; null when the "
                                             "plan does not sample dynamically", nullable=True)
          for count, meaning in SAMPLING_COUNTS.items()))),
    TableSpec("sft_losses", "one SFT step's loss", (
        _SEED,
        Column("stage", "string", "initial (the SFT every arm starts from), an sft-only "
                                  "arm's extra SFT, or an sft-selected arm's own SFT"),
        Column("step", "int64", "the SFT step, from 1"),
        Column("loss", "float64", "the step's cross-entropy loss"))),
    TableSpec("summary", "one seed, stage, split and decoding, as summary.json holds it, under "
              "every registered contract", (
                  _SEED,
                  Column("stage", "string", "initial or an arm's name"),
                  Column("split", "string", "the plan's split"),
                  Column("decoding", "string", "greedy or sampled"),
                  Column("n", "int64", "answers"),
                  Column("mean_tokens", "float64", "mean tokens per answer, EOS counted"),
                  Column("truncated", "int64", "answers without EOS"),
                  Column("covered", "int64", "questions with at least one answer accepted "
                                             "under covered_under"),
                  Column("questions", "int64", "questions"),
                  Column("covered_under", "string", "the contract coverage is counted under: "
                                                    "the task's first (reference) contract"))),
)}


def contract_columns(table: str, contracts: Sequence[str]) -> tuple[Column, ...]:
    """The columns a table gets for each registered contract (a partial-credit contract's
    are its rewards and their sums)."""
    from postlab.tasks.contracts import PARTIAL_CREDIT

    if table in ("eval_samples", "rollout_samples"):
        return tuple(Column(name, "float64", f"the {name} contract's reward (partial credit)")
                     if name in PARTIAL_CREDIT else
                     Column(name, "bool", f"whether the {name} contract accepts the answer")
                     for name in contracts)
    if table == "summary":
        return (*(Column(name, "float64", f"the {name} contract's rewards, summed")
                  if name in PARTIAL_CREDIT else
                  Column(name, "int64", f"answers the {name} contract accepts")
                  for name in contracts),
                *(Column(f"{name}_rate", "float64", f"{name} / n") for name in contracts))
    return ()


def columns_of(table: str, contracts: Sequence[str], *, sweep: bool = False,
               text_answers: bool = False) -> tuple[Column, ...]:
    """A table's columns in order: ``version`` for a sweep, its own, then its contracts'.
    ``text_answers``: the task's answers are text (reasoning-gym items), not integers."""
    first = (VERSION,) if sweep else ()
    own = TABLES[table].columns
    if text_answers:
        own = tuple(_ITEM_ANSWER if column is _ANSWER else column for column in own)
    columns = first + own + contract_columns(table, contracts)
    names = [column.name for column in columns]
    clash = sorted({name for name in names if names.count(name) > 1})
    if clash:
        raise UserError(f"a registered contract's column clashes with the {table} table's "
                        f"column {', '.join(clash)}; rename the contract to export it")
    return columns


@dataclass(frozen=True)
class Source:
    """One run's inputs: its record, its plan, its sweep version (None for a lone run), and
    what makes its flat tables checked as a reader checks them (None: the record's own, each
    seed checked first, :func:`~postlab.records.columns.record_tables`)."""

    record: Record
    plan: Plan
    version: str | None = None
    tables: Callable[[], Iterable[Any]] | None = None

    def row_tables(self) -> Iterable[Any]:
        from postlab.records.columns import record_tables

        return record_tables(self.record, self.plan) if self.tables is None else self.tables()


def table_columns(name: str, sources: Sequence[Source], contracts: Sequence[str]
                  ) -> tuple[Column, ...]:
    """The columns of one table over ``sources``: a ``version`` column when any source is a
    sweep version; refused when the contracts cannot read these runs' answers."""
    from postlab.tasks.contracts import contract_answers
    from postlab.tasks.registry import task_for

    sweep = any(source.version is not None for source in sources)
    kinds = {task_for(source.plan).answer_kind for source in sources}
    misfits = [name for name in contracts if kinds and contract_answers(name) not in kinds]
    if len(kinds) > 1 or misfits:
        raise UserError(f"the {name} table needs contracts that read these runs' answers "
                        f"({', '.join(sorted(kinds))}); "
                        + (f"{', '.join(misfits)} read others" if misfits else
                           "the runs' tasks differ"))
    text_answers = bool(kinds) and kinds != {"integer"}
    return columns_of(name, contracts, sweep=sweep, text_answers=text_answers)


def arrow_schema(columns: Sequence[Column], metadata: dict[str, str] | None = None
                 ) -> pa.Schema:
    """The Arrow schema of declared columns (pyarrow is imported only here)."""
    import pyarrow as pa

    types = {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
             "string": pa.string()}
    return pa.schema([pa.field(c.name, types[c.type], nullable=c.nullable) for c in columns],
                     metadata=metadata)
