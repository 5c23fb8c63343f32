"""Debian's Chromium for the browser tests (Playwright drives it; a browser build of its own is never downloaded)."""

from __future__ import annotations

import shutil
from pathlib import Path

# Debian's package installs /usr/bin/chromium; other systems name it chromium-browser. First found wins.
CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
# Headless as root on a machine with no network: no sandbox, no GPU, and none of Chromium's own connections
# (they are refused here, many at a time, and slow every start).
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
MISSING = f"no Chromium ({', '.join(CANDIDATES)}): scripts/bootstrap.sh test installs Debian's chromium"


def find_chromium() -> Path | None:
    """The Chromium binary: /usr/bin/chromium, else `chromium` or `chromium-browser` on PATH."""
    for candidate in CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return Path(found)
    return None


def launch(playwright, **options):
    """A headless Chromium browser from Playwright; a clear error when Chromium is not installed."""
    found = find_chromium()
    if found is None:
        raise RuntimeError(MISSING)
    return playwright.chromium.launch(executable_path=str(found), headless=True, args=ARGS, **options)
