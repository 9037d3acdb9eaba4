"""Plots of estimates with their intervals (matplotlib is an optional extra: ``ldpkit[plots]``).

- categorical: one bar per category, whiskers from ``low`` to ``high``;
- numeric: the mean as a point with its interval;
- over time (``per_bucket=True`` results): one line per category (or the mean) across
  buckets, with the interval as a shaded band.
"""

from __future__ import annotations

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
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(result.items) + 2), 4))
    if result.kind != "numeric":
        names = [i.category for i in result.items]
        values = [i.estimate if i.estimate is not None else 0.0 for i in result.items]
        lows = [
            v - i.low if i.low is not None else 0.0
            for v, i in zip(values, result.items, strict=True)
        ]
        highs = [
            i.high - v if i.high is not None else 0.0
            for v, i in zip(values, result.items, strict=True)
        ]
        ax.bar(names, values, color="#4C78A8", label="unbiased estimate")
        ax.errorbar(
            names,
            values,
            yerr=[lows, highs],
            fmt="none",
            ecolor="black",
            capsize=4,
            label=f"{result.level:.0%} interval",
        )
        if result.consistent:
            ax.scatter(
                names,
                [i.consistent for i in result.items],
                marker="_",
                s=300,
                color="#F58518",
                label="consistent (Norm-Sub)",
                zorder=3,
            )
        ax.axhline(0.0, color="grey", linewidth=0.8)
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
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


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
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _nan(values: list[float | None]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]
