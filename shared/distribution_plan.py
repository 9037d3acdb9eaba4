"""Planning a distribution metric: how wide its intervals will be, and the n it needs.

Kept apart from :mod:`ldpkit.planner` (means and frequencies) so both can change on their
own; ``ldpkit plan`` can call :func:`plan_distribution` for a ``kind = "distribution"``
metric.

Ranges. A range fraction's served interval is a score interval (the variance taken at
the hypothesised fraction; :meth:`~ldpkit.distribution.DistributionEstimate.range_bounds`),
about the reporting users' own values (``estimand="reporters"``, the default) or the
population they were drawn from (``"population"``), every depth getting its expected
``n / height`` reports. ``typical_half_width`` is that interval's half-width for values
spread evenly over the bounds, computed by the served code itself on the noise-free
answer (the estimate equal to the assumed fraction, the range's share of the bounds);
simulated campaigns' median half-widths agree with it for both estimands
(tests/shared/test_distribution_plan.py). ``half_width`` bounds it *whatever the data*,
for either estimand: ``z sqrt(V / n) + (1/2 + K (z^2 - 1) / 6) / n``. ``V`` bounds the
variance over all data (the covariance is affine in the node fractions less a
non-negative term, see :meth:`~ldpkit.distribution.LevelNoise.bound_terms`; the
reporters' variance is the population's plus ``(S - Var(h)) / (n - 1)``, S the users'
sampling part, ``O(1 / n)`` beside their own spread ``Var(h)``, so at most it but at a
handful of users; the tests check both);
``1 / (2 n)`` is half a user of continuity correction; and ``K (z^2 - 1) / (6 n)`` bounds
the served interval's skewness term (one Cornish-Fisher term, ``gamma (z^2 - 1) / 6``
standard deviations, i.e. ``kappa_3 / Var (z^2 - 1) / 6`` in the estimate's units): the
estimate is a sum of independent per-user contributions, each within a span ``K / n``
(the largest minus the smallest contribution one report can make, over the depths: for a
hashed depth the sum of the positive scaled coefficients less the sum of the negative,
for randomized response the largest less the smallest), and for such a sum
``|kappa_3| <= span Var``. Both are for the worst of a grid of ranges (widths 1/16, 1/8,
1/4, 1/2 and 3/4 of the bounds, each at 16 positions) unless a range is given. Ranges
whose ends cut a leaf are served from the whole leaves inside and around them; the bound
is for those (the typical half-width includes the widening to them).

Quantiles. ``quantile_half_width`` is half the interval the estimator gives for the
``quantile`` (default the median) of values spread evenly over the bounds when its
estimate equals the truth: the real algorithm (see
:class:`~ldpkit.distribution.QuantileEstimate`, for the estimand) on the noise-free
answer. Noise moves the interval about; measured widths are within about 20% below this
figure. The width scales with one over the density at the quantile: a quantile in a dense
part of the distribution gets a narrower interval, one in a sparse part a wider one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._validation import check_bounds, check_count, check_epsilon, check_level, check_positive
from .distribution import REPORTERS, DistributionEstimate, check_estimand
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
    """Whose distribution the intervals are about: the reporting users' values
    (``"reporters"``) or the population's (``"population"``)."""
    skew_widening: float = 0.0
    """The part of :attr:`half_width` that bounds the skewness term, ``K (z^2 - 1) / (6 n)``."""


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


@dataclass(frozen=True)
class _Bound:
    """Whatever the data, for n = 1 (divide by n): the worst range's variance, and the
    largest span of one user's contribution to a range's estimate."""

    variance: float
    span: float

    def half_width(self, z: float, n: float) -> float:
        """The score interval's half-width with the variance ``variance / n`` at every
        fraction, its skewness term at its bound and half a user of continuity correction
        (the root of ``|estimate +- 1/(2n) - theta| = z sqrt(V) + kappa_3 / V (z^2 - 1) / 6``)."""
        return z * math.sqrt(self.variance / n) + self.constant(z) / n

    def constant(self, z: float) -> float:
        """The coefficient of ``1 / n``: continuity and skewness."""
        return 0.5 + self.span * (z * z - 1.0) / 6.0


def _bound(m: HierarchicalHistogram, range_: tuple[float, float] | None) -> _Bound:
    """The :class:`_Bound` of the ranges planned for."""
    est: DistributionEstimate = m.expected(1.0)  # variances for n = 1: divide by n
    a, b = _ranges(m, range_)
    pos_a, pos_b = est._positions(a), est._positions(b)
    # Whole leaves around each range (what an honest interval reaches to).
    queries = est._range_queries(np.floor(pos_a), np.ceil(pos_b))
    coef = est.smoother.adjoint(queries)
    bound = np.zeros(queries.shape[1])
    top, bottom = np.zeros(queries.shape[1]), np.zeros(queries.shape[1])
    for t, noise in enumerate(est.levels, start=1):
        v, k = noise.bound_terms()
        c2 = coef[t] ** 2
        bound += (v * c2.sum(axis=0) + k * c2.max(axis=0)) / noise.n
        # One report's contribution at this depth, c the scaled coefficients.
        c = coef[t] / (noise.n * (noise.p - noise.q))
        if noise.exclusive:  # it supports one node
            high, low = c.max(axis=0), c.min(axis=0)
        else:  # it supports any set of nodes
            high, low = np.clip(c, 0.0, None).sum(axis=0), np.clip(c, None, 0.0).sum(axis=0)
        top, bottom = np.maximum(top, high), np.minimum(bottom, low)
    return _Bound(float(bound.max()), float(np.max(top - bottom)))


def _typical_half_width(
    m: HierarchicalHistogram,
    n: int,
    range_: tuple[float, float] | None,
    level: float,
    estimand: str,
) -> float:
    """Half the widest served interval (for the estimand) of the ranges for values
    spread evenly, each estimate equal to its range's true fraction."""
    est = m.expected(float(n))
    a, b = _ranges(m, range_)
    at = est._ranges(a, b)["at"]
    low, high = est.range_bounds(at, level, 1, estimand)
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
    estimand: str = REPORTERS,
) -> DistributionPlan:
    """Expected half-widths of a distribution metric's intervals after ``n`` reports, about
    the reporting users' values (``estimand="reporters"``) or the population's."""
    epsilon = check_epsilon(epsilon)
    bounds = check_bounds(bounds)
    n = check_count(n)
    level = check_level(level)
    estimand = check_estimand(estimand)
    m = _model(epsilon, bounds, resolution, branching)
    bound = _bound(m, range_)
    z = normal_quantile(level)
    noise_free = m.expected(float(n)).quantile(quantile, level, estimand=estimand)
    return DistributionPlan(
        mechanism=m.name,
        epsilon=epsilon,
        n=n,
        level=level,
        resolution=m.resolution,
        branching=m.branching,
        range=None if range_ is None else (float(range_[0]), float(range_[1])),
        half_width=bound.half_width(z, n),
        typical_half_width=_typical_half_width(m, n, range_, level, estimand),
        quantile=noise_free.q,
        quantile_half_width=(noise_free.high - noise_free.low) / 2.0,
        estimand=estimand,
        skew_widening=bound.span * (z * z - 1.0) / (6.0 * n),
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
    estimand: str = REPORTERS,
) -> DistributionPlan:
    """The smallest n whose range-fraction score half-width is at most ``half_width``
    for any data (:attr:`DistributionPlan.half_width`, a bound for either estimand; the
    plan's typical and quantile half-widths are for ``estimand``)."""
    half_width = check_positive(half_width, "half_width")
    epsilon = check_epsilon(epsilon)
    bounds = check_bounds(bounds)
    level = check_level(level)
    estimand = check_estimand(estimand)
    m = _model(epsilon, bounds, resolution, branching)
    bound = _bound(m, range_)
    z = normal_quantile(level)
    # z sqrt(V) s + c s^2 = half_width in s = 1 / sqrt(n); then settle rounding.
    a, c = z * math.sqrt(bound.variance), bound.constant(z)
    s = 2.0 * half_width / (a + math.sqrt(a * a + 4.0 * c * half_width))  # the positive root
    n = max(1, math.ceil(1.0 / (s * s)))
    while n > 1 and bound.half_width(z, n - 1) <= half_width:
        n -= 1
    while bound.half_width(z, n) > half_width:
        n += 1
    return plan_distribution(
        epsilon=epsilon,
        bounds=bounds,
        n=n,
        resolution=m.resolution,
        branching=m.branching,
        level=level,
        range_=range_,
        estimand=estimand,
    )
