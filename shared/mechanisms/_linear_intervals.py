"""Score-type intervals for a linear functional of multinomial frequencies.

A channel-inversion estimate of ``t = w^T f`` (an item's frequency, a range share, the mean
rank) is ``t_hat = g^T lam_hat`` with ``g = A^T w`` and ``lam_hat = c / n`` the observed
output frequencies: the mean of n independent draws of ``g_o``, ``o ~ lam``. Its variance
``sum_o lam_o (g_o - t)^2 / n`` depends on the unknown law ``lam``.

The normal interval plugs in ``lam_hat``; where the estimate lands low on a rare item its
variance is underestimated too, and it under-covers (as the binomial's Wald interval does).
Here, as in Wilson's interval (and :mod:`ldpkit.intervals`), each bound is a hypothesised
``t0`` that a two-sided test at level ``alpha / 2`` per side just rejects, the variance taken
*at the hypothesis*: the law ``lam(t0)`` is a base law (below) of mean ``t_b`` tilted to
mean ``t0``, ``lam_o (1 + (t0 - t_b) (g_o - t_b) / V)``, ``V = sum_o lam_o (g_o - t_b)^2`` (the
law's conditional mean given ``g^T lam = t0`` under the normal approximation; for a
binomial it is exactly Wilson's), clipped at 0. The critical value carries one
Cornish-Fisher term for the skewness of ``t_hat`` under ``lam(t0)``:
``z -/+ gamma (z^2 - 1) / 6``. Bounds are found by bisection, all rows at once, and clipped
to the functional's range ``[min w, max w]``.

The law tilted is not ``lam_hat`` itself but the channel's law of the inversion estimate
clipped to the simplex, ``P^T f+`` (``f+`` the clipped, renormalised ``f_hat``): it has no
empty outputs and smooths the noise of ``lam_hat`` (d frequencies rather than m outputs,
non-negative), which at small n makes a plug-in variance too small as often as too large.
The estimate itself is not smoothed (it stays unbiased). Coverage is validated by
simulation (benchmarks/exponential_coverage.py, tests/shared/test_exponential_ranges.py).

References
----------
E. B. Wilson, "Probable inference, the law of succession, and statistical inference",
JASA 1927. E. A. Cornish, R. A. Fisher, "Moments and cumulants in the specification of
distributions", Rev. Int. Stat. Inst. 1938.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..intervals import normal_quantile

FloatArray = npt.NDArray[np.float64]

_BISECTIONS = 40  # the range over 2^40: far below any standard error


@dataclass(frozen=True)
class LinearBounds:
    """Confidence bounds of one or more linear functionals at ``level``.

    Attributes
    ----------
    lower, upper : the bounds, within each functional's range ``[min w, max w]``.
    level : the two-sided confidence level (each row on its own, or all rows together
        when made over ``comparisons`` rows: :func:`score_bounds`).
    """

    lower: FloatArray
    upper: FloatArray
    level: float


@dataclass(frozen=True)
class _Rows:
    """Rows of functionals: estimate, output weights g, base law, n and range."""

    estimate: FloatArray  # (r,)
    weights: FloatArray  # (r, m)
    law: FloatArray  # (r, m), each row a law
    n: float
    low: FloatArray  # (r,)
    high: FloatArray  # (r,)

    @functools.cached_property
    def _tilt(self) -> tuple[FloatArray, FloatArray]:
        """The base law's mean per row, and the weights' deviations from it over its
        variance (the tilt's slope)."""
        centre = np.sum(self.law * self.weights, axis=1)
        dev = self.weights - centre[:, None]
        spread = np.maximum(np.sum(self.law * dev * dev, axis=1), 1e-300)
        return centre, dev / spread[:, None]

    def excess(self, t0: FloatArray, z: float, upper: bool) -> FloatArray:
        """``|t0 - t_hat| - sd(t0) z_eff(t0)``: >= 0 where the test rejects ``t0``."""
        centre, slope = self._tilt
        lam = self.law * np.maximum(1.0 + (t0 - centre)[:, None] * slope, 0.0)
        lam /= np.maximum(lam.sum(axis=1, keepdims=True), 1e-300)
        off = self.weights - t0[:, None]
        lam_off2 = lam * off * off
        var = np.sum(lam_off2, axis=1) / self.n
        third = np.sum(lam_off2 * off, axis=1) / self.n**2
        skew = third / np.maximum(var, 1e-300) ** 1.5
        shift = skew * (z * z - 1.0) / 6.0
        z_eff = np.clip(z - shift if upper else z + shift, 0.5 * z, 2.0 * z)
        gap = t0 - self.estimate if upper else self.estimate - t0
        return np.asarray(gap - np.sqrt(var) * z_eff)

    def bound(self, z: float, upper: bool) -> FloatArray:
        """The nearest ``t0`` on one side of the estimate that the test rejects."""
        near = self.estimate.copy()
        far = np.maximum(near, self.high) if upper else np.minimum(near, self.low)
        rejected = self.excess(far, z, upper) >= 0
        lo, hi = near.copy(), far.copy()  # accepted end, rejected end (or the range's edge)
        for _ in range(_BISECTIONS):
            mid = 0.5 * (lo + hi)
            bad = self.excess(mid, z, upper) >= 0
            hi = np.where(bad, mid, hi)
            lo = np.where(bad, lo, mid)
        return np.where(rejected, hi, far)


def hull(
    score: LinearBounds, normal: LinearBounds, low: FloatArray, high: FloatArray
) -> LinearBounds:
    """The smallest interval holding both (the normal one clipped to ``[low, high]``):
    it covers whenever either does. The tilt's variance and skewness at the hypothesis come
    from an estimated law; where the functional's output weights are large (an
    ill-conditioned channel: the mean rank at d = 32) their noise can make the score
    interval shorter than the normal one on the wrong side, and the hull keeps the normal
    interval's coverage there while the score interval lifts rare items."""
    return LinearBounds(
        np.minimum(score.lower, np.clip(normal.lower, low, high)),
        np.maximum(score.upper, np.clip(normal.upper, low, high)),
        score.level,
    )


def score_bounds(
    estimate: npt.ArrayLike,
    output_weights: npt.ArrayLike,
    law: npt.ArrayLike,
    n: int,
    *,
    value_range: tuple[npt.ArrayLike, npt.ArrayLike],
    level: float = 0.95,
    comparisons: int = 1,
) -> LinearBounds:
    """Score-type bounds of rows of linear functionals ``t = g^T lam`` (module docstring).

    Parameters
    ----------
    estimate : (r,) the estimates ``g^T lam_hat``.
    output_weights : (r, m) each row's ``g``.
    law : (m,) or (r, m) the output law tilted to each hypothesis (rows sum to 1): the
        channel's law of the clipped inversion estimate.
    n : the number of reports.
    value_range : ((r,), (r,)) each functional's smallest and largest possible value.
    level : the two-sided level.
    comparisons : each row is made at ``1 - (1 - level) / comparisons`` (Bonferroni):
        ``comparisons = r`` makes all r rows hold together with probability at least
        ``level``, whatever their dependence.
    """
    z = normal_quantile(level, comparisons=comparisons)
    g = np.atleast_2d(np.asarray(output_weights, dtype=np.float64))
    rows = _Rows(
        np.asarray(estimate, dtype=np.float64).reshape(-1),
        g,
        np.broadcast_to(np.asarray(law, dtype=np.float64), g.shape),
        float(n),
        np.broadcast_to(np.asarray(value_range[0], dtype=np.float64), g.shape[:1]),
        np.broadcast_to(np.asarray(value_range[1], dtype=np.float64), g.shape[:1]),
    )
    lower = np.clip(rows.bound(z, upper=False), rows.low, rows.high)
    upper = np.clip(rows.bound(z, upper=True), rows.low, rows.high)
    return LinearBounds(lower, upper, float(level))
