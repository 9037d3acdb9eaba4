"""One-sided Clopper-Pearson bounds on a binomial proportion, without scipy.

The regularized incomplete beta function by its continued fraction (modified Lentz) with a
prefactor free of ``lgamma`` cancellation, or for upper bounds from at most 64 successes
the binomial sum itself, inverted by bisection, then widened by a relative 1e-9 so that
rounding can only make them conservative. The tests compare them with scipy (1e-7
relative) and check, in exact rational arithmetic, that they lie on the safe side.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral

from ..errors import ParameterError

__all__ = ["clopper_pearson_lower", "clopper_pearson_upper"]

_SMALL_COUNT = 64  # Clopper-Pearson upper bounds sum the binomial terms up to this count
_WIDEN = 1e-9  # relative widening of the bounds, far above their floating-point error


def _betacf(a: float, b: float, x: float, y: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz); ``y = 1 - x``."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    # 1 - (a + b) x / (a + 1), from the small one of x and y (x near 1 would cancel).
    d = 1.0 - qab * x / qap if x <= 0.5 else (1.0 - b + qab * y) / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        even = m * (b - m) * x / ((qam + m2) * (a + m2))
        for aa in (even, -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            delta = d * c
            h *= delta
        if abs(delta - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge ({a}, {b}, {x})")


_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _stirling_correction(x: float) -> float:
    """``lgamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2)``, accurate for large x too."""
    if x >= 10.0:
        x2 = x * x
        return (1.0 / 12.0 - (1.0 / 360.0 - (1.0 / 1260.0 - 1.0 / (1680.0 * x2)) / x2) / x2) / x
    return math.lgamma(x) - ((x - 0.5) * math.log(x) - x + _HALF_LOG_2PI)


def _log_front(a: float, b: float, x: float) -> float:
    """``log(x^a (1 - x)^b / B(a, b))`` without the cancellation of lgamma differences.
    With ``s = a + b`` and ``d = x s - a`` it equals
    ``a log(1 + d / a) + b log(1 - d / b) + log(a b / s) / 2 - log(2 pi) / 2`` plus the
    Stirling corrections; near the mean, where the bounds are, d is small and each term
    keeps its precision (plain lgamma loses ~1e-8 relative at n = 1e7)."""
    s = a + b
    d = x * s - a
    first = a * math.log1p(d / a) if abs(d) < 0.5 * a else a * math.log(x * s / a)
    second = b * math.log1p(-d / b) if abs(d) < 0.5 * b else b * math.log((1.0 - x) * s / b)
    return (
        first
        + second
        + 0.5 * math.log(a * b / s)
        - _HALF_LOG_2PI
        - _stirling_correction(a)
        - _stirling_correction(b)
        + _stirling_correction(s)
    )


def _betainc(a: float, b: float, x: float) -> tuple[float, float]:
    """``(I_x(a, b), 1 - I_x(a, b))``, each with a small relative error (a, b > 0)."""
    if x <= 0.0:
        return 0.0, 1.0
    if x >= 1.0:
        return 1.0, 0.0
    front = math.exp(_log_front(a, b, x))
    if x < (a + 1.0) / (a + b + 2.0):
        value = front * _betacf(a, b, x, 1.0 - x) / a
        return value, 1.0 - value
    complement = front * _betacf(b, a, 1.0 - x, x) / b
    return 1.0 - complement, complement


def _bisect(decreasing: Callable[[float], float], target: float, lower: bool) -> float:
    """Root of a decreasing function of p in [0, 1], rounded down (``lower``) or up."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if decreasing(mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return lo if lower else hi


def _check_count(k: object, n: object, alpha: float) -> tuple[int, int]:
    if (
        isinstance(k, bool)
        or isinstance(n, bool)
        or not isinstance(k, Integral)
        or not isinstance(n, Integral)
    ):
        raise ParameterError(f"k and n must be integers, got k={k!r}, n={n!r}")
    kk, nn = int(k), int(n)
    if not 0 <= kk <= nn or nn == 0:
        raise ParameterError(f"need 0 <= k <= n and n > 0, got k={kk}, n={nn}")
    if not 0.0 < alpha < 1.0:
        raise ParameterError(f"alpha must be in (0, 1), got {alpha!r}")
    return kk, nn


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound on p from k successes in n trials.

    The smallest p with ``P(Bin(n, p) >= k) >= alpha`` (0 when k = 0): the true p is at
    least this with probability at least ``1 - alpha``. Equal to
    ``scipy.stats.beta.ppf(alpha, k, n - k + 1)``, rounded down.
    """
    k, n = _check_count(k, n, alpha)
    if k == 0:
        return 0.0
    a, b = float(k), float(n - k + 1)
    # P(Bin(n, p) < k) = 1 - I_p(k, n - k + 1) decreases in p; find where it is 1 - alpha,
    # comparing the small side of the pair to keep its relative precision.
    return _bisect(lambda p: -_betainc(a, b, p)[0], -alpha, lower=True) * (1.0 - _WIDEN)


def _binomial_cdf_small(k: int, n: int, p: float) -> float:
    """``P(Bin(n, p) <= k)`` by summing its k + 1 terms in logs (small k, any n)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    step = math.log(p) - math.log1p(-p)
    logs = [n * math.log1p(-p)]
    for j in range(k):
        logs.append(logs[-1] + math.log((n - j) / (j + 1)) + step)
    top = max(logs)
    return math.exp(top) * math.fsum(math.exp(v - top) for v in logs)


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound on p from k successes in n trials.

    The largest p with ``P(Bin(n, p) <= k) >= alpha`` (1 when k = n): the true p is at
    most this with probability at least ``1 - alpha``. Equal to
    ``scipy.stats.beta.isf(alpha, k + 1, n - k)``, rounded up.
    """
    k, n = _check_count(k, n, alpha)
    if k == n:
        return 1.0
    if k <= _SMALL_COUNT:
        # The continued fraction loses digits for a tiny p with a small k: sum directly.
        bound = _bisect(lambda p: _binomial_cdf_small(k, n, p), alpha, lower=False)
    else:
        a, b = float(k + 1), float(n - k)
        # P(Bin(n, p) <= k) = 1 - I_p(k + 1, n - k) decreases in p.
        bound = _bisect(lambda p: _betainc(a, b, p)[1], alpha, lower=False)
    return min(1.0, bound * (1.0 + _WIDEN))
