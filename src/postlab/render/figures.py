"""Figures of a run's :class:`~postlab.analysis.results.Analysis`, drawn with matplotlib.

Each figure is returned as PNG and SVG bytes with a caption saying how it was drawn; callers
decide where they go (files, or embedded in one HTML page). Every axis carries its unit, every
figure one legend, every mean its seeds as dots or faint lines. Chinese labels need a CJK
font; without one the figures fall back to English labels rather than draw empty boxes, and
:func:`figure_language` says so.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postlab.analysis.results import Analysis, Band
from postlab.analysis.samples import PairGrid
from postlab.render.figure_words import FIGURE_WORDS
from postlab.render.labels import LABELS, metric_label, stage_label
from postlab.tasks.contracts import describe

CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC", "Source Han Sans SC",
             "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "SimHei", "Microsoft YaHei",
             "PingFang SC")
#: Units of each training series' axis (reward series end in ``_reward``).
SERIES_UNITS = {"zero_variance_groups": "units_groups", "kl": "units_nats",
                "entropy": "units_nats", "ratio_outside_clip": "units_share_tokens",
                "gradient_norm_before_clip": "units_norm", "loss": "units_loss",
                "mean_tokens": "units_tokens", "truncated": "units_share_rollouts"}


#: Every figure a run's plot can write (its files are NAME.png and NAME.svg).
FIGURE_NAMES = frozenset({"outcomes", "generalisation", "pair_success", "hacking_gap",
                          "pass_at_k", "dynamics", "sft_loss"})


@dataclass(frozen=True)
class Figure:
    """A saved figure; ``svg`` is None where only the PNG was asked for (the HTML pages embed
    PNG, and the SVG's rendering is about a third of drawing them)."""

    name: str
    title: str
    png: bytes
    svg: bytes | None
    caption: str = ""


@dataclass(frozen=True)
class Drawn:
    """A matplotlib figure drawn and not yet saved, with what its saved form is called."""

    fig: object
    name: str
    title: str
    caption: str = ""


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: The CJK font postlab ships (a subset of Noto Sans CJK SC, SIL OFL 1.1: data/fonts/OFL.txt):
#: every character postlab's own labels use, so Chinese figures and pages read on a machine
#: without a CJK font (made by scripts/make-cjk-subset.py).
SHIPPED_CJK_FAMILY = "postlab CJK subset"


def shipped_cjk_font() -> Path:
    """The shipped CJK subset's file."""
    from importlib import resources

    return Path(str(resources.files("postlab") / "data" / "fonts" / "postlab-cjk-subset.otf"))


def _find_cjk_font() -> str | None:
    """A CJK font for Chinese figures: the system's where it has one (it holds every
    character, a plan's own words included), else the shipped subset."""
    found = _system_cjk_font()
    if found is not None:
        return found
    from matplotlib import font_manager

    path = shipped_cjk_font()
    if path.is_file():
        font_manager.fontManager.addfont(str(path))
        return SHIPPED_CJK_FAMILY
    return None


def _system_cjk_font() -> str | None:
    from matplotlib import font_manager

    available = {f.name for f in font_manager.fontManager.ttflist}
    for name in CJK_FONTS:
        if name in available:
            return name
    # matplotlib caches its font list: a font installed after the cache was built is not in
    # it, so look among the system's font files once and register the CJK ones.
    for path in font_manager.findSystemFonts():
        lowered = path.lower()
        if any(mark in lowered for mark in ("cjk", "wqy", "wenquanyi", "sourcehansans")):
            try:
                font_manager.fontManager.addfont(path)
            except (OSError, RuntimeError, ValueError):
                continue
    available = {f.name for f in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in available), None)


def figure_language(lang: str) -> tuple[str, str | None]:
    """The language figures can be drawn in here, and the font to use for it."""
    if lang != "zh":
        return lang, None
    font = _find_cjk_font()
    return ("zh", font) if font else ("en", None)


def save_figure(fig, name: str, title: str, caption: str = "", *, svg: bool = True) -> Figure:
    """PNG bytes, and SVG bytes unless ``svg`` is False; the figure is closed."""
    plt = pyplot()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
    vector = None
    if svg:
        out = io.BytesIO()
        # A fixed hash salt and no date keep the SVG bytes the same from run to run.
        fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
        vector = out.getvalue()
    plt.close(fig)
    return Figure(name=name, title=title, png=png.getvalue(), svg=vector, caption=caption)


def smoothing_window(steps: int) -> int:
    """About a twentieth of the steps, odd so the moving average is centred."""
    window = max(1, steps // 20)
    return window if window % 2 else window + 1


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Centred moving average; near the ends it averages the steps that exist."""
    half = window // 2
    out = []
    for i in range(len(values)):
        part = values[max(0, i - half):i + half + 1]
        out.append(sum(part) / len(part))
    return out


def _errors(mean: float, low: float | None, high: float | None) -> tuple[float, float]:
    if low is None or high is None:
        return 0.0, 0.0
    return mean - low, high - mean


def _bars(ax, groups: Sequence[str], series: Sequence[tuple[str, Sequence]]) -> None:
    """Grouped bars of intervals with their seeds as dots; ``series`` is (label, intervals
    per group)."""
    width = 0.8 / len(series)
    for j, (label, values) in enumerate(series):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(groups))]
        errs = list(zip(*[_errors(v.mean, v.low, v.high) for v in values], strict=True))
        ax.bar(xs, [v.mean for v in values], width, yerr=errs, capsize=3, label=label,
               error_kw={"elinewidth": 0.9})
        for x, value in zip(xs, values, strict=True):
            ax.plot([x] * len(value.per_seed), value.per_seed, "o", color="black",
                    markersize=2.5, alpha=0.7)
    ax.set_xticks(range(len(groups)), groups)
    ax.grid(axis="y", alpha=0.3)


def _rate_axis(ax, values: Sequence) -> None:
    """A rate axis from 0 to a little above the highest bar, whisker or seed (at most 1)."""
    top = max([v.high if v.high is not None else v.mean for v in values]
              + [max(v.per_seed) for v in values] + [0.05])
    ax.set_ylim(0, min(1.0, top * 1.1 + 0.01))


def _legend_below(fig, ax, columns: int = 2) -> None:
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.1, 1, 1))


def _outcomes(analysis: Analysis, lang: str, split: str, method: str) -> Drawn:
    plt = pyplot()
    words, fw = LABELS[lang], FIGURE_WORDS[lang]
    rates = [f"{name}_rate" for name in analysis.contracts]
    series_keys = [("greedy", rates[0]), *(("sampled", rate) for rate in rates),
                   ("sampled", "coverage")]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    series, every = [], []
    for decoding, metric in series_keys:
        values = [analysis.outcome(stage, split, decoding, metric).value
                  for stage in analysis.stages]
        every += values
        series.append((f"{words[decoding]}: {metric_label(metric, lang)}", values))
    _bars(ax, [stage_label(s, lang) for s in analysis.stages], series)
    _rate_axis(ax, every)
    ax.set_ylabel(fw["share_answers"])
    ax.set_title(f"{words['fig_outcomes']} ({split})")
    _legend_below(fig, ax)
    return Drawn(fig, "outcomes", words["fig_outcomes"],
                 fw["fig_outcomes_caption"].format(method=method))


def _generalisation(analysis: Analysis, lang: str, split: str) -> Drawn | None:
    if not analysis.training_rewards:
        return None
    plt = pyplot()
    fw = FIGURE_WORDS[lang]
    rate = f"{analysis.contracts[0]}_rate"
    arms = [r.arm for r in analysis.training_rewards]
    series = [(fw["training_reward"], [r.reward for r in analysis.training_rewards])]
    if any(r.contract != analysis.contracts[0] for r in analysis.training_rewards):
        series.append((fw["training_right"], [r.reference for r in analysis.training_rewards]))
    shown = [s for s in ("train", split) if s in analysis.splits]
    for name in dict.fromkeys(shown):
        series.append((fw["split_success"].format(split=name),
                       [analysis.outcome(arm, name, "sampled", rate).value for arm in arms]))
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    _bars(ax, [stage_label(a, lang) for a in arms], series)
    ax.set_ylim(0, 1)
    ax.set_ylabel(fw["share_outputs"])
    ax.set_title(fw["fig_generalisation"])
    _legend_below(fig, ax)
    return Drawn(fig, "generalisation", fw["fig_generalisation"],
                 fw["fig_generalisation_caption"].format(
                     contract=describe(analysis.contracts[0], lang).name))


#: The heatmap's scale starts just above 0: a share of exactly 0 falls below it and is drawn
#: in the 'under' colour, while the smallest share a pair can have (one right answer in the
#: teaching plan's 3 seeds x 16 samples, 0.021) takes the darkest shade.
ZERO_BELOW = 1e-9


def heatmap_figure(grids: Sequence[PairGrid], stages: Sequence[str], splits: Sequence[str],
                   lang: str) -> Drawn:
    """Success by operand pair: one panel per stage (rows) and split (columns)."""
    import numpy as np
    from matplotlib import colormaps

    plt = pyplot()
    fw = FIGURE_WORDS[lang]
    by_place = {(g.stage, g.split): g for g in grids}
    operands = grids[0].operands
    size = len(operands)
    cell = 2.3 if size <= 12 else 3.2
    fig, axes = plt.subplots(len(stages), len(splits), figsize=(cell * len(splits) + 1.2,
                                                               cell * len(stages) + 0.4),
                             squeeze=False)
    # exactly 0 (no answer right) is white, below the scale, so a share just above 0 (the
    # darkest shade) cannot be taken for it; grey: the pair is not in the split
    cmap = colormaps["viridis"].with_extremes(bad="#dddddd", under="#ffffff")
    image = None
    for r, stage in enumerate(stages):
        for c, split in enumerate(splits):
            ax = axes[r][c]
            grid = np.full((size, size), np.nan)
            for (a, b), value in by_place[(stage, split)].rates.items():
                grid[a, b] = value
            image = ax.imshow(grid, cmap=cmap, vmin=ZERO_BELOW, vmax=1, origin="upper")
            ticks = list(range(size)) if size <= 12 else list(range(0, size, max(1, size // 5)))
            ax.set_xticks(ticks, [str(operands[t]) for t in ticks], fontsize=6)
            ax.set_yticks(ticks, [str(operands[t]) for t in ticks], fontsize=6)
            ax.set_title(f"{stage_label(stage, lang)} · {split}", fontsize=8)
            if r == len(stages) - 1:
                ax.set_xlabel(fw["operand_b"], fontsize=7)
            if c == 0:
                ax.set_ylabel(fw["operand_a"], fontsize=7)
    fig.tight_layout(rect=(0, 0, 0.9, 1))
    bar = fig.add_axes((0.92, 0.15, 0.02, 0.7))
    fig.colorbar(image, cax=bar, extend="min").set_label(fw["share_answers"], fontsize=7)
    return Drawn(fig, "pair_success", fw["fig_heatmap"], fw["fig_heatmap_caption"].format(
        contract=describe(grids[0].contract, lang).name))


def _gap(analysis: Analysis, lang: str, split: str) -> Drawn | None:
    gaps = [g for g in analysis.hacking_gaps if g.split == split]
    if not gaps:
        return None
    plt = pyplot()
    words, fw = LABELS[lang], FIGURE_WORDS[lang]
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    _bars(ax, [stage_label(g.stage, lang) for g in gaps],
          [(words["gap"], [g.gap for g in gaps])])
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_ylabel(fw["gap_axis"])
    ax.set_title(f"{words['fig_gap']} ({split})")
    fig.tight_layout()
    return Drawn(fig, "hacking_gap", words["fig_gap"], fw["fig_gap_caption"])


def _pass_at_k(analysis: Analysis, lang: str, split: str) -> Drawn:
    plt = pyplot()
    words, fw = LABELS[lang], FIGURE_WORDS[lang]
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    for curve in analysis.pass_at_k:
        if curve.split != split:
            continue
        line, = ax.plot(curve.k, curve.mean, marker=".", label=stage_label(curve.stage, lang))
        for seed_curve in curve.per_seed:
            ax.plot(curve.k, seed_curve, color=line.get_color(), alpha=0.25, linewidth=0.7)
        if all(v is not None for v in curve.low):
            ax.fill_between(curve.k, curve.low, curve.high, alpha=0.12,
                            color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1)
    ax.set_xlabel(words["k"])
    ax.set_ylabel(fw["pass_axis"])
    ax.set_title(f"{words['fig_pass']} ({split})")
    ax.grid(alpha=0.3)
    _legend_below(fig, ax, columns=4)
    return Drawn(fig, "pass_at_k", words["fig_pass"], fw["fig_pass_caption"])


def _smoothed(ax, steps: Sequence[int], band: Band, window: int, colour: str | None,
              label: str | None):
    raw, = ax.plot(steps, band.mean, linewidth=0.6, alpha=0.35, color=colour)
    ax.fill_between(steps, band.low, band.high, alpha=0.12, color=raw.get_color())
    line, = ax.plot(steps, moving_average(band.mean, window), linewidth=1.6,
                    color=raw.get_color(), label=label)
    return line


def _dynamics(analysis: Analysis, lang: str) -> Drawn | None:
    if not analysis.dynamics:
        return None
    plt = pyplot()
    words, fw = LABELS[lang], FIGURE_WORDS[lang]
    names = list(analysis.dynamics[0].series)
    window = smoothing_window(len(analysis.dynamics[0].steps))
    cols = 5 if len(names) > 8 else 4
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.8 * cols, 2.6 * rows + 0.4),
                             squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, name in enumerate(names):
        ax = axes[index // cols][index % cols]
        for n, dyn in enumerate(analysis.dynamics):
            colour = colours[n % len(colours)]
            _smoothed(ax, dyn.steps, dyn.series[name], window, colour,
                      stage_label(dyn.arm, lang))
            # each seed's hacking onset, marked in the arm's colour on every panel: one
            # collection of the distinct steps (a line object per seed and panel held
            # matplotlib objects in proportion to the seeds, tens of MB at 1,000)
            steps = sorted({onset.onset for onset in analysis.hacking_onsets
                            if onset.arm == dyn.arm and onset.onset is not None})
            if steps:
                ax.vlines(steps, 0, 1, transform=ax.get_xaxis_transform(), colors=colour,
                          linestyles=":", linewidth=0.9)
        ax.set_title(metric_label(name, lang), fontsize=8)
        unit = "units_reward" if name.endswith("_reward") else SERIES_UNITS[name]
        ax.set_ylabel(fw[unit], fontsize=7)
        ax.set_xlabel(words["step"], fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for index in range(len(names), rows * cols):
        axes[index // cols][index % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    marked = any(o.onset is not None for o in analysis.hacking_onsets)
    fig.suptitle(words["fig_dynamics"] + (words["fig_onset_note"] if marked else ""))
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return Drawn(fig, "dynamics", words["fig_dynamics"],
                 fw["fig_dynamics_caption"].format(window=window))


def _sft_loss(analysis: Analysis, lang: str) -> Drawn:
    plt = pyplot()
    words, fw = LABELS[lang], FIGURE_WORDS[lang]
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    steps = list(range(1, len(analysis.sft_loss.mean) + 1))
    window = smoothing_window(len(steps))
    _smoothed(ax, steps, analysis.sft_loss, window, "tab:blue", None)
    ax.set_yscale("log")
    ax.set_xlabel(words["step"])
    ax.set_ylabel(fw["sft_axis"])
    ax.set_title(words["fig_sft"])
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return Drawn(fig, "sft_loss", words["fig_sft"], fw["fig_sft_caption"].format(window=window))


def draw_figures(analysis: Analysis, lang: str, split: str = "test",
                 grids: Sequence[PairGrid] = (), *, svg: bool = True) -> list[Figure]:
    """Every figure of a run, in reading order; the pair heatmap when ``grids`` are given;
    PNG only when ``svg`` is False."""
    import matplotlib

    lang, font = figure_language(lang)
    style = {"svg.hashsalt": "postlab", "font.size": 9}
    if font:
        style["font.family"] = [font]
    method = LABELS[lang]["rate_method_short"]
    drawn: list[Drawn | None] = []
    with matplotlib.rc_context(style):
        drawn.append(_outcomes(analysis, lang, split, method))
        drawn.append(_generalisation(analysis, lang, split))
        if grids:
            splits = [s for s in analysis.splits if any(g.split == s for g in grids)]
            drawn.append(heatmap_figure(grids, analysis.stages, splits, lang))
        drawn.append(_gap(analysis, lang, split))
        drawn.append(_pass_at_k(analysis, lang, split))
        drawn.append(_dynamics(analysis, lang))
        drawn.append(_sft_loss(analysis, lang))
        # saved inside the style: the SVG's hash salt is read when it is written
        return [save_figure(d.fig, d.name, d.title, d.caption, svg=svg)
                for d in drawn if d is not None]
