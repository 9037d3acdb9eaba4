"""Plots of estimates with their intervals (matplotlib is an optional extra: ``ldpkit[plots]``).

- categorical (and a hierarchy's nodes, a table's cells, strings found): one bar per
  item, whiskers from ``low`` to ``high``;
- distribution: the bins as bars on the bounds axis, quantiles marked with their intervals;
- numeric: the mean as a point with its interval;
- over time (``per_bucket=True`` results): one line per category (or the mean) across
  buckets, with the interval as a shaded band.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import EstimateResult


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files, not windows: works on servers and in CI
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'ldpkit[plots]'") from None
    return plt


def _title(result: EstimateResult) -> str:
    return (
        f"{result.metric}  (n={result.n}, {result.mechanism}, ε={result.epsilon:g}, "
        f"{result.level:.0%} intervals)"
    )


def plot_estimate(result: EstimateResult, path: str | Path | None = None) -> Any:
    """Bars with interval whiskers (categorical) or a point with its interval (numeric).

    Returns the matplotlib Figure; writes it to ``path`` when given.
    """
    plt = _pyplot()
    if result.buckets:
        return plot_over_time(result, path)
    if result.kind == "distribution":
        return _histogram(result, path)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(result.items) + 2), 4))
    if result.kind != "numeric":
        names = [i.category for i in result.items]
        x = list(range(len(names)))
        values = [i.estimate if i.estimate is not None else 0.0 for i in result.items]
        ax.bar(x, values, color="#4C78A8", label="unbiased estimate")
        # Whiskers from low to high (an unbiased estimate may lie outside its interval,
        # which is clipped to [0, 1]: below 0, say).
        _whiskers(ax, x, result.items, label=f"{result.level:.0%} interval")
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
    else:
        if result.mean is not None:
            low = result.mean - (result.low if result.low is not None else result.mean)
            high = (result.high if result.high is not None else result.mean) - result.mean
            ax.errorbar(
                [result.metric],
                [result.mean],
                yerr=[[low], [high]],
                fmt="o",
                capsize=6,
                color="#4C78A8",
            )
        ax.set_ylabel("mean")
    ax.set_title(_title(result), fontsize="medium")
    return _done(fig, path)


def _done(fig: Any, path: str | Path | None) -> Any:
    """The figure, laid out, and written to ``path`` when given."""
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _whiskers(ax: Any, x: Sequence[float], items: Any, label: str) -> None:
    shown = [(p, i.low, i.high) for p, i in zip(x, items, strict=True) if i.low is not None]
    if not shown:
        return
    xs, lows, highs = zip(*shown, strict=True)
    ax.vlines(xs, lows, highs, color="black", linewidth=1.5, label=label, zorder=3)
    ax.scatter(xs + xs, lows + highs, marker="_", s=60, color="black", zorder=3)


def _histogram(result: EstimateResult, path: str | Path | None) -> Any:
    """A distribution: the bins as bars on the bounds axis, whiskers at their middles, the
    quantiles as lines with their intervals shaded, the mean in the title."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    bins = [i for i in result.items if i.lower is not None and i.upper is not None]
    lower = [float(i.lower) for i in bins]  # type: ignore[arg-type]
    width = [float(i.upper) - float(i.lower) for i in bins]  # type: ignore[arg-type]
    values = [i.estimate if i.estimate is not None else 0.0 for i in bins]
    ax.bar(
        lower,
        values,
        width=width,
        align="edge",
        color="#4C78A8",
        edgecolor="white",
        label="fraction in the bin",
    )
    middles = [lo + w / 2 for lo, w in zip(lower, width, strict=True)]
    _whiskers(ax, middles, bins, label=f"{result.level:.0%} interval")
    for q in result.quantiles:
        ax.axvspan(q.low, q.high, color="#F58518", alpha=0.12, zorder=0)
        ax.axvline(q.value, color="#F58518", linewidth=2)
        ax.annotate(
            f"p{q.q * 100:g}",
            (q.value, 1.0),
            xycoords=("data", "axes fraction"),
            ha="center",
            va="bottom",
            color="#F58518",
            fontsize="small",
        )
    ax.axhline(0.0, color="grey", linewidth=0.8)
    if result.bounds is not None:
        ax.set_xlim(*result.bounds)
    ax.set_xlabel(result.metric)
    ax.set_ylabel("fraction of users")
    ax.legend(loc="upper right", fontsize="small")
    mean = ""
    if result.mean is not None and result.low is not None and result.high is not None:
        mean = f"\nmean {result.mean:.4g} [{result.low:.4g}, {result.high:.4g}]"
    ax.set_title(_title(result) + mean, fontsize="medium", pad=14)  # room for "p50"
    return _done(fig, path)


def plot_over_time(result: EstimateResult, path: str | Path | None = None) -> Any:
    """Estimates per time bucket, with intervals as bands."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    times = [b.start for b in result.buckets]
    if result.kind != "numeric":
        categories = [i.category for i in result.items] or (
            [i.category for i in result.buckets[0].items] if result.buckets else []
        )
        for index, category in enumerate(categories):
            est = [b.items[index].estimate if b.items else None for b in result.buckets]
            low = [b.items[index].low if b.items else None for b in result.buckets]
            high = [b.items[index].high if b.items else None for b in result.buckets]
            line = ax.plot(times, _nan(est), marker="o", label=category)[0]
            ax.fill_between(times, _nan(low), _nan(high), alpha=0.15, color=line.get_color())
        ax.set_ylabel("fraction of users")
        ax.legend(loc="best", fontsize="small", ncol=2)
    else:
        ax.plot(times, _nan([b.mean for b in result.buckets]), marker="o", label="mean")
        ax.fill_between(
            times,
            _nan([b.low for b in result.buckets]),
            _nan([b.high for b in result.buckets]),
            alpha=0.2,
        )
        ax.set_ylabel("mean")
    ax.set_xlabel("bucket start (UTC)")
    ax.set_title(_title(result), fontsize="medium")
    fig.autofmt_xdate()
    return _done(fig, path)


def _nan(values: list[float | None]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]
