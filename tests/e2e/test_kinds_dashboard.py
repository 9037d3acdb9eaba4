"""The dashboard's view of each metric kind, in a headless browser, against a real
``ldpkit serve`` whose TOML defines a distribution, a hierarchy, a table and a strings
metric. Checks the view drawn, its marks against the API's answer, that nothing is cut
off at 1400 and 420 px, and (hierarchy) that clicking a node opens it. Screenshots go to
$LDPKIT_SCREENSHOTS (default: the test's temporary folder)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit.client import Reporter
from ldpkit.collector.launcher import environment_without_tokens, running_collector
from tests.collector.helpers import without_as_of

from .conftest import READ, RELAY
from .test_dashboard import READABLE

WIDTHS = (1400, 420)
LEAVES = [
    "MX/Jalisco/Guadalajara",
    "MX/Jalisco/Zapopan",
    "MX/Sonora/Hermosillo",
    "MX/Sonora/Nogales",
    "MX/Yucatan/Merida",
    "MX/Yucatan/Valladolid",
]
TYPES = ["Compact", "Large", "Midsize", "Small", "Sporty", "Van"]
CARS93 = [(7, 9), (11, 0), (10, 12), (7, 14), (8, 6), (5, 4)]

CONFIG = f"""
[collector]
database = "collector.sqlite3"

[tokens]
relay = ["{RELAY}"]
read = ["{READ}"]

[metrics.session_minutes_dist]
kind = "distribution"
bounds = [0.0, 120.0]
resolution = 256
epsilon = 2.0

[metrics.region]
kind = "hierarchy"
separator = "/"
categories = {json.dumps(LEAVES)}
epsilon = 2.0

[metrics.car]
kind = "table"
epsilon = 2.0
[metrics.car.dimensions]
type = {json.dumps(TYPES)}
origin = ["USA", "non-USA"]

[metrics.search_term]
kind = "strings"
max_length = 16
k = 10
epsilon = 4.0

# Ordered categories: the mean rank and the shares "k or later" below the items.
[metrics.rating]
kind = "categorical"
categories = ["1", "2", "3", "4", "5"]
ordered = true
mechanism = "exponential"
epsilon = 4.0

# The stale-then-fresh test's own metric: its estimates are computed at most once an hour
# unless a query waits (the dashboard's follow-up does).
[metrics.wait_minutes]
kind = "distribution"
bounds = [0.0, 120.0]
resolution = 64
epsilon = 2.0
"""


MAINTAINED = ("session_minutes_dist", "region", "car", "search_term")


@dataclass
class Kinds:
    url: str
    directory: Path


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kinds]:
    directory = tmp_path_factory.mktemp("kinds")
    (directory / "collector.toml").write_text(CONFIG)
    with running_collector(
        "collector.toml", cwd=directory, env=environment_without_tokens()
    ) as collector:
        rng = np.random.default_rng(1516)
        with Reporter(
            collector.url, token=RELAY, state_dir=directory / "device", background=False
        ) as r:
            r.refresh_definitions()
            minutes = np.concatenate([rng.gamma(2.0, 10.0, 12_000), rng.normal(80, 8, 6_000)])
            r.simulate("session_minutes_dist", np.clip(minutes, 0, 120), rng=rng)
            counts = [100, 200, 150, 250, 200, 100]
            regions = [leaf for leaf, c in zip(LEAVES, counts, strict=True) for _ in range(c * 20)]
            r.simulate("region", regions, rng=rng)
            cars = [
                {"type": t, "origin": o}
                for t, pair in zip(TYPES, CARS93, strict=True)
                for o, c in zip(("USA", "non-USA"), pair, strict=True)
                for _ in range(c * 150)
            ]
            r.simulate("car", cars, rng=rng)
            words = ["weather", "news", "maps", "translate", "música", "football", "recipes"]
            words += [f"word{i}" for i in range(500)]
            p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
            r.simulate("search_term", list(rng.choice(words, 40_000, p=p / p.sum())), rng=rng)
            r.simulate("wait_minutes", rng.uniform(0, 120, 2_000), rng=rng)
            ratings = rng.choice(["1", "2", "3", "4", "5"], 2_000, p=[0.1, 0.1, 0.2, 0.4, 0.2])
            r.simulate("rating", list(ratings), rng=rng)
            assert r.flush().remaining == 0
        # Readiness: every maintained estimate computed from every report posted.
        for metric in (*MAINTAINED, "wait_minutes"):
            assert api(collector.url, metric, wait="120")["as_of"]["fresh"]
        yield Kinds(collector.url, directory)


def api(url: str, metric: str, **query: str) -> dict[str, Any]:
    qs = urllib.parse.urlencode(query)
    request = urllib.request.Request(
        f"{url}/v1/estimates/{metric}?{qs}", headers={"Authorization": f"Bearer {READ}"}
    )
    with urllib.request.urlopen(request, timeout=150) as response:
        data: dict[str, Any] = json.load(response)
    return data


def open_metric(browser: Any, kinds: Kinds, width: int, metric: str, view: str) -> Any:
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
    browser: Any, kinds: Kinds, shots: Path, width: int
) -> None:
    page = open_metric(browser, kinds, width, "session_minutes_dist", "histogram")
    data = page.evaluate("window.ldpkitDashboard.data")
    served = api(
        kinds.url,
        "session_minutes_dist",
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
        "session_minutes_dist",
        "histogram",
        "window.ldpkitDashboard.data.estimand === 'population'",
    )
    assert "the population" in page.inner_text("#distribution-estimand")
    page.screenshot(path=str(shots / f"kinds-histogram-population-{width}.png"), full_page=True)
    page.select_option("#bins", "64")
    drawn(
        page, "session_minutes_dist", "histogram", "window.ldpkitDashboard.data.items.length === 64"
    )
    assert page.locator("g.estimate-bars rect").count() == 64
    # over time: the mean and quantiles per bucket, and a bucket x bin heat map (one
    # bucket here: whiskers only, one column)
    page.select_option("#bins", "8")
    page.check("#over-time")
    drawn(page, "session_minutes_dist", "distribution-over-time")
    assert page.locator("#distribution-summary-over-time g.points circle").count() == 3
    assert page.locator("#distribution-heatmap g.bin-cells rect").count() == 8
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
        "session_minutes_dist",
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
    browser: Any, kinds: Kinds, shots: Path, width: int
) -> None:
    page = open_metric(browser, kinds, width, "region", "tree")
    assert [i["category"] for i in page.evaluate("window.ldpkitDashboard.data.items")] == ["MX"]
    page.select_option("#depth", "2")
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.depth === 2")
    assert page.locator("g.estimate-bars rect").count() == 3
    readable(page)
    page.screenshot(path=str(shots / f"kinds-tree-depth2-{width}.png"), full_page=True)
    page.locator("g.estimate-bars rect").nth(1).click()  # MX/Sonora: open it
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
def test_table_heat_map_and_marginals(browser: Any, kinds: Kinds, shots: Path, width: int) -> None:
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
    browser: Any, kinds: Kinds, shots: Path, width: int
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
    browser: Any, kinds: Kinds, shots: Path, width: int
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
    browser: Any, kinds: Kinds, shots: Path, width: int
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


def test_a_stale_estimate_says_computing_then_the_fresh_one_is_drawn(
    browser: Any, kinds: Kinds, shots: Path
) -> None:
    """New reports after the last computation: the page draws the latest estimate at once,
    saying "computing, as of ..." with the reports received since, then draws the fresh
    one when its follow-up query (wait=) gets it."""
    rng = np.random.default_rng(27)
    with Reporter(
        kinds.url, token=RELAY, state_dir=kinds.directory / "later", background=False
    ) as r:
        r.refresh_definitions()
        # One more report, its estimate waited for: the next computation is then at least
        # estimate_interval_seconds (30 s) away, so the page's first answer is stale.
        r.simulate("wait_minutes", [60.0], rng=rng)
        assert r.flush().remaining == 0
        assert api(kinds.url, "wait_minutes", wait="120")["as_of"]["n"] == 2001
        r.simulate("wait_minutes", rng.uniform(0, 120, 300), rng=rng)
        assert r.flush().remaining == 0
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(kinds.url + "/ui/")
    page.fill("#token", READ)
    page.click("#token-form button")
    page.click("button[data-metric=wait_minutes]")
    page.wait_for_selector("#as-of.stale")
    stale = page.inner_text("#as-of")
    assert stale.startswith("computing: as of") and "2001 reports; 300 received since" in stale
    page.screenshot(path=str(shots / "kinds-computing.png"), full_page=True)
    page.wait_for_selector("#as-of.fresh", timeout=150_000)
    assert "2301 reports, fresh" in page.inner_text("#as-of")
    assert page.evaluate("window.ldpkitDashboard.data.n") == 2301
    page.close()


def test_ordered_categories_list_the_mean_rank_and_shares(
    browser: Any, kinds: Kinds, shots: Path
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
