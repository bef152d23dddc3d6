"""Re-scoring stored raw outputs under other reward contracts, without touching the record.

A contract changed after training is a new rule (answer 10): the old outputs are kept and
scored under both rules, each figure labelled with its contract and with whether the policy was
trained on it. Training under the new rule is another experiment, not a re-score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from postlab.records.metrics import count_text
from postlab.tasks.contracts import CONTRACTS, Answer, score
from postlab.tasks.rows import iter_run_rows, rows_by_place


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


def _leading_zero(text: str) -> bool:
    return len(text) > 1 and text.startswith("0")


def rescore(record: dict[str, Any], trained: dict[str, str], contracts: list[str],
            split: str | None = None, answer: Answer = sum) -> Rescore:
    """Score every evaluation row under each contract; ``split`` limits to one split.

    ``trained`` maps each RL stage to the contract it was trained on.
    """
    for name in contracts:
        CONTRACTS[name]  # an unknown name fails before any row is read
    rows, gap_counts = [], {}
    for run in record["runs"]:
        # per run, so a block is one seed's even where a record repeats a seed
        blocks = rows_by_place(iter_run_rows(run, training=False))
        for place, outputs in blocks.items():
            if split is not None and place.split != split:
                continue
            accepted = {name: 0 for name in contracts}
            for row in outputs:
                verdicts = {name: score(row, name, answer) for name in contracts}
                for name, ok in verdicts.items():
                    accepted[name] += ok
                for i, first in enumerate(contracts):
                    for second in contracts[i + 1:]:
                        for looser, stricter in ((first, second), (second, first)):
                            if verdicts[looser] >= 1 and verdicts[stricter] < 1:
                                key = (looser, stricter)
                                only, zeros = gap_counts.get(key, (0, 0))
                                gap_counts[key] = (only + 1, zeros + _leading_zero(row.text))
            rows.append(ScoreRow(seed=place.seed, stage=place.stage,
                                 trained_on=trained.get(place.stage), split=place.split,
                                 decoding=place.decoding, n=len(outputs), accepted=accepted))
    gaps = []
    for i, first in enumerate(contracts):
        for second in contracts[i + 1:]:
            for looser, stricter in ((first, second), (second, first)):
                only, zeros = gap_counts.get((looser, stricter), (0, 0))
                gaps.append(ContractGap(looser=looser, stricter=stricter,
                                        accepted_only_by_looser=only, with_leading_zeros=zeros))
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
