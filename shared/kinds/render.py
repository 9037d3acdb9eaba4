"""What the kinds share to show an answer: text tables (the analyst's ``to_table``, the CLI)
and matplotlib pieces (``ldpkit.analyst.plots`` passes matplotlib in: nothing here imports
it on loading). A ``result`` is an ``ldpkit.analyst.EstimateResult``, an item its
``ItemEstimate``."""

from __future__ import annotations

import colorsys
import textwrap
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


BAR = "#4C78A8"
"""An estimate's bar; with a ``most_common``, the bars of the items that could be the most
common (as the dashboard draws them)."""
OTHER = "#B6CCE3"
"""With a ``most_common``, the bars of the items less common than one of its set."""


def member(part: Any) -> Callable[[Any], bool]:
    """Whether an item of ``part`` (the answer or a bucket) is in its ``most_common`` set:
    a category or a node's path by name, a table's cell by its attributes, a bin by its
    name ``[lo, hi)``; every item is when ``part`` has no mode."""
    common = part.most_common
    if not _has_mode(part):
        return lambda item: True
    names = {str(s) for s in common.set if not isinstance(s, dict)}
    cells = [s for s in common.set if isinstance(s, dict)]
    return lambda item: item.cell in cells if item.cell is not None else item.category in names


def set_colours(part: Any, items: Sequence[Any]) -> list[str]:
    """Each item's bar colour: dark (:data:`BAR`) in ``part``'s most common set, light
    (:data:`OTHER`) outside it; all dark without a mode."""
    inside = member(part)
    return [BAR if inside(i) else OTHER for i in items]


def set_line(part: Any) -> str:
    """``part``'s ``most common: X (or Y at 95%)`` ("" without a mode)."""
    return str(part.most_common.describe()) if _has_mode(part) else ""


def set_legend(ax: Any, part: Any, **options: Any) -> None:
    """``ax``'s legend (``options``: ``loc``, ...); with a mode, the dark and light bars'
    entries first (one bar's colour could not say both)."""
    handles, labels = ax.get_legend_handles_labels()
    if set_line(part):
        from matplotlib.patches import Patch  # the caller has matplotlib (ldpkit[plots])

        level = f"{part.most_common.level:.0%}"
        handles = [Patch(color=BAR), Patch(color=OTHER), *handles]
        labels = [f"could be the most common ({level})", "less common than one of those", *labels]
    ax.legend(handles, labels, **options)


def bars(result: Any, plt: Any) -> Any:
    """One bar per item, whiskers from ``low`` to ``high`` (an unbiased estimate may lie
    outside its interval, which is clipped to [0, 1]: below 0, say); with a mode, the bars
    of its confidence set dark, the others light, and ``most common: X (or Y at 95%)`` in
    the title."""
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(result.items) + 2), 4))
    names = [i.category for i in result.items]
    x = list(range(len(names)))
    values = [i.estimate if i.estimate is not None else 0.0 for i in result.items]
    line = set_line(result)
    ax.bar(
        x,
        values,
        color=set_colours(result, result.items),
        label="" if line else "unbiased estimate",
    )
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
    set_legend(ax, result, loc="best", fontsize="small")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    ax.set_title(title(result) + wrapped(line, fig), fontsize="medium")
    return fig


def wrapped(line: str, fig: Any) -> str:
    """``line`` on new lines of the title, as wide as ``fig`` holds ("" if none)."""
    width = int(fig.get_figwidth() * 11)  # characters of the medium font per inch
    return "".join("\n" + part for part in textwrap.wrap(line, max(width, 30)))


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
    """The bucket axis, the title (with the whole range's most common); estimates below
    zero below a zero line."""
    ax.set_xlabel("bucket start (UTC)")
    ax.set_title(title(result) + wrapped(set_line(result), fig), fontsize="medium")
    if ax.get_ylim()[0] < 0:
        ax.axhline(0.0, color="grey", linewidth=0.8)
    fig.autofmt_xdate()


def lines_over_time(
    result: Any,
    ax: Any,
    items: Callable[[Any], Sequence[Any]] | None = None,
) -> None:
    """One line per item (of ``items(part)``: a marginal; default the items) across the
    buckets, its interval as a band and a whisker, each its own colour; the series side by
    side in a bucket (each one's line, points, whiskers and band shifted together, as the
    dashboard draws them); the legend beside the axes when it is long. Of the items
    themselves, a point is filled when the item is in its bucket's ``most_common`` set
    (it could be the most common then), hollow when not, with a key saying so."""
    marked = items is None and any(_has_mode(b) for b in result.buckets)
    pick = items or (lambda part: part.items)
    by_bucket = [{i.category: i for i in pick(b)} for b in result.buckets]
    inside = [member(b) for b in result.buckets]
    categories = list(dict.fromkeys([i.category for i in pick(result)] + [
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
        face = "white" if marked else colour  # hollow; the set's points filled on top
        ax.plot(x, series[0], marker="o", mfc=face, label=category, color=colour, zorder=3)
        ax.vlines(x, series[1], series[2], color=colour, linewidth=1.2, alpha=0.7, zorder=2)
        ax.fill_between(x, series[1], series[2], alpha=shade, color=colour)
        if marked:
            filled = [(t, v) for t, v, i, ins in zip(x, series[0], points, inside, strict=True)
                      if i is not None and ins(i)]  # fmt: skip
            ax.scatter(
                [t for t, _ in filled], [v for _, v in filled], color=colour, s=36, zorder=4,
                gid=f"most-common {category}",
            )  # fmt: skip
    ax.set_ylabel("fraction of users")
    key: list[tuple[Any, str]] = []
    if marked:
        from matplotlib.lines import Line2D  # the caller has matplotlib (ldpkit[plots])

        level = next(b.most_common.level for b in result.buckets if _has_mode(b))
        key = [
            (Line2D([], [], marker="o", color="black", linestyle="none"),
             f"could be the bucket's most common ({level:.0%})"),
            (Line2D([], [], marker="o", color="black", mfc="white", linestyle="none"),
             "less common than one of those"),
        ]  # fmt: skip
    handles, labels = ax.get_legend_handles_labels()
    handles, labels = [h for h, _ in key] + handles, [t for _, t in key] + labels
    if len(labels) > 6:  # beside the axes: inside, it would hide lines
        ax.legend(
            handles,
            labels,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize="small",
            ncol=1 + len(categories) // 16,
        )
    else:
        ax.legend(handles, labels, loc="best", fontsize="small", ncol=2)


def _has_mode(part: Any) -> bool:
    return part.most_common is not None and part.most_common.mode is not None


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
    marked = [(col, b) for col, b in enumerate(buckets) if _has_mode(b)]
    if marked:  # each bucket's most common set outlined
        from matplotlib.patches import Rectangle  # the caller has matplotlib (ldpkit[plots])

        for col, bucket in marked:
            inside = member(bucket)
            for row, item in enumerate(bucket.items):
                if inside(item):
                    outline = Rectangle((col, row), 1, 1, fill=False, edgecolor="black")
                    outline.set(linewidth=2, gid="most-common", zorder=3)
                    ax.add_patch(outline)
        level = bucket.most_common.level
        ax.set_title(f"outlined: could be the bucket's most common ({level:.0%})", fontsize="small")
    if len(names) <= 12 and len(rows) <= 16:
        for (row, col), v in np.ndenumerate(values):
            colour = "white" if abs(v) > 0.6 * reach else "black"
            ax.text(
                col + 0.5, row + 0.5, f"{v:.3f}", ha="center", va="center", fontsize=7, color=colour
            )
