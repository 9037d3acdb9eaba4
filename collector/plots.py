"""Moved to :mod:`ldpkit.analyst.plots`; kept so that existing imports go on working."""

from ..analyst.plots import plot_estimate as plot_estimate
from ..analyst.plots import plot_over_time as plot_over_time
