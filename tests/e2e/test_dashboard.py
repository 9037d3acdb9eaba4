"""The dashboard in a real headless browser against a running collector with data.

Needs Debian's chromium (/usr/bin/chromium) and the playwright package (dev extra);
.ci/run installs both and sets LDPKIT_REQUIRE_BROWSER=1 so that they cannot be skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import READ, Populated

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


def _require_browser() -> Any:
    reason = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        reason = "playwright is not installed (pip install -e '.[dev]')"
    if reason is None and not os.path.exists(CHROMIUM):
        reason = "chromium is not installed (apt-get install chromium)"
    if reason is not None:
        if os.environ.get("LDPKIT_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser tests are required here but {reason}")
        pytest.skip(f"{reason}; set up both to run the dashboard tests")
    return sync_playwright


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_playwright = _require_browser()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _api(url: str, path: str) -> dict[str, Any]:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {READ}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        data: dict[str, Any] = json.load(response)
    return data


def test_bars_and_whiskers_show_the_api_values(browser: Any, populated: Populated) -> None:
    page = browser.new_page(viewport={"width": 1100, "height": 800})
    page.goto(populated.url + "/ui")
    page.fill("#token", READ)
    page.click("#token-form button")
    page.click("button[data-metric=theme]")
    page.wait_for_selector("#bars rect.bar")
    expected = _api(populated.url, "/v1/estimates/theme?level=0.95")
    bars = page.eval_on_selector_all(
        "rect.bar", "els => els.map(e => [e.dataset.category, Number(e.dataset.estimate)])"
    )
    whiskers = page.eval_on_selector_all(
        "line.whisker",
        "els => els.map(e => [e.dataset.category, Number(e.dataset.low), Number(e.dataset.high)])",
    )
    assert bars == [[i["category"], pytest.approx(i["estimate"])] for i in expected["items"]]
    assert whiskers == [
        [i["category"], pytest.approx(i["low"]), pytest.approx(i["high"])]
        for i in expected["items"]
    ]
    assert page.text_content("#n") == f"n = {expected['n']}"
    assert expected["mechanism"] in (page.text_content("#mechanism") or "")
    # The bars are drawn to scale: taller bar for the larger estimate.
    heights = page.eval_on_selector_all(
        "rect.bar", "els => els.map(e => Number(e.getAttribute('height')))"
    )
    order = sorted(range(3), key=lambda k: expected["items"][k]["estimate"])
    assert heights[order[0]] <= heights[order[1]] <= heights[order[2]]
    page.screenshot(path=str(populated.directory / "dashboard-theme.png"))

    # Consistent estimates appear beside the unbiased ones when asked.
    page.check("#consistent")
    page.wait_for_selector("line.consistent-mark", state="attached")
    marks = page.eval_on_selector_all(
        "line.consistent-mark", "els => els.map(e => Number(e.dataset.consistent))"
    )
    assert sum(marks) == pytest.approx(1.0)
    page.close()


def test_numeric_metric_shows_mean_with_interval(browser: Any, populated: Populated) -> None:
    page = browser.new_page()
    page.goto(populated.url + "/ui/")
    page.fill("#token", READ)
    page.click("#token-form button")
    page.click("button[data-metric=session_minutes]")
    page.wait_for_selector("#mean circle.point")
    expected = _api(populated.url, "/v1/estimates/session_minutes")
    mean = page.get_attribute("#mean circle.point", "data-mean")
    low = page.get_attribute("#mean line.whisker", "data-low")
    high = page.get_attribute("#mean line.whisker", "data-high")
    assert float(mean or "nan") == pytest.approx(expected["mean"])
    assert float(low or "nan") == pytest.approx(expected["low"])
    assert float(high or "nan") == pytest.approx(expected["high"])
    # Over time: one bucket of data, drawn as a point with a whisker per category.
    page.check("#over-time")
    page.wait_for_selector("#over-time-chart")
    page.close()


def test_bad_token_shows_a_clear_message(browser: Any, populated: Populated) -> None:
    page = browser.new_page()
    page.goto(populated.url + "/ui/")
    page.fill("#token", "not-a-token")
    page.click("#token-form button")
    page.wait_for_selector("#message.error:not([hidden])")  # not the initial hint
    message = page.text_content("#message") or ""
    assert "refused" in message and "401" in message
    assert page.is_hidden("#main")
    page.close()
