"""Constrained maximum likelihood of a finite channel, with profile-likelihood intervals.

n reporters' outputs have counts ``c`` (m outputs) with law ``lam = P^T f`` for a channel
``P`` (d x m, every entry positive) and the inputs' frequencies ``f`` on the simplex. The
log-likelihood ``l(f) = sum_o c_o log lam_o`` is concave; :func:`fit` finds its maximum over
the simplex (the constrained maximum-likelihood estimate: non-negative, summing to one).

Intervals (:func:`profile_bounds`). The profile log-likelihood of item i,
``l_i(t) = max {l(f) : f on the simplex, f_i = t}``, is concave in t, so its set
``{t : l_i(t) >= l(f_hat) - k}``, ``k = chi2_1(level) / 2 = z^2 / 2``, is an interval whose
ends are the least and the largest ``f_i`` over the likelihood-ratio region
``R = {f on the simplex : l(f) >= l(f_hat) - k}``. Each end is one convex problem
(maximise ``+-f_i`` over R), solved by a log-barrier method (Boyd and Vandenberghe, ch. 11):
Newton's method on ``t (+-f_i) + log(l(f) - l(f_hat) + k) + sum_j log f_j`` over
``sum_j f_j = 1``, t raised twentyfold per stage until the barrier's gap ``(d + 1) / t`` is below
:data:`END_TOLERANCE`. All 2d ends of all the campaigns given are solved together (batched
Newton steps: the benchmark stacks hundreds of campaigns). The ends respect the
constraints (within [0, 1], 0 reached when an item may be absent) and need no normal
approximation; at the boundary (a true share of 0) the likelihood ratio is
half 0 and half chi2_1, so the interval over-covers there (about 1 - (1 - level) / 2).
Where the estimate has a share at 0 (on a face of the simplex) the likelihood ratio of
another item is not chi2_1: with a nuisance share whose truth is on the boundary it is a
chi-bar-squared, a mixture of chi2_1 and chi2_2 (Self and Liang 1987), stochastically
larger. A near-certain item (0.97, the rest spread thin) under-covered so at n <= 2000
(0.86-0.94 at 95%). The served intervals (:func:`profile_z`) then take the threshold of
``chi2_1 / 2 + chi2_2 / 2``, the one-nuisance mixture at its worst weights (5.14 instead
of 3.84 at 95%: 16% wider); measured, benchmarks/exponential_mle.py, docs/statistics.md.

Standard errors (:func:`observed_stderr`): the observed information
``I = P diag(c / lam^2) P^T`` at the estimate, inverted on the simplex's tangent space
(``Z (Z^T I Z)^+ Z^T``, Z an orthonormal basis of ``sum_j delta_j = 0``): the Wald standard
errors of the interior. At the boundary (an item estimated at 0) they are the curvature's
scale there, not the estimate's standard deviation (its law has a mass at 0); the
interval is the profile one, which holds there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from ..estimates import FrequencyEstimate, RobustFrequencies
from ..intervals import Bounds, normal_quantile
from ..ranking import TOP, MostCommon, Ranks

if TYPE_CHECKING:
    from ..aggregate import Aggregate
    from .base import FrequencyOracle

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

END_TOLERANCE = 1e-6
"""The barrier's gap at the last stage: each end is within this of the exact end."""
FIT_TOLERANCE = 1e-8
"""The fit's gap in log-likelihood units (its ends' ``k`` is at least 0.2 for level >= 0.5)."""
_GROWTH = 20.0  # the barrier's t per stage (10 and 30 took longer, d = 32, eps = 1)
_NEWTON_STEPS = 60  # per stage, at most (a damped start takes a few; then 1-3 per stage)
_DECREMENT = 1e-6  # a row's stage ends when its Newton decrement is below this
# (the decrement bounds the barrier objective's distance from its centre: 1e-6 / t in f_i)
_HALVINGS = 60
_ZERO = 1e-7  # a fitted share below this with no ascent into it is 0


def _relative_loglik(p: FloatArray, c: FloatArray, f: FloatArray, ref: FloatArray) -> FloatArray:
    """``l(f) - l(ref_f)`` per row: ``sum_o c_o log(lam_o / ref_o)`` (ref: the reference law)."""
    lam = f @ p
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(c > 0, c * np.log(lam / ref), 0.0)
    return np.asarray(terms.sum(axis=-1))


def _direction(a: FloatArray, g: FloatArray) -> FloatArray:
    """The Newton step ``delta`` maximising ``g . delta - delta^T A delta / 2`` subject to
    ``sum delta = 0``, per row (A positive definite)."""
    scale = 1.0 / np.sqrt(np.diagonal(a, axis1=1, axis2=2))  # Jacobi: a unit diagonal
    scaled = a * scale[:, :, None] * scale[:, None, :]
    rhs = np.stack([g, np.ones_like(g)], axis=-1) * scale[:, :, None]
    try:
        sol = np.linalg.solve(scaled, rhs)
    except np.linalg.LinAlgError:  # a row singular to rounding: least squares for all
        sol = np.linalg.pinv(scaled, hermitian=True) @ rhs
    sol *= scale[:, :, None]
    x, y = sol[..., 0], sol[..., 1]
    nu = x.sum(axis=-1) / y.sum(axis=-1)
    return np.asarray(x - nu[:, None] * y)


def _information(p: FloatArray, w: FloatArray) -> FloatArray:
    """``P diag(w_b) P^T`` per row b of w (B x m): B x d x d, as one product
    ``w @ K`` with ``K[o] = P[:, o] P[:, o]^T`` flattened (a batch of small products is
    many times slower)."""
    d, m = p.shape
    k = (p.T[:, :, None] * p.T[:, None, :]).reshape(m, d * d)
    return np.asarray((w @ k).reshape(w.shape[0], d, d))


def fit(channel: npt.ArrayLike, counts: npt.ArrayLike) -> FloatArray:
    """The constrained maximum-likelihood frequencies (rows of ``counts``: B x m -> B x d,
    one m-vector -> one d-vector), by the barrier method on ``t l(f) + sum_j log f_j``,
    then shares below 1e-7 where the likelihood does not ascend set to 0."""
    p = np.asarray(channel, dtype=np.float64)
    c0 = np.asarray(counts, dtype=np.float64)
    c = np.atleast_2d(c0)
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        # (a NaN or negative n makes the first gap d / n never reach the last: a hang)
        raise ParameterError("the maximum-likelihood estimate needs non-negative counts")
    b, (d, _) = c.shape[0], p.shape
    n = c.sum(axis=1)
    f = np.full((b, d), 1.0 / d)
    t = d / n  # the first stage's gap d / t is n: one per report
    t_end = d / FIT_TOLERANCE
    while True:
        f = _center_fit(p, c, f, t)
        if float(np.min(t)) >= t_end:
            break
        t = np.minimum(t * _GROWTH, t_end)
    f = _clean(p, c, f)
    return f[0] if c0.ndim == 1 else f


def _center_fit(p: FloatArray, c: FloatArray, f: FloatArray, t: FloatArray) -> FloatArray:
    """Newton's method on ``t l(f) + sum_j log f_j`` over the simplex, from ``f``."""
    eye = np.eye(f.shape[1])

    def step(x: FloatArray, idx: IntArray) -> tuple[FloatArray, FloatArray]:
        lam = x @ p
        g = t[idx, None] * ((c[idx] / lam) @ p.T) + 1.0 / x
        a = t[idx, None, None] * _information(p, c[idx] / lam**2)
        return g, a + eye / x[:, :, None] ** 2 * eye

    def value(x: FloatArray, idx: IntArray) -> FloatArray:
        lam = x @ p
        with np.errstate(divide="ignore", invalid="ignore"):
            ll = np.where(c[idx] > 0, c[idx] * np.log(lam), 0.0).sum(axis=1)
            return np.asarray(t[idx] * ll + np.log(x).sum(axis=1))

    return _center(f, step, value, lambda x, idx: np.ones(x.shape[0], bool))


Step = Callable[[FloatArray, IntArray], tuple[FloatArray, FloatArray]]
Value = Callable[[FloatArray, IntArray], FloatArray]
Feasible = Callable[[FloatArray, IntArray], BoolArray]


def _center(f: FloatArray, step: Step, value: Value, feasible: Feasible) -> FloatArray:
    """Damped Newton steps on every row of ``f`` until its decrement is below
    :data:`_DECREMENT` (or no step raises its objective: centred to rounding)."""
    f = f.copy()
    active = np.arange(f.shape[0])
    for _ in range(_NEWTON_STEPS):
        if not active.size:
            break
        x = f[active]
        g, a = step(x, active)
        delta = _direction(a, g)
        dec = np.einsum("bj,bj->b", g, delta)
        moving = dec >= _DECREMENT
        active, x, delta, dec = active[moving], x[moving], delta[moving], dec[moving]
        new, stuck = _line_search(x, delta, dec, active, value, feasible)
        f[active] = new
        active = active[~stuck]
    return f


def _line_search(
    f: FloatArray,
    delta: FloatArray,
    dec: FloatArray,
    idx: IntArray,
    value: Value,
    feasible: Feasible,
) -> tuple[FloatArray, BoolArray]:
    """Backtracking (Armijo, 1/4) from the largest step that keeps every share positive
    (rows ``idx`` of the problem); also which rows found no step (rounding: they are
    centred as well as doubles tell)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(delta < 0, -f / delta, np.inf).min(axis=1)
    step = np.minimum(1.0, 0.99 * ratio)
    rows = np.arange(f.shape[0])
    todo = np.ones(f.shape[0], bool)
    out = f.copy()
    base = value(f, idx)
    for _ in range(_HALVINGS):
        at = rows[todo]
        if not at.size:
            break
        trial = f[at] + step[at, None] * delta[at]
        ok = np.all(trial > 0, axis=1) & feasible(trial, idx[at])
        with np.errstate(invalid="ignore"):
            vals = np.where(ok, value(trial, idx[at]), -np.inf)
        good = ok & (vals >= base[at] + 0.25 * step[at] * dec[at])
        out[at[good]] = trial[good]
        todo[at[good]] = False
        step[at[~good]] *= 0.5
    return out, todo


def _clean(p: FloatArray, c: FloatArray, f: FloatArray) -> FloatArray:
    """Shares below 1e-7 whose gradient does not exceed the multiplier ``n`` (the KKT
    condition of a share at 0) set to 0, the rest renormalised."""
    lam = f @ p
    g = (c / lam) @ p.T
    n = c.sum(axis=1, keepdims=True)
    zero = (f < _ZERO) & (g <= n * (1.0 + 1e-6))
    out = np.where(zero, 0.0, f)
    return np.asarray(out / out.sum(axis=1, keepdims=True))


def profile_bounds(
    channel: npt.ArrayLike, counts: npt.ArrayLike, estimate: npt.ArrayLike, z: float
) -> tuple[FloatArray, FloatArray]:
    """Each item's profile-likelihood interval (lower, upper): the least and the largest
    ``f_i`` with ``l(f) >= l(estimate) - z^2 / 2`` on the simplex (``estimate``: the
    maximum, :func:`fit`; z: the two-sided normal quantile of the level, so that
    ``z^2`` is chi2_1's quantile). Rows of counts and estimates give rows of bounds."""
    p = np.asarray(channel, dtype=np.float64)
    c0 = np.asarray(counts, dtype=np.float64)
    c = np.atleast_2d(c0)
    fh = np.atleast_2d(np.asarray(estimate, dtype=np.float64))
    b, (d, _) = c.shape[0], p.shape
    kappa = z * z / 2.0
    # problem k: campaign k // (2d), item (k % (2d)) // 2, sign + (upper) or - (lower)
    camp = np.repeat(np.arange(b), 2 * d)
    item = np.tile(np.repeat(np.arange(d), 2), b)
    sign = np.tile(np.array([-1.0, 1.0]), b * d)
    cc, ref = c[camp], (fh @ p)[camp]
    f = _inside(p, cc, ref, fh[camp], kappa)
    t = np.full(f.shape[0], float(d + 1))
    t_end = (d + 1) / END_TOLERANCE
    while True:
        f = _center_end(p, cc, ref, f, t, item, sign, kappa)
        if float(np.min(t)) >= t_end:
            break
        t = np.minimum(t * _GROWTH, t_end)
    ends = f[np.arange(f.shape[0]), item].reshape(b, d, 2)
    low = np.clip(ends[..., 0] - END_TOLERANCE, 0.0, 1.0)
    high = np.clip(ends[..., 1] + END_TOLERANCE, 0.0, 1.0)
    low = np.minimum(low, fh)  # the estimate is in R: its interval holds it
    high = np.maximum(high, fh)
    return (low[0], high[0]) if c0.ndim == 1 else (low, high)


def _inside(
    p: FloatArray, c: FloatArray, ref: FloatArray, f: FloatArray, kappa: float
) -> FloatArray:
    """The estimates ``f`` (whose laws are ``ref``) mixed with a little of the uniform law,
    so that every share is positive and ``l - l(f)`` stays above ``-kappa / 2``: strictly
    inside the region."""
    d = f.shape[1]
    mix = np.full(f.shape[0], 0.01)
    out = 0.99 * f + 0.01 / d
    for _ in range(60):
        r = _relative_loglik(p, c, out, ref)
        bad = r <= -kappa / 2.0
        if not bool(np.any(bad)):
            break
        mix[bad] *= 0.5
        out[bad] = (1.0 - mix[bad, None]) * f[bad] + mix[bad, None] / d
    return np.asarray(out)


def _center_end(
    p: FloatArray,
    c: FloatArray,
    ref: FloatArray,
    f: FloatArray,
    t: FloatArray,
    item: IntArray,
    sign: FloatArray,
    kappa: float,
) -> FloatArray:
    b, d = f.shape
    rows = np.arange(b)
    a_vec = np.zeros((b, d))
    a_vec[rows, item] = sign

    eye = np.eye(d)

    def step(x: FloatArray, idx: IntArray) -> tuple[FloatArray, FloatArray]:
        lam = x @ p
        s = _relative_loglik(p, c[idx], x, ref[idx]) + kappa
        grad_l = (c[idx] / lam) @ p.T
        g = t[idx, None] * a_vec[idx] + grad_l / s[:, None] + 1.0 / x
        a = _information(p, c[idx] / lam**2) / s[:, None, None]
        a += np.einsum("bj,bk->bjk", grad_l, grad_l) / (s**2)[:, None, None]
        return g, a + eye / x[:, :, None] ** 2 * eye

    def value(x: FloatArray, idx: IntArray) -> FloatArray:
        s = _relative_loglik(p, c[idx], x, ref[idx]) + kappa
        with np.errstate(invalid="ignore", divide="ignore"):
            linear = t[idx] * np.einsum("bj,bj->b", a_vec[idx], x)
            return np.asarray(linear + np.log(s) + np.log(x).sum(axis=1))

    def feasible(x: FloatArray, idx: IntArray) -> BoolArray:
        return np.asarray(_relative_loglik(p, c[idx], x, ref[idx]) + kappa > 0)

    return _center(f, step, value, feasible)


def observed_stderr(
    channel: npt.ArrayLike, counts: npt.ArrayLike, estimate: npt.ArrayLike
) -> FloatArray:
    """Wald standard errors from the observed information at ``estimate`` (module
    docstring), inverted on the simplex's tangent space (a pseudo-inverse: a direction
    the reports do not inform gets no information, not an error)."""
    p = np.asarray(channel, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    f = np.asarray(estimate, dtype=np.float64)
    d = p.shape[0]
    lam = f @ p
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(c > 0, c / lam**2, 0.0)
    info = (p * w) @ p.T
    # an orthonormal basis of the tangent space: the complement of the unit vector 1/sqrt(d)
    q, _ = np.linalg.qr(np.column_stack([np.ones(d), np.eye(d)[:, : d - 1]]))
    z = q[:, 1:]
    cov = z @ np.linalg.pinv(z.T @ info @ z, rcond=1e-12, hermitian=True) @ z.T
    return np.asarray(np.sqrt(np.clip(np.diag(cov), 0.0, None)))


def profile_z(level: float, comparisons: int, boundary: bool) -> float:
    """The ``z`` of :func:`profile_bounds` for a served interval: the normal quantile of
    ``level`` (Bonferroni over ``comparisons``), so that ``z^2`` is chi2_1's; with
    ``boundary`` (the estimate has a share at 0) the root of
    ``P(chi2_1 > c) / 2 + P(chi2_2 > c) / 2 = alpha`` as ``z^2 = c`` (module docstring)."""
    z = normal_quantile(level, comparisons=comparisons)
    if not boundary:
        return z
    alpha = (1.0 - level) / comparisons

    def tail(c: float) -> float:
        return 0.5 * math.erfc(math.sqrt(c / 2.0)) + 0.5 * math.exp(-c / 2.0)

    lo, hi = z * z, z * z + 2.0 * math.log(2.0) + 2.0  # tail(lo) > alpha >= tail(hi)
    while tail(hi) > alpha:
        hi *= 2.0
    for _ in range(100):  # bisection to rounding
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tail(mid) > alpha else (lo, mid)
    return math.sqrt(hi)


# --- the served estimate: a categorical answer's ``estimator=ml`` -------------------------

PROFILE = "profile"
"""The interval method of the maximum-likelihood estimate (an answer's ``interval``)."""
MAX_ML_ITEMS = 64
"""The most items the maximum-likelihood estimate serves (its 2d interval ends are convex
problems of d unknowns: about a second at d = 64 and a smooth channel, docs/statistics.md)."""
ML_SECONDS_64 = 4.0
"""CPU seconds of one maximum-likelihood answer at 64 items at worst: the fit, the standard
errors and the 128 interval ends at one level (measured 0.6-1.9 s, grr and exponential, eps
0.5-8, n 200-10^6, benchmarks/ml_cost.py; 2.46 s once, grr at eps 4 with one item at 0.97
and n = 200: a loaded machine's margin above that)."""


def ml_seconds(items: int) -> float:
    """What one answer with ``estimator=ml`` costs at worst (the collector's request budget):
    :data:`ML_SECONDS_64` scaled as d^3 (2d ends, each Newton steps on d x d systems: d^4
    in flops, but at d <= 64 numpy's calls weigh; 32 items measured 0.09-0.15 s) and 0.04 s
    of calls whatever d (8 items: 0.013-0.030 s, 16: 0.022-0.037 s)."""
    return 0.04 + ML_SECONDS_64 * (items / 64) ** 3


@dataclass(frozen=True, eq=False)
class MLFrequencies(FrequencyEstimate):
    """The constrained maximum-likelihood frequencies (on the simplex: consistent, biased
    toward the inside at small n) with observed-information standard errors and
    profile-likelihood intervals (module docstring). ``simultaneous=True`` makes each
    interval at ``1 - (1 - level) / d`` (Bonferroni). No forgery shift is derived for it
    (NaN): :meth:`forgery_shift` is the inversion estimate's.

    Attributes (beyond :class:`~ldpkit.estimates.FrequencyEstimate`'s)
    ----------
    channel : the law of a report given each item (d x m) the likelihood is of.
    """

    channel: FloatArray | None = None

    def _bounds(self, level: float, simultaneous: bool) -> Bounds:
        key = (float(level), bool(simultaneous))
        if key not in self._cache:
            d = self.domain_size
            if self.n < 2 or self.channel is None:
                nan = np.full(d, np.nan)
                self._cache[key] = Bounds(nan, nan.copy(), np.zeros(d, bool))
            else:
                boundary = bool(np.any(self.frequencies == 0.0))
                z = profile_z(level, d if simultaneous else 1, boundary)
                low, high = profile_bounds(self.channel, self.support_counts, self.frequencies, z)
                self._cache[key] = Bounds(low, high, np.zeros(d, bool))
        return self._cache[key]

    def interval_methods(
        self, level: float = 0.95, *, simultaneous: bool = False
    ) -> npt.NDArray[np.str_]:
        return np.full(self.domain_size, PROFILE)

    def interval_method(self, level: float = 0.95, *, simultaneous: bool = False) -> str:
        return PROFILE

    def forgery_shift(self, beta: float) -> FloatArray:
        return np.full(self.domain_size, np.nan)

    # The base class's pairwise variance is randomized response's with p and q (for the
    # exponential channel its largest and smallest entry: 100 times too small at d = 10,
    # a uniform population's most-common set one item), and its robust intervals are
    # support counts': neither is this estimate's. The answer takes them from the inversion.
    def difference_variance(self, i: IntArray, j: IntArray) -> FloatArray:
        raise _inversions("difference_variance")

    def most_common(self, level: float = 0.95) -> MostCommon:
        raise _inversions("most_common")

    def ranks(self, level: float = 0.95, *, top: int = TOP) -> Ranks:
        raise _inversions("ranks")

    def robust(self, beta: float) -> RobustFrequencies:
        raise _inversions("robust")

    def consistent(self) -> FloatArray:
        """The estimate itself: it is on the simplex already."""
        return self.frequencies


def _inversions(what: str) -> ParameterError:
    return ParameterError(
        f"{what} is not derived for the maximum-likelihood estimate: ask it of the "
        "inversion estimate (the oracle's estimate(aggregate), as the answer does)"
    )


def ml_frequencies(oracle: FrequencyOracle, aggregate: Aggregate) -> MLFrequencies:
    """The maximum-likelihood estimate of an oracle whose sums are the counts of each
    report (:meth:`FrequencyOracle.report_channel`: grr, rr, exponential); ParameterError
    for another oracle or more than :data:`MAX_ML_ITEMS` items."""
    channel = oracle.report_channel()
    if channel is None:
        raise ParameterError(
            f"the maximum-likelihood estimate needs reports that name one output each "
            f"(mechanisms grr, rr, exponential); {oracle.name!r} reports are not counted so"
        )
    d = oracle.domain_size
    if d > MAX_ML_ITEMS:
        raise ParameterError(
            f"the maximum-likelihood estimate serves at most {MAX_ML_ITEMS} categories, got {d}"
        )
    agg = oracle._checked_aggregate(aggregate)
    counted = float(np.sum(agg.sums))
    if not abs(counted - agg.n) <= 1e-6 * max(agg.n, 1):  # (a NaN sum fails here too)
        raise ParameterError(
            f"the maximum-likelihood estimate counts each report once: the aggregate's "
            f"counts add up to {counted:g}, not its n = {agg.n}"
        )
    if agg.n < 2:
        nan = np.full(d, np.nan)
        f, se = nan, nan.copy()
    else:
        f = fit(channel, agg.sums)
        se = observed_stderr(channel, agg.sums, f)
    return MLFrequencies(
        oracle.name, oracle.epsilon, agg.n, f, se, agg.sums, oracle.p, oracle.q, channel=channel
    )
