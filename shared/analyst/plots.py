"""Plots of estimates with their intervals (matplotlib is an optional extra: ``ldpkit[plots]``).

- categorical (and a hierarchy's nodes, a table's cells, strings found): one bar per
  item, whiskers from ``low`` to ``high``;
- distribution: the bins as bars on the bounds axis, quantiles marked with their intervals;
- numeric: the mean as a point with its interval;
- over time (``per_bucket=True`` results): one line per category (or the mean) across
  buckets, with the interval as a shaded band and a whisker, the categories side by side
  in a bucket (each one's points on its own whiskers); a distribution's mean and quantiles per
  bucket with their intervals, above a bucket x bin heat map of its fractions.

With a ``most_common`` (docs/statistics.md, "Which is the most common?"), the bars of the
items that could be the most common are dark and the others light, its line ``most
common: X (or Y at 95%)`` in the title; over time, each bucket's own set: a point filled
when its item is in it, hollow when not (a key says so), a heat map's cells outlined.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..kinds import kind_or_default
from . import EstimateResult


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files, not windows: works on servers and in CI
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'ldpkit[plots]'") from None
    return plt


def plot_estimate(result: EstimateResult, path: str | Path | None = None) -> Any:
    """Bars with interval whiskers (categorical) or a point with its interval (numeric):
    the kind's own plot (a distribution's histogram).

    Returns the matplotlib Figure; writes it to ``path`` when given.
    """
    plt = _pyplot()
    if result.buckets:
        return plot_over_time(result, path)
    return _done(kind_or_default(result.kind).plot(result, plt), path)


def _done(fig: Any, path: str | Path | None) -> Any:
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def plot_over_time(result: EstimateResult, path: str | Path | None = None) -> Any:
    """Estimates per time bucket, with intervals as bands (a distribution: its mean and
    quantiles per bucket, and a bucket x bin heat map)."""
    return _done(kind_or_default(result.kind).plot_over_time(result, _pyplot()), path)
