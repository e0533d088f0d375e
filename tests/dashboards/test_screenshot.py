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


#: Appended to a copy of the page: the browser's layout, written into the DOM that ``--dump-dom`` prints.
_MEASURE = """<script>
const boxes = [...document.querySelectorAll('.table-box')];
document.body.dataset.pageOverflow = document.documentElement.scrollWidth - window.innerWidth;
document.body.dataset.boxesScrolling = boxes.filter(b => b.scrollWidth > b.clientWidth + 1).length;
document.body.dataset.boxesOverflowing = boxes.filter(b => b.getBoundingClientRect().right > window.innerWidth).length;
</script>"""


def test_numbers_have_4_decimals_and_wide_tables_scroll_in_their_own_box(built, tmp_path):
    import re

    _, page, _ = built
    text = page.read_text()
    cells = re.findall(r"<td>([^<]*)</td>", text)
    decimals = [len(m) for c in cells for m in re.findall(r"\d\.(\d+)", c)]
    assert decimals and max(decimals) == 4, sorted(set(decimals))  # metrics and interval ends at 4 decimals
    assert text.count("<table") == text.count('<div class="table-box"><table') > 0
    if not CHROMIUM.exists():
        pytest.skip("the layout check needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)")
    measured = tmp_path / "measured.html"
    measured.write_text(text.replace("</body>", _MEASURE + "</body>"))
    (tmp_path / "figures").symlink_to(page.parent / "figures")
    proc = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
        + ["--disable-background-networking", "--disable-component-update", f"--user-data-dir={tmp_path / 'p'}"]
        + ["--window-size=700,2000", "--dump-dom", measured.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", proc.stdout)
    assert body is not None, proc.stdout[:2000]
    layout = dict(re.findall(r'data-([a-z-]+)="(-?\d+)"', body.group(1)))
    # At 700 px the wide tables scroll inside their boxes, and neither a box nor the page runs off the screen.
    assert int(layout["boxes-scrolling"]) > 0 and int(layout["boxes-overflowing"]) == 0, layout
    assert int(layout["page-overflow"]) <= 0, layout
