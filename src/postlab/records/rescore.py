"""Re-scoring stored raw outputs under other reward contracts, without touching the record.

A contract changed after training is a new rule (answer 10): the old outputs are kept and
scored under both rules, each figure labelled with its contract and with whether the policy was
trained on it. Training under the new rule is another experiment, not a re-score.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from postlab.records.metrics import count_text
from postlab.records.models import Record
from postlab.tasks.contracts import CONTRACTS, DRAWN, PARTIAL_CREDIT, Answer


@dataclass(frozen=True, kw_only=True)
class ScoreRow:
    seed: int
    stage: str
    trained_on: str | None  # the contract RL used for this stage; None for the SFT model
    split: str
    decoding: str
    n: int
    accepted: dict[str, int]  # contract -> accepted outputs


@dataclass(frozen=True, kw_only=True)
class ContractGap:
    """Outputs accepted by ``looser`` but not ``stricter``, and how many had leading zeros."""

    looser: str
    stricter: str
    accepted_only_by_looser: int
    with_leading_zeros: int


@dataclass(frozen=True, kw_only=True)
class Rescore:
    contracts: tuple[str, ...]
    rows: tuple[ScoreRow, ...]
    gaps: tuple[ContractGap, ...]


def rescore(record: Record, trained: dict[str, str], contracts: list[str],
            split: str | None = None, answer: Answer = sum,
            tables: Iterable[Any] | None = None) -> Rescore:
    """Score every evaluation row under each contract; ``split`` limits to one split.

    ``trained`` maps each RL stage to the contract it was trained on. Computed columnar, a
    batch of seeds at a time (``tables``: the record's flat tables as a reader checked them;
    None: read from the record): each distinct answer scored once, counts summed by Arrow.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from postlab.records.chunks import ChunkedRuns
    from postlab.records.columns import judged, row_tables, scores_table

    for name in contracts:
        CONTRACTS[name]  # an unknown name fails before any row is read
        if name in DRAWN:
            raise ValueError(f"the {name} contract pays at random and judges no row")
    if tables is None and isinstance(record.runs, ChunkedRuns):
        raise ValueError("a chunked record is re-scored from the tables its reader checked "
                         "(records.opened.checked_tables)")
    pairs = [(looser, stricter) for i, first in enumerate(contracts)
             for second in contracts[i + 1:]
             for looser, stricter in ((first, second), (second, first))]
    rows, gap_counts = [], dict.fromkeys(pairs, (0, 0))
    for batch in row_tables(record) if tables is None else tables:
        # a partial-credit reward is added in row order, as a plain loop adds it
        found = judged(batch.evaluations, scores_table(batch, answer, contracts),
                       ordered=any(name in PARTIAL_CREDIT for name in contracts))
        blocks = batch.blocks
        if split is not None:
            wanted = pc.equal(blocks.column("split"), split).to_numpy(zero_copy_only=False)
            found = found.filter(pa.array(wanted[found.column("block_id").to_numpy()]))
        text = found.column("text")
        zero = pc.cast(pc.and_(pc.greater(pc.utf8_length(text), 1),
                               pc.starts_with(text, "0")), pa.int64())
        columns = {"block_id": found.column("block_id")}
        for name in contracts:
            columns[name] = found.column(f"score:{name}")
        for index, (looser, stricter) in enumerate(pairs):
            only = pc.and_(pc.greater_equal(found.column(f"score:{looser}"), 1),
                           pc.less(found.column(f"score:{stricter}"), 1))
            columns[f"only{index}"] = pc.cast(only, pa.int64())
            columns[f"zeros{index}"] = pc.multiply(columns[f"only{index}"], zero)
        per = pa.table(columns).group_by("block_id", use_threads=False).aggregate(
            [("block_id", "count"), *((name, "sum") for name in columns if name != "block_id")]
        ).sort_by("block_id").to_pylist()
        for index, pair in enumerate(pairs):
            only, zeros = gap_counts[pair]
            gap_counts[pair] = (only + sum(entry[f"only{index}_sum"] for entry in per),
                                zeros + sum(entry[f"zeros{index}_sum"] for entry in per))
        labels = {name: blocks.column(name).to_pylist()
                  for name in ("seed", "stage", "split", "decoding")}
        for entry in per:
            block = entry["block_id"]
            stage = labels["stage"][block]
            rows.append(ScoreRow(seed=labels["seed"][block], stage=stage,
                                 trained_on=trained.get(stage), split=labels["split"][block],
                                 decoding=labels["decoding"][block], n=entry["block_id_count"],
                                 accepted={name: entry[f"{name}_sum"] for name in contracts}))
    gaps = [ContractGap(looser=looser, stricter=stricter,
                        accepted_only_by_looser=gap_counts[(looser, stricter)][0],
                        with_leading_zeros=gap_counts[(looser, stricter)][1])
            for looser, stricter in pairs]
    return Rescore(contracts=tuple(contracts), rows=tuple(rows), gaps=tuple(gaps))


WORDS = {
    "en": {"title": "Re-scored raw outputs (the record is unchanged); contracts: {names}",
           "header": "seed / stage (trained on) / split / decoding / " "{columns}",
           "sft": "no RL contract", "mark": " (trained on)", "stages": {"initial": "SFT"},
           "gap": "accepted by {looser} but not by {stricter}: {only}, of which "
                  "{zeros} with leading zeros"},
    "zh": {"title": "按其他契约重新评分原始输出（记录未改动）；契约：{names}",
           "header": "种子 / 阶段（训练契约）/ 划分 / 解码 / {columns}",
           "sft": "无 RL 契约", "mark": "（训练所用）",
           "gap": "{looser} 接受而 {stricter} 不接受：{only}，其中前导零 {zeros}"},
}


def render_rescore(result: Rescore, lang: str) -> str:
    words = WORDS[lang]
    columns = " / ".join(result.contracts)
    lines = [words["title"].format(names=", ".join(result.contracts)),
             words["header"].format(columns=columns)]
    for row in result.rows:
        trained = row.trained_on or words["sft"]
        cells = []
        for name in result.contracts:
            mark = words["mark"] if name == row.trained_on else ""
            cells.append(f"{name}={count_text(row.accepted[name])}/{row.n}{mark}")
        stage = words.get("stages", {}).get(row.stage, row.stage)
        lines.append(f"{row.seed:2d} {stage:9s} ({trained}) {row.split} {row.decoding:7s} "
                     + " ".join(cells))
    for gap in result.gaps:
        lines.append(words["gap"].format(looser=gap.looser, stricter=gap.stricter,
                                         only=gap.accepted_only_by_looser,
                                         zeros=gap.with_leading_zeros))
    return "\n".join(lines) + "\n"
