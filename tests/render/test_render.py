"""Renderers over one computed analysis: JSON stability, tables, figures, HTML, plot."""

import json
import re
import shutil
from pathlib import Path

import pytest
from browser import check_page_renders, needs_chromium

from postlab.analysis.aggregate import analyse
from postlab.cli import main
from postlab.plan.frozen import teaching_plan_loaded
from postlab.render import figures as figures_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bundled_analysis():
    from postlab.records.record import bundled_record_path, load_record

    return analyse(load_record(bundled_record_path()), teaching_plan_loaded().model)


def _keys(value, prefix=""):
    """Every key path in a JSON value, lists collapsed to []."""
    found = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else key
            found.add(path)
            found |= _keys(item, path)
    elif isinstance(value, list) and value:
        found |= _keys(value[0], prefix + "[]")
    return found


EXPECTED_KEYS = {
    "schema", "plan_sha256", "seeds", "stages", "arms", "splits", "eval_samples",
    "interval_method", "band_method", "outcomes", "hacking_gaps", "pass_at_k", "dynamics",
    "sft_loss", "outcomes[].stage", "outcomes[].split", "outcomes[].decoding",
    "outcomes[].metric", "outcomes[].value", "outcomes[].change_from_sft",
    "hacking_gaps[].stage", "hacking_gaps[].split", "hacking_gaps[].gap",
    "pass_at_k[].stage", "pass_at_k[].split", "pass_at_k[].k", "pass_at_k[].per_seed",
    "pass_at_k[].mean", "pass_at_k[].low", "pass_at_k[].high", "dynamics[].arm",
    "dynamics[].steps", "dynamics[].series", "sft_loss.mean", "sft_loss.low", "sft_loss.high",
    "training_rewards", "training_rewards[].arm", "training_rewards[].contract",
    "training_rewards[].steps", "training_rewards[].reward", "training_rewards[].reference",
}


def test_json_schema_is_stable_and_documented(capsys):
    assert main(["report", "--format", "json"]) == 0
    first = capsys.readouterr().out
    data = json.loads(first)
    assert data["schema"] == "postlab.analysis.aggregate/1"
    keys = _keys(data)
    assert keys >= EXPECTED_KEYS
    assert {"mean", "low", "high", "per_seed"} == set(data["outcomes"][0]["value"])
    series = set(data["dynamics"][0]["series"])
    assert series == {"strict_reward", "substring_reward", "zero_variance_groups", "kl",
                      "entropy", "ratio_outside_clip", "gradient_norm_before_clip", "loss",
                      "mean_tokens", "truncated"}
    doc = (ROOT / "docs" / "report-json.md").read_text()
    for key in EXPECTED_KEYS | series:
        assert f"`{key}`" in doc, key
    assert main(["report", "--format", "json"]) == 0
    assert capsys.readouterr().out == first  # deterministic


def test_markdown_and_table(capsys):
    assert main(["report", "--format", "markdown", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "## Results by stage (test split)" in out
    assert "| RL under substring | sampled | coverage |" in out
    assert "pass@16" in out and "seeds x questions, two-way random effects" in out
    assert main(["report", "--format", "table", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert "奖励投机差距" in out and "pass@16" in out


def test_every_figure_has_data_labels_and_one_legend(bundled_analysis, monkeypatch):
    from postlab.analysis.samples import pair_grids
    from postlab.records.record import bundled_record_path, load_record

    captured = []
    real_save = figures_module.save_figure

    def spy(fig, name, title, caption="", **options):
        captured.append((name, fig))
        legends = len(fig.legends) + sum(ax.get_legend() is not None for ax in fig.axes)
        assert legends <= 1, f"{name}: {legends} legends"
        assert caption, f"{name}: no caption saying how it was drawn"
        for ax in fig.axes:
            if not ax.axison or ax.get_label() == "<colorbar>":
                continue
            drawn = [line for line in ax.get_lines() if len(line.get_xdata())]
            # bars (a colorbar's extension triangle is a path, not a bar)
            drawn += [p for p in ax.patches if hasattr(p, "get_height") and p.get_height() != 0]
            drawn += [c for c in ax.collections if len(c.get_paths())]
            drawn += ax.images
            assert drawn, f"{name}: an axis without data"
            if name != "pair_success":  # its panels share the row's and column's labels
                assert ax.get_ylabel(), f"{name}: an axis without a y label"
        return real_save(fig, name, title, caption, **options)

    monkeypatch.setattr(figures_module, "save_figure", spy)
    record = load_record(bundled_record_path())
    grids = pair_grids(record, teaching_plan_loaded().model)
    result = figures_module.draw_figures(bundled_analysis, "en", grids=grids)
    assert [f.name for f in result] == ["outcomes", "generalisation", "pair_success",
                                        "hacking_gap", "pass_at_k", "dynamics", "sft_loss"]
    assert set(figures_module.FIGURE_NAMES) == {f.name for f in result}
    for figure in result:
        assert figure.png.startswith(b"\x89PNG") and len(figure.png) > 5000
        assert b"<svg" in figure.svg
    # every rate axis stays within [0, 1]
    for name, fig in captured:
        if name in ("outcomes", "generalisation", "pass_at_k"):
            low, high = fig.axes[0].get_ylim()
            assert low >= 0 and high <= 1, name


def test_a_png_only_figure_has_the_same_png_and_no_svg():
    """The HTML pages ask for PNG alone; the PNG is the one a plot writes beside its SVG."""
    plt = figures_module.pyplot()
    pngs = []
    for svg in (True, False):
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.plot([0, 1, 2], [0.2, 0.5, 0.4], label="a")
        ax.legend()
        saved = figures_module.save_figure(fig, "f", "F", "caption", svg=svg)
        assert (saved.svg is not None) == svg and not plt.fignum_exists(fig.number)
        pngs.append(saved.png)
    assert pngs[0] == pngs[1] and pngs[0].startswith(b"\x89PNG")


def test_chinese_figures_fall_back_without_a_cjk_font(bundled_analysis, monkeypatch, tmp_path):
    """No system CJK font: the shipped subset; not even that (a damaged install): English."""
    monkeypatch.setattr(figures_module, "CJK_FONTS", ("No Such Font",))
    assert figures_module.figure_language("zh") == ("zh", figures_module.SHIPPED_CJK_FAMILY)
    monkeypatch.setattr(figures_module, "shipped_cjk_font", lambda: tmp_path / "none.otf")
    assert figures_module.figure_language("zh") == ("en", None)
    assert figures_module.figure_language("en") == ("en", None)


def test_plot_writes_png_and_svg(tmp_path, capsys):
    out = tmp_path / "figures"
    assert main(["plot", "--out-dir", str(out), "--lang", "en"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"{n}.{ext}" for n in ("outcomes", "generalisation", "pair_success",
                                                   "hacking_gap", "pass_at_k", "dynamics",
                                                   "sft_loss")
                           for ext in ("png", "svg"))
    assert main(["plot", "--out-dir", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["plot"]) == 2


def test_plot_defaults_to_the_run_folder(tmp_path, capsys):
    from postlab.records.record import bundled_run_dir

    run = tmp_path / "run"
    shutil.copytree(bundled_run_dir(), run)
    assert main(["plot", str(run), "--lang", "en"]) == 0
    assert (run / "figures" / "pass_at_k.png").is_file()


def test_html_is_self_contained(tmp_path, capsys):
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page), "--lang", "en"]) == 0
    text = page.read_text()
    assert text.count("<img") == 7 and text.count("data:image/png;base64,") == 7
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", text)
    assert "http://" not in text and "https://" not in text
    assert "Reward hacking gap" in text and "pass@16" in text
    before = page.read_bytes()
    assert main(["report", "--html", str(page)]) == 2
    assert page.read_bytes() == before


@needs_chromium
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_html_renders_in_headless_chromium(tmp_path, capsys, lang):
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page), "--lang", lang]) == 0
    check_page_renders(page, tmp_path / "shot.png")


def test_a_heatmap_tells_a_small_share_from_none():
    """Exactly 0 is drawn below the scale (white), so the darkest shade, one right answer in
    dozens, cannot be taken for it; a pair outside the split is grey."""
    pytest.importorskip("matplotlib")
    import numpy as np

    from postlab.analysis.samples import PairGrid
    from postlab.render.figures import heatmap_figure

    grid = PairGrid(stage="initial", split="test", decoding="sampled", contract="strict",
                    rates={(0, 0): 0.0, (0, 1): 0.02, (1, 0): 1.0}, operands=(0, 1))
    drawn = heatmap_figure([grid], ["initial"], ["test"], "en")
    image = drawn.fig.axes[0].images[0]  # type: ignore[attr-defined]
    zero, small, missing = image.to_rgba(np.ma.masked_invalid([0.0, 0.02, np.nan]))
    assert tuple(zero[:3]) == (1.0, 1.0, 1.0)
    assert sum(abs(a - b) for a, b in zip(zero[:3], small[:3], strict=True)) > 1.5
    assert tuple(round(v, 3) for v in missing[:3]) == (0.867, 0.867, 0.867)
