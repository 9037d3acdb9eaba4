"""What the kinds share to show an answer: text tables (the analyst's ``to_table``, the CLI)
and matplotlib pieces (``ldpkit.analyst.plots`` passes matplotlib in: nothing here imports
it). A ``result`` is an ``ldpkit.analyst.EstimateResult``, an item its ``ItemEstimate``."""

from __future__ import annotations

import colorsys
from collections.abc import Callable, Collection, Container, Sequence
from dataclasses import asdict
from datetime import timedelta
from itertools import pairwise
from typing import Any

import numpy as np

NUMBERS = ["estimate", "stderr", "low", "high", "forgery_shift"]


def item_rows(items: Sequence[Any], columns: Sequence[str]) -> list[dict[str, Any]]:
    """One row of ``columns`` per item (a table's cell also by its attributes)."""
    rows = []
    for item in items:
        row = {**asdict(item), **(item.cell or {})}
        rows.append({c: row.get(c) for c in columns})
    return rows


def text_table(
    rows: list[dict[str, Any]], hidden: Collection[str] = (), dimensions: Sequence[str] = ()
) -> list[str]:
    """``rows`` in aligned columns, less the ``hidden`` ones: what names an item
    (``bucket``, ``category``, a table's ``dimensions``) left-aligned, numbers right."""
    if not rows:
        return ["(no buckets in this range)"]
    text = [{k: cell(k, v) for k, v in r.items() if k not in hidden} for r in rows]
    return aligned_lines(text, left={"bucket", "category", *dimensions})


def aligned_lines(rows: list[dict[str, str]], left: Container[str] | None = None) -> list[str]:
    """A header row and the rows in columns; the ``left`` columns (all if None) are
    left-aligned, the others (numbers) right-aligned."""
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}

    def line(cells: dict[str, str]) -> str:
        return "  ".join(
            cells[c].ljust(widths[c]) if left is None or c in left else cells[c].rjust(widths[c])
            for c in columns
        ).rstrip()

    return [line({c: c for c in columns}), *(line(r) for r in rows)]


def cell(key: str, value: Any) -> str:
    if key == "bucket":  # 2025-11-21T10:00:00Z -> 2025-11-21 10:00
        return str(value).replace("T", " ").removesuffix(":00Z")
    if key in ("category", "n", "interval") or isinstance(value, str):
        return "-" if value is None else str(value)
    return fmt(value)


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def nan(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]


def title(result: Any) -> str:
    return (
        f"{result.metric}  (n={result.n}, {result.mechanism}, ε={result.epsilon:g}, "
        f"{result.level:.0%} intervals)"
    )


def whiskers(ax: Any, x: Sequence[float], items: Any, label: str) -> None:
    shown = [(p, i.low, i.high) for p, i in zip(x, items, strict=True) if i.low is not None]
    if not shown:
        return
    xs, lows, highs = zip(*shown, strict=True)
    ax.vlines(xs, lows, highs, color="black", linewidth=1.5, label=label, zorder=3)
    ax.scatter(xs + xs, lows + highs, marker="_", s=60, color="black", zorder=3)


def bars(result: Any, plt: Any) -> Any:
    """One bar per item, whiskers from ``low`` to ``high`` (an unbiased estimate may lie
    outside its interval, which is clipped to [0, 1]: below 0, say)."""
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(result.items) + 2), 4))
    names = [i.category for i in result.items]
    x = list(range(len(names)))
    values = [i.estimate if i.estimate is not None else 0.0 for i in result.items]
    ax.bar(x, values, color="#4C78A8", label="unbiased estimate")
    whiskers(ax, x, result.items, label=f"{result.level:.0%} interval")
    if result.consistent:
        ax.scatter(
            x,
            [i.consistent for i in result.items],
            marker="_",
            s=300,
            color="#F58518",
            label="consistent",
            zorder=3,
        )
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xticks(x, names)
    ax.set_ylabel("fraction of users")
    ax.legend(loc="best", fontsize="small")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    ax.set_title(title(result), fontsize="medium")
    return fig


TABLEAU10 = [
    "#4C78A8", "#F58518", "#E45756", "#72B7B2", "#54A24B",
    "#EECA3B", "#B279A2", "#FF9DA6", "#9D755D", "#BAB0AC",
]  # fmt: skip


def palette(n: int) -> list[str]:
    """``n`` distinct colours: Tableau 10, then hues spread evenly (matplotlib's default
    cycle repeats after 10, so neighbouring series would look alike)."""
    if n <= len(TABLEAU10):
        return TABLEAU10[:n]
    rgb = [colorsys.hsv_to_rgb(k / n, 0.75, 0.85 if k % 2 else 0.6) for k in range(n)]
    return ["#{:02x}{:02x}{:02x}".format(*(round(255 * c) for c in col)) for col in rgb]


def time_axis(fig: Any, ax: Any, result: Any) -> None:
    """The bucket axis, the title; estimates below zero below a zero line."""
    ax.set_xlabel("bucket start (UTC)")
    ax.set_title(title(result), fontsize="medium")
    if ax.get_ylim()[0] < 0:
        ax.axhline(0.0, color="grey", linewidth=0.8)
    fig.autofmt_xdate()


def lines_over_time(
    result: Any, ax: Any, items: Callable[[Any], Sequence[Any]] = lambda part: part.items
) -> None:
    """One line per item (of ``items(part)``: the items, a marginal) across the buckets,
    its interval as a band and a whisker, each its own colour; the series side by side in
    a bucket (each one's line, points, whiskers and band shifted together, as the
    dashboard draws them); the legend beside the axes when there are many."""
    by_bucket = [{i.category: i for i in items(b)} for b in result.buckets]
    categories = list(dict.fromkeys([i.category for i in items(result)] + [
        c for found in by_bucket for c in found
    ]))  # fmt: skip
    times = [b.start for b in result.buckets]
    gaps = [b - a for a, b in pairwise(times)]
    step = (min(gaps) if gaps else timedelta(days=1)) * (0.25 / max(len(categories), 1))
    shade = 0.15 if len(categories) <= 6 else 0.05  # many bands: lighter, as the dashboard
    for j, (category, colour) in enumerate(zip(categories, palette(len(categories)), strict=True)):
        points = [found.get(category) for found in by_bucket]
        series = [
            nan([getattr(i, k) if i else None for i in points]) for k in ("estimate", "low", "high")
        ]
        x = [t + (j - (len(categories) - 1) / 2) * step for t in times]
        ax.plot(x, series[0], marker="o", label=category, color=colour, zorder=3)
        ax.vlines(x, series[1], series[2], color=colour, linewidth=1.2, alpha=0.7, zorder=2)
        ax.fill_between(x, series[1], series[2], alpha=shade, color=colour)
    ax.set_ylabel("fraction of users")
    if len(categories) > 6:
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize="small",
            ncol=1 + len(categories) // 16,
        )
    else:
        ax.legend(loc="best", fontsize="small", ncol=2)


def bucket_name(start: Any) -> str:
    """A bucket's start as a tick label: the day, with the time unless it is midnight."""
    return str(start.strftime("%Y-%m-%d %H:%M").removesuffix(" 00:00"))


def heat_over_time(fig: Any, ax: Any, result: Any, label: str, top_first: bool = False) -> None:
    """A bucket x item heat map of the items' unbiased estimates (a distribution's bins, a
    table's cells): blue above zero, red below (one colour scale, symmetric about zero),
    each cell labelled when there is room; ``top_first``: the first item on top."""
    buckets = [b for b in result.buckets if b.items]
    values = np.array([nan([i.estimate for i in b.items]) for b in buckets]).T
    reach = max(float(np.nanmax(np.abs(values))), 1e-9)
    image = ax.pcolormesh(values, cmap="RdBu", vmin=-reach, vmax=reach, edgecolors="white")
    below = int(np.sum(values < 0))
    fig.colorbar(
        image, ax=ax, label="fraction of users" + (f"\n(red: {below} below zero)" if below else "")
    )
    names = [bucket_name(b.start) for b in buckets]
    every = max(1, len(names) // 12)
    ax.set_xticks([k + 0.5 for k in range(0, len(names), every)], names[::every])
    rows = [i.category for i in buckets[0].items]
    step = max(1, len(rows) // 16)
    ax.set_yticks([k + 0.5 for k in range(0, len(rows), step)], rows[::step], fontsize="small")
    ax.set_xlabel("bucket start (UTC)")
    ax.set_ylabel(label)
    if top_first:
        ax.invert_yaxis()
    if len(names) <= 12 and len(rows) <= 16:
        for (row, col), v in np.ndenumerate(values):
            colour = "white" if abs(v) > 0.6 * reach else "black"
            ax.text(
                col + 0.5, row + 0.5, f"{v:.3f}", ha="center", va="center", fontsize=7, color=colour
            )
