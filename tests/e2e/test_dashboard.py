"""The dashboard in a real headless browser against a running collector with data.

What is drawn is compared with the API's answer by inverting the figure's own scales
(so a bar drawn at the wrong height fails), and what a person needs to read is checked:
axis tick labels, legend entries in the colours of their series, nothing clipped or
overflowing at 1400 and at 420 px wide. Screenshots go to $LDPKIT_SCREENSHOTS (default:
the test's temporary folder) to be looked at.

Needs Debian's chromium (/usr/bin/chromium) and the playwright package (dev extra):
without them these tests fail with instructions unless LDPKIT_SKIP_BROWSER=1 (see
browser.py); .ci/run installs both.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .board import COUNTRIES, DAYS, NEW_OS, OLD_OS, OS, PER_DAY, Board, board_collector
from .conftest import READ, THEMES

WIDTHS = (1400, 420)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Board]:
    yield from board_collector(tmp_path_factory.mktemp("board"))


def _api(url: str, path: str) -> dict[str, Any]:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {READ}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        data: dict[str, Any] = json.load(response)
    return data


def _open(browser: Any, board: Board, width: int, metric: str) -> Any:
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(board.url + "/ui/")
    page.fill("#token", READ)
    page.click("#token-form button")
    page.click(f"button[data-metric={metric}]")
    _drawn(page, metric)
    page.errors = errors
    return page


def _drawn(page: Any, metric: str, view: str | None = None) -> None:
    """Wait until the page has drawn ``metric`` (with ``view``) for its current query."""
    page.wait_for_function(
        "([m, v]) => window.ldpkitDashboard.data && window.ldpkitDashboard.data.metric === m"
        " && (v === null || window.ldpkitDashboard.view === v)",
        arg=[metric, view],
    )


# In the page: where an element is drawn, in its figure's coordinates (whatever
# transforms Plot applied), so it can be read back through the figure's own scales.
USER_BOX = """
  const userBox = (el) => {
    const svg = el.ownerSVGElement, s = svg.getBoundingClientRect(), r = el.getBoundingClientRect();
    const k = s.width / svg.viewBox.baseVal.width;
    const box = { left: (r.left - s.left) / k, right: (r.right - s.left) / k,
                  top: (r.top - s.top) / k, bottom: (r.bottom - s.top) / k };
    box.cx = (box.left + box.right) / 2;
    box.cy = (box.top + box.bottom) / 2;
    return box;
  };
"""

READ_BARS = (
    """() => {"""
    + USER_BOX
    + """
  const fig = window.ldpkitDashboard.figures[0];
  const y = fig.scale("y"), x = fig.scale("x");
  const cat = (el) =>
    x.domain.find((c) => Math.abs(x.apply(c) + x.bandwidth / 2 - userBox(el).cx) < 2);
  return {
    unit: (y.domain[1] - y.domain[0]) / (y.range[0] - y.range[1]),
    bars: [...fig.querySelectorAll("g.estimate-bars rect")].map((r) =>
      [cat(r), y.invert(userBox(r).top)]),
    whiskers: [...fig.querySelectorAll("g.whiskers line")].map((l) =>
      [cat(l), y.invert(userBox(l).bottom), y.invert(userBox(l).top)]),
    consistent: [...fig.querySelectorAll("g.consistent-marks line")].map((l) =>
      y.invert(userBox(l).cy)),
  };
}"""
)

READABLE = """(root) => {
  // What a person needs to read: tick labels on both axes, and nothing clipped.
  const out = { problems: [], yTicks: 0, xTicks: 0 };
  const vw = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth > vw + 1)
    out.problems.push(
      `the page is ${document.documentElement.scrollWidth}px wide in a ${vw}px window`);
  for (const svg of document.querySelectorAll(root + " svg")) {
    const box = svg.getBoundingClientRect();
    if (box.width < 8) continue;  // a legend swatch
    if (box.left < -0.5 || box.right > vw + 0.5)
      out.problems.push(`a chart spans ${box.left}..${box.right} in a ${vw}px window`);
    for (const t of svg.querySelectorAll("text")) {
      const r = t.getBoundingClientRect();
      if (!r.width) continue;
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5
          || r.bottom > box.bottom + 0.5 || r.right > vw + 0.5 || r.left < -0.5)
        out.problems.push(
          `text "${t.textContent}" is cut off (${Math.round(r.left)}..${Math.round(r.right)})`);
    }
    out.yTicks += svg.querySelectorAll('g[aria-label="y-axis tick label"] text').length;
    out.xTicks += svg.querySelectorAll('g[aria-label="x-axis tick label"] text').length;
  }
  for (const e of document.querySelectorAll(root + " .key span, " + root + " figure > div span")) {
    const r = e.getBoundingClientRect();
    if (r.right > vw + 0.5) out.problems.push(`legend entry "${e.textContent}" is cut off`);
  }
  return out;
}"""


def _readable(page: Any) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(READABLE, "#chart")
    assert not result["problems"], result["problems"]
    return result


# --- bars with whiskers -----------------------------------------------------------------
@pytest.mark.parametrize("width", WIDTHS)
def test_bars_and_whiskers_show_the_api_values(
    browser: Any, board: Board, shots: Path, width: int
) -> None:
    page = _open(browser, board, width, "theme")
    expected = _api(board.url, "/v1/estimates/theme?level=0.95")
    drawn = page.evaluate(READ_BARS)
    tolerance = 1.5 * drawn["unit"]  # a pixel and a half
    assert [c for c, _ in drawn["bars"]] == THEMES
    for (category, value), item in zip(drawn["bars"], expected["items"], strict=True):
        assert category == item["category"]
        assert value == pytest.approx(item["estimate"], abs=tolerance)
    assert [c for c, *_ in drawn["whiskers"]] == THEMES
    for (_, low, high), item in zip(drawn["whiskers"], expected["items"], strict=True):
        assert low == pytest.approx(item["low"], abs=tolerance)
        assert high == pytest.approx(item["high"], abs=tolerance)
    assert page.text_content("#n") == f"n = {expected['n']}" == f"n = {DAYS * PER_DAY}"
    assert expected["mechanism"] in (page.text_content("#mechanism") or "")
    readable = _readable(page)
    assert readable["yTicks"] >= 4
    assert readable["xTicks"] == len(THEMES)
    assert "fraction of users" in (page.text_content("#chart") or "")
    page.screenshot(path=str(shots / f"theme-bars-{width}.png"), full_page=True)

    # Consistent estimates appear beside the unbiased ones when asked.
    page.check("#consistent")
    page.wait_for_function("window.ldpkitDashboard.data.consistent === true")
    marks = page.evaluate(READ_BARS)["consistent"]
    consistent = _api(board.url, "/v1/estimates/theme?consistent=true")["items"]
    assert marks == pytest.approx([i["consistent"] for i in consistent], abs=tolerance)
    assert sum(marks) == pytest.approx(1.0, abs=3 * tolerance)
    assert not page.errors
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_most_common_and_its_set_are_marked(
    browser: Any, board: Board, shots: Path, width: int
) -> None:
    """The line names the API's mode and set; the set's bars are dark, the others light."""
    page = _open(browser, board, width, "theme")
    common = _api(board.url, "/v1/estimates/theme?level=0.95")["most_common"]
    others = common["set"][1:]
    tail = f"or {', '.join(others)} at" if others else "alone at"
    assert page.text_content("#most-common") == f"most common: {common['mode']} ({tail} 95%)"
    ranks = page.text_content("#ranks") or ""
    for r in common["ranks"]:
        assert f"{r['category']} {r['rank']} [{r['low']}, {r['high']}]" in ranks
    fills = page.evaluate(
        "() => [...window.ldpkitDashboard.figures[0].querySelectorAll('g.estimate-bars rect')]"
        ".map((r) => r.getAttribute('fill'))"
    )
    dark = {c for c, f in zip(THEMES, fills, strict=True) if f == "#4C78A8"}
    assert dark == set(common["set"]) and len(set(fills)) == (2 if len(dark) < 3 else 1)
    _readable(page)
    page.screenshot(path=str(shots / f"theme-most-common-{width}.png"), full_page=True)
    assert not page.errors
    page.close()


# --- the mean of a numeric metric -------------------------------------------------------
@pytest.mark.parametrize("width", WIDTHS)
def test_numeric_mean_with_its_interval_at_a_readable_size(
    browser: Any, board: Board, shots: Path, width: int
) -> None:
    page = _open(browser, board, width, "session_minutes")
    expected = _api(board.url, "/v1/estimates/session_minutes")
    strips = page.evaluate(
        "() => {"
        + USER_BOX
        + """return window.ldpkitDashboard.figures.map((fig) => {
          const x = fig.scale("x");
          const dot = userBox(fig.querySelector("g.mean-dot circle"));
          const rule = userBox(fig.querySelector("g.interval line"));
          return {
            domain: x.domain, range: x.range,
            mean: x.invert(dot.cx), low: x.invert(rule.left), high: x.invert(rule.right),
            ruleWidth: rule.right - rule.left,
            ticks: [...fig.querySelectorAll('g[aria-label="x-axis tick label"] text')]
              .map((t) => t.textContent),
          };
        })}"""
    )
    assert len(strips) == 2
    bounds, zoom = strips
    assert bounds["domain"] == [0, 240]  # the metric's bounds axis
    assert bounds["ticks"][0] == "0" and bounds["ticks"][-1] == "240"
    for strip in strips:
        unit = (strip["domain"][1] - strip["domain"][0]) / (strip["range"][1] - strip["range"][0])
        for key in ("mean", "low", "high"):
            assert strip[key] == pytest.approx(expected[key], abs=1.5 * unit), key
    # Readable: the zoomed interval spans about half the chart, however narrow it is.
    plot_width = zoom["range"][1] - zoom["range"][0]
    assert zoom["ruleWidth"] >= 0.4 * plot_width
    size = page.evaluate(
        "parseFloat(getComputedStyle(document.querySelector('#mean-value')).fontSize)"
    )
    assert size >= 18
    text = page.text_content("#mean-value") or ""
    assert f"{expected['mean']:.3f}" in text and f"{expected['high']:.3f}" in text
    _readable(page)
    page.screenshot(path=str(shots / f"minutes-mean-{width}.png"), full_page=True)
    assert not page.errors
    page.close()


# --- the forgery shift beside each interval; a mean beyond its bounds (issue 26) -----------
READ_SPEND = (
    "() => {"
    + USER_BOX
    + """const fig = window.ldpkitDashboard.figures[0], x = fig.scale("x");
    const rule = userBox(fig.querySelector("g.interval line"));
    return { low: x.invert(rule.left), high: x.invert(rule.right),
      bounds: [...fig.querySelectorAll("g.bounds line")].map((l) => x.invert(userBox(l).cx)),
      unit: (x.domain[1] - x.domain[0]) / (x.range[1] - x.range[0]) };
  }"""
)
CELLS = "(rows) => rows.map((r) => [...r.children].map((c) => c.textContent))"


@pytest.mark.parametrize("width", WIDTHS)
def test_forgery_shift_beside_the_interval_and_a_mean_beyond_its_bounds(
    browser: Any, board: Board, shots: Path, width: int
) -> None:
    page = _open(browser, board, width, "theme")
    expected = _api(board.url, "/v1/estimates/theme")
    assert (page.text_content("#forgery-fraction") or "") == (
        "forgery shift: how far 1% forged reports could move each estimate"
    )
    head, *rows = page.eval_on_selector_all("#table tr", CELLS)
    assert head == ["category", "estimate", "stderr", "low", "high", "forgery shift"]
    assert [r[5] for r in rows] == [f"{i['forgery_shift']:.4f}" for i in expected["items"]]
    page.screenshot(path=str(shots / f"theme-shift-{width}.png"), full_page=True)

    page.click("button[data-metric=spend]")
    _drawn(page, "spend")
    spend = _api(board.url, "/v1/estimates/spend")
    assert spend["beyond_bounds"] == "upper" and spend["low"] > 100.0
    headline = page.text_content("#mean-value") or ""
    assert f"[{spend['low']:.3f}, {spend['high']:.3f}]" in headline
    assert f"forgery shift ±{spend['forgery_shift']:.3f}" in headline
    warning = page.text_content("#beyond-bounds") or ""
    assert warning.startswith("Beyond the bounds: the 95% interval lies wholly above")
    assert "forged reports are the likely cause" in warning
    drawn = page.evaluate(READ_SPEND)  # the interval drawn beyond the bounds, not on them
    assert drawn["bounds"] == pytest.approx([0.0, 100.0], abs=1.5 * drawn["unit"])
    assert drawn["low"] == pytest.approx(spend["low"], abs=1.5 * drawn["unit"])
    assert drawn["high"] - drawn["low"] > 2 * drawn["unit"]  # not zero-width
    head, row = page.eval_on_selector_all("#table tr", CELLS)
    assert dict(zip(head, row, strict=True))["beyond bounds"] == "upper"
    _readable(page)
    page.screenshot(path=str(shots / f"spend-beyond-{width}.png"), full_page=True)
    assert not page.errors
    page.close()


# --- over time --------------------------------------------------------------------------
READ_TIME = (
    "() => {"
    + USER_BOX
    + """
  const fig = window.ldpkitDashboard.figures[0];
  const x = fig.scale("x"), y = fig.scale("y"), color = fig.scale("color");
  const swatches = [...fig.querySelectorAll(":scope > div span")].map((s) => ({
    label: s.textContent, fill: s.querySelector("svg").getAttribute("fill"),
  }));
  return {
    unit: (y.domain[1] - y.domain[0]) / (y.range[0] - y.range[1]),
    seconds: (x.domain[1] - x.domain[0]) / (x.range[1] - x.range[0]) / 1000,
    swatches,
    scale: Object.fromEntries(color.domain.map((d) => [d, color.apply(d)])),
    lines: [...fig.querySelectorAll("g.lines path")].map((p) => p.getAttribute("stroke")),
    bands: [...fig.querySelectorAll("g.bands path")].map((p) => p.getAttribute("fill")),
    points: [...fig.querySelectorAll("g.points circle")].map((c) => ({
      t: +x.invert(userBox(c).cx) / 1000,
      px: userBox(c).cx,
      value: y.invert(userBox(c).cy),
      fill: c.getAttribute("fill"),
      stroke: c.getAttribute("stroke") || c.parentNode.getAttribute("stroke"),
    })),
    key: [...document.querySelectorAll("#over-time-chart .key span")].map((s) => s.textContent),
    whiskers: [...fig.querySelectorAll("g.whiskers line")].map((l) => ({
      px: userBox(l).cx, stroke: l.getAttribute("stroke") || l.parentNode.getAttribute("stroke"),
    })),
  };
}"""
)


@pytest.mark.parametrize("width", WIDTHS)
def test_over_time_has_bands_a_coloured_legend_and_axes(
    browser: Any, board: Board, shots: Path, width: int
) -> None:
    page = _open(browser, board, width, "theme")
    page.check("#over-time")
    _drawn(page, "theme", "over-time")
    expected = _api(board.url, "/v1/estimates/theme?per_bucket=true")
    drawn = page.evaluate(READ_TIME)
    # The legend: one entry per series, in the colour its line, band and points are drawn in.
    assert [s["label"] for s in drawn["swatches"]] == THEMES
    colours = [s["fill"] for s in drawn["swatches"]]
    assert len(set(colours)) == len(THEMES)
    for swatch in drawn["swatches"]:
        assert drawn["scale"][swatch["label"]] == swatch["fill"]
    assert sorted(drawn["lines"]) == sorted(colours)
    assert sorted(drawn["bands"]) == sorted(colours)
    # Each point where the API puts it, in its series' colour (its outline: filled when it
    # could be its bucket's most common, hollow when not).
    by_colour = {s["fill"]: s["label"] for s in drawn["swatches"]}
    sets = {b["bucket"]: b["most_common"]["set"] for b in expected["buckets"]}
    assert {len(s) for s in sets.values()} == {1, 2}  # the fixture: ties early, dark later
    want = {
        (b["bucket"], i["category"]): i["estimate"] for b in expected["buckets"] for i in b["items"]
    }
    assert len(drawn["points"]) == len(want) == DAYS * len(THEMES)
    buckets = sorted({b for b, _ in want})
    # Series sit side by side in a bucket (a few px apart), each point on its own whisker.
    aside = 8 * drawn["seconds"]
    for point in drawn["points"]:
        bucket = min(buckets, key=lambda b: abs(b - point["t"]))
        assert abs(bucket - point["t"]) <= 1.5 * drawn["seconds"] + aside  # at its bucket
        key = (bucket, by_colour[point["stroke"]])
        assert point["value"] == pytest.approx(want[key], abs=1.5 * drawn["unit"])
        filled = point["fill"] == point["stroke"]
        assert filled == (key[1] in sets[bucket]) and (filled or point["fill"] == "white"), key
        own = [w["px"] for w in drawn["whiskers"] if w["stroke"] == point["stroke"]]
        assert min(abs(px - point["px"]) for px in own) <= 0.5, (point, own)
    assert len({round(p["px"]) for p in drawn["points"]}) == len(drawn["points"])
    assert "could be the bucket's most common (95%)" in drawn["key"]
    assert page.text_content("#most-common").startswith("most common: ")  # the whole range's
    readable = _readable(page)
    assert readable["yTicks"] >= 4 and readable["xTicks"] >= 2
    # The last bucket's date is on the axis, not cut off (READABLE checked every label).
    page.screenshot(path=str(shots / f"theme-over-time-{width}.png"), full_page=True)

    # Numeric over time: one series, the mean, with its band.
    page.click("button[data-metric=session_minutes]")
    _drawn(page, "session_minutes", "over-time")
    numeric = page.evaluate(READ_TIME)
    assert [s["label"] for s in numeric["swatches"]] == ["mean"]
    assert len(numeric["points"]) == DAYS and len(numeric["bands"]) == 1
    _readable(page)
    page.screenshot(path=str(shots / f"minutes-over-time-{width}.png"), full_page=True)
    assert not page.errors
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_sixteen_categories_stay_readable(
    browser: Any, board: Board, shots: Path, width: int
) -> None:
    """Long category names under bars, and sixteen series over time with sixteen colours."""
    page = _open(browser, board, width, "country")
    drawn = page.evaluate(READ_BARS)
    assert [c for c, _ in drawn["bars"]] == COUNTRIES
    readable = _readable(page)
    assert readable["xTicks"] == len(COUNTRIES)
    page.screenshot(path=str(shots / f"country-bars-{width}.png"), full_page=True)
    page.check("#over-time")
    _drawn(page, "country", "over-time")
    series = page.evaluate(READ_TIME)
    assert [s["label"] for s in series["swatches"]] == COUNTRIES
    assert len({s["fill"] for s in series["swatches"]}) == len(COUNTRIES)
    _readable(page)
    page.screenshot(path=str(shots / f"country-over-time-{width}.png"), full_page=True)
    assert not page.errors
    page.close()


# --- versions, range, interval method ---------------------------------------------------
def test_a_late_version_list_does_not_replace_the_picked_metrics(
    browser: Any, board: Board
) -> None:
    """The token selects the first metric; a metric clicked before the first one's version
    list came keeps its own list when that one comes late (on a loaded machine it did not:
    the version picker listed the other metric's versions)."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    held: list[Any] = []  # the other metrics' version lists, let go once os is drawn
    page.route(
        re.compile(r"/v1/metrics/[^/]+/versions$"),
        lambda route: (
            route.continue_() if "/metrics/os/" in route.request.url else held.append(route)
        ),
    )
    page.goto(board.url + "/ui/")
    page.fill("#token", READ)
    page.click("#token-form button")
    page.wait_for_function("document.querySelector('button[data-metric=os]') !== null")
    page.click("button[data-metric=os]")
    _drawn(page, "os")
    assert held, "the token selected no other metric first"
    # Readiness: the first metric's selection ends by drawing the current one (os) again.
    again = lambda r: "/v1/estimates/os?" in r.url and "version=" not in r.url  # noqa: E731
    with page.expect_request(again):
        for route in held:
            route.continue_()
    options = page.eval_on_selector_all(
        "#version option", "os => os.map(o => o.dataset.fingerprint)"
    )
    assert options == [board.os_new, board.os_old]
    page.close()


def test_version_picker_lists_versions_and_shows_the_picked_one(
    browser: Any, board: Board, shots: Path
) -> None:
    page = _open(browser, board, 1400, "os")
    options = page.eval_on_selector_all(
        "#version option", "os => os.map(o => [o.dataset.fingerprint, o.textContent])"
    )
    assert [fp for fp, _ in options] == [board.os_new, board.os_old]  # newest first
    assert "current" in options[0][1] and f"n={NEW_OS}" in options[0][1]
    assert "ε=1" in options[1][1] and f"n={OLD_OS}" in options[1][1]
    assert page.text_content("#n") == f"n = {NEW_OS}"
    page.select_option("#version", board.os_old)
    page.wait_for_function(f"window.ldpkitDashboard.data.version === '{board.os_old}'")
    assert page.text_content("#n") == f"n = {OLD_OS}"
    assert page.text_content("#epsilon") == "ε = 1"
    expected = _api(board.url, f"/v1/estimates/os?version={board.os_old}")
    drawn = page.evaluate(READ_BARS)
    assert [c for c, _ in drawn["bars"]] == OS
    for (_, value), item in zip(drawn["bars"], expected["items"], strict=True):
        assert value == pytest.approx(item["estimate"], abs=1.5 * drawn["unit"])
    page.screenshot(path=str(shots / "os-older-version.png"), full_page=True)
    page.close()


def test_date_range_means_what_the_cli_means(browser: Any, board: Board) -> None:
    """From is included and Before is excluded, as in the API and `ldpkit estimates`."""
    from datetime import UTC, datetime

    day = lambda k: datetime.fromtimestamp(board.first_day + k * 86400, UTC)  # noqa: E731
    page = _open(browser, board, 1400, "theme")
    page.fill("#from", f"{day(1):%Y-%m-%d}")
    page.fill("#to", f"{day(3):%Y-%m-%d}")
    page.click("#query button[type=submit]")
    page.wait_for_function(f"window.ldpkitDashboard.data.to === {board.first_day + 3 * 86400}")
    expected = _api(board.url, f"/v1/estimates/theme?from={day(1):%Y-%m-%d}&to={day(3):%Y-%m-%d}")
    assert expected["n"] == 2 * PER_DAY
    assert page.text_content("#n") == f"n = {expected['n']}"
    assert f"before {day(3):%Y-%m-%d}" in (page.text_content("#range") or "")
    page.close()


def test_interval_method_is_shown_when_the_api_gives_one(browser: Any, board: Board) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})

    def without_method(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        body.pop("interval", None)
        route.fulfill(response=response, json=body)

    page.route("**/v1/estimates/os*", without_method)
    page.goto(board.url + "/ui/")
    page.fill("#token", READ)
    page.click("#token-form button")
    page.click("button[data-metric=theme]")
    _drawn(page, "theme")
    expected = _api(board.url, "/v1/estimates/theme")["interval"]
    assert expected in ("score", "exact", "score+exact")
    assert page.text_content("#interval-method") == f"interval: {expected}"
    page.click("button[data-metric=os]")
    _drawn(page, "os")
    assert page.query_selector("#interval-method") is None  # not answered: not shown
    page.close()


def test_bad_token_shows_a_clear_message(browser: Any, board: Board) -> None:
    page = browser.new_page()
    page.goto(board.url + "/ui/")
    page.fill("#token", "not-a-token")
    page.click("#token-form button")
    page.wait_for_selector("#message.error:not([hidden])")  # not the initial hint
    message = page.text_content("#message") or ""
    assert "refused" in message and "401" in message
    assert page.is_hidden("#main")
    page.close()


# --- robust estimates beside the unbiased ones (issue 26) ----------------------------------
READ_ROBUST_BARS = (
    "() => {"
    + USER_BOX
    + """const fig = window.ldpkitDashboard.figures[0], y = fig.scale("y"), x = fig.scale("x");
    const cat = (el) => x.domain.reduce((best, c) =>
      Math.abs(x.apply(c) + x.bandwidth / 2 - userBox(el).cx)
        < Math.abs(x.apply(best) + x.bandwidth / 2 - userBox(el).cx) ? c : best);
    return {
      unit: (y.domain[1] - y.domain[0]) / (y.range[0] - y.range[1]),
      whiskers: [...fig.querySelectorAll("g.robust-whiskers line")].map((l) =>
        [cat(l), y.invert(userBox(l).bottom), y.invert(userBox(l).top)]),
      marks: [...fig.querySelectorAll("g.robust-marks circle")].map((c) =>
        [cat(c), y.invert(userBox(c).cy)]),
      colour: fig.querySelector("g.robust-whiskers").getAttribute("stroke"),
    };
  }"""
)
READ_ROBUST_MEAN = (
    "() => {"
    + USER_BOX
    + """return window.ldpkitDashboard.figures.map((fig) => {
      const x = fig.scale("x"), rule = userBox(fig.querySelector("g.robust-interval line"));
      return { mean: x.invert(userBox(fig.querySelector("g.robust-dot circle")).cx),
        low: x.invert(rule.left), high: x.invert(rule.right),
        plain: x.invert(userBox(fig.querySelector("g.interval line")).left),
        unit: (x.domain[1] - x.domain[0]) / (x.range[1] - x.range[0]) };
    })}"""
)


@pytest.mark.parametrize("width", WIDTHS)
def test_robust_estimates_are_drawn_beside_the_unbiased_ones(
    browser: Any, board: Board, shots: Path, width: int
) -> None:
    """The "robust" box asks ``robust=true``: a categorical metric's robust intervals as
    green whiskers beside the black ones and its robust estimates as green dots, a mean's
    robust interval as a second row; the table's robust columns, and the line saying what
    they are; the values those of the API."""
    page = _open(browser, board, width, "theme")
    page.check("#robust")
    page.wait_for_function("window.ldpkitDashboard.data.robust !== undefined")
    expected = _api(board.url, "/v1/estimates/theme?robust=true")
    drawn = page.evaluate(READ_ROBUST_BARS)
    tolerance = 1.5 * drawn["unit"]
    assert drawn["colour"] == "#54A24B"
    assert [c for c, *_ in drawn["whiskers"]] == THEMES == [c for c, _ in drawn["marks"]]
    for (_, low, high), (_, mark), item in zip(
        drawn["whiskers"], drawn["marks"], expected["items"], strict=True
    ):
        assert low == pytest.approx(item["robust_low"], abs=tolerance)
        assert high == pytest.approx(item["robust_high"], abs=tolerance)
        assert mark == pytest.approx(item["robust"], abs=tolerance)
    forged = expected["robust"]["forged_reports"]
    assert forged == expected["n"] // 100
    assert (page.text_content("#robust-shown") or "") == (
        "robust: projected onto what every honest population satisfies; its interval holds for "
        f"the genuine reporters if up to 1% ({forged} of the {expected['n']}) of the reports "
        "are forged"
    )
    head, *rows = page.eval_on_selector_all("#table tr", CELLS)
    assert head[-4:] == ["robust", "robust low", "robust high", "robust shift"]
    assert [r[-3] for r in rows] == [f"{i['robust_low']:.4f}" for i in expected["items"]]
    _readable(page)
    page.screenshot(path=str(shots / f"theme-robust-{width}.png"), full_page=True)

    page.click("button[data-metric=spend]")
    _drawn(page, "spend")
    spend = _api(board.url, "/v1/estimates/spend?robust=true")["robust"]
    # 5% forged at the noise cap, more than the 1% assumed: the robust mean is clamped to the
    # bound, and its interval too lies beyond it (kept as the reports give it).
    assert spend["mean"] == 100.0 and 100.0 < spend["low"] < spend["high"]
    for strip in page.evaluate(READ_ROBUST_MEAN):
        for key in ("mean", "low", "high"):
            assert strip[key] == pytest.approx(spend[key], abs=1.5 * strip["unit"]), key
        assert strip["plain"] > 100.0  # the unbiased interval, beyond the bounds, stays
    said = page.text_content("#robust-value") or ""
    assert f"robust mean {spend['mean']:.3f}" in said
    assert said.endswith("it too lies beyond the bounds: more of the reports are forged than that")
    head, row = page.eval_on_selector_all("#table tr", CELLS)
    assert dict(zip(head, row, strict=True))["robust high"] == f"{spend['high']:.4f}"
    _readable(page)
    page.screenshot(path=str(shots / f"spend-robust-{width}.png"), full_page=True)
    assert not page.errors
    page.close()
