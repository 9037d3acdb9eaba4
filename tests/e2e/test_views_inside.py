"""Every kind's single and over-time view in the dashboard, at 1400 and 420 px, against a
real collector holding four daily buckets of each kind (``kinds``: tests/e2e/allkinds.py): no mark
is drawn outside its figure's plot area, no label is cut off, estimates below zero are
drawn below a zero line and said to be so; a distribution over time is its mean and
quantiles per bucket and a bucket x bin heat map; the hierarchy's breadcrumb opens every
ancestor. Screenshots go to $LDPKIT_SCREENSHOTS (default: the test's temporary folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .allkinds import DAYS, AllKinds
from .conftest import READ
from .test_dashboard import READABLE
from .test_kinds_dashboard import OUTLINED, in_bucket_sets

WIDTHS = (1400, 420)
# metric -> (its single view, its over-time view)
VIEWS = {
    "theme": ("categories", "over-time"),
    "spend": ("mean", "over-time"),
    "minutes": ("histogram", "distribution-over-time"),
    "region": ("tree", "tree-over-time"),
    "car": ("heatmap", "table-over-time"),
    "search_term": ("ranked", "over-time"),
}

INSIDE = """(root) => {
  // Each figure's plot area is its frame (class "plot-area"); every mark's shapes must lie
  // in it: a rect's, line's, path's or text's box, a dot's centre (1.5 px of slack).
  const out = { problems: [], figures: 0, shapes: 0 };
  const slack = 1.5;
  for (const svg of document.querySelectorAll(root + " svg")) {
    let area = svg.querySelector(".plot-area");
    if (!area) continue;  // a legend's ramp or swatch
    if (area.tagName.toLowerCase() === "g") area = area.querySelector("rect");
    const a = area.getBoundingClientRect();
    out.figures += 1;
    for (const mark of svg.children) {
      const what = mark.getAttribute("aria-label") || "";
      if (/axis|grid|frame/.test(what) || mark.classList.contains("plot-area")) continue;
      if (!what) continue;  // Plot's own style element and the like
      const kinds = "rect, line, path, circle, text";
      const shapes = mark.matches(kinds) ? [mark] : mark.querySelectorAll(kinds);
      for (const s of shapes) {
        const r = s.getBoundingClientRect();
        if (!r.width && !r.height) continue;
        out.shapes += 1;
        const [x1, x2, y1, y2] = s.tagName.toLowerCase() === "circle"
          ? [r.left + r.width / 2, r.left + r.width / 2, r.top + r.height / 2, r.top + r.height / 2]
          : [r.left, r.right, r.top, r.bottom];
        const px = (v) => Math.round(v);
        if (x1 < a.left - slack || x2 > a.right + slack
            || y1 < a.top - slack || y2 > a.bottom + slack) {
          out.problems.push(`${what} ${s.tagName} "${(s.textContent || "").slice(0, 30)}" at ` +
            `${px(x1)}..${px(x2)} x ${px(y1)}..${px(y2)}, plot area ` +
            `${px(a.left)}..${px(a.right)} x ${px(a.top)}..${px(a.bottom)}`);
        }
      }
    }
  }
  return out;
}"""


def drawn(page: Any, metric: str, view: str, extra: str = "true") -> None:
    """Readiness: the page drew ``view`` of a fresh answer about ``metric``."""
    page.wait_for_function(
        "([m, v]) => window.ldpkitDashboard.data && window.ldpkitDashboard.data.metric === m"
        " && window.ldpkitDashboard.view === v && (!window.ldpkitDashboard.data.as_of ||"
        f" window.ldpkitDashboard.data.as_of.fresh) && ({extra})",
        arg=[metric, view],
        timeout=150_000,
    )


def open_metric(browser: Any, kinds: AllKinds, width: int, metric: str) -> Any:
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(kinds.url + "/ui/")
    page.fill("#token", READ)
    page.click("#token-form button")
    page.click(f"button[data-metric={metric}]")
    drawn(page, metric, VIEWS[metric][0])
    return page


def inside(page: Any) -> dict[str, Any]:
    """Nothing outside a plot area, nothing cut off, one plot area per figure drawn."""
    result: dict[str, Any] = page.evaluate(INSIDE, "#chart")
    assert not result["problems"], result["problems"]
    assert result["figures"] == page.evaluate("window.ldpkitDashboard.figures.length") > 0
    assert result["shapes"] > 0
    readable: dict[str, Any] = page.evaluate(READABLE, "#chart")
    assert not readable["problems"], readable["problems"]
    assert not page.errors, page.errors
    return result


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("metric", list(VIEWS))
def test_every_view_draws_inside_its_plot_area(
    browser: Any, kinds: AllKinds, shots: Path, metric: str, width: int
) -> None:
    over_time = VIEWS[metric][1]
    page = open_metric(browser, kinds, width, metric)
    inside(page)
    page.screenshot(path=str(shots / f"views-{metric}-{width}.png"), full_page=True)
    page.check("#over-time")
    drawn(page, metric, over_time, "Array.isArray(window.ldpkitDashboard.data.buckets)")
    assert len(page.evaluate("window.ldpkitDashboard.data.buckets")) == DAYS
    inside(page)
    # The bucket table has each estimate's stderr (a table's marginals: below).
    head = page.locator("#bucket-table tr").first.inner_text()
    assert "stderr" in head
    page.screenshot(path=str(shots / f"views-{metric}-over-time-{width}.png"), full_page=True)
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_distribution_over_time_is_its_mean_quantiles_and_a_heat_map(
    browser: Any, kinds: AllKinds, width: int
) -> None:
    page = open_metric(browser, kinds, width, "minutes")
    page.check("#over-time")
    drawn(page, "minutes", "distribution-over-time")
    data = page.evaluate("window.ldpkitDashboard.data")
    buckets = data["buckets"]
    bins = len(buckets[0]["items"])
    assert bins == 16 and len(buckets) == DAYS
    # mean, p50, p90: a point per bucket each, three colours, one line each
    summary = page.locator("#distribution-summary-over-time")
    assert summary.locator("g.points circle").count() == 3 * DAYS
    assert summary.locator("g.lines path").count() == 3
    swatches = page.locator("#distribution-over-time figure > div span").all_text_contents()
    assert swatches == ["mean", "p50", "p90"]
    # the heat map: a cell per bucket and bin
    heat = page.locator("#distribution-heatmap")
    assert heat.locator("g.bin-cells rect").count() == DAYS * bins
    # estimates below zero: drawn as such (a diverging scale, red below 0) and said so
    below = [i for b in buckets for i in b["items"] if i["estimate"] < 0]
    assert below, "the fixture's nearly empty bins should give some estimates below zero"
    assert page.locator(".below-zero").count() >= 1
    scale = page.evaluate("window.ldpkitDashboard.figures[1].scale('color')")
    assert scale["type"] == "diverging" and scale["pivot"] == 0
    # the bucket table: each bucket's bins, mean and quantiles with their stderr
    table = page.inner_text("#bucket-table")
    assert table.count("quantile 0.9") == DAYS and table.count("mean") >= DAYS
    inside(page)
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_histogram_shows_bins_below_zero_below_its_zero_line(
    browser: Any, kinds: AllKinds, width: int
) -> None:
    page = open_metric(browser, kinds, width, "minutes")
    page.select_option("#bins", "64")
    drawn(page, "minutes", "histogram", "window.ldpkitDashboard.data.items.length === 64")
    items = page.evaluate("window.ldpkitDashboard.data.items")
    assert min(i["estimate"] for i in items) < 0
    y = page.evaluate("window.ldpkitDashboard.figures[0].scale('y').domain")
    assert y[0] <= min(i["estimate"] for i in items)
    assert "below zero" in page.inner_text(".below-zero")
    inside(page)
    page.close()


def test_a_table_over_time_is_its_marginals_and_a_heat_map_of_its_cells(
    browser: Any, kinds: AllKinds
) -> None:
    page = open_metric(browser, kinds, 1400, "car")
    page.check("#over-time")
    drawn(page, "car", "table-over-time")
    # each marginal's categories as lines (a point per bucket), the cells as a heat map
    marginals = page.locator("[data-marginal]")
    assert marginals.count() == 2
    assert page.locator("[data-marginal=type] g.points circle").count() == 6 * DAYS
    assert page.locator("[data-marginal=origin] g.points circle").count() == 2 * DAYS
    assert page.locator("#cells-heatmap g.bin-cells rect").count() == 12 * DAYS
    # each bucket's most common cells outlined (its own set: they differ by bucket)
    outlined = page.evaluate(OUTLINED, "#cells-heatmap")
    assert sorted(outlined) == in_bucket_sets(page, lambda cell: ", ".join(cell.values()))
    assert len({o.split(" UTC")[0] for o in outlined}) == DAYS
    table = page.inner_text("#bucket-table")
    assert table.count("origin=non-USA (marginal)") == DAYS
    assert table.count("type=Van (marginal)") == DAYS
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_hierarchy_breadcrumb_opens_every_ancestor(
    browser: Any, kinds: AllKinds, shots: Path, width: int
) -> None:
    page = open_metric(browser, kinds, width, "region")
    page.select_option("#depth", "2")
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.depth === 2")
    names = [i["category"] for i in page.evaluate("window.ldpkitDashboard.data.items")]
    page.locator("g.estimate-bars rect").nth(names.index("MX/Sonora")).click()
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.subtree === 'MX/Sonora'")
    crumbs = page.locator("#tree-where .crumb")
    assert crumbs.all_text_contents() == ["all", "MX", "Sonora"]
    assert page.locator("#tree-where button.crumb").all_text_contents() == ["all", "MX"]
    inside(page)
    page.screenshot(path=str(shots / f"views-region-breadcrumb-{width}.png"), full_page=True)
    page.click("#tree-where button.crumb[data-path='MX']")
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.subtree === 'MX'")
    items = [i["category"] for i in page.evaluate("window.ldpkitDashboard.data.items")]
    assert items == ["MX/Jalisco", "MX/Sonora"]
    page.click("#tree-where button.crumb[data-path='']")
    drawn(page, "region", "tree", "!window.ldpkitDashboard.data.subtree")
    assert page.locator("#tree-where button.crumb").count() == 0
    page.close()


@pytest.mark.parametrize(("metric", "axes"), [("minutes", 3), ("car", 4), ("region", 1)])
def test_the_cli_plots_each_kind_over_time_inside_its_axes(
    kinds: AllKinds, shots: Path, metric: str, axes: int
) -> None:
    """``ldpkit estimates --per-bucket --plot``'s figure, and the same figure from the
    Analyst's result of the real collector: its axes (a distribution: the mean and
    quantiles, the heat map and its colour bar) and nothing outside them."""
    from ldpkit.analyst import Analyst
    from ldpkit.analyst.plots import plot_estimate
    from tests.collector.test_plots_over_time import outside

    from .test_cli_paths import ldpkit

    path = shots / f"cli-{metric}-over-time.png"
    query = ["--collector", kinds.url, "--token", READ, "--per-bucket", "--wait", "120"]
    asked = ["--quantiles", "0.5,0.9"] if metric == "minutes" else []
    done = ldpkit("estimates", metric, *query, *asked, "--plot", str(path))
    assert done.returncode == 0, done.stderr
    assert path.read_bytes()[:4] == b"\x89PNG"
    options = {"quantiles": [0.5, 0.9]} if metric == "minutes" else {}
    result = Analyst(kinds.url, READ).estimates(metric, per_bucket=True, wait=120, **options)
    fig = plot_estimate(result)
    assert len(fig.axes) == axes
    assert not outside(fig)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_hierarchy_over_time_has_its_breadcrumb(
    browser: Any, kinds: AllKinds, shots: Path, width: int
) -> None:
    """Over time, the drill-down says where it is as the single view does ("all > MX >
    Sonora", each ancestor a button); a click on a node's point opens that node."""
    page = open_metric(browser, kinds, width, "region")
    page.select_option("#depth", "2")
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.depth === 2")
    names = [i["category"] for i in page.evaluate("window.ldpkitDashboard.data.items")]
    page.locator("g.estimate-bars rect").nth(names.index("MX/Sonora")).click()
    drawn(page, "region", "tree", "window.ldpkitDashboard.data.subtree === 'MX/Sonora'")
    page.check("#over-time")
    drawn(page, "region", "tree-over-time", "window.ldpkitDashboard.data.subtree === 'MX/Sonora'")
    assert page.locator("#tree-where .crumb").all_text_contents() == ["all", "MX", "Sonora"]
    assert page.locator("#tree-where button.crumb").all_text_contents() == ["all", "MX"]
    assert "click a point to open that node" in page.inner_text("#tree-where")
    inside(page)
    page.screenshot(path=str(shots / f"views-region-over-time-crumbs-{width}.png"), full_page=True)
    page.click("#tree-where button.crumb[data-path='MX']")
    drawn(page, "region", "tree-over-time", "window.ldpkitDashboard.data.subtree === 'MX'")
    series = [i["category"] for i in page.evaluate("window.ldpkitDashboard.data.items")]
    assert series == ["MX/Jalisco", "MX/Sonora"]
    page.locator("g.points").nth(series.index("MX/Sonora")).locator("circle").first.click()
    drawn(page, "region", "tree-over-time", "window.ldpkitDashboard.data.subtree === 'MX/Sonora'")
    assert page.locator("#tree-where .crumb").all_text_contents() == ["all", "MX", "Sonora"]
    page.close()
