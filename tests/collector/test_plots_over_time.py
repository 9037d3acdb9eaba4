"""``ldpkit estimates --per-bucket --plot`` (``ldpkit.analyst.plots``): a distribution over
time is its mean and quantiles per bucket with their intervals, above a bucket x bin heat
map (not one line per bin); nothing is drawn outside its axes; estimates below zero are red
in the heat map; many series over time each have their own colour. The figures are written
to $LDPKIT_SCREENSHOTS when set (to look at)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit.collector.analyst import EstimateResult

pytest.importorskip("matplotlib")

DAY = 86_400
T0 = 1_763_683_200  # 2025-11-21 00:00 UTC
BINS = 16
DAYS = 5


def _bins(rng: np.random.Generator, shift: float) -> list[dict[str, Any]]:
    edges = np.linspace(0.0, 120.0, BINS + 1)
    truth = np.exp(-(((edges[:-1] + 3.75 - 30.0 - shift) / 20.0) ** 2))
    estimate = truth / truth.sum() + rng.normal(0, 0.012, BINS)  # the top bins: below zero
    return [
        {
            "lower": float(a),
            "upper": float(b),
            "estimate": float(e),
            "stderr": 0.012,
            "low": max(0.0, float(e) - 0.024),
            "high": float(e) + 0.024,
        }
        for a, b, e in zip(edges[:-1], edges[1:], estimate, strict=True)
    ]


def _part(rng: np.random.Generator, day: int) -> dict[str, Any]:
    mean = 32.0 + 2 * day
    return {
        "n": 2000,
        "items": _bins(rng, 2.0 * day),
        "mean": mean,
        "mean_stderr": 1.0,
        "mean_low": mean - 2.0,
        "mean_high": mean + 2.0,
        "quantiles": [
            {"q": 0.5, "value": mean - 2, "low": mean - 6, "high": mean + 1},
            {"q": 0.9, "value": mean + 30, "low": mean + 24, "high": mean + 36},
        ],
    }


def distribution_over_time() -> EstimateResult:
    rng = np.random.default_rng(28)
    buckets = [{"bucket": T0 + d * DAY, **_part(rng, d)} for d in range(DAYS)]
    whole = _part(rng, 2)
    whole["n"] = 2000 * DAYS
    return EstimateResult.from_json(
        {
            "metric": "minutes",
            "kind": "distribution",
            "version": "0123456789abcdef",
            "mechanism": "hh",
            "epsilon": 2.0,
            "level": 0.95,
            "consistent": False,
            "bounds": [0.0, 120.0],
            **whole,
            "buckets": buckets,
        }
    )


def outside(fig: Any) -> list[str]:
    """The data artists (lines, collections, patches, texts, images) of each axes whose
    drawn extent leaves the axes' box (a pixel of slack), after drawing the figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    for ax in fig.axes:
        box = ax.get_window_extent(renderer)
        artists = [*ax.lines, *ax.collections, *ax.patches, *ax.texts, *ax.images]
        for artist in artists:
            if not artist.get_visible():
                continue
            extent = artist.get_window_extent(renderer)
            if extent.width == 0 and extent.height == 0:
                continue
            if (
                extent.x0 < box.x0 - 1
                or extent.x1 > box.x1 + 1
                or extent.y0 < box.y0 - 1
                or extent.y1 > box.y1 + 1
            ):
                problems.append(f"{ax.get_label() or ax.get_ylabel()}: {artist} at {extent}")
    return problems


def save(fig: Any, name: str, tmp_path: Path) -> Path:
    folder = Path(os.environ.get("LDPKIT_SCREENSHOTS") or tmp_path)
    path = folder / name
    fig.savefig(path, dpi=110)
    return path


def test_a_distribution_over_time_is_its_mean_quantiles_and_a_heat_map(tmp_path: Path) -> None:
    from ldpkit.analyst.plots import plot_estimate

    result = distribution_over_time()
    assert [q.q for q in result.buckets[0].quantiles] == [0.5, 0.9]
    fig = plot_estimate(result, tmp_path / "minutes.png")
    assert (tmp_path / "minutes.png").read_bytes()[:4] == b"\x89PNG"
    summary, heat, colourbar = fig.axes  # the heat map's colour bar is an axes of its own
    # mean, p50, p90: one line each (not one per bin), a point per bucket
    lines = [line for line in summary.lines if line.get_label() in ("mean", "p50", "p90")]
    assert [line.get_label() for line in lines] == ["mean", "p50", "p90"]
    assert all(len(line.get_xdata()) == DAYS for line in lines)
    assert len({line.get_color() for line in lines}) == 3
    assert list(summary.lines) == lines  # nothing else drawn as a line
    # the heat map: a cell per bin and bucket, one colour scale symmetric about zero
    (mesh,) = heat.collections
    values = np.asarray(mesh.get_array()).reshape(BINS, DAYS)
    assert values[:, 1] == pytest.approx([i.estimate for i in result.buckets[1].items])
    assert values.min() < 0, "the fixture has bins below zero"
    low, high = mesh.get_clim()
    assert low == -high and high >= np.abs(values).max()
    assert "below zero" in colourbar.get_ylabel()
    assert not outside(fig)
    save(fig, "plot-distribution-over-time.png", tmp_path)


def test_the_check_finds_a_mark_outside_its_axes() -> None:
    """The check of the test above, on a figure that draws outside its axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ax.set_ylim(0.2, 0.8)  # the line runs below and above its axes
    assert outside(fig)
    plt.close(fig)


def test_sixteen_series_over_time_have_sixteen_colours(tmp_path: Path) -> None:
    from ldpkit.analyst.plots import plot_estimate

    names = [f"country-{c}" for c in "abcdefghijklmnop"]
    items = [
        {"category": c, "estimate": 0.0625, "stderr": 0.01, "low": 0.04, "high": 0.08}
        for c in names
    ]
    items[3]["estimate"] = -0.01  # below zero: the axis goes below its zero line
    result = EstimateResult.from_json(
        {
            "metric": "country",
            "kind": "categorical",
            "n": 3000,
            "epsilon": 2.0,
            "level": 0.95,
            "items": items,
            "buckets": [{"bucket": T0 + d * DAY, "n": 1000, "items": items} for d in range(3)],
        }
    )
    fig = plot_estimate(result)
    (ax,) = fig.axes
    colours = [line.get_color() for line in ax.lines if line.get_label() in names]
    assert len(colours) == len(set(colours)) == 16
    assert ax.get_ylim()[0] < -0.01
    assert not outside(fig)
    save(fig, "plot-sixteen-over-time.png", tmp_path)


def test_each_series_points_sit_on_its_own_whiskers(tmp_path: Path) -> None:
    """Over time, the series of a bucket sit side by side: each one's points, whiskers and
    band are shifted together, so a point is on its own whisker, never on another's."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgb
    from matplotlib.dates import date2num

    from ldpkit.analyst.plots import plot_estimate

    names = ["light", "dark", "system"]
    items = [
        {"category": c, "estimate": 0.3, "stderr": 0.01, "low": 0.28, "high": 0.32} for c in names
    ]
    result = EstimateResult.from_json(
        {
            "metric": "theme",
            "kind": "categorical",
            "n": 3000,
            "epsilon": 2.0,
            "level": 0.95,
            "items": items,
            "buckets": [{"bucket": T0 + d * DAY, "n": 1000, "items": items} for d in range(3)],
        }
    )
    fig = plot_estimate(result)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.lines if line.get_label() in names}
    whiskers = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(lines) == len(whiskers) == 3
    xs = []
    for name, whisker in zip(names, whiskers, strict=True):
        at = np.asarray(date2num(lines[name].get_xdata()), dtype=float)
        ends = np.array([seg[0][0] for seg in whisker.get_segments()])
        np.testing.assert_allclose(ends, at, rtol=0, atol=1e-9)  # on its own whiskers
        assert tuple(whisker.get_color()[0][:3]) == pytest.approx(to_rgb(lines[name].get_color()))
        xs.append(at)
    assert len({round(float(x), 6) for x in np.concatenate(xs)}) == 9  # side by side
    assert not outside(fig)
    save(fig, "plot-theme-over-time.png", tmp_path)
