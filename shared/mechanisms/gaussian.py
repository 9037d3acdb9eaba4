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
from fractions import Fraction
from numbers import Real
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from . import _portable
from ._conformance import Cdf, numeric_cases
from ._grid import GRID_STEPS as GRID_STEPS  # D: as for Laplace; part of protocol v1
from ._grid import REPORT_DTYPE as REPORT_DTYPE
from ._grid import GridMechanism
from ._portable import Derived, Words
from .base import BoolArray, FloatArray, IntArray, PlanCase

TAIL_SIGMAS = 40.0
"""A report is valid if it lies within ``TAIL_SIGMAS`` noise standard deviations of the
grid: genuine noise goes further with probability below ``e^-800``, and the device
clamps it there anyway (post-processing)."""

MIN_DELTA = 1e-30
"""Smallest delta accepted: below it the calibration's normal tails underflow."""

CALIBRATION_SLACK = 1e-3
"""sigma is calibrated for ``delta * (1 - CALIBRATION_SLACK)``: the margin absorbs the
grid (the discrete Gaussian's curve differs from the continuous one by a relative
O(1 / sigma_grid), below 1e-4 here)."""


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
        return np.asarray(np.exp(-(y * y) / (2.0 * sigma * sigma)))

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

    Sampling is exact (Canonne, Kamath, Steinke 2020, Algorithms 1-3), in integers
    only, so that no floating-point rounding can shift a probability (the portable
    rule of docs/protocol.md). The noise parameter is rounded up once to an exact
    integer: with ``t = floor(s) + 1`` (the discrete Laplace proposal's scale) and
    ``m = ceil(s^2 / t)``, the noise is the discrete Gaussian of variance parameter
    ``sigma2 = t m >= s^2`` (larger by less than ``t``, a relative ``1 / s``: the
    privacy-safe side). Then ``Z`` is drawn from the discrete Laplace
    ``∝ exp(-|z| / t)`` and accepted with probability
    ``exp(-(|Z| - m)^2 / (2 sigma2))`` (``sigma2 / t = m`` is an integer), else drawn
    again; every ``Bernoulli(exp(-x / q))`` is the Taylor-series coin of Algorithm 1
    made of exact ``Bernoulli(x / q)`` coins (uniform integers below ``q``). Every output
    probability is therefore realized exactly, and :meth:`realized_delta` is the exact
    divergence of the realized law.

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
    delta : float
        Probability slack of one report, ``0 < delta < 1`` (at least 1e-30); pick it well
        below 1 / (number of users).
    """

    name: ClassVar[str] = "gaussian"
    # a strict delta at the small epsilon
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = numeric_cases(
        "gaussian", delta=(1e-9, 1e-3)
    )
    delta: float | None = None
    sigma: float = field(init=False)
    """The noise's parameter in the metric's units: ``sqrt(sigma2) (hi - lo) / D``."""
    grid_sigma: float = field(init=False, repr=False)
    """``sqrt(sigma2)``: the discrete Gaussian's parameter in grid steps."""
    laplace_scale: int = field(init=False, repr=False)
    """t: the scale of the discrete Laplace proposal (``floor(s) + 1``)."""
    sigma2_over_t: int = field(init=False, repr=False)
    """m: ``sigma2 = t m``, the exact variance parameter in grid steps squared."""
    _noise_variance: float = field(init=False, repr=False)

    def _derive(self) -> None:
        delta = check_delta(self.delta)
        self._set(delta=delta)
        lo, hi = self.bounds
        d = self.grid_steps
        unit_sigma = analytic_gaussian_sigma(self.epsilon, delta * (1.0 - CALIBRATION_SLACK))
        t, m = exact_noise_parameter(unit_sigma * d)
        sigma2 = t * m
        grid_sigma = math.sqrt(sigma2)
        self._set(laplace_scale=t, sigma2_over_t=m)
        self._set(sigma=grid_sigma * (hi - lo) / d, grid_sigma=grid_sigma)
        # ceil(TAIL_SIGMAS sqrt(sigma2)), exactly: the smallest c with c^2 >= 40^2 sigma2.
        self._set(noise_cap=math.isqrt(1600 * sigma2 - 1) + 1)
        if grid_sigma < 8.0:
            reach = math.ceil(60 * grid_sigma) + 60
            z = np.arange(-reach, reach + 1, dtype=np.float64)
            w = np.exp(-z * z / (2.0 * sigma2))
            var = float((w * z * z).sum() / w.sum())
        else:
            var = float(sigma2)
        self._set(_noise_variance=var)

    def params(self) -> dict[str, Any]:
        return {**super().params(), "delta": self.delta}

    def noise(self, rng: np.random.Generator, n: int) -> IntArray:
        """n exact draws of the discrete Gaussian Z (see the class doc): vectorised in
        rounds over the draws; a few draws by the portable rule (numpy's rounds cost
        more than they save there)."""
        t, m = self.laplace_scale, self.sigma2_over_t
        if n > _FEW:
            return discrete_gaussian(rng, t, m, n)
        block = rng.integers(0, 1 << 32, size=64 * n, dtype=np.uint64).tolist()

        def word() -> int:
            if not block:
                block.extend(rng.integers(0, 1 << 32, size=64, dtype=np.uint64).tolist())
            return int(block.pop())

        words = Words(word)
        return np.array([_portable.discrete_gaussian(t, m, words) for _ in range(n)], np.int64)

    def grid_noise_variance(self) -> float:
        return self._noise_variance

    def noise_tail(self, t: int) -> float:
        """``P[Z >= t] <= Q(t / s) + exp(-t^2 / (2 s^2)) / (s sqrt(2 pi))`` (s^2 = ``t m``):
        the sum over z >= t is at most its first term plus the integral from t, and the
        normalizing sum is at least ``s sqrt(2 pi)`` (Poisson summation); exact sampling."""
        s = self.grid_sigma
        return 0.5 * math.erfc(t / (s * math.sqrt(2.0))) + math.exp(-0.5 * (t / s) ** 2) / (
            s * math.sqrt(2.0 * math.pi)
        )

    def realized_delta(self) -> float:
        """The delta the sampler realizes at this epsilon, exactly (at most ``delta``):
        :func:`discrete_gaussian_delta` ``(epsilon, sqrt(sigma2), D)``, the worst pair of
        inputs' divergence (class doc); a fraction of a second."""
        return discrete_gaussian_delta(self.epsilon, self.grid_sigma, self.grid_steps)

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {
            "grid_steps": self.grid_steps,
            "cap": self.noise_cap,
            "t": self.laplace_scale,
            "m": self.sigma2_over_t,
        }

    @classmethod
    def conformance_lies(cls, derived: Derived) -> list[tuple[str, dict[str, Any]]]:
        """One grid step of noise (``t = m = 1``): far more than delta at epsilon."""
        return [("derived.t, derived.m", {**derived, "t": 1, "m": 1})]

    @classmethod
    def portable_noise(cls, derived: Derived, words: Words) -> int:
        """The discrete Gaussian of variance parameter ``t m`` (CKS Algorithm 3)."""
        return _portable.discrete_gaussian(int(derived["t"]), int(derived["m"]), words)

    def noise_cdf(self, derived: Derived) -> Cdf:
        """Z's law from the served ``t m``: its pmf summed exactly below
        :data:`_EXACT_GAUSSIAN_REACH`, else the normal law with a continuity correction."""
        sigma2 = int(derived["t"]) * int(derived["m"])
        sigma = math.sqrt(sigma2)
        if sigma >= _EXACT_GAUSSIAN_REACH:
            # Pr[Z <= k] = Phi((k + 1/2) / sigma) to within 1 / (24 sigma^2) (the midpoint
            # rule's error on the Gaussian), far below what any sample size here can see.
            erfc = np.vectorize(math.erfc, otypes=[np.float64])

            def normal(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
                return np.asarray(0.5 * erfc(-(np.floor(z) + 0.5) / (sigma * math.sqrt(2.0))))

            return normal
        reach = math.ceil(40.0 * sigma) + 2
        support = np.arange(-reach, reach + 1, dtype=np.float64)
        pmf = np.exp(-(support * support) / (2.0 * sigma2))
        cumulative = np.cumsum(pmf / pmf.sum())

        def exact(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            at = np.clip(np.floor(z) + reach, -1, 2 * reach).astype(np.int64)
            return np.asarray(np.where(at < 0, 0.0, cumulative[np.maximum(at, 0)]))

        return exact


_EXACT_GAUSSIAN_REACH = 64
"""Below this noise parameter the conformance law sums the discrete Gaussian's pmf exactly."""


def exact_noise_parameter(s: float) -> tuple[int, int]:
    """``(t, m)``: ``t = floor(s) + 1`` and the least m with ``t m >= s^2``, exactly (the
    variance parameter ``sigma2 = t m`` of :class:`LocalGaussian`)."""
    exact = Fraction(s)
    t = math.floor(exact) + 1
    return t, math.ceil(exact * exact / t)


_INT64_SAFE = 1 << 62
_FEW = 8
"""Up to this many draws at once, the one-report rule is faster than vectorised rounds."""


def _below(rng: np.random.Generator, n: int | IntArray, size: int) -> Any:
    """Uniform integers in ``[0, n)``, exactly (numpy's bounded integers reject, as
    ``below`` does); a scalar n beyond int64 gives Python ints (an object array)."""
    if isinstance(n, int) and n > _INT64_SAFE:
        count = max(1, -(-(n - 1).bit_length() // 32))
        span = 1 << (32 * count)
        limit = span - span % n
        out = np.empty(size, dtype=object)
        todo = np.arange(size)
        while todo.size:
            words = rng.integers(0, 1 << 32, size=(todo.size, count), dtype=np.uint64)
            value = np.zeros(todo.size, dtype=object)
            for i in range(count):  # a few words per number, not a loop per report
                value = value + (words[:, i].astype(object) << (32 * i))
            ok = (value < limit).astype(bool)
            out[todo[ok]] = value[ok] % n
            todo = todo[~ok]
        return out
    return rng.integers(0, n, size=size)


def _bernoulli(rng: np.random.Generator, x: Any, q: int | IntArray) -> BoolArray:
    """Coins of probability ``x / q`` (``0 <= x <= q``), exactly."""
    out = np.asarray(x >= q, dtype=bool)
    mid = np.flatnonzero(np.asarray(x > 0, dtype=bool) & ~out)
    if mid.size:
        qq = q if isinstance(q, int) else q[mid]
        out[mid] = np.asarray(_below(rng, qq, mid.size) < x[mid], dtype=bool)
    return out


def _exp_bernoulli(rng: np.random.Generator, x: Any, q: int) -> BoolArray:
    """Coins of probability ``exp(-x / q)`` for ``0 <= x <= q`` (CKS Algorithm 1): k counts
    up while ``Bernoulli(x / (q k))`` succeeds; true when k ends odd. (The portable rule
    draws that coin as ``Bernoulli(x / q)`` and ``Bernoulli(1 / k)``: the same law.)"""
    k = np.ones(len(x), dtype=np.int64)
    active = np.arange(len(x))
    while active.size:
        kk = k[active]
        if q * int(kk.max()) <= _INT64_SAFE:
            go = active[_bernoulli(rng, x[active], q * kk)]
        else:
            go = active[_bernoulli(rng, x[active], q)]
            go = go[_bernoulli(rng, np.ones(go.size, dtype=np.int64), k[go])]
        k[go] += 1
        active = go
    return np.asarray(k % 2 == 1)


_FACTORIAL_STEPS = 20
_FACTORIAL = math.factorial(_FACTORIAL_STEPS)  # below 2**62
_FACTORIAL_CUTS = np.array(
    [_FACTORIAL // math.factorial(j) for j in range(_FACTORIAL_STEPS, 0, -1)], dtype=np.int64
)
"""``N! / j!`` for j = N .. 1 (increasing): ``Pr[k > j] = 1 / j!`` in the e^-1 coin."""


def _exp_minus_one(rng: np.random.Generator, size: int) -> BoolArray:
    """Coins of probability ``e^-1``: Algorithm 1 at x = q, whose count k has
    ``Pr[k > j] = 1 / j!`` exactly, read off one uniform integer below ``N!`` (k > j iff
    it is below ``N! / j!``) for j <= N = 20; the rare rest goes on coin by coin."""
    u = rng.integers(0, _FACTORIAL, size=size)
    k = 1 + (_FACTORIAL_CUTS.size - np.searchsorted(_FACTORIAL_CUTS, u, side="right"))
    tail = np.flatnonzero(k > _FACTORIAL_STEPS)  # u = 0: k > N, continue from there
    while tail.size:
        go = tail[rng.integers(0, k[tail]) == 0]
        k[go] += 1
        tail = go
    return np.asarray(k % 2 == 1)


def discrete_laplace(rng: np.random.Generator, t: int, n: int) -> IntArray:
    """n exact draws of ``Pr[Z = z] ∝ exp(-|z| / t)`` (CKS Algorithm 2 with s = 1)."""
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        u = np.asarray(_below(rng, t, todo.size), dtype=np.int64)
        kept = _exp_bernoulli(rng, u, t)
        u, idx = u[kept], todo[kept]
        v = np.zeros(idx.size, dtype=np.int64)
        active = np.arange(idx.size)
        while active.size:
            active = active[_exp_minus_one(rng, active.size)]
            v[active] += 1
        x = u + t * v
        negative = rng.integers(0, 2, size=idx.size) == 1
        good = ~(negative & (x == 0))
        out[idx[good]] = np.where(negative, -x, x)[good]
        done = np.zeros(n, dtype=bool)
        done[idx[good]] = True
        todo = todo[~done[todo]]
    return out


def discrete_gaussian(rng: np.random.Generator, t: int, m: int, n: int) -> IntArray:
    """n exact draws of ``Pr[Z = z] ∝ exp(-z^2 / (2 t m))`` (CKS Algorithm 3): a discrete
    Laplace of scale t, accepted with probability ``exp(-(|Z| - m)^2 / (2 t m))``."""
    two_sigma2 = 2 * t * m
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        y = discrete_laplace(rng, t, todo.size)
        b = np.abs(np.abs(y) - m)
        if two_sigma2 <= _INT64_SAFE and int(b.max(initial=0)) < 1 << 31:
            whole, rest = np.divmod(b * b, two_sigma2)
        else:  # beyond int64: the same arithmetic in Python ints
            square = b.astype(object) ** 2
            whole = np.minimum(square // two_sigma2, 1 << 62).astype(np.int64)
            rest = square % two_sigma2
        accept = np.ones(todo.size, dtype=bool)
        # exp(-gamma) = exp(-1)^floor(gamma) * exp(-(gamma - floor(gamma))).
        pending = np.flatnonzero(whole > 0)
        while pending.size:
            passed = _exp_minus_one(rng, pending.size)
            accept[pending[~passed]] = False
            pending = pending[passed]
            whole[pending] -= 1
            pending = pending[whole[pending] > 0]
        alive = np.flatnonzero(accept)
        accept[alive] = _exp_bernoulli(rng, rest[alive], two_sigma2)
        out[todo[accept]] = y[accept]
        todo = todo[~accept]
    return out
