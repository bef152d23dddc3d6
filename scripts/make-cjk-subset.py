"""Write the CJK font subset postlab ships, so Chinese pages and figures read on a machine
without a CJK font.

    python scripts/make-cjk-subset.py [SOURCE.ttc]     (default: Debian's fonts-noto-cjk)

The subset holds the glyphs of every character postlab's own source writes (its Chinese
labels, punctuation and symbols) and printable ASCII, from Noto Sans CJK SC Regular (SIL Open
Font License 1.1). A subset is a modified version under that licence, so it is renamed
(``postlab CJK subset``: no reserved name) and its copyright and licence strings are kept;
the licence text ships beside it as OFL.txt. ``tests/render/test_cjk_font.py`` fails when a
label uses a character the subset lacks: run this again then.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fontTools import subset
from fontTools.ttLib import TTCollection

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
TARGET = ROOT / "src" / "postlab" / "data" / "fonts" / "postlab-cjk-subset.otf"
FAMILY = "postlab CJK subset"
SIMPLIFIED_CHINESE = 2  # the collection's Noto Sans CJK SC


def characters() -> set[str]:
    """Printable ASCII and every other character in postlab's source files."""
    found = {chr(code) for code in range(0x20, 0x7F)}
    for path in (ROOT / "src" / "postlab").rglob("*.py"):
        found |= {c for c in path.read_text(encoding="utf-8") if ord(c) > 0x7F}
    return found


def main() -> None:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else SOURCE
    font = TTCollection(source).fonts[SIMPLIFIED_CHINESE]
    cmap = font.getBestCmap()
    wanted = sorted(ord(c) for c in characters() if ord(c) in cmap)
    options = subset.Options()
    options.name_IDs = ["*"]
    options.hinting = False
    options.desubroutinize = True
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=wanted)
    subsetter.subset(font)
    names = font["name"]
    for record in list(names.names):
        if record.nameID in (1, 16):
            names.setName(FAMILY, record.nameID, record.platformID, record.platEncID,
                          record.langID)
        elif record.nameID in (3, 4):
            names.setName(f"{FAMILY} Regular", record.nameID, record.platformID,
                          record.platEncID, record.langID)
        elif record.nameID == 6:
            names.setName("postlabCJKsubset-Regular", record.nameID, record.platformID,
                          record.platEncID, record.langID)
    if "CFF " in font:
        font["CFF "].cff.fontNames = ["postlabCJKsubset-Regular"]
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    font.save(TARGET)
    print(f"wrote {TARGET} ({TARGET.stat().st_size} bytes, {len(wanted)} characters)")


if __name__ == "__main__":
    main()
