"""The HTML report in a real headless browser, offline; skipped where no Chromium is installed."""

from __future__ import annotations

import shutil
import subprocess

import matplotlib.image
import numpy as np
import pytest
from dpsql.engine.display import number
from dpsql.engine.report.build import build_report
from dpsql.engine.report.render import render_html

from tests.test_report import write_ledger

BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(name)), None)

pytestmark = pytest.mark.skipif(BROWSER is None, reason="no headless Chromium installed")


def _chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium with every host name unresolvable, so the page must be self-contained."""
    return subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1300,1800", *args],
        capture_output=True, text=True, timeout=120, check=True,
    )


def test_browser_shows_the_totals_and_draws_the_embedded_plot(tmp_path):
    report = build_report(write_ledger(tmp_path / "l.sqlite", [("a", 0.5, "auto"), ("b", 0.5, "auto")]))
    page = tmp_path / "report.html"
    page.write_text(render_html(report), encoding="utf-8")
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    level = number(report.totals.transcript_level)
    assert 'data-key="transcript_level"' in dom and f"<td>{level}</td>" in dom
    shot = tmp_path / "shot.png"
    _chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    pixels = matplotlib.image.imread(shot)[..., :3]
    plot_blue = np.array([0x1F, 0x4E, 0x9C]) / 255
    assert (np.abs(pixels - plot_blue).max(axis=-1) < 0.06).sum() > 500, "the embedded plot was not drawn"
