"""Moved to :mod:`ldpkit.analyst.plots`; kept so that existing imports go on working."""

from ..analyst.plots import plot_estimate, plot_over_time

__all__ = ["plot_estimate", "plot_over_time"]
