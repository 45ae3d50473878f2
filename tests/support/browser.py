"""A real headless Chromium (Debian's `chromium`) driven by Playwright; never a downloaded one.

Without the browser or the playwright package the browser tests skip and say why; with
CI=true that is a failure instead, so CI cannot pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM_ENV = "KANBAN_CHROMIUM"
CANDIDATES = ("chromium", "chromium-browser", "/usr/bin/chromium")


def chromium_path() -> str | None:
    """KANBAN_CHROMIUM, else Debian's chromium on PATH."""
    explicit = os.environ.get(CHROMIUM_ENV)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser tests cannot run under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A launched headless Chromium browser (Playwright's sync API).

    Per module: Playwright's sync API keeps an event loop running on this thread while
    it is open, and asyncio.run() elsewhere in the suite must find none."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install -e '.[test]')")
    path = chromium_path()
    if path is None:
        unavailable("no chromium executable: install Debian's `chromium` (make test does, as "
                    f"root) or point {CHROMIUM_ENV} at one")
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=path, headless=True)
        except Error as exc:
            unavailable(f"chromium at {path} did not start: {str(exc).splitlines()[0]}")
        try:
            yield browser
        finally:
            browser.close()
