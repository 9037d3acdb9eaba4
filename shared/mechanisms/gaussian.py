"""The Gaussian mechanism for a number, (epsilon, delta)-LDP, discrete so floats cannot leak.

References
----------
B. Balle, Y.-X. Wang, "Improving the Gaussian mechanism for differential privacy:
analytical calibration and optimal denoising", ICML 2018 (the analytic Gaussian
mechanism: the exact (epsilon, delta) curve of Gaussian noise, and its calibration).
C. L. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential privacy",
NeurIPS 2020 (the discrete Gaussian, its privacy and its exact sampler).
I. Mironov, "On significance of the least significant bits for differential privacy",
ACM CCS 2012 (why ``x + N(0, sigma^2)`` in doubles is not private).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, ClassVar

import numpy as np

from ..errors import ParameterError
from ._dyadic import check_min_epsilon
from ._geometric import SplitGeometric
from ._grid import GRID_STEPS as GRID_STEPS  # D: as for Laplace; part of protocol v1
from ._grid import REPORT_DTYPE as REPORT_DTYPE
from ._grid import GridMechanism
from .base import BoolArray, FloatArray, IntArray

TAIL_SIGMAS = 40.0
"""A report is valid if it lies within ``TAIL_SIGMAS`` noise standard deviations of the
grid: genuine noise goes further with probability below ``e^-800``, and the device
clamps it there anyway (post-processing)."""

MIN_DELTA = 1e-30
"""Smallest delta accepted: below it the calibration's normal tails underflow."""

CALIBRATION_SLACK = 1e-3
"""sigma is calibrated for ``delta * (1 - CALIBRATION_SLACK)``: the margin absorbs the
grid (the discrete Gaussian's curve differs from the continuous one by a relative
O(1 / sigma_grid), below 1e-4 here) and the sampler's relative error (about 1e-9)."""

SAMPLER_RELATIVE_ERROR = 1e-9
"""Bound on the relative error of any output probability of the sampler (see the class
doc); :meth:`LocalGaussian.realized_delta` accounts for it."""

_INV_E = math.exp(-1.0)


def _normal_cdf(x: float) -> float:
    """Phi(x), with full relative precision in the lower tail (erfc, not 1 - erf)."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def gaussian_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> float:
    """The smallest delta for which ``N(0, sigma^2)`` noise is (epsilon, delta)-DP.

    Balle and Wang (2018), Theorem 8: for sensitivity Delta,
    ``delta = Phi(Delta / (2 sigma) - epsilon sigma / Delta)
    - e^epsilon Phi(-Delta / (2 sigma) - epsilon sigma / Delta)``.
    """
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return max(0.0, _normal_cdf(a - b) - math.exp(epsilon) * _normal_cdf(-a - b))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The smallest sigma with ``gaussian_delta(epsilon, sigma) <= delta`` (bisection).

    The exact calibration of the analytic Gaussian mechanism (Balle and Wang 2018,
    Algorithm 1 solves the same equation), with the standard library's erfc. The
    classic ``sigma = Delta sqrt(2 ln(1.25 / delta)) / epsilon`` is only valid for
    epsilon < 1 and wastes noise; this one is tight for every epsilon.
    """
    if not (0.0 < delta < 1.0):
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}")
    # delta(sigma) decreases from 1 (sigma -> 0) to 0 (sigma -> inf).
    low, high = 1e-12, 1.0
    while gaussian_delta(epsilon, high * sensitivity, sensitivity) > delta:
        high *= 2.0
        if high > 1e30:
            raise ParameterError(f"cannot calibrate sigma for epsilon={epsilon!r}, delta={delta!r}")
    for _ in range(200):
        mid = math.sqrt(low * high)
        if gaussian_delta(epsilon, mid * sensitivity, sensitivity) > delta:
            low = mid
        else:
            high = mid
        if high - low <= 1e-15 * high:
            break
    return high * sensitivity


def check_delta(delta: object) -> float:
    if delta is None:
        raise ParameterError("the Gaussian mechanism needs delta, 0 < delta < 1 (per report)")
    if isinstance(delta, bool) or not isinstance(delta, Real):
        raise ParameterError(f"delta must be a real number, got {delta!r}")
    value = float(delta)
    if not (math.isfinite(value) and 0.0 < value < 1.0):
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}")
    if value < MIN_DELTA:
        raise ParameterError(f"delta must be at least {MIN_DELTA:g}, got {delta!r}")
    return value


def discrete_gaussian_delta(epsilon: float, sigma: float, shift: int) -> float:
    """Exact hockey-stick divergence ``H_(e^eps)(N_Z(0, s^2) || N_Z(shift, s^2))``.

    ``sum_y max(0, P(y) - e^eps P(y - shift))`` over the integers, with
    ``P(y) = exp(-y^2 / (2 s^2)) / sum_z exp(-z^2 / (2 s^2))`` summed term by term. Terms
    more than 14 standard deviations from 0 are left out: each is below ``e^-98`` of the
    largest, together less than 1e-40 of the total, so the result is exact for any
    delta >= MIN_DELTA. Work is proportional to sigma.
    """
    if shift <= 0:
        raise ParameterError(f"shift must be a positive integer, got {shift!r}")
    reach = math.ceil(14.0 * sigma) + 1
    chunk = 1 << 20

    def weights(lo: int, hi: int) -> FloatArray:
        y = np.arange(lo, hi, dtype=np.float64)
        out: FloatArray = np.exp(-(y * y) / (2.0 * sigma * sigma))
        return out

    norm = math.fsum(
        float(weights(s, min(s + chunk, reach + 1)).sum()) for s in range(-reach, reach + 1, chunk)
    )
    # P(y) > e^eps P(y - shift) iff y < shift / 2 - eps sigma^2 / shift: sum there only.
    cut = math.ceil(shift / 2.0 - epsilon * sigma * sigma / shift)  # first y not counted
    parts = []
    for s in range(-reach, min(cut, reach + 1), chunk):
        e = min(s + chunk, cut, reach + 1)
        gap = weights(s, e) - math.exp(epsilon) * weights(s - shift, e - shift)
        parts.append(float(np.maximum(gap, 0.0).sum()))
    return math.fsum(parts) / norm


@dataclass(frozen=True, kw_only=True)
class LocalGaussian(GridMechanism):
    """Value plus discrete Gaussian noise on an integer grid: (epsilon, delta)-LDP per report.

    A value x in ``bounds`` (clipped to them on the device) maps to
    ``u = (x - lo) / (hi - lo) * D`` in [0, D], ``D = GRID_STEPS = 2**16``. The device
    sends the integer ``Y = M + Z``: ``M = floor(u) + Bernoulli(u - floor(u))`` is u
    stochastically rounded to the grid, and Z is discrete Gaussian,
    ``Pr[Z = z] ∝ exp(-z^2 / (2 s^2))`` on the integers, with ``s = sigma D / (hi - lo)``
    and sigma the analytic Gaussian mechanism's noise for sensitivity ``hi - lo`` at
    ``(epsilon, delta (1 - CALIBRATION_SLACK))``.

    Privacy. Each report is (epsilon, delta)-LDP: for any two values and any set of
    outputs E, ``Pr[Y in E | x] <= e^eps Pr[Y in E | x'] + delta``. Reports compose: a
    user who sends k reports is (k epsilon, k delta)-LDP (basic composition), so delta is
    spent per report like epsilon. The proof: the hockey-stick divergence is jointly
    convex and M takes values in [0, D], so the worst pair is a point mass at 0 against
    one at D, whose divergence is :func:`discrete_gaussian_delta` ``(eps, s, D)``; the
    tests compute it exactly and check it is at most delta, with the sampler's error
    below accounted for (:meth:`realized_delta`). Reports are integers, and every
    integer within the clamp is possible for every input (Mironov 2012).

    Sampling (Canonne, Kamath, Steinke 2020, Algorithm 3): with ``t = floor(s) + 1``,
    draw Y from the discrete Laplace ``∝ exp(-|y| / t)`` (a difference of two geometrics
    from :class:`~._geometric.SplitGeometric`) and accept it with probability
    ``exp(-(|Y| - s^2 / t)^2 / (2 s^2))``, else draw again. The acceptance coin is a
    product of ``floor(g)`` coins of probability ``e^-1`` and one of ``e^-(g - floor(g))``
    (g the exponent), so that every acceptance probability, however small, is realized
    to a relative error of about 1e-15; the geometrics' is about ``2**-33``. Every output
    probability is therefore realized to a relative error below
    ``SAMPLER_RELATIVE_ERROR = 1e-9``, which turns (epsilon, delta) into at most
    ``(epsilon, (1 + r) delta_grid(epsilon - 2r))`` with ``r = 1e-9``, where delta_grid is
    the exact divergence above; the calibration slack covers it.

    Estimation: ``t_hat = 2 Y / D - 1`` is unbiased for ``t = 2 (x - lo) / (hi - lo) - 1``
    with variance ``(2 / D)^2 (f (1 - f) + Var Z)``, ``f = u - floor(u)``, and
    ``Var Z = s^2`` to within a relative ``4 pi^2 s^2 e^(-2 pi^2 s^2)`` (computed exactly
    when s < 8). Gaussian noise is never the smallest-variance choice for one number
    under LDP (Laplace, Duchi, PM and HM beat it at every epsilon); it is offered for
    analysts who need (epsilon, delta) accounting, and ``auto`` only weighs it when the
    metric allows delta > 0.

    Wire format (protocol v1): one little-endian int64 per report; valid reports lie in
    ``-cap .. D + cap`` with ``cap = ceil(TAIL_SIGMAS * s)``.

    Parameters
    ----------
    epsilon : float
        Privacy parameter of one report, > 0.
    delta : float
        Probability slack of one report, ``0 < delta < 1`` (at least 1e-30); pick it well
        below 1 / (number of users).
    bounds : (float, float)
        ``(lo, hi)``; values outside are clipped to them on the device.
    """

    name: ClassVar[str] = "gaussian"
    delta: float | None = None
    sigma: float = field(init=False)
    """Noise standard deviation in the metric's units (continuous calibration)."""
    grid_sigma: float = field(init=False, repr=False)
    """s: the discrete Gaussian's parameter in grid steps."""
    _noise_variance: float = field(init=False, repr=False)
    _proposal: SplitGeometric = field(init=False, repr=False)
    _scale: int = field(init=False, repr=False)

    def _derive(self) -> None:
        check_min_epsilon(self.name, self.epsilon)
        delta = check_delta(self.delta)
        object.__setattr__(self, "delta", delta)
        lo, hi = self.bounds
        d = self.grid_steps
        unit_sigma = analytic_gaussian_sigma(self.epsilon, delta * (1.0 - CALIBRATION_SLACK))
        s = unit_sigma * d
        object.__setattr__(self, "sigma", unit_sigma * (hi - lo))
        object.__setattr__(self, "grid_sigma", s)
        object.__setattr__(self, "noise_cap", math.ceil(TAIL_SIGMAS * s))
        if s < 8.0:
            z = np.arange(-math.ceil(60 * s) - 60, math.ceil(60 * s) + 61, dtype=np.float64)
            w = np.exp(-z * z / (2 * s * s))
            var = float((w * z * z).sum() / w.sum())
        else:
            var = s * s
        object.__setattr__(self, "_noise_variance", var)
        scale = math.floor(s) + 1
        object.__setattr__(self, "_scale", scale)
        object.__setattr__(self, "_proposal", SplitGeometric(1.0 / scale))

    def params(self) -> dict[str, Any]:
        return {**super().params(), "delta": self.delta}

    # --- sampling ----------------------------------------------------------------------
    def _accept(self, y: IntArray, rng: np.random.Generator) -> BoolArray:
        """Coins of probability ``exp(-(|y| - s^2/t)^2 / (2 s^2))``, each to ~1e-15 relative."""
        s, t = self.grid_sigma, self._scale
        g = (np.abs(y).astype(np.float64) - s * s / t) ** 2 / (2.0 * s * s)
        whole = np.floor(g)
        accept = rng.random(y.size) < np.exp(-(g - whole))
        left = whole.astype(np.int64)
        pending = np.flatnonzero(accept & (left > 0))
        while pending.size:
            passed = rng.random(pending.size) < _INV_E
            accept[pending[~passed]] = False
            left[pending] -= 1
            pending = pending[passed & (left[pending] > 0)]
        return accept

    def noise(self, rng: np.random.Generator, n: int) -> IntArray:
        """n draws of the discrete Gaussian Z (rejection from the discrete Laplace)."""
        out = np.empty(n, dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            g = self._proposal.sample(rng, 2 * todo.size)
            y = g[: todo.size] - g[todo.size :]
            ok = self._accept(y, rng)
            out[todo[ok]] = y[ok]
            todo = todo[~ok]
        return out

    def grid_noise_variance(self) -> float:
        return self._noise_variance

    # --- the realized guarantee --------------------------------------------------------
    def realized_delta(self) -> float:
        """An upper bound on the delta the real sampler gives at this epsilon.

        ``(1 + r) * discrete_gaussian_delta(epsilon - 2 r, s, D)`` with
        ``r = SAMPLER_RELATIVE_ERROR``: the exact divergence of the discrete Gaussian for
        the worst pair of inputs, widened for the sampler's relative error (class doc).
        It must be at most ``delta``; work is proportional to s (a fraction of a second).
        """
        r = SAMPLER_RELATIVE_ERROR
        return (1.0 + r) * discrete_gaussian_delta(
            self.epsilon - 2.0 * r, self.grid_sigma, self.grid_steps
        )
