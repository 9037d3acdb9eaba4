"""Headless Chromium for the dashboard tests, through playwright (no browser download:
Debian's /usr/bin/chromium).

Without chromium or playwright these tests FAIL, saying how to install them, so that the
README's test command never passes while silently leaving the dashboard untested. Set
``LDPKIT_SKIP_BROWSER=1`` to skip them on purpose; ``LDPKIT_REQUIRE_BROWSER=1`` (CI)
makes them fail even then.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Mapping
from typing import Any, Literal

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def browser_problem(
    environ: Mapping[str, str], chromium: str = CHROMIUM
) -> tuple[Literal["fail", "skip"] | None, str]:
    """(None, "") when the browser tests can run; else whether to fail or skip, and why."""
    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install -e '.[dev]')")
    if not os.path.exists(chromium):
        missing.append("chromium (apt-get install chromium)")
    if not missing:
        return None, ""
    what = " and ".join(missing)
    if environ.get("LDPKIT_SKIP_BROWSER") == "1" and environ.get("LDPKIT_REQUIRE_BROWSER") != "1":
        return "skip", f"dashboard tests skipped as asked (LDPKIT_SKIP_BROWSER=1): no {what}"
    return "fail", (
        f"the dashboard tests need {what}; install it, or set LDPKIT_SKIP_BROWSER=1 to "
        "skip them on purpose"
    )


def require_browser() -> Any:
    """playwright's sync_playwright, or fail/skip as :func:`browser_problem` says."""
    verdict, reason = browser_problem(os.environ)
    if verdict == "fail":
        pytest.fail(reason, pytrace=False)
    if verdict == "skip":
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    return sync_playwright
