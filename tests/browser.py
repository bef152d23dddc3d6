"""Headless Chromium for the HTML pages: a screenshot, and what the page logged."""

from __future__ import annotations

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


needs_chromium = pytest.mark.skipif(
    chromium() is None,
    reason="Chromium is not installed (Debian package 'chromium'); .ci/run installs it when "
           "it can")


def check_page_renders(page: Path, shot: Path, height: int = 2400) -> None:
    """Render ``page`` at 1280 x ``height``: no console messages, not blank, text and figures
    drawn."""
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
