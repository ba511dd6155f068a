"""Headless Chromium for the tests that check an HTML report renders: found once, run one way."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def chromium() -> str:
    """The browser's path; the test is skipped where there is none, and fails in CI, which installs it."""
    found = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have chromium (installed by .ci/run)")
        pytest.skip("no chromium on this machine")
    return found


def headless(browser: str, work: Path, page: Path, *options: str, width: int = 1280) -> str:
    """Open ``page`` in a ``width`` x 1,400 window with ``options`` (--screenshot=..., --dump-dom); its stdout."""
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", "--no-first-run",
                           f"--user-data-dir={work / 'profile'}", f"--window-size={width},1400", *options, page.as_uri()],
                          check=True, capture_output=True, timeout=120, text=True).stdout
