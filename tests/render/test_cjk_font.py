"""Chinese pages and figures read on a machine without a CJK font: postlab ships a subset of
Noto Sans CJK SC holding every character its own words use, embeds it in Chinese pages and
draws Chinese figures with it where the system has no CJK font."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import needs_chromium, screenshot_without_cjk_fonts

ROOT = Path(__file__).resolve().parents[2]


def _source_characters() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "src" / "postlab").rglob("*.py"):
        found |= {c for c in path.read_text(encoding="utf-8")
                  if "\u3000" <= c <= "\u9fff" or "\uff00" <= c <= "\uffef"}
    return found


def test_the_subset_holds_every_cjk_character_postlab_writes():
    """Adding a Chinese label with a new character fails here until
    scripts/make-cjk-subset.py is run again."""
    from fontTools.ttLib import TTFont

    from postlab.render.figures import SHIPPED_CJK_FAMILY, shipped_cjk_font

    font = TTFont(shipped_cjk_font())
    cmap = font.getBestCmap()
    missing = sorted(c for c in _source_characters() if ord(c) not in cmap)
    assert missing == [], f"run scripts/make-cjk-subset.py: {''.join(missing)}"
    assert font["name"].getDebugName(1) == SHIPPED_CJK_FAMILY  # renamed: no reserved name
    assert "Open Font License" in font["name"].getDebugName(13)
    assert (shipped_cjk_font().parent / "OFL.txt").read_text().count("SIL OPEN FONT") == 1


def test_chinese_figures_fall_back_to_the_shipped_font(monkeypatch):
    pytest.importorskip("matplotlib")
    from postlab.render import figures

    monkeypatch.setattr(figures, "_system_cjk_font", lambda: None)
    assert figures.figure_language("zh") == ("zh", figures.SHIPPED_CJK_FAMILY)
    from matplotlib import font_manager

    found = font_manager.findfont(figures.SHIPPED_CJK_FAMILY, fallback_to_default=False)
    assert Path(found).name == "postlab-cjk-subset.otf"


def _page(folder: Path, name: str, text: str, lang: str) -> Path:
    from postlab.render.html import page_start

    path = folder / f"{name}.html"
    body = f'<p style="font-size:96px;margin:0">{text}</p></body></html>'
    path.write_text("\n".join(page_start(lang, "·")) + body, encoding="utf-8")
    return path


@needs_chromium
def test_a_chinese_page_reads_in_chromium_without_cjk_fonts(tmp_path):
    """Two different Chinese words, each drawn by Chromium offered no CJK font: without the
    shipped font both come out as the same empty boxes (the control), with it they differ."""
    from matplotlib import image

    def drawn(name: str, text: str, lang: str):
        page = _page(tmp_path, name, text, lang)
        shot = screenshot_without_cjk_fonts(page, tmp_path / f"{name}.png", (600, 300))
        return image.imread(str(shot))[..., :3]

    first, second = drawn("zh-a", "预注册假设", "zh"), drawn("zh-b", "训练前核验", "zh")
    plain_a, plain_b = drawn("en-a", "预注册假设", "en"), drawn("en-b", "训练前核验", "en")
    assert (plain_a == plain_b).all(), "Chromium found a CJK font: the control is void"
    assert (first != second).any(), "the shipped font did not draw the Chinese words"
    assert (first != plain_a).any()
