"""A comparison of plan versions as tables (terminal, Markdown), JSON, figures and one HTML
page. The numbers come from :mod:`postlab.analysis.versions`; this module only lays them out."""

from __future__ import annotations

import dataclasses
import html
import json

from postlab.analysis.intervals import Interval
from postlab.analysis.versions import Comparison, MetricComparison
from postlab.render.figures import Figure, figure_language, pyplot, save_figure
from postlab.render.html import figure_html, page_start, table_html
from postlab.render.labels import LABELS, metric_label
from postlab.render.tables import Table, fmt_interval

WORDS: dict[str, dict[str, str]] = {
    "en": {
        "title": "postlab comparison of plan versions",
        "base": "base version", "versions": "versions", "changes": "changes",
        "version": "version", "value": "mean [95% CI]", "seeds": "seeds",
        "difference": "paired difference from {base} [95% CI]", "pairs": "pairs",
        "metric_title": "{metric}, {decoding}, {stage}, {split} split",
        "gap": "hacking gap", "fig_title": "{metric} ({decoding}, {split}) against {x}",
        "rates": "Rates: {method}.", "differences": "Differences: {method}.",
        "figures": "Figures",
    },
    "zh": {
        "title": "postlab 计划版本比较",
        "base": "基准版本", "versions": "版本", "changes": "改动",
        "version": "版本", "value": "均值 [95% 置信区间]", "seeds": "种子",
        "difference": "相对 {base} 的配对差 [95% 置信区间]", "pairs": "配对数",
        "metric_title": "{metric}，{decoding}，{stage}，{split} 集",
        "gap": "奖励投机差距", "fig_title": "{metric}（{decoding}，{split}）随 {x} 变化",
        "rates": "比率：{method}。", "differences": "差值：{method}。",
        "figures": "图",
    },
}


def _stage(stage: str, lang: str) -> str:
    words = LABELS[lang]
    return words["initial"] if stage == "initial" else words["arm"].format(arm=stage)


def _metric(item: MetricComparison, lang: str) -> str:
    return WORDS[lang]["gap"] if item.metric == "hacking_gap" else metric_label(item.metric, lang)


def _fmt(value: Interval | None, lang: str, signed: bool = False) -> str:
    if value is None:
        return "—"
    text = fmt_interval(value, lang)
    return f"+{text}" if signed and value.mean >= 0 else text


def build_tables(comparison: Comparison, lang: str, split: str | None = None) -> list[Table]:
    """The versions' preregistered verdicts first (if any), then one table per metric: each
    version's mean, and its paired difference from the base."""
    words = WORDS[lang]
    tables = []
    if comparison.verdicts:
        labels = LABELS[lang]
        rows = tuple(
            (version, verdict.id, f"{verdict.comparison}: {verdict.metric}",
             f"{verdict.mean:+.3f} [{min(verdict.bound, verdict.opposite):+.3f}, "
             f"{max(verdict.bound, verdict.opposite):+.3f}]", f"{verdict.level:.4f}",
             labels[f"verdict_{verdict.outcome}"])
            for version, verdicts in comparison.verdicts.items() for verdict in verdicts)
        tables.append(Table(labels["hypotheses"], (
            words["version"], labels["hypothesis"], labels["claim"],
            labels["difference_bounds"], labels["level"], labels["verdict"]), rows))
    for item in comparison.metrics:
        if split is not None and item.split != split:
            continue
        title = words["metric_title"].format(metric=_metric(item, lang),
                                             decoding=LABELS[lang][item.decoding],
                                             stage=_stage(item.stage, lang), split=item.split)
        columns = (words["version"], words["changes"], words["value"],
                   words["difference"].format(base=comparison.base), words["pairs"])
        rows = []
        for value in item.values:
            changes = ", ".join(f"{k}={json.dumps(v)}"
                                for k, v in comparison.changes[value.version].items()) or "—"
            rows.append((value.version, changes, _fmt(value.value, lang),
                         _fmt(value.difference, lang, signed=True),
                         str(len(value.paired_seeds)) if value.difference else "—"))
        tables.append(Table(title=title, columns=columns, rows=tuple(rows)))
    return tables


def to_text(comparison: Comparison, lang: str, split: str | None = None) -> str:
    words = WORDS[lang]
    lines = [f"{words['title']}: {words['base']} {comparison.base}; {words['versions']}: "
             f"{', '.join(comparison.versions)}"]
    for table in build_tables(comparison, lang, split):
        lines.append("")
        lines.append(table.title)
        widths = [max(len(str(row[i])) for row in (table.columns, *table.rows))
                  for i in range(len(table.columns))]
        for row in (table.columns, *table.rows):
            lines.append("  ".join(str(cell).ljust(width)
                                   for cell, width in zip(row, widths, strict=True)).rstrip())
    lines += ["", words["rates"].format(method=comparison.rate_method),
              words["differences"].format(method=comparison.difference_method)]
    return "\n".join(lines) + "\n"


def to_markdown(comparison: Comparison, lang: str, split: str | None = None) -> str:
    words = WORDS[lang]
    parts = [f"# {words['title']}", "",
             f"{words['base']}: `{comparison.base}`; {words['versions']}: "
             + ", ".join(f"`{v}`" for v in comparison.versions)]
    for table in build_tables(comparison, lang, split):
        parts += ["", f"## {table.title}", "",
                  "| " + " | ".join(table.columns) + " |",
                  "| " + " | ".join("---" for _ in table.columns) + " |"]
        parts += ["| " + " | ".join(row) + " |" for row in table.rows]
    parts += ["", words["rates"].format(method=comparison.rate_method),
              words["differences"].format(method=comparison.difference_method)]
    return "\n".join(parts) + "\n"


def to_json(comparison: Comparison) -> str:
    return json.dumps(dataclasses.asdict(comparison), indent=2, ensure_ascii=False) + "\n"


# --- figures ---------------------------------------------------------------------------------

#: The metrics drawn against the swept value: sampled rates and coverage, and the gap.
FIGURE_DECODING = "sampled"


def _points(item: MetricComparison, xs: list[float], paired: bool, base: str
            ) -> tuple[list[float], list[float], list[list[float]]]:
    """x, mean and error bars of one stage's series, in x order; for ``paired``, the
    differences from the base (the base itself at zero, without a bar; a version sharing no
    seed with the base is left out)."""
    xs_out, means, below, above = [], [], [], []
    for i in sorted(range(len(xs)), key=lambda i: xs[i]):
        value = item.values[i]
        interval = value.difference if paired else value.value
        if paired and value.version == base:
            interval = Interval(per_seed=(), mean=0.0, low=None, high=None)
        if interval is None:
            continue
        xs_out.append(xs[i])
        means.append(interval.mean)
        below.append(interval.mean - interval.low if interval.low is not None else 0.0)
        above.append(interval.high - interval.mean if interval.high is not None else 0.0)
    return xs_out, means, [below, above]


def draw_figures(comparison: Comparison, lang: str, split: str = "test", *,
                 svg: bool = True) -> list[Figure]:
    """Per metric of sampled outputs on ``split``: each stage's mean and interval (left) and
    its paired difference from the base version (right) against the swept value (numbers on
    a numeric axis, else the version names in order); PNG only when ``svg`` is False."""
    plt = pyplot()
    figure_lang, font = figure_language(lang)
    fig_words = WORDS[figure_lang]
    figures = []
    by_metric: dict[str, list[MetricComparison]] = {}
    for item in comparison.metrics:
        if item.split == split and item.decoding == FIGURE_DECODING:
            by_metric.setdefault(item.metric, []).append(item)
    swept = comparison.swept
    numeric = swept is not None and all(isinstance(v, int | float) and not isinstance(v, bool)
                                        for v in swept[1].values())
    x_label = swept[0] if numeric and swept else fig_words["version"]
    for metric, items in by_metric.items():
        name = fig_words["gap"] if metric == "hacking_gap" else metric_label(metric, figure_lang)
        with plt.rc_context({"font.family": font} if font else {}):
            fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.0))
            for offset, item in enumerate(items):
                if numeric:
                    assert swept is not None
                    xs = [float(swept[1][v.version]) for v in item.values]
                else:
                    xs = [i + (offset - (len(items) - 1) / 2) * 0.08
                          for i in range(len(item.values))]
                label = _stage(item.stage, figure_lang)
                for ax, paired in ((left, False), (right, True)):
                    x, y, bars = _points(item, xs, paired, comparison.base)
                    ax.errorbar(x, y, yerr=bars, marker="o", capsize=3, label=label)
            right.axhline(0.0, color="#888", linewidth=0.8)
            for ax in (left, right):
                if not numeric:
                    ax.set_xticks(range(len(comparison.versions)), comparison.versions,
                                  rotation=20, ha="right")
                ax.set_xlabel(x_label)
            left.set_ylabel(name)
            right.set_ylabel(fig_words["difference"].format(base=comparison.base))
            if metric != "hacking_gap":
                left.set_ylim(-0.02, 1.02)
            left.legend(fontsize=8)
            title = fig_words["fig_title"].format(metric=name,
                                                  decoding=LABELS[figure_lang][FIGURE_DECODING],
                                                  split=split, x=x_label)
            fig.suptitle(title, fontsize=10)
            fig.tight_layout()
            figures.append(save_figure(fig, f"compare_{metric}", title, svg=svg))
    return figures


def render_html(comparison: Comparison, figures: list[Figure], lang: str,
                split: str | None = None) -> str:
    """Figures first (metric against the swept value), then a table per metric."""
    words = WORDS[lang]
    esc = html.escape
    parts = [*page_start(lang, words["title"]),
             f"<p>{esc(words['base'])}: <code>{esc(comparison.base)}</code> · "
             f"{esc(words['versions'])}: {esc(', '.join(comparison.versions))}</p>"]
    if figures:
        parts.append(f"<h2>{esc(words['figures'])}</h2>")
    parts += [figure_html(figure) for figure in figures]
    parts += [table_html(table) for table in build_tables(comparison, lang, split)]
    parts.append(f'<p class="note">{esc(words["rates"].format(method=comparison.rate_method))} '
                 f'{esc(words["differences"].format(method=comparison.difference_method))}</p>'
                 "</body></html>\n")
    return "\n".join(parts)
