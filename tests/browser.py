"""Headless Chromium for the HTML pages: a screenshot, what the page logged, and what it
laid out.

Where Chromium was meant to be installed (``.ci/run`` sets ``POSTLAB_REQUIRE_CHROMIUM=1``
where it can install it), a missing browser fails these tests instead of skipping them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


REQUIRED = os.environ.get("POSTLAB_REQUIRE_CHROMIUM") == "1"

needs_chromium = pytest.mark.skipif(
    chromium() is None and not REQUIRED,
    reason="Chromium is not installed (Debian package 'chromium'); .ci/run installs it when "
           "it can")


def check_page_renders(page: Path, shot: Path, height: int = 2400) -> None:
    """Render ``page`` at 1280 x ``height``: no console messages, not blank, text and figures
    drawn."""
    _require()
    profile = tempfile.mkdtemp()
    try:
        done = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
             f"--window-size=1280,{height}", f"--screenshot={shot}", page.as_uri()],
            capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert shot.is_file(), done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line.upper()]
    assert console == []
    from matplotlib import image

    pixels = image.imread(str(shot))
    assert pixels.shape[0] == height and pixels.shape[1] == 1280
    assert float(pixels[..., :3].std()) > 0.05  # not a blank page
    dark = (pixels[..., :3].mean(axis=2) < 0.5).mean()
    assert dark > 0.01  # text and figures are drawn


def _require() -> None:
    if chromium() is None:
        pytest.fail("Chromium was meant to be installed (POSTLAB_REQUIRE_CHROMIUM=1) but is "
                    "missing")


#: Run in the page after it loads: every image decoded, and where the named parts lie.
_PROBE = """<script>
window.addEventListener("load", () => {
  const images = [...document.images];
  const place = (el) => el ? Math.round(el.getBoundingClientRect().top + window.scrollY) : -1;
  const parts = {};
  for (const id of ["summary", "verification", "findings", "answers"]) {
    parts[id] = place(document.getElementById(id));
  }
  for (const fig of document.querySelectorAll("figure[data-figure]")) {
    parts["figure:" + fig.dataset.figure] = place(fig);
  }
  const report = {
    images: images.length,
    decoded: images.filter((i) => i.complete && i.naturalWidth > 0 && i.width > 0).length,
    parts: parts,
    text: document.body.innerText.slice(0, 20000),
  };
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(report);
  document.body.appendChild(out);
});
</script>"""


def probe_page(page: Path, width: int = 1280, height: int = 900) -> dict:
    """Load a copy of ``page`` with a probe script: how many images decoded, where the first
    screen's parts lie (pixels from the top), and the page's visible text."""
    _require()
    probed = page.with_name(page.stem + ".probe.html")
    probed.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    profile = tempfile.mkdtemp()
    try:
        done = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "--virtual-time-budget=15000", "--dump-dom", probed.as_uri()],
            capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stderr[-2000:]
    import html

    return json.loads(html.unescape(found.group(1)))


def screenshot_without_cjk_fonts(page: Path, shot: Path, size: tuple[int, int]) -> Path:
    """Render ``page`` with a font configuration that offers only DejaVu (no CJK font), as
    on a machine that has none, whatever this one has installed."""
    _require()
    home = Path(tempfile.mkdtemp())
    try:
        fonts = home / "fonts"
        fonts.mkdir()
        for name in ("DejaVuSans.ttf",):
            found = next(Path("/usr/share/fonts").rglob(name), None)
            if found is None:
                pytest.skip(f"{name} is not installed (Debian's fonts-dejavu-core)")
            shutil.copy(found, fonts / name)
        config = home / "fonts.conf"
        config.write_text(f"""<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig><dir>{fonts}</dir><cachedir>{home / "cache"}</cachedir></fontconfig>""")
        environment = dict(os.environ, FONTCONFIG_FILE=str(config), HOME=str(home))
        done = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={home / 'profile'}", f"--window-size={size[0]},{size[1]}",
             "--virtual-time-budget=5000",  # until the embedded font has loaded
             f"--screenshot={shot}", page.as_uri()],
            capture_output=True, text=True, timeout=120, env=environment)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert shot.is_file(), done.stderr[-2000:]
    return shot
