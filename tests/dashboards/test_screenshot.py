"""The page renders in a real browser: headless Chromium screenshots it and the picture is not blank."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = Path("/usr/bin/chromium")


def screenshot(
    page: Path, png: Path, profile: Path, width: int = 1400, height: int = 2400
) -> subprocess.CompletedProcess:
    """Headless Chromium with no network side channels and a fresh profile; writes ``png``."""
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={png}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)"
)
def test_page_renders_non_blank_in_headless_chromium(built, tmp_path):
    from matplotlib.image import imread

    _, page, _ = built
    png = tmp_path / "shot.png"
    proc = screenshot(page, png, tmp_path / "profile")
    assert proc.returncode == 0 and png.is_file(), proc.stderr[-2000:]
    pixels = imread(png)[..., :3]
    assert pixels.shape[:2] == (2400, 1400)
    # Not blank: many colours, and neither one flat colour nor mostly background.
    colours = np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 500 and pixels.std() > 0.05
    # The header band is the page's dark blue, i.e. the CSS was applied, and the figures were decoded:
    # the leaderboard table and the robustness plot sit in the first screen.
    assert np.allclose(pixels[10, 700], np.array([0x1F, 0x3A, 0x5F]) / 255, atol=0.02)
    non_background = (np.abs(pixels - pixels[5, 5]).sum(axis=2) > 0.1).mean()
    assert non_background > 0.5
