"""The report's tables as plain text cells, shared by the terminal, Markdown and HTML views."""

from __future__ import annotations

import dataclasses
import json
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from postlab.analysis.intervals import Interval
from postlab.analysis.results import Analysis
from postlab.render.labels import LABELS, hacking_title, metric_label, pass_at_k_title, stage_label

#: k values shown in the pass@k table (the figure shows every k).
SHOWN_K = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def fmt_interval(value: Interval, lang: str, digits: int = 3) -> str:
    if value.low is None or value.high is None:
        return f"{value.mean:.{digits}f} [{LABELS[lang]['no_interval']}]"
    return f"{value.mean:.{digits}f} [{value.low:.{digits}f}, {value.high:.{digits}f}]"


def fmt_seeds(values: tuple[float, ...], digits: int = 3) -> str:
    return " ".join(f"{v:.{digits}f}" for v in values)


def standing_text(analysis: Analysis, standing: str, lang: str) -> str:
    """How a hypothesis was fixed, in words: registered before training (with the time), in
    the plan, or exploratory."""
    time = (analysis.registration or {}).get("registered_at", "")
    return LABELS[lang][f"standing_{standing}"].format(time=time)


def hypothesis_table(analysis: Analysis, lang: str) -> Table | None:
    """The hypotheses and their verdicts, first in every report form: the registered (or
    the plan's own), then any exploratory ones, each row saying which it is."""
    if not analysis.verdicts:
        return None
    words = LABELS[lang]
    rows = []
    for verdict in analysis.verdicts:
        bound = (f"> {verdict.margin:g}" if verdict.direction == "increase"
                 else f"< -{verdict.margin:g}")
        low, high = sorted((verdict.bound, verdict.opposite))
        rows.append((verdict.id, verdict.statement,
                     f"{verdict.comparison}: {verdict.metric} {bound}",
                     fmt_seeds(verdict.per_seed),
                     f"{verdict.mean:+.3f} [{low:+.3f}, {high:+.3f}]",
                     f"{verdict.level:.4f}", words[f"verdict_{verdict.outcome}"],
                     standing_text(analysis, verdict.standing, lang)))
    return Table(words["hypotheses"], (words["hypothesis"], words["statement"],
                                       words["claim"], words["per_seed"],
                                       words["difference_bounds"], words["level"],
                                       words["verdict"], words["standing"]), tuple(rows))


def _window_mean(values: Sequence[float]) -> str:
    """The mean of a window of steps, over those with a value (a step in which some seed
    made no update has none: DAPO's dynamic sampling), or a dash."""
    present = [value for value in values if not math.isnan(value)]
    return f"{sum(present) / len(present):.3f}" if present else "—"


def build_tables(analysis: Analysis, lang: str, split: str = "test") -> list[Table]:
    words = LABELS[lang]
    first = hypothesis_table(analysis, lang)
    outcome_rows = []
    for stage in analysis.stages:
        for decoding in ("greedy", "sampled"):
            for item in analysis.outcomes:
                if (item.stage, item.split, item.decoding) != (stage, split, decoding):
                    continue
                change = (fmt_interval(item.change_from_sft, lang)
                          if item.change_from_sft else "—")
                outcome_rows.append((stage_label(stage, lang), words[decoding],
                                     metric_label(item.metric, lang),
                                     fmt_seeds(item.value.per_seed),
                                     fmt_interval(item.value, lang), change))
    tables = [] if first is None else [first]
    tables += [Table(words["outcomes"].format(split=split),
                    (words["stage"], words["decoding"], words["metric"], words["per_seed"],
                     words["mean_ci"], words["change"]), tuple(outcome_rows))]

    gap_rows = tuple((stage_label(g.stage, lang), fmt_seeds(g.gap.per_seed),
                      fmt_interval(g.gap, lang))
                     for g in analysis.hacking_gaps if g.split == split)
    if len(analysis.contracts) > 1:
        tables.append(Table(hacking_title(analysis.contracts, lang, split),
                            (words["stage"], words["per_seed"], words["gap"]), gap_rows))

    shown = [k for k in SHOWN_K if k <= analysis.eval_samples]
    if analysis.eval_samples not in shown:
        shown.append(analysis.eval_samples)
    pass_rows = []
    for curve in analysis.pass_at_k:
        if curve.split != split:
            continue
        cells = []
        for k in shown:
            i = curve.k.index(k)
            cells.append(fmt_interval(Interval(per_seed=(), mean=curve.mean[i], low=curve.low[i],
                                               high=curve.high[i]), lang))
        pass_rows.append((stage_label(curve.stage, lang), *cells))
    tables.append(Table(pass_at_k_title(analysis.contracts, lang, split),
                        (words["stage"], *[f"pass@{k}" for k in shown]), tuple(pass_rows)))

    if analysis.hacking_onsets:
        onset_rows = tuple(
            (stage_label(o.arm, lang), str(o.seed),
             str(o.onset) if o.onset is not None else words["no_onset"],
             str(o.alarm) if o.alarm is not None else "—",
             f"{sum(o.gaps[-max(1, len(o.gaps) // 10):]) / max(1, len(o.gaps) // 10):+.3f}",
             f"{o.kl_trend:+.2e}", f"{o.entropy_trend:+.2e}")
            for o in analysis.hacking_onsets)
        tables.append(Table(words["onsets"], (
            words["stage"], words["seed"], words["onset"], words["alarm"], words["late_gap"],
            words["kl_trend"], words["entropy_trend"]), onset_rows))

    dyn_rows = []
    for dyn in analysis.dynamics:
        n = len(dyn.steps)
        tenth = max(1, n // 10)
        for name, band in dyn.series.items():
            dyn_rows.append((stage_label(dyn.arm, lang), metric_label(name, lang),
                             _window_mean(band.mean[:tenth]), _window_mean(band.mean[-tenth:])))
    if analysis.compute:
        keys = list(analysis.compute[0].own)
        rows = tuple((stage_label(c.stage, lang), c.pipeline,
                      *[f"{c.own[k]:g} / {c.total[k]:g}" for k in keys])
                     for c in analysis.compute)
        tables.append(Table(words["compute"], (words["stage"], words["pipeline"],
                                               *[words[k] for k in keys]), rows))
    tables.append(Table(words["dynamics"], (words["stage"], words["series"],
                                            words["first_steps"], words["last_steps"]),
                        tuple(dyn_rows)))
    return tables


def to_json(analysis: Analysis) -> str:
    """The documented, stable JSON form (docs/report-json.md): the analysis as plain data.

    ``contracts`` is left out: schema 1 names them in its metric and series keys already; so
    are the per-question counts the intervals come from (the record holds their rows)."""
    data = dataclasses.asdict(dataclasses.replace(analysis, counts={}, questions={}))
    del data["contracts"], data["counts"], data["questions"]
    if not data["verdicts"]:
        del data["verdicts"]  # schema 1 as it was for plans without hypotheses
    if data["registration"] is None:
        del data["registration"]  # likewise for runs without a registration
    if not data["policy_loss"]:
        del data["policy_loss"]  # and for plans without RL arms
    if data["control"] is None:  # and for plans without a control arm
        del data["control"]
        for outcome in data["outcomes"]:
            del outcome["change_from_control"]
    return json.dumps(_nan_as_null(data), ensure_ascii=False, indent=2, allow_nan=False,
                      default=_plain) + "\n"


def _nan_as_null(value: Any) -> Any:
    """NaN, which JSON cannot hold, as null: a step's update statistics where it made no
    update (DAPO's dynamic sampling), and the bands over seeds that include such a step."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _nan_as_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_nan_as_null(item) for item in value]
    return value


def _plain(value: Any) -> Any:
    """Series the analysis keeps as arrays of doubles (8 bytes a value) print as lists."""
    if isinstance(value, array):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not part of the report's JSON")


def _loss_words(analysis: Analysis, words: dict[str, str]) -> str:
    """The policy loss that trained the RL arms, for a report's first line."""
    return f" · {words['policy_loss']}: {analysis.policy_loss}" if analysis.policy_loss else ""


def to_markdown(analysis: Analysis, lang: str, split: str = "test",
                findings: Sequence[str] = ()) -> str:
    words = LABELS[lang]
    lines = [f"# {words['title']}", "",
             f"{words['plan_sha256']}: `{analysis.plan_sha256}` · {words['seeds']}: "
             f"{', '.join(map(str, analysis.seeds))}" + _loss_words(analysis, words), "",
             words["interval_method"].format(method=analysis.interval_method), ""]
    if findings:
        lines += [f"## {words['findings']}", "", *(f"- {line}" for line in findings), ""]
    for table in build_tables(analysis, lang, split):
        lines += [f"## {table.title}", "", "| " + " | ".join(table.columns) + " |",
                  "|" + "---|" * len(table.columns)]
        lines += ["| " + " | ".join(row) + " |" for row in table.rows]
        lines.append("")
    return "\n".join(lines)


def to_terminal(analysis: Analysis, lang: str, split: str = "test",
                findings: Sequence[str] = ()) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console()
    words = LABELS[lang]
    console.print(f"[bold]{words['title']}[/bold]  {words['plan_sha256']} "
                  f"{analysis.plan_sha256[:16]}…  {words['seeds']} "
                  f"{', '.join(map(str, analysis.seeds))}" + _loss_words(analysis, words))
    if findings:
        console.print(f"[bold]{words['findings']}[/bold]")
        for line in findings:
            console.print(f"• {line}", highlight=False, markup=False)
    for table in build_tables(analysis, lang, split):
        view = RichTable(title=table.title, title_justify="left")
        for column in table.columns:
            view.add_column(column)
        for row in table.rows:
            view.add_row(*row)
        console.print(view)
    console.print(words["interval_method"].format(method=analysis.interval_method))
