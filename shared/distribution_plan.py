"""Planning a distribution metric: how wide its intervals will be, and the n it needs.

Kept apart from :mod:`ldpkit.planner` (means and frequencies) so both can change on their
own; ``ldpkit plan`` can call :func:`plan_distribution` for a ``kind = "distribution"``
metric.

Ranges. A range fraction's served interval is a score interval (the variance taken at
the hypothesised fraction; :meth:`~ldpkit.distribution.DistributionEstimate.range_bounds`),
about the reporting users' own values (estimand ``"reporters"``, the default), every
depth getting its expected ``n / height`` reports. ``typical_half_width`` is that
interval's half-width for values spread evenly over the bounds, computed by the served
code itself on the noise-free answer (the estimate equal to the assumed fraction, the
range's share of the bounds); simulated campaigns' median half-widths agree with it
(tests/shared/test_distribution_plan.py). ``half_width`` bounds it *whatever the data*:
the score interval's half-width with the variance at its bound over all data,
``z sqrt(V / n) + 1 / (2 n)`` (half a user of continuity correction); the covariance is
affine in the node fractions less a non-negative term (see
:meth:`~ldpkit.distribution.LevelNoise.bound_terms`). The bound leaves out the
interval's skewness term, which only matters with a handful of users in the range.
Both are for the worst of a grid of ranges (widths 1/16, 1/8, 1/4, 1/2 and 3/4 of the
bounds, each at 16 positions) unless a range is given. Ranges whose ends cut a leaf are
served from the whole leaves inside and around them; the bound is for those.

Quantiles. ``quantile_half_width`` is half the interval the estimator gives for the
``quantile`` (default the median) of values spread evenly over the bounds when its
estimate equals the truth: the real algorithm (see
:class:`~ldpkit.distribution.QuantileEstimate`) on the noise-free answer. Noise moves the
interval about; measured widths are within about 20% below this figure. The width
scales with one over the density at the quantile: a quantile in a dense part of the
distribution gets a narrower interval, one in a sparse part a wider one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._validation import check_bounds, check_count, check_epsilon, check_level, check_positive
from .distribution import REPORTERS, DistributionEstimate
from .errors import ParameterError
from .estimates import normal_quantile
from .mechanisms import mechanism
from .mechanisms.hierarchical import HierarchicalHistogram

_WIDTHS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4)
_POSITIONS = 16


@dataclass(frozen=True)
class DistributionPlan:
    """Expected interval half-widths of a distribution metric after n reports."""

    mechanism: str
    epsilon: float
    n: int
    level: float
    resolution: int
    branching: int
    range: tuple[float, float] | None
    """The range planned for, or None for the worst of the grid of ranges."""
    half_width: float
    """Of a range fraction's score interval, whatever the data (an upper bound)."""
    typical_half_width: float
    """Of a range fraction's served score interval, for values spread evenly."""
    quantile: float
    """The quantile planned for (values spread evenly over the bounds)."""
    quantile_half_width: float
    """Half its interval, in the metric's units."""
    estimand: str = REPORTERS
    """Whose distribution the range intervals are about: the reporting users' values."""


def _model(
    epsilon: float, bounds: tuple[float, float], resolution: int, branching: int | None
) -> HierarchicalHistogram:
    options = {"resolution": resolution}
    if branching is not None:
        options["branching"] = branching
    m = mechanism("hh", epsilon=epsilon, bounds=bounds, **options)
    assert isinstance(m, HierarchicalHistogram)
    return m


def _ranges(
    m: HierarchicalHistogram, range_: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = m.bounds
    if range_ is not None:
        try:
            a, b = (float(v) for v in range_)
        except (TypeError, ValueError):
            raise ParameterError(f"range must be a pair (lower, upper), got {range_!r}") from None
        if not (math.isfinite(a) and math.isfinite(b) and lo <= a < b <= hi):
            raise ParameterError(f"range must satisfy lo <= lower < upper <= hi, got {range_!r}")
        return np.array([a]), np.array([b])
    starts, stops = [], []
    for w in _WIDTHS:
        for k in range(_POSITIONS):
            start = lo + (hi - lo) * (1 - w) * k / (_POSITIONS - 1)
            starts.append(start)
            stops.append(min(hi, start + (hi - lo) * w))
    return np.array(starts), np.array(stops)


def _bound_variance(m: HierarchicalHistogram, range_: tuple[float, float] | None) -> float:
    """The variance of the worst range for n = 1, whatever the data."""
    est: DistributionEstimate = m.expected(1.0)  # variances for n = 1: divide by n
    a, b = _ranges(m, range_)
    pos_a, pos_b = est._positions(a), est._positions(b)
    # Whole leaves around each range (what an honest interval reaches to).
    queries = est._range_queries(np.floor(pos_a), np.ceil(pos_b))
    coef = est.smoother.adjoint(queries)
    bound = np.zeros(queries.shape[1])
    for t, noise in enumerate(est.levels, start=1):
        v, k = noise.bound_terms()
        c2 = coef[t] ** 2
        bound += (v * c2.sum(axis=0) + k * c2.max(axis=0)) / noise.n
    return float(bound.max())


def _bound_half_width(bound: float, z: float, n: float) -> float:
    """The score interval's half-width with the variance ``bound / n`` at every fraction
    (the root of ``|estimate +- 1/(2n) - theta| = z sqrt(bound / n)``)."""
    return z * math.sqrt(bound / n) + 0.5 / n


def _typical_half_width(
    m: HierarchicalHistogram, n: int, range_: tuple[float, float] | None, level: float
) -> float:
    """Half the widest served interval (estimand reporters) of the ranges for values
    spread evenly, each estimate equal to its range's true fraction."""
    est = m.expected(float(n))
    a, b = _ranges(m, range_)
    at = est._ranges(a, b)["at"]
    low, high = est.range_bounds(at, level, 1, REPORTERS)
    return float(np.max(high - low)) / 2.0


def plan_distribution(
    *,
    epsilon: float,
    bounds: tuple[float, float],
    n: int,
    resolution: int = 1024,
    branching: int | None = None,
    level: float = 0.95,
    range_: tuple[float, float] | None = None,
    quantile: float = 0.5,
) -> DistributionPlan:
    """Expected half-widths of a distribution metric's intervals after ``n`` reports."""
    epsilon = check_epsilon(epsilon)
    bounds = check_bounds(bounds)
    n = check_count(n)
    level = check_level(level)
    m = _model(epsilon, bounds, resolution, branching)
    bound = _bound_variance(m, range_)
    z = normal_quantile(level)
    noise_free = m.expected(float(n)).quantile(quantile, level)
    return DistributionPlan(
        mechanism=m.name,
        epsilon=epsilon,
        n=n,
        level=level,
        resolution=m.resolution,
        branching=m.branching,
        range=None if range_ is None else (float(range_[0]), float(range_[1])),
        half_width=_bound_half_width(bound, z, n),
        typical_half_width=_typical_half_width(m, n, range_, level),
        quantile=noise_free.q,
        quantile_half_width=(noise_free.high - noise_free.low) / 2.0,
    )


def required_n_distribution(
    *,
    half_width: float,
    epsilon: float,
    bounds: tuple[float, float],
    resolution: int = 1024,
    branching: int | None = None,
    level: float = 0.95,
    range_: tuple[float, float] | None = None,
) -> DistributionPlan:
    """The smallest n whose range-fraction score half-width is at most ``half_width``
    for any data (:attr:`DistributionPlan.half_width`)."""
    half_width = check_positive(half_width, "half_width")
    epsilon = check_epsilon(epsilon)
    bounds = check_bounds(bounds)
    level = check_level(level)
    m = _model(epsilon, bounds, resolution, branching)
    bound = _bound_variance(m, range_)
    z = normal_quantile(level)
    # z sqrt(V) s + s^2 / 2 = half_width in s = 1 / sqrt(n); then settle rounding.
    a = z * math.sqrt(bound)
    s = 2.0 * half_width / (a + math.sqrt(a * a + 2.0 * half_width))  # the positive root
    n = max(1, math.ceil(1.0 / (s * s)))
    while n > 1 and _bound_half_width(bound, z, n - 1) <= half_width:
        n -= 1
    while _bound_half_width(bound, z, n) > half_width:
        n += 1
    return plan_distribution(
        epsilon=epsilon,
        bounds=bounds,
        n=n,
        resolution=m.resolution,
        branching=m.branching,
        level=level,
        range_=range_,
    )
