"""What an answer discloses about forged reports (issue 26), in the core: a mean's interval
beyond its bounds, and the ``forgery_fraction`` definition key."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from ldpkit.errors import ParameterError
from ldpkit.estimates import MeanEstimate
from ldpkit.mechanisms import mechanism
from ldpkit.metrics import MetricDefinition

Z95 = 1.959963984540054


@pytest.mark.parametrize(
    ("mean", "side", "interval"),
    [
        (104.0, "upper", (104.0 - Z95, 104.0 + Z95)),  # wholly above: kept as the reports give it
        (-5.0, "lower", (-5.0 - Z95, -5.0 + Z95)),
        (99.0, None, (99.0 - Z95, 100.0)),  # across a bound: intersected with the bounds
        (50.0, None, (50.0 - Z95, 50.0 + Z95)),
    ],
)
def test_a_mean_interval_beyond_its_bounds_says_so(
    mean: float, side: str | None, interval: tuple[float, float]
) -> None:
    e = MeanEstimate("laplace", 1.0, 1000, mean, 1.0, (0.0, 100.0))
    assert e.beyond_bounds(0.95) == side
    assert tuple(e.ci(0.95)) == pytest.approx(interval, rel=1e-12)
    low, high = e.ci(0.95)
    assert high - low > 1.0  # never zero-width


def test_binary_reports_beyond_the_bounds() -> None:
    """Duchi's reports all +C (what no population within the bounds sends, n = 400): the
    proportion's interval maps above the upper bound; half and half sits inside."""
    m: Any = mechanism("duchi", epsilon=1.0, bounds=(0.0, 10.0))
    forged = m.estimate(m.aggregate(np.ones(400, dtype=m.report_dtype)))
    assert forged.beyond_bounds() == "upper" and forged.clamped_mean == 10.0
    low, high = forged.ci()
    assert 10.0 < low < high
    even = m.estimate(m.aggregate(np.array([1, -1] * 200, dtype=m.report_dtype)))
    assert even.beyond_bounds() is None and 0.0 <= even.ci()[0] < even.ci()[1] <= 10.0


def test_no_reports_no_side() -> None:
    e = MeanEstimate("laplace", 1.0, 0, math.nan, math.nan, (0.0, 1.0))
    assert e.beyond_bounds() is None and all(math.isnan(v) for v in e.ci())


BASE = {"categories": ["a", "b", "c"], "epsilon": 1.0, "mechanism": "grr"}


def test_forgery_fraction_is_served_when_given_and_leaves_the_fingerprint() -> None:
    plain = MetricDefinition.from_dict("m", BASE)
    given = MetricDefinition.from_dict("m", {**BASE, "forgery_fraction": 0.05})
    assert given.fingerprint == plain.fingerprint  # it changes no report's meaning
    assert "forgery_fraction" not in plain.to_dict() and plain.effective_forgery_fraction == 0.01
    assert given.to_dict()["forgery_fraction"] == 0.05 and given.effective_forgery_fraction == 0.05
    served = given.to_dict()
    again = MetricDefinition.from_served("m", served, served["fingerprint"])
    assert again.to_dict() == served and again.forgery_fraction == 0.05
    assert (
        MetricDefinition.from_dict("m", {**BASE, "forgery_fraction": 0.5}).forgery_fraction == 0.5
    )


@pytest.mark.parametrize("bad", [0, 0.0, -0.01, 0.51, 1, math.nan, math.inf, True, "0.01", [0.1]])
def test_forgery_fraction_is_checked(bad: object) -> None:
    with pytest.raises(ParameterError, match=r"metric m: forgery_fraction must be a number in"):
        MetricDefinition.from_dict("m", {**BASE, "forgery_fraction": bad})


def test_an_honest_mean_at_its_bound_is_beyond_it_at_the_levels_rate() -> None:
    """Everyone at the upper bound (Laplace, epsilon 1, n = 200, 2,000 campaigns): the
    interval lies wholly above it in about (1 - level) / 2 of them (the normal law of the
    mean: the known-variance interval) and covers the bound in about ``level`` of them (it
    was 97.5%: the interval wholly above collapsed onto the bound and counted as covering)."""
    m: Any = mechanism("laplace", epsilon=1.0, bounds=(0.0, 1.0))
    rng = np.random.default_rng(26)
    campaigns, level = 2000, 0.95
    beyond = covered = 0
    for _ in range(campaigns):
        e = m.estimate(m.aggregate(m.perturb(np.ones(200), rng=rng)))
        low, high = e.ci(level)
        beyond += e.beyond_bounds(level) == "upper"
        covered += low <= 1.0 <= high
    for rate, p in ((beyond, (1 - level) / 2), (covered, level)):
        assert abs(rate / campaigns - p) <= 4 * math.sqrt(p * (1 - p) / campaigns), (rate, p)
