"""The dashboard's view of each metric kind, in a headless browser, against a real
``ldpkit serve`` holding a distribution, a hierarchy, a table, a strings and an ordered
categorical metric over DAYS daily buckets (``kinds``: tests/e2e/allkinds.py). Checks
the view drawn, its marks against the API's answer, that nothing is cut off at 1400 and
420 px, and (hierarchy) that clicking a node opens it. Screenshots go to
$LDPKIT_SCREENSHOTS (default: the test's temporary folder)."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit.client import Reporter
from ldpkit.collector.launcher import environment_without_tokens, running_collector
from tests.collector.helpers import without_as_of
from tests.readiness import wait_until

from .allkinds import DAYS, AllKinds
from .conftest import READ, RELAY, stale_config
from .test_dashboard import READABLE

WIDTHS = (1400, 420)


def api(url: str, metric: str, **query: str) -> dict[str, Any]:
    qs = urllib.parse.urlencode(query)
    request = urllib.request.Request(
        f"{url}/v1/estimates/{metric}?{qs}", headers={"Authorization": f"Bearer {READ}"}
    )
    with urllib.request.urlopen(request, timeout=150) as response:
        data: dict[str, Any] = json.load(response)
    return data


def open_metric(browser: Any, kinds: AllKinds, width: int, metric: str, view: str) -> Any:
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(kinds.url + "/ui/")
    page.fill("#token", READ)
    page.click("#token-form button")
    page.click(f"button[data-metric={metric}]")
    drawn(page, metric, view)
    page.errors = errors
    return page


def drawn(page: Any, metric: str, view: str, extra: str = "true") -> None:
    page.wait_for_function(
        "([m, v]) => window.ldpkitDashboard.data && window.ldpkitDashboard.data.metric === m"
        " && window.ldpkitDashboard.view === v && (!window.ldpkitDashboard.data.as_of ||"
        f" window.ldpkitDashboard.data.as_of.fresh) && ({extra})",
        arg=[metric, view],
    )


def readable(page: Any) -> None:
    result: dict[str, Any] = page.evaluate(READABLE, "#chart")
    assert not result["problems"], result["problems"]
    assert not page.errors, page.errors


@pytest.mark.parametrize("width", WIDTHS)
def test_distribution_histogram_with_quantiles(
    browser: Any, kinds: AllKinds, shots: Path, width: int
) -> None:
    page = open_metric(browser, kinds, width, "minutes", "histogram")
    data = page.evaluate("window.ldpkitDashboard.data")
    served = api(
        kinds.url,
        "minutes",
        bins="16",
        quantiles="0.5,0.9",
        level="0.95",
        consistent="false",
        per_bucket="false",
    )
    assert without_as_of(data) == without_as_of(served)
    assert "fresh" in page.inner_text("#as-of")
    assert page.locator("g.estimate-bars rect").count() == 16
    assert page.locator("g.whiskers line").count() == 16
    assert page.locator("g.quantile-marks line").count() == 2
    assert "p50" in page.inner_text("#distribution-summary")
    # the bins that could be the most common: named, and their bars dark
    common = served["most_common"]
    assert page.inner_text("#most-common").startswith(f"most common: {common['mode']} (")
    fills = page.locator("g.estimate-bars rect").evaluate_all(
        "rs => rs.map(r => r.getAttribute('fill'))"
    )
    named = [f"[{i['lower']:g}, {i['upper']:g})" for i in served["items"]]
    assert {n for n, f in zip(named, fills, strict=True) if f == "#4C78A8"} == set(common["set"])
    readable(page)
    page.screenshot(path=str(shots / f"kinds-histogram-{width}.png"), full_page=True)
    # whose bins the intervals are about: the reporting users' by default, stated
    assert data["estimand"] == "reporters"
    assert "the reporting users" in page.inner_text("#distribution-estimand")
    page.select_option("#estimand", "population")
    drawn(
        page,
        "minutes",
        "histogram",
        "window.ldpkitDashboard.data.estimand === 'population'",
    )
    assert "the population" in page.inner_text("#distribution-estimand")
    page.screenshot(path=str(shots / f"kinds-histogram-population-{width}.png"), full_page=True)
    page.select_option("#bins", "64")
    drawn(page, "minutes", "histogram", "window.ldpkitDashboard.data.items.length === 64")
    assert page.locator("g.estimate-bars rect").count() == 64
    # over time: the mean and quantiles per bucket, and a bucket x bin heat map
    page.select_option("#bins", "8")
    page.check("#over-time")
    drawn(page, "minutes", "distribution-over-time")
    assert page.locator("#distribution-summary-over-time g.points circle").count() == 3 * DAYS
    assert page.locator("#distribution-heatmap g.bin-cells rect").count() == 8 * DAYS
    assert "[0, 15)" in page.inner_text("#chart")
    # the bucket's most common set: its bins' cells outlined, and a key saying so
    outlined = page.evaluate(OUTLINED, "#distribution-heatmap")
    assert outlined and sorted(outlined) == in_bucket_sets(page, str)
    assert "outlined: could be the bucket's most common (95%)" in page.inner_text("#chart")
    assert page.text_content("#most-common").startswith("most common: [")
    page.screenshot(path=str(shots / f"kinds-distribution-over-time-{width}.png"), full_page=True)
    readable(page)
    # robust: a distribution has none, and the page says so (the answer's robust_note)
    page.check("#robust")
    drawn(
        page,
        "minutes",
        "distribution-over-time",
        "'robust_note' in window.ldpkitDashboard.data",
    )
    note = page.evaluate("window.ldpkitDashboard.data.robust_note")
    assert note.startswith("no robust estimate for a distribution metric")
    assert page.text_content("#robust-shown") == f"robust: {note}"
    page.close()


OUTLINED = """(id) => {
  // The heat-map cells outlined, as "<bucket> UTC, <item>": each outline's centre is its cell's.
  const centre = (r) => {
    const b = r.getBoundingClientRect();
    return [b.x + b.width / 2, b.y + b.height / 2];
  };
  const cells = [...document.querySelectorAll(id + " g.bin-cells rect")].map((r) =>
    [centre(r), r.querySelector("title").textContent.split(": ")[0]]);
  return [...document.querySelectorAll(id + " g.most-common-cells rect")].map((r) => {
    const [x, y] = centre(r);
    return cells.find(([[cx, cy]]) => Math.abs(cx - x) < 1 && Math.abs(cy - y) < 1)[1];
  });
}"""


def in_bucket_sets(page: Any, name: Any) -> list[str]:
    """Each bucket's most common set as the heat map's cells name them, "<day> UTC, <item>"
    (an item named by ``name``: a bin as is, a cell by its values)."""
    buckets = page.evaluate("window.ldpkitDashboard.data.buckets")
    day = lambda b: datetime.fromtimestamp(b["bucket"], UTC).strftime("%Y-%m-%d")  # noqa: E731
    return sorted(
        f"{day(b)} UTC, {name(s)}"
        for b in buckets
        if b["most_common"]
        for s in b["most_common"]["set"]
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_hierarchy_opens_level_by_level(
    browser: Any, kinds: AllKinds, shots: Path, width: int
) -> None:
    page = open_metric(browser, kinds, width, "region", "tree")
    top = [i["category"] for i in page.evaluate("window.ldpkitDashboard.data.items")]
    assert top == ["MX", "US"]
    page.select_option("#depth", "2")
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.depth === 2")
    names = [i["category"] for i in page.evaluate("window.ldpkitDashboard.data.items")]
    assert names == ["MX/Jalisco", "MX/Sonora", "US/Texas"]
    assert page.locator("g.estimate-bars rect").count() == 3
    readable(page)
    page.screenshot(path=str(shots / f"kinds-tree-depth2-{width}.png"), full_page=True)
    page.locator("g.estimate-bars rect").nth(names.index("MX/Sonora")).click()  # open it
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.subtree === 'MX/Sonora'")
    items = page.evaluate("window.ldpkitDashboard.data.items")
    assert [i["category"] for i in items] == ["MX/Sonora/Hermosillo", "MX/Sonora/Nogales"]
    assert page.locator("#tree-where .crumb").all_text_contents() == ["all", "MX", "Sonora"]
    readable(page)
    page.screenshot(path=str(shots / f"kinds-tree-open-{width}.png"), full_page=True)
    page.click("#tree-top")
    drawn(page, "region", "tree", "!window.ldpkitDashboard.data.subtree")
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_table_heat_map_and_marginals(
    browser: Any, kinds: AllKinds, shots: Path, width: int
) -> None:
    page = open_metric(browser, kinds, width, "car", "heatmap")
    data = page.evaluate("window.ldpkitDashboard.data")
    assert page.locator("g.cells rect").count() == len(data["items"]) == 12
    labels = page.locator("g.cell-labels text").all_text_contents()
    assert len(labels) == 12
    # "0.108 [0.079, 0.140]", on two lines where the cells are narrow (420 px)
    first = data["items"][0]
    assert any(
        t.replace(" ", "") == f"{first['estimate']:.3f}[{first['low']:.3f},{first['high']:.3f}]"
        for t in labels
    ), labels
    assert page.locator("svg[data-marginal] g.estimate-bars rect").count() == 6 + 2
    readable(page)
    page.screenshot(path=str(shots / f"kinds-heatmap-{width}.png"), full_page=True)
    page.check("#consistent")
    drawn(page, "car", "heatmap", "window.ldpkitDashboard.data.consistent")
    page.screenshot(path=str(shots / f"kinds-heatmap-consistent-{width}.png"), full_page=True)
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_simultaneous_checkbox_for_hierarchies_and_tables(
    browser: Any, kinds: AllKinds, shots: Path, width: int
) -> None:
    """Shown for the kinds that offer simultaneous intervals (hierarchy, table), hidden for
    the others; checked, it asks ``simultaneous=true``, draws the served (wider) intervals
    and the summary says so; a subtree opened keeps asking it."""
    page = open_metric(browser, kinds, width, "car", "heatmap")
    assert page.is_visible("#simultaneous")
    plain = page.evaluate("window.ldpkitDashboard.data")
    page.check("#simultaneous")
    drawn(page, "car", "heatmap", "window.ldpkitDashboard.data.simultaneous === true")
    data = page.evaluate("window.ldpkitDashboard.data")
    served = api(kinds.url, "car", level="0.95", simultaneous="true", consistent="false")
    assert without_as_of(data) == without_as_of(served)
    for a, b in zip(data["items"], plain["items"], strict=True):
        assert a["low"] <= b["low"] and a["high"] >= b["high"]
    assert "95% simultaneous intervals" in page.inner_text("#level-shown")
    readable(page)
    page.screenshot(path=str(shots / f"kinds-heatmap-simultaneous-{width}.png"), full_page=True)
    page.click("button[data-metric=region]")
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.simultaneous === true")
    page.select_option("#depth", "2")
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.depth === 2")
    page.locator("g.estimate-bars rect").nth(1).click()  # MX/Sonora: its 2 children together
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.subtree === 'MX/Sonora'")
    assert page.evaluate("window.ldpkitDashboard.data.simultaneous") is True
    readable(page)
    page.screenshot(path=str(shots / f"kinds-tree-simultaneous-{width}.png"), full_page=True)
    page.click("button[data-metric=search_term]")
    drawn(page, "search_term", "ranked")
    assert not page.is_visible("#simultaneous")
    assert page.evaluate("window.ldpkitDashboard.data.simultaneous") is False
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_strings_ranked_with_threshold_and_candidates(
    browser: Any, kinds: AllKinds, shots: Path, width: int
) -> None:
    page = open_metric(browser, kinds, width, "search_term", "ranked")
    data = page.evaluate("window.ldpkitDashboard.data")
    assert data["items"] and data["items"][0]["category"] == "weather"
    assert page.locator("g.estimate-bars rect").count() == len(data["items"])
    assert "threshold" in page.inner_text("#threshold")
    page.fill("#candidates", "música,never-typed")
    page.press("#candidates", "Enter")
    drawn(
        page, "search_term", "ranked", "(window.ldpkitDashboard.data.candidates || []).length === 2"
    )
    assert page.locator("g.estimate-bars rect").count() == len(data["items"]) + 2
    readable(page)
    page.screenshot(path=str(shots / f"kinds-ranked-{width}.png"), full_page=True)
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_strings_weak_listings_are_marked(
    browser: Any, kinds: AllKinds, shots: Path, width: int
) -> None:
    """A listing found on evidence less than 1 z above ``find_z`` is drawn faded, named
    "(weak)" and explained; its tooltip gives its evidence. This population's listings are
    all strong, so the served ``find_z`` is raised (in the browser) to put the last one
    just above it: what an answer holding a weak listing looks like."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))

    def raise_find_z(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        if body.get("items"):
            body["find_z"] = body["items"][-1]["evidence_z"] - 0.5
        route.fulfill(response=response, json=body)

    page.route("**/v1/estimates/search_term*", raise_find_z)
    page.goto(kinds.url + "/ui/")
    page.fill("#token", READ)
    page.click("#token-form button")
    page.click("button[data-metric=search_term]")
    drawn(page, "search_term", "ranked")
    data = page.evaluate("window.ldpkitDashboard.data")
    items, find_z = data["items"], data["find_z"]
    assert len(items) >= 2 and all(i["evidence_z"] is not None for i in items)
    weak = [i["category"] for i in items if i["evidence_z"] < find_z + 1]
    assert weak and weak[-1] == items[-1]["category"] and len(weak) < len(items)
    text = "els => els.map(e => e.textContent)"  # SVG elements have no innerText
    labels = page.locator("#ranked svg g[aria-label='y-axis tick label'] text").evaluate_all(text)
    assert {label for label in labels if label.endswith(" (weak)")} == {f"{w} (weak)" for w in weak}
    assert "(weak)" in page.inner_text("#weak-note")
    titles = page.locator("g.estimate-bars rect title").evaluate_all(text)
    assert all("evidence z" in t for t in titles)
    assert sum("(weak: could be a string nobody holds)" in t for t in titles) == len(weak)
    bars = page.locator("g.estimate-bars rect")
    fills = bars.evaluate_all("rs => rs.map(r => r.getAttribute('fill'))")
    assert fills.count("#A7BFD9") == len(weak)
    # The table beside it gives every string's evidence; a named string has none.
    heads = page.locator("#table th").all_inner_texts()
    assert heads[-1] == "evidence z"
    first = page.locator("#table tr").nth(1).locator("td").all_inner_texts()
    assert first[-1] == f"{items[0]['evidence_z']:.2f}"
    readable(page)
    page.screenshot(path=str(shots / f"kinds-ranked-weak-{width}.png"), full_page=True)
    page.close()


def test_an_ems_answer_that_did_not_converge_is_flagged_above_the_figure(
    browser: Any, kinds: AllKinds, shots: Path
) -> None:
    """A square wave answer whose EMS stopped at its step limit carries ``warning`` (the
    whole range's, or a bucket's over time): the page says it first, as the CLI does, in
    both distribution views. Meeting the real limit takes a million reports at a small
    epsilon, so the served answer is given one (in the browser): what such an answer
    looks like; an answer without one shows none."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    says = "EMS did not converge: stopped at its limit of 10,000 steps"

    def stopped(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        if "per_bucket=true" in route.request.url:
            for bucket in body["buckets"][1:]:
                bucket["warning"] = says
        else:
            body["warning"] = says
        route.fulfill(response=response, json=body)

    page.goto(kinds.url + "/ui/")
    page.fill("#token", READ)
    page.click("#token-form button")
    page.click("button[data-metric=minutes]")
    drawn(page, "minutes", "histogram")
    assert page.locator("#distribution-warning").count() == 0  # converged: nothing said
    page.route("**/v1/estimates/minutes*", stopped)
    page.select_option("#bins", "8")
    drawn(page, "minutes", "histogram", "window.ldpkitDashboard.data.items.length === 8")
    assert page.inner_text("#distribution-warning") == f"WARNING: {says}"
    page.screenshot(path=str(shots / "kinds-histogram-ems-warning.png"), full_page=True)
    page.check("#over-time")
    drawn(page, "minutes", "distribution-over-time")
    more = f" (and {DAYS - 2} more answers)" if DAYS > 2 else ""
    assert page.inner_text("#distribution-warning") == f"WARNING: {says}{more}"
    readable(page)
    page.close()


def test_a_stale_estimate_says_computing_then_the_fresh_one_is_drawn(
    browser: Any, shots: Path, tmp_path: Path
) -> None:
    """New reports after the last computation: the page draws the latest estimate at once,
    saying "computing, as of ..." with the reports received since, then draws the fresh
    one when its follow-up query (wait=) gets it."""
    (tmp_path / "collector.toml").write_text(stale_config("wait_minutes", 120.0, 64))
    rng = np.random.default_rng(27)
    env = environment_without_tokens()
    with (
        running_collector("collector.toml", cwd=tmp_path, env=env) as collector,
        Reporter(collector.url, token=RELAY, state_dir=tmp_path / "device", background=False) as r,
    ):
        r.refresh_definitions()
        r.simulate("wait_minutes", rng.uniform(0, 120, 2_000), rng=rng)
        assert r.flush().remaining == 0
        assert api(collector.url, "wait_minutes", wait="120")["as_of"]["n"] == 2000
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        # The page's follow-up queries (wait=) are held until its stale answer is read:
        # then they go to the collector as they were, and any sent later goes at once.
        held: list[Any] = []
        released = [False]

        def hold(route: Any) -> None:
            if released[0] or "wait=" not in route.request.url:
                route.continue_()
            else:
                held.append(route)

        page.route(re.compile(r"/v1/estimates/wait_minutes\?"), hold)
        page.goto(collector.url + "/ui/")
        page.fill("#token", READ)
        page.click("#token-form button")
        sent = [2000]

        def first_answer_is_stale() -> bool:
            """300 more reports, then the page's answer that counts them: stale, unless
            STALE_INTERVAL passed since the last computation first (a slow machine: the
            collector computed again; then once more)."""
            r.simulate("wait_minutes", rng.uniform(0, 120, 300), rng=rng)
            assert r.flush().remaining == 0
            sent[0] += 300
            page.click("button[data-metric=wait_minutes]")
            page.wait_for_function(
                "(n) => { const d = window.ldpkitDashboard.data; return d && d.metric === "
                "'wait_minutes' && d.as_of.n + d.as_of.reports_since === n; }",
                arg=sent[0],
            )
            return not page.evaluate("window.ldpkitDashboard.data.as_of.fresh")

        wait_until(first_answer_is_stale, "an answer older than its data")
        assert page.locator("#as-of.stale").count() == 1
        stale = page.inner_text("#as-of")
        assert stale.startswith("computing: as of")
        assert f"{sent[0] - 300} reports; 300 received since" in stale
        page.screenshot(path=str(shots / "kinds-computing.png"), full_page=True)
        # (route handlers run inside playwright's calls: evaluate lets a late one run)
        wait_until(lambda: page.evaluate("true") and held, "the page's query for the fresh one")
        released[0] = True
        for route in held:
            route.continue_()
        page.wait_for_selector("#as-of.fresh", timeout=150_000)
        assert f"{sent[0]} reports, fresh" in page.inner_text("#as-of")
        assert page.evaluate("window.ldpkitDashboard.data.n") == sent[0]
        page.close()


def test_ordered_categories_list_the_mean_rank_and_shares(
    browser: Any, kinds: AllKinds, shots: Path
) -> None:
    page = open_metric(browser, kinds, 1400, "rating", "categories")
    data = page.evaluate("window.ldpkitDashboard.data")
    assert [s["category"] for s in data["at_least"]] == ["2", "3", "4", "5"]
    rows = {
        cells[0]: cells[1:]
        for cells in (
            r.locator("td").all_inner_texts() for r in page.locator("#table tr").all()[1:]
        )
    }
    assert "mean rank (1..d)" in rows
    for share in data["at_least"]:
        cells = rows[f"share at least {share['category']}"]
        for text, key in zip(cells, ("estimate", "stderr", "low", "high"), strict=False):
            assert float(text) == pytest.approx(share[key], abs=1e-3)
    readable(page)
    page.screenshot(path=str(shots / "kinds-ordered-1400.png"), full_page=True)
    page.close()
