"""Confidence intervals from the distribution of what is counted.

Every frequency oracle turns its reports into *support counts*: item v's count ``C`` adds
one Bernoulli(p) trial for each of the ``m`` reporters who hold v and one Bernoulli(q)
trial for each of the other ``n - m``, all independent::

    C ~ Bin(m, p) + Bin(n - m, q),    f = m / n the estimand (the reporters' own fraction).

Duchi's mechanism counts its +1 reports, a sum of n Bernoulli trials whose mean
probability ``theta`` maps linearly to the reporters' mean; that count is treated as
``Bin(n, theta)``, which is conservative (a sum of Bernoullis with unequal probabilities
is less spread than the binomial of the same mean: Hoeffding 1956).

An interval is the set of parameters that two one-sided tests at level ``alpha / 2``
accept. Two ways of running those tests:

``score``
    The score test with the variance taken at the *hypothesised* parameter, not at the
    estimate (Wilson 1927), its critical values corrected for the count's skewness
    (one Cornish-Fisher term, ``z + gamma (z^2 - 1) / 6``) and for the count being an
    integer (half a unit). Closed form (a quadratic) per bound, iterated a few times for
    the skewness term. Used where the count's variance at the bound is large.
``exact``
    The tests computed from the count's exact distribution (a convolution of two
    binomials, or a binomial), inverted over the parameter (Clopper and Pearson 1934 for
    the binomial; over the integer m for support counts). Used where the variance at
    the bound is small: few expected reports on one side, which is where the normal
    approximation fails (high epsilon, small n, rare or near-certain items).

The exact computation sums each binomial over a window of +-11 standard deviations
(plus 12) around its mean, which holds all but a negligible fraction of the mass; the
window is narrow because the exact method is only used where the variance is small.

References
----------
E. B. Wilson, "Probable inference, the law of succession, and statistical inference",
JASA 1927. C. J. Clopper, E. S. Pearson, "The use of confidence or fiducial limits
illustrated in the case of the binomial", Biometrika 1934. W. Hoeffding, "On the
distribution of the number of successes in independent trials", Ann. Math. Stat. 1956.
E. A. Cornish, R. A. Fisher, "Moments and cumulants in the specification of
distributions", Rev. Int. Stat. Inst. 1938.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from ._validation import check_level

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

SCORE = "score"
EXACT = "exact"
KNOWN_VARIANCE = "known-variance"

_FACTORIAL_TABLE = 1 << 16
_WINDOW_SDS = 11.0
_WINDOW_PAD = 12.0
_SKEW_ITERATIONS = 4


def normal_quantile(level: float, *, comparisons: int = 1) -> float:
    """Two-sided normal quantile for ``level``, Bonferroni-corrected over ``comparisons``.

    Computed from the lower tail, so levels within a few ulps of 1 still give a finite z.
    """
    level = check_level(level)
    return -NormalDist().inv_cdf((1.0 - level) / comparisons / 2.0)


def exact_variance_limit(z: float) -> float:
    """Below this variance of the count, a bound is computed exactly.

    The score test's error in a tail grows with the skewness times ``z^3``; the limit
    grows with ``z^2`` so that simultaneous intervals (large z) go exact earlier.
    Chosen by exact coverage computations (tests/shared/test_intervals.py).
    """
    return max(40.0, 8.0 * z * z)


@functools.cache
def _log_factorial_table() -> FloatArray:
    table = np.zeros(_FACTORIAL_TABLE, dtype=np.float64)
    np.cumsum(np.log(np.arange(1, _FACTORIAL_TABLE, dtype=np.float64)), out=table[1:])
    return table


def log_factorial(k: npt.ArrayLike) -> FloatArray:
    """``log(k!)`` for integer-valued k >= 0 (a table below 2**16, Stirling above)."""
    kk = np.asarray(k, dtype=np.float64)
    table = _log_factorial_table()
    if kk.size and float(kk.max()) < _FACTORIAL_TABLE:
        return table[kk.astype(np.int64)]
    small = kk < _FACTORIAL_TABLE
    out = np.empty_like(kk)
    out[small] = table[kk[small].astype(np.int64)]
    x = kk[~small] + 1.0  # lgamma(x) with x = k + 1 >= 2**16: the series' next term < 1e-25
    out[~small] = (
        (x - 0.5) * np.log(x)
        - x
        + 0.5 * math.log(2.0 * math.pi)
        + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x**3)
    )
    return out


def _binom_pmf(k: FloatArray, m: FloatArray, prob: FloatArray) -> FloatArray:
    """Binomial pmf, 0 outside ``0 <= k <= m`` (arrays broadcast; prob may be 0 or 1)."""
    inside = (k >= 0) & (k <= m)
    kk = np.where(inside, k, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_p = np.where(kk > 0, kk * np.log(prob), 0.0)
        log_q = np.where(m - kk > 0, (m - kk) * np.log1p(-prob), 0.0)
        logpmf = log_factorial(m) - log_factorial(kk) - log_factorial(m - kk) + log_p + log_q
    return np.where(inside, np.exp(logpmf), 0.0)


def _window(m: FloatArray, prob: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``[start, stop]`` holding all but a negligible part of Bin(m, prob)'s mass."""
    mean = m * prob
    spread = _WINDOW_SDS * np.sqrt(m * prob * (1.0 - prob)) + _WINDOW_PAD
    start = np.clip(np.floor(mean - spread), 0.0, m)
    stop = np.clip(np.ceil(mean + spread), 0.0, m)
    return start, stop


def _sum_tails(
    c: FloatArray, mx: FloatArray, px: FloatArray, my: FloatArray, py: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``(P[X + Y <= c], P[X + Y >= c])`` for X ~ Bin(mx, px), Y ~ Bin(my, py), per row.
    Both tails are summed directly (not as 1 - the other), so tiny tail probabilities
    keep their precision."""
    x0, x1 = _window(mx, px)
    y0, y1 = _window(my, py)
    width_x = int(np.max(x1 - x0)) + 1 if c.size else 1
    width_y = int(np.max(y1 - y0)) + 1 if c.size else 1
    xs = x0[:, None] + np.arange(width_x)[None, :]
    pmf_x = np.where(xs <= x1[:, None], _binom_pmf(xs, mx[:, None], px[:, None]), 0.0)
    ys = y0[:, None] + np.arange(width_y)[None, :]
    pmf_y = np.where(ys <= y1[:, None], _binom_pmf(ys, my[:, None], py[:, None]), 0.0)
    cdf_y = np.cumsum(pmf_y, axis=1)
    sf_y = np.cumsum(pmf_y[:, ::-1], axis=1)[:, ::-1]  # P[Y >= ys]
    # P[Y <= c - x]: below the window 0, above it everything.
    index = c[:, None] - xs - y0[:, None]
    below = index < 0
    above = index > (y1 - y0)[:, None]
    at = np.clip(index, 0, width_y - 1).astype(np.int64)
    cdf_at = np.where(below, 0.0, np.where(above, cdf_y[:, -1:], np.take_along_axis(cdf_y, at, 1)))
    # P[Y >= c - x]: below the window everything, above it 0.
    sf_at = np.where(below, sf_y[:, :1], np.where(above, 0.0, np.take_along_axis(sf_y, at, 1)))
    return np.sum(pmf_x * cdf_at, axis=1), np.sum(pmf_x * sf_at, axis=1)


@dataclass(frozen=True)
class _Support:
    """Support counts: C ~ Bin(m, p) + Bin(n - m, q); parameter f = m / n."""

    n: int
    p: float
    q: float

    def moments(self, f: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Mean, variance and skewness of C at fraction f."""
        n, p, q = float(self.n), self.p, self.q
        mean = n * (q + f * (p - q))
        a, b = p * (1.0 - p), q * (1.0 - q)
        var = n * (b + f * (a - b))
        third = n * (f * a * (1.0 - 2.0 * p) + (1.0 - f) * b * (1.0 - 2.0 * q))
        with np.errstate(divide="ignore", invalid="ignore"):
            skew = np.where(var > 0, third / np.maximum(var, 1e-300) ** 1.5, 0.0)
        return mean, var, skew

    def score_root(self, count: FloatArray, z: FloatArray, upper: bool) -> FloatArray:
        """Root of ``(count - mean(f))^2 = z^2 var(f)`` on the side of the estimate."""
        n, p, q = float(self.n), self.p, self.q
        r = p - q
        a, b = p * (1.0 - p), q * (1.0 - q)
        g = (count / n - q) / r
        k = z * z / (n * r * r)
        big_b = 2.0 * g + k * (a - b)
        disc = np.maximum(big_b * big_b - 4.0 * (g * g - k * b), 0.0)
        return (big_b + (1.0 if upper else -1.0) * np.sqrt(disc)) / 2.0

    def tails(self, count: FloatArray, f: FloatArray) -> tuple[FloatArray, FloatArray]:
        m = np.rint(f * self.n)
        return _sum_tails(
            count, m, np.full_like(m, self.p), float(self.n) - m, np.full_like(m, self.q)
        )


@dataclass(frozen=True)
class _Binomial:
    """A plain binomial count: C ~ Bin(n, theta); parameter theta."""

    n: int

    def moments(self, theta: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        n = float(self.n)
        var = n * theta * (1.0 - theta)
        with np.errstate(divide="ignore", invalid="ignore"):
            skew = np.where(var > 0, (1.0 - 2.0 * theta) / np.sqrt(np.maximum(var, 1e-300)), 0.0)
        return n * theta, var, skew

    def score_root(self, count: FloatArray, z: FloatArray, upper: bool) -> FloatArray:
        """Wilson's bound: root of ``(count - n theta)^2 = z^2 n theta (1 - theta)``."""
        n = float(self.n)
        g = count / n
        k = z * z / n
        disc = np.maximum((2.0 * g + k) ** 2 - 4.0 * (1.0 + k) * g * g, 0.0)
        return (2.0 * g + k + (1.0 if upper else -1.0) * np.sqrt(disc)) / (2.0 * (1.0 + k))

    def tails(self, count: FloatArray, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        zero = np.zeros_like(theta)
        return _sum_tails(count, np.full_like(theta, float(self.n)), theta, zero, zero)


@dataclass(frozen=True)
class _Linear:
    """A linear estimate whose variance and third cumulant, at the hypothesised parameter
    theta, are polynomials in theta (one row of coefficients per estimate, lowest power
    first): a distribution's bin or range. On the count scale: the estimate divided by
    ``unit`` (one user's share), so that the continuity correction is half a user.

    Its law is a mixture (a user adds a different amount at each depth of the tree), so a
    positive skewness does not mean a light lower tail: with a few users in a bin, the
    chance that all of them reported a coarse depth, which dilutes them, is large. The
    skewness term therefore only ever widens a bound, never narrows it."""

    unit: float
    variance: FloatArray  # (rows, 3): Var(estimate) = v0 + v1 theta + v2 theta^2
    third: FloatArray  # (rows, 4): the third cumulant of the estimate, a cubic in theta

    def moments(self, theta: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        powers = theta[:, None] ** np.arange(4)
        var = np.maximum(np.sum(self.variance * powers[:, :3], axis=1), 0.0)
        third = np.sum(self.third * powers, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            skew = np.where(var > 0, third / np.maximum(var, 1e-300) ** 1.5, 0.0)
        return theta / self.unit, var / self.unit**2, skew

    def score_root(self, count: FloatArray, z: FloatArray, upper: bool) -> FloatArray:
        """Root of ``(estimate - theta)^2 = z^2 Var(theta)`` on the side of the estimate."""
        est = count * self.unit
        v0, v1, v2 = (self.variance[:, i] for i in range(3))
        k = z * z
        a = np.maximum(1.0 - k * v2, 1e-12)
        b = 2.0 * est + k * v1
        disc = np.maximum(b * b - 4.0 * a * (est * est - k * v0), 0.0)
        return (b + (1.0 if upper else -1.0) * np.sqrt(disc)) / (2.0 * a)


_Family = _Support | _Binomial


def _score_bound(family: _Family | _Linear, count: FloatArray, z: float, upper: bool) -> FloatArray:
    """One bound of the skew- and continuity-corrected score interval, in [0, 1]."""
    adjusted = count + (0.5 if upper else -0.5)
    factor = (z * z - 1.0) / 6.0
    bound = family.score_root(adjusted, np.full_like(count, z), upper)
    for _ in range(_SKEW_ITERATIONS):
        _, _, skew = family.moments(np.clip(bound, 0.0, 1.0))
        # Right skew (gamma > 0) stretches the upper tail: the lower bound's critical value
        # grows, the upper bound's shrinks.
        z_eff = np.maximum(z + (-1.0 if upper else 1.0) * skew * factor, 0.0)
        if isinstance(family, _Linear):  # its skewness can mislead (see _Linear): widen only
            z_eff = np.maximum(z_eff, z)
        bound = family.score_root(adjusted, z_eff, upper)
    return np.clip(bound, 0.0, 1.0)


def _accepts(
    family: _Family, count: FloatArray, parameter: FloatArray, z: float, tail: float, upper: bool
) -> BoolArray:
    """Does the one-sided test keep ``parameter``? (exact where the variance is small)."""
    mean, var, skew = family.moments(parameter)
    factor = (z * z - 1.0) / 6.0
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = np.sqrt(var)
        if upper:  # is count too low for this parameter? lower-tail test
            stat = (mean - count - 0.5) / sd
            keep = stat < np.maximum(z - skew * factor, 0.0)
        else:  # is count too high? upper-tail test
            stat = (count - 0.5 - mean) / sd
            keep = stat < np.maximum(z + skew * factor, 0.0)
    keep = np.where(var > 0, keep, np.abs(mean - count) < 0.5)
    small = var <= 2.0 * exact_variance_limit(z)
    if np.any(small):
        le, ge = family.tails(count[small], parameter[small])
        keep[small] = (le if upper else ge) > tail
    return np.asarray(keep, dtype=bool)


def _exact_support_bound(
    family: _Support, count: FloatArray, start: FloatArray, z: float, tail: float, upper: bool
) -> FloatArray:
    """Over the integer m: the largest (upper) or smallest (lower) m the tests keep.
    Gallops from ``start`` (the score bound, usually a few units away) in doubling steps
    until the decision flips, then bisects; all rows in lockstep."""
    n = float(family.n)
    x = np.clip(np.rint(start * n), 0.0, n)
    keep = _accepts(family, count, x / n, z, tail, upper)
    # Invariant: `inside` is kept, `outside` is not (-1 and n + 1 stand for the virtual
    # ends: beyond them nothing is kept).
    inside = np.where(keep, x, np.nan)
    outside = np.where(keep, np.nan, x)
    direction = 1.0 if upper else -1.0
    toward = np.where(keep, direction, -direction)  # from the known end toward the other
    step = np.ones_like(x)
    while True:
        searching = np.isnan(inside) | np.isnan(outside)
        if not np.any(searching):
            break
        known = np.where(np.isnan(inside), outside, inside)
        probe = known + toward * step
        beyond = (probe < 0) | (probe > n)
        probe = np.clip(probe, 0.0, n)
        rows = np.flatnonzero(searching & ~beyond)
        kept = np.zeros(x.size, dtype=bool)
        if rows.size:
            kept[rows] = _accepts(family, count[rows], probe[rows] / n, z, tail, upper)
        virtual = np.where(toward > 0, n + 1.0, -1.0)
        # A probe past an end: the virtual end is "not kept" when searching outward from
        # a kept m, and "kept" when searching back from an unkept one.
        ends = searching & beyond
        outside = np.where(ends & ~np.isnan(inside), virtual, outside)
        inside = np.where(ends & np.isnan(inside), virtual, inside)
        hit = searching & ~beyond
        inside = np.where(hit & kept & np.isnan(inside), probe, inside)
        outside = np.where(hit & ~kept & np.isnan(outside), probe, outside)
        # Still on the same side: move the known end and double the step.
        same = hit & ((kept & np.isnan(outside)) | (~kept & np.isnan(inside)))
        inside = np.where(same & kept, probe, inside)
        outside = np.where(same & ~kept, probe, outside)
        step = np.where(same, step * 2.0, step)
    while True:
        open_ = np.abs(inside - outside) > 1
        if not np.any(open_):
            break
        mid = np.floor((inside + outside) / 2.0)
        rows = np.flatnonzero(open_)
        kept = np.zeros(x.size, dtype=bool)
        kept[rows] = _accepts(family, count[rows], mid[rows] / n, z, tail, upper)
        inside = np.where(open_ & kept, mid, inside)
        outside = np.where(open_ & ~kept, mid, outside)
    return np.clip(inside, 0.0, n) / n


def _exact_bound(
    family: _Family, count: FloatArray, start: FloatArray, z: float, alpha: float, upper: bool
) -> FloatArray:
    """The bound from the exact tests, searched over the parameter (vectorized)."""
    tail = alpha / 2.0
    if isinstance(family, _Support):
        return _exact_support_bound(family, count, start, z, tail, upper)
    return _ClopperPearson(family, count, tail, upper).search(start)


class _ClopperPearson:
    """Over a continuous theta: Newton's method on the logarithm of the tail probability,
    whose derivative in theta is a binomial pmf (n b(c; n - 1, theta) for the upper
    tail), from the score bound; steps that leave the bracket are halved. Per row it
    keeps the bracket (``kept``, ``other``) and the kept iterate nearest the root."""

    def __init__(self, family: _Binomial, count: FloatArray, tail: float, upper: bool) -> None:
        self.family, self.count, self.tail, self.upper = family, count, tail, upper
        self.n = float(family.n)
        self.kept = np.clip(count / self.n, 0.0, 1.0)  # the estimate is always kept
        self.other = np.ones(count.size) if upper else np.zeros(count.size)
        self.best = self.kept.copy()

    def search(self, start: FloatArray) -> FloatArray:
        count, n, upper = self.count, self.n, self.upper
        at_end = (count >= n) if upper else (count <= 0)  # the bound is the end itself
        done = at_end.copy()
        theta = np.clip(start, 0.0, 1.0)
        for _ in range(60):
            rows = np.flatnonzero(~done)
            if not rows.size:
                break
            theta[rows], converged = self._step(rows, theta[rows])
            done[rows] |= converged
        result = np.where(at_end, 1.0 if upper else 0.0, self.best)
        return np.asarray(result, dtype=np.float64)

    def _step(self, rows: npt.NDArray[np.intp], th: FloatArray) -> tuple[FloatArray, BoolArray]:
        """The next thetas of the open ``rows`` (now at ``th``), and which converged."""
        c, kept, other, upper = self.count[rows], self.kept, self.other, self.upper
        le, ge = self.family.tails(c, th)
        tail_at = np.maximum(le if upper else ge, 1e-300)
        g = np.log(tail_at) - math.log(self.tail)
        keep = g > 0
        kept[rows] = np.where(keep, th, kept[rows])
        other[rows] = np.where(keep, other[rows], th)
        self.best[rows] = np.where(keep, th, self.best[rows])
        # d log(tail) / d theta = -+ n b(c or c - 1; n - 1, theta) / tail
        density = self.n * _binom_pmf(c if upper else c - 1.0, np.full_like(th, self.n - 1.0), th)
        slope = (-density if upper else density) / tail_at
        with np.errstate(divide="ignore", invalid="ignore"):
            step = th - g / slope
        lo_b = np.minimum(kept[rows], other[rows])
        hi_b = np.maximum(kept[rows], other[rows])
        inside = np.isfinite(step) & (step > lo_b) & (step < hi_b)
        nxt = np.where(inside, step, (kept[rows] + other[rows]) / 2.0)
        tolerance = 1e-13 * np.maximum(th, 1e-12)
        converged = (np.isfinite(step) & (np.abs(step - th) <= tolerance)) | (hi_b - lo_b <= 1e-15)
        # Converged on the rejected side: step just past the root, onto the kept side.
        toward_kept = np.sign(kept[rows] - th)
        ahead = np.where(converged & ~keep, th + toward_kept * 4.0 * tolerance, nxt)
        return ahead, converged & keep


@dataclass(frozen=True)
class Bounds:
    """Interval bounds on the parameter scale (a fraction in [0, 1]) and how each was made."""

    low: FloatArray
    high: FloatArray
    exact: BoolArray  # True where either bound came from the exact tests

    def methods(self) -> npt.NDArray[np.str_]:
        return np.where(self.exact, EXACT, SCORE)


def _interval(family: _Family, counts: npt.ArrayLike, level: float, comparisons: int) -> Bounds:
    z = normal_quantile(level, comparisons=comparisons)  # checks level: not again here
    alpha = (1.0 - float(level)) / comparisons
    c = np.rint(np.asarray(counts, dtype=np.float64))
    unique, inverse = np.unique(c.ravel(), return_inverse=True)
    limit = exact_variance_limit(z)
    lows = _score_bound(family, unique, z, upper=False)
    highs = _score_bound(family, unique, z, upper=True)
    exact = np.zeros(unique.size, dtype=bool)
    for upper, bounds in ((False, lows), (True, highs)):
        _, var, _ = family.moments(bounds)
        go_exact = var < limit
        if np.any(go_exact):
            bounds[go_exact] = _exact_bound(
                family, unique[go_exact], bounds[go_exact], z, alpha, upper
            )
            exact |= go_exact
    highs = np.maximum(highs, lows)
    return Bounds(
        lows[inverse].reshape(c.shape),
        highs[inverse].reshape(c.shape),
        exact[inverse].reshape(c.shape),
    )


def support_interval(
    counts: npt.ArrayLike, n: int, p: float, q: float, *, level: float, comparisons: int = 1
) -> Bounds:
    """Intervals for each item's fraction f from its support count (see module doc).

    Parameters
    ----------
    counts : array_like
        Support counts, one per item (integer-valued).
    n : int
        Number of reports, > 0.
    p, q : float
        Probability that a report supports the item when the reporter holds it (p) and
        when not (q), ``p > q``.
    level : float
        Confidence level of each interval, Bonferroni-divided over ``comparisons``.
    """
    return _interval(_Support(int(n), float(p), float(q)), counts, level, comparisons)


def linear_interval(
    estimates: npt.ArrayLike,
    unit: float,
    variance: npt.ArrayLike,
    third: npt.ArrayLike,
    *,
    level: float,
    comparisons: int = 1,
    upper: bool,
) -> FloatArray:
    """One bound (``upper`` or lower) of each linear estimate's score interval.

    The score test of :func:`support_interval` (the variance at the hypothesised
    parameter, one Cornish-Fisher term for the skewness, half a ``unit`` for the
    discreteness), for an estimate whose variance and third cumulant at the parameter
    theta are the polynomials ``variance`` (rows of 3 coefficients, lowest power first)
    and ``third`` (rows of 4). No exact branch: the estimate is a weighted sum of several
    support counts, whose exact law has no lattice to invert over.
    """
    z = normal_quantile(level, comparisons=comparisons)
    est = np.atleast_1d(np.asarray(estimates, dtype=np.float64))
    family = _Linear(
        float(unit),
        np.asarray(variance, dtype=np.float64).reshape(est.size, 3),
        np.asarray(third, dtype=np.float64).reshape(est.size, 4),
    )
    return _score_bound(family, est / family.unit, z, upper)


def binomial_interval(count: npt.ArrayLike, n: int, *, level: float) -> Bounds:
    """Interval for a binomial proportion theta from ``count`` successes out of ``n``."""
    return _interval(_Binomial(int(n)), count, level, 1)


def support_distribution(n: int, m: int, p: float, q: float) -> tuple[int, FloatArray]:
    """``(start, pmf)``: ``P[C = start + i] = pmf[i]`` for C ~ Bin(m, p) + Bin(n - m, q)."""
    one = np.ones(1)
    x0, x1 = (int(v[0]) for v in _window(one * m, one * p))
    y0, y1 = (int(v[0]) for v in _window(one * (n - m), one * q))
    xs, ys = np.arange(x0, x1 + 1.0), np.arange(y0, y1 + 1.0)
    pmf_x = _binom_pmf(xs, np.full_like(xs, m), np.full_like(xs, p))
    pmf_y = _binom_pmf(ys, np.full_like(ys, n - m), np.full_like(ys, q))
    return x0 + y0, np.convolve(pmf_x, pmf_y)


def support_coverage(
    n: int, m: int, p: float, q: float, *, level: float, comparisons: int = 1
) -> float:
    """Exact probability that :func:`support_interval` covers ``m / n``.

    Sums ``P[C = c]`` over the counts c whose interval holds ``m / n``, with C's exact
    distribution (a convolution of Bin(m, p) and Bin(n - m, q)).
    """
    start, pmf = support_distribution(n, m, p, q)
    keep = pmf > 1e-15 * float(pmf.max())
    counts = start + np.flatnonzero(keep).astype(np.float64)
    bounds = support_interval(counts, n, p, q, level=level, comparisons=comparisons)
    f = m / n
    covered = (bounds.low <= f) & (f <= bounds.high)
    return float(np.sum(pmf[keep][covered]))
