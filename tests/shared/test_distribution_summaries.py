"""A distribution's mean and quantile intervals follow the chosen estimand (issue 28).

Simulated campaigns from the exact law of the aggregate (benchmarks/distribution_bins.py),
each estimand scored against its own truth: the campaign's users' (``reporters``) or the
population's. Tolerances from theory: a standard deviation estimated from R campaigns has a
relative standard error of about ``1 / sqrt(2 R)``, a coverage of 0.95 a binomial one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.distribution_bins import BRANCHING, LEAVES, beta_leaves, simulate
from benchmarks.distribution_summaries import run_cell
from ldpkit.distribution import ESTIMANDS
from ldpkit.mechanisms.hierarchical import HierarchicalHistogram

CAMPAIGNS = 300
RATIO_TOLERANCE = 4.0 / math.sqrt(2 * CAMPAIGNS)
COVERAGE_FLOOR = 0.95 - 3.0 * math.sqrt(0.95 * 0.05 / CAMPAIGNS)


@pytest.mark.parametrize(
    ("population", "epsilon", "n"), [("beta(2,5)", 8.0, 3000), ("half at 0.4", 4.0, 300)]
)
def test_mean_and_quantiles_cover_their_estimand(population: str, epsilon: float, n: int) -> None:
    """The mean's stderr is the spread of its error about each estimand's own mean (the
    population's stderr is 1.3-1.7x the reporters' spread here, so serving it for both fails);
    the mean's interval, with and without its half leaf, and the median's and 0.9 quantile's
    cover at 95%."""
    out = run_cell(population, epsilon, n, CAMPAIGNS, seed=2801)
    for e in ESTIMANDS:
        s = out[e]
        assert abs(s.se_ratio - 1.0) <= RATIO_TOLERANCE, (e, s.se_ratio)
        assert min(s.wald, s.served, *s.quantiles.values()) >= COVERAGE_FLOOR, (e, s)
    assert out["reporters"].mean_width < out["population"].mean_width


def test_distribution_function_band_follows_the_estimand() -> None:
    """The quantile intervals invert the band at the leaf edges: its stderr for each
    estimand is the spread of ``P(X < e)``'s error about that estimand's value."""
    m = HierarchicalHistogram(
        epsilon=8.0, bounds=(0.0, 1.0), resolution=LEAVES, branching=BRANCHING
    )
    leaves, n = beta_leaves(), 2000
    users, aggregates = simulate(m, leaves, n, CAMPAIGNS, np.random.default_rng(2802))
    at = np.array([8, 16, 24, 40])
    truth = {
        "reporters": np.cumsum(users, axis=1)[:, at - 1] / n,
        "population": np.cumsum(leaves)[at - 1][None, :],
    }
    errors = {e: np.empty((CAMPAIGNS, at.size)) for e in ESTIMANDS}
    stderr = {e: np.empty((CAMPAIGNS, at.size)) for e in ESTIMANDS}
    for r, aggregate in enumerate(aggregates):
        est = m.estimate(aggregate)
        for e in ESTIMANDS:
            cdf, se = est.edge_band(e)
            errors[e][r] = cdf[at] - truth[e][min(r, len(truth[e]) - 1)]
            stderr[e][r] = se[at]
    for e in ESTIMANDS:
        ratio = np.sqrt(np.mean(stderr[e] ** 2, axis=0)) / np.std(errors[e], axis=0)
        assert np.all(np.abs(ratio - 1.0) <= RATIO_TOLERANCE), (e, ratio)
