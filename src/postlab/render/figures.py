"""Figures of an aggregate :class:`~postlab.analysis.aggregate.Analysis`, drawn with matplotlib.

Each figure is returned as PNG and SVG bytes; callers decide where they go (files, or embedded
in one HTML page). Chinese labels need a CJK font; without one the figures fall back to English
labels rather than draw empty boxes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from postlab.analysis.aggregate import Analysis, HackingGap
from postlab.render.labels import LABELS, metric_label, stage_label

CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "WenQuanYi Micro Hei",
             "WenQuanYi Zen Hei", "SimHei", "Microsoft YaHei", "PingFang SC")


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    png: bytes
    svg: bytes


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_language(lang: str) -> tuple[str, str | None]:
    """The language figures can be drawn in here, and the font to use for it."""
    if lang != "zh":
        return lang, None
    from matplotlib import font_manager

    available = {f.name for f in font_manager.fontManager.ttflist}
    for name in CJK_FONTS:
        if name in available:
            return "zh", name
    return "en", None


def save_figure(fig, name: str, title: str) -> Figure:
    plt = pyplot()
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
    # A fixed hash salt and no date keep the SVG bytes the same from run to run.
    fig.savefig(svg, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return Figure(name=name, title=title, png=png.getvalue(), svg=svg.getvalue())


def _errors(mean: float, low: float | None, high: float | None) -> tuple[float, float]:
    if low is None or high is None:
        return 0.0, 0.0
    return mean - low, high - mean


def _gap_figure(gaps: list[HackingGap], words: dict[str, str], lang: str,
                split: str) -> Figure:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    means = [g.gap.mean for g in gaps]
    errs = list(zip(*[_errors(g.gap.mean, g.gap.low, g.gap.high) for g in gaps],
                    strict=True))
    ax.bar(range(len(gaps)), means, yerr=errs, capsize=4, color="tab:red")
    for i, g in enumerate(gaps):
        ax.plot([i] * len(g.gap.per_seed), g.gap.per_seed, "k.", markersize=4)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(gaps)), [stage_label(g.stage, lang) for g in gaps])
    ax.set_title(f"{words['fig_gap']} ({split})")
    return save_figure(fig, "hacking_gap", words["fig_gap"])


def draw_figures(analysis: Analysis, lang: str, split: str = "test") -> list[Figure]:
    import matplotlib

    plt = pyplot()
    lang, font = figure_language(lang)
    words = LABELS[lang]
    style = {"svg.hashsalt": "postlab", "font.size": 9}
    if font:
        style["font.family"] = [font]
    figures = []
    with matplotlib.rc_context(style):
        stages = analysis.stages
        names = [stage_label(s, lang) for s in stages]

        # 1. held-out outcomes with intervals and per-seed points
        fig, ax = plt.subplots(figsize=(7.5, 3.6))
        rates = [f"{name}_rate" for name in analysis.contracts]
        series = [("greedy", rates[0]), *(("sampled", rate) for rate in rates),
                  ("sampled", "coverage")]
        width = 0.8 / len(series)
        for j, (decoding, metric) in enumerate(series):
            means, errs, points = [], ([], []), []
            for stage in stages:
                item = analysis.outcome(stage, split, decoding, metric).value
                means.append(item.mean)
                lo, hi = _errors(item.mean, item.low, item.high)
                errs[0].append(lo)
                errs[1].append(hi)
                points.append(item.per_seed)
            xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(stages))]
            ax.bar(xs, means, width, yerr=errs, capsize=3,
                   label=f"{words[decoding]}: {metric_label(metric, lang)}")
            for x, seeds in zip(xs, points, strict=True):
                ax.plot([x] * len(seeds), seeds, "k.", markersize=3)
        ax.set_xticks(range(len(stages)), names)
        ax.set_ylabel(words["rate"])
        ax.set_title(f"{words['fig_outcomes']} ({split})")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
        figures.append(save_figure(fig, "outcomes", words["fig_outcomes"]))

        # 2. reward hacking gap (a task judged by one contract has none)
        gaps = [g for g in analysis.hacking_gaps if g.split == split]
        if gaps:
            figures.append(_gap_figure(gaps, words, lang, split))
        # 3. pass@k curves
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        for curve in analysis.pass_at_k:
            if curve.split != split:
                continue
            line, = ax.plot(curve.k, curve.mean, marker=".", label=stage_label(curve.stage,
                                                                                lang))
            if all(v is not None for v in curve.low):
                ax.fill_between(curve.k, curve.low, curve.high, alpha=0.15,
                                color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_xlabel(words["k"])
        ax.set_ylabel("pass@k")
        ax.set_title(f"{words['fig_pass']} ({split})")
        ax.legend(fontsize=7)
        figures.append(save_figure(fig, "pass_at_k", words["fig_pass"]))

        # 4. training dynamics, one panel per series
        if analysis.dynamics:
            names_series = list(analysis.dynamics[0].series)
            cols = 5
            rows = (len(names_series) + cols - 1) // cols
            fig, axes = plt.subplots(rows, cols, figsize=(13, 2.4 * rows), squeeze=False)
            for index, name in enumerate(names_series):
                ax = axes[index // cols][index % cols]
                for dyn in analysis.dynamics:
                    band = dyn.series[name]
                    line, = ax.plot(dyn.steps, band.mean, linewidth=1,
                                    label=stage_label(dyn.arm, lang))
                    ax.fill_between(dyn.steps, band.low, band.high, alpha=0.2,
                                    color=line.get_color())
                    # each seed's hacking onset, marked in the arm's colour on every panel
                    for onset in analysis.hacking_onsets:
                        if onset.arm == dyn.arm and onset.onset is not None:
                            ax.axvline(onset.onset, color=line.get_color(), linestyle=":",
                                       linewidth=0.9)
                ax.set_title(metric_label(name, lang), fontsize=8)
                ax.set_xlabel(words["step"], fontsize=7)
            for index in range(len(names_series), rows * cols):
                axes[index // cols][index % cols].axis("off")
            axes[0][0].legend(fontsize=7)
            marked = any(o.onset is not None for o in analysis.hacking_onsets)
            fig.suptitle(words["fig_dynamics"] + (words["fig_onset_note"] if marked else ""))
            fig.tight_layout()
            figures.append(save_figure(fig, "dynamics", words["fig_dynamics"]))

        # 5. SFT loss
        fig, ax = plt.subplots(figsize=(5, 3))
        steps = list(range(1, len(analysis.sft_loss.mean) + 1))
        ax.plot(steps, analysis.sft_loss.mean, color="tab:blue")
        ax.fill_between(steps, analysis.sft_loss.low, analysis.sft_loss.high, alpha=0.2)
        ax.set_yscale("log")
        ax.set_xlabel(words["step"])
        ax.set_title(words["fig_sft"])
        figures.append(save_figure(fig, "sft_loss", words["fig_sft"]))
    return figures
