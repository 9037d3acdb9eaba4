"""``ldpkit estimates --plot`` (``ldpkit.analyst.plots``) shows which could be the most
common, from real answers: the bars of the answer's ``most_common`` set dark, the others
light, its line in the title; over time, a point filled when its item is in that bucket's
set and hollow when not (a distribution's or a table's heat map: those cells outlined).
The figures are written to $LDPKIT_SCREENSHOTS when set (to look at)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from ldpkit import wire
from ldpkit.analyst import EstimateResult
from ldpkit.kinds.render import BAR, OTHER
from ldpkit.metrics import MetricDefinition

from .helpers import batch, estimates, new_ids, post_batch, today
from .test_kinds_api import DIST, put
from .test_plots_over_time import outside, save

pytest.importorskip("matplotlib")

DAY = 86_400
HAIR = {"kind": "categorical", "categories": ["red", "brown", "black"], "epsilon": 2.0}


async def send_on(client: TestClient, d: MetricDefinition, values: Any, days_ago: int) -> None:
    """The reports of ``values`` in the bucket of ``days_ago`` days before today."""
    reports = d.mechanism_instance.perturb(values, rng=np.random.default_rng(7 + days_ago))
    block = wire.Block(
        d.name,
        d.fingerprint,
        today() - days_ago * DAY,
        new_ids(len(reports)),
        np.ascontiguousarray(reports).tobytes(),
    )
    status, answer = await post_batch(client, batch(block))
    assert status == 200 and answer["accepted"] == len(reports), answer


def bar_colours(ax: Any) -> list[str]:
    """The estimates' bars' colours, left to right (not the legend's patches)."""
    from matplotlib.colors import to_hex

    bars = [p for p in ax.patches if p.get_width() > 0 and p.axes is ax]
    return [to_hex(p.get_facecolor()) for p in sorted(bars, key=lambda p: p.get_x())]


def dark(names: list[str], in_set: list[Any]) -> list[str]:
    return [BAR.lower() if n in in_set else OTHER.lower() for n in names]


async def hair(client: TestClient) -> MetricDefinition:
    status, answer = await put(client, "hair", HAIR)
    assert status == 201, answer
    d = MetricDefinition.from_dict("hair", answer["definition"])
    await send_on(client, d, np.repeat([0, 1, 2], [500, 200, 60]), 1)  # red far ahead
    await send_on(client, d, np.repeat([1, 0, 2], [500, 200, 60]), 0)  # brown: in all, a tie
    return d


async def test_the_bars_of_the_set_are_dark(client: TestClient, tmp_path: Path) -> None:
    from ldpkit.analyst.plots import plot_estimate

    d = await hair(client)
    status, body = await estimates(client, "hair")
    assert status == 200
    common = body["most_common"]
    assert set(common["set"]) == {"red", "brown"}  # the fixture: two could be the most common
    fig = plot_estimate(EstimateResult.from_json(body, d))
    (ax,) = fig.axes
    assert bar_colours(ax) == dark(["red", "brown", "black"], common["set"])
    other = next(s for s in common["set"] if s != common["mode"])
    assert f"most common: {common['mode']} (or {other} at 95%)" in ax.get_title()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == ["could be the most common (95%)", "less common than one of those"]
    assert not outside(fig)
    save(fig, "plot-most-common.png", tmp_path)


async def test_over_time_the_points_of_each_buckets_set_are_filled(
    client: TestClient, tmp_path: Path
) -> None:
    from matplotlib.dates import date2num

    from ldpkit.analyst.plots import plot_estimate

    d = await hair(client)
    status, body = await estimates(client, "hair", per_bucket="true")
    assert status == 200
    sets = [b["most_common"]["set"] for b in body["buckets"]]
    # the buckets' sets differ: each bucket's own is drawn, not the answer's
    assert sets == [["red"], ["brown"]] and len(body["most_common"]["set"]) == 2
    result = EstimateResult.from_json(body, d)
    fig = plot_estimate(result)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.lines if line.get_label() in HAIR["categories"]}
    assert all(line.get_markerfacecolor() == "white" for line in lines.values())  # hollow
    filled = {c.get_gid(): c for c in ax.collections if (c.get_gid() or "").startswith("most")}
    for name, line in lines.items():
        xs = np.asarray(date2num(line.get_xdata()), dtype=float)
        dots = filled[f"most-common {name}"].get_offsets()
        at = {round(float(x), 9) for x in np.asarray(dots)[:, 0]} if len(dots) else set()
        expected = {round(float(x), 9) for x, s in zip(xs, sets, strict=True) if name in s}
        assert at == expected, name
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == "could be the bucket's most common (95%)"
    assert not outside(fig)
    save(fig, "plot-most-common-over-time.png", tmp_path)


async def test_a_distributions_modal_bins_and_a_tables_cells(
    client: TestClient, tmp_path: Path
) -> None:
    from ldpkit.analyst.plots import plot_estimate

    status, answer = await put(client, "wait_dist", DIST)
    assert status == 201, answer
    d = MetricDefinition.from_dict("wait_dist", answer["definition"])
    await send_on(client, d, np.concatenate([np.full(3000, 40.0), np.linspace(0, 120, 1000)]), 1)
    await send_on(client, d, np.concatenate([np.full(1500, 70.0), np.linspace(0, 120, 500)]), 0)
    status, body = await estimates(client, "wait_dist", bins=4)
    assert status == 200
    names = [f"[{i['lower']:g}, {i['upper']:g})" for i in body["items"]]
    fig = plot_estimate(EstimateResult.from_json(body, d))
    ax = fig.axes[0]
    assert bar_colours(ax) == dark(names, body["most_common"]["set"])
    assert "most common: [30, 60)" in ax.get_title()
    save(fig, "plot-most-common-distribution.png", tmp_path)
    # over time: each bucket's set outlined in the heat map (a row per bin, a column per bucket)
    status, body = await estimates(client, "wait_dist", bins=4, per_bucket="true")
    sets = [b["most_common"]["set"] for b in body["buckets"]]
    assert sets == [["[30, 60)"], ["[60, 90)"]]
    fig = plot_estimate(EstimateResult.from_json(body, d))
    heat = fig.axes[1]
    outlined = {(p.get_x(), p.get_y()) for p in heat.patches if p.get_gid() == "most-common"}
    assert outlined == {(col, names.index(s)) for col, b in enumerate(sets) for s in b}
    assert not outside(fig)
    save(fig, "plot-most-common-distribution-over-time.png", tmp_path)
    # a table's cells: by their attributes
    car = {"kind": "table", "epsilon": 2.0, "dimensions": {"type": ["Compact", "Van"],
           "origin": ["USA", "non-USA"]}}  # fmt: skip
    status, answer = await put(client, "car", car)
    t = MetricDefinition.from_dict("car", answer["definition"])
    await send_on(client, t, np.repeat([0, 1, 2, 3], [100, 700, 660, 100]), 0)
    status, body = await estimates(client, "car")
    cells = [i["cell"] for i in body["items"]]
    assert len(body["most_common"]["set"]) == 2
    fig = plot_estimate(EstimateResult.from_json(body, t))
    assert bar_colours(fig.axes[0]) == dark(cells, body["most_common"]["set"])
    save(fig, "plot-most-common-table.png", tmp_path)
