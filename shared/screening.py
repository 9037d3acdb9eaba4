"""Screening: does a set of reports follow the law every honest population's reports follow?

A forged report is deniable like an honest one, so one report alone rarely gives a forger
away. But honest reports follow laws that hold *whatever the inputs* (a unary report sets
Bern(p) + Bin(d - 1, q) bits; an item is supported by between a fraction q and a fraction
p of any honest population's reports), and forgeries that move an estimate far must break
them once there are enough of them. Each mechanism states its laws in its own module
(:meth:`~ldpkit.mechanisms.base.Mechanism.screen_reports` on a batch's reports,
:meth:`~ldpkit.mechanisms.base.Mechanism.screen_aggregate` on pooled sufficient
statistics); this module holds what they share: the :class:`Finding` they return, exact
binomial tests of counts (:func:`count_law`) and how several tests split a false-alarm rate
(:func:`first_finding`, :func:`composed`). Every test is set so that honest reports fail it
with probability at most the ``alpha`` it is given (its false-alarm rate).

What screening cannot hold, forgeries that follow the honest laws, it can bound: the
residual (:func:`part_gains`, :func:`waterfill`, :class:`LinearShift`) is the largest
change a fraction beta of forged reports can make to an estimate linear in support counts,
which the estimate objects disclose as ``forgery_shift(beta)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import numpy.typing as npt

from .errors import ParameterError
from .intervals import _binom_pmf, _window

FloatArray = npt.NDArray[np.float64]

DEFAULT_FALSE_ALARM = 1e-4
"""The probability that an honest batch is held (1 in 10,000), split over its tests."""


@dataclass(frozen=True)
class Finding:
    """Why reports do not look honest: the ``test`` that failed, a sentence saying what was
    seen against what honest reports allow, and ``p_value``, an upper bound on the
    probability that honest reports look at least this far off."""

    test: str
    reason: str
    p_value: float

    def to_dict(self) -> dict[str, object]:
        return {"test": self.test, "reason": self.reason, "p_value": self.p_value}


def shown(probability: float) -> str:
    """A tail probability for a reason; 0 is what the exact sums leave out (below 1e-25)."""
    return f"{probability:.2g}" if probability > 0 else "below 1e-25"


def _tails(n: int, p: float) -> tuple[int, npt.NDArray[np.float64]]:
    """``(start, pmf)`` of Bin(n, p) over the window that holds all but ~1e-25 of it."""
    start, stop = (int(v[0]) for v in _window(np.array([float(n)]), np.array([p])))
    k = np.arange(start, stop + 1, dtype=np.float64)
    return start, _binom_pmf(k, np.full_like(k, n), np.full_like(k, p))


@functools.lru_cache(maxsize=4096)
def upper_critical(n: int, p: float, alpha: float) -> int:
    """The smallest count c with ``P[Bin(n, p) >= c] <= alpha`` (n + 1: none up to n)."""
    if n <= 0:
        return n + 1
    start, pmf = _tails(n, p)
    upper = np.cumsum(pmf[::-1])[::-1]  # upper[i] = P[C >= start + i]
    above = np.flatnonzero(upper <= alpha)
    return start + int(above[0]) if above.size else start + len(pmf)


@functools.lru_cache(maxsize=4096)
def lower_critical(n: int, q: float, alpha: float) -> int:
    """The largest count c with ``P[Bin(n, q) <= c] <= alpha`` (-1: none)."""
    if n <= 0:
        return -1
    start, pmf = _tails(n, q)
    lower = np.cumsum(pmf)  # lower[i] = P[C <= start + i]
    below = np.flatnonzero(lower <= alpha)
    return start + int(below[-1]) if below.size else start - 1


def _upper_tail(n: int, p: float, count: int) -> float:
    start, pmf = _tails(n, p)
    return float(pmf[max(0, count - start) :].sum())


def _lower_tail(n: int, q: float, count: int) -> float:
    start, pmf = _tails(n, q)
    return float(pmf[: max(0, count - start + 1)].sum())


def count_law(
    counts: npt.ArrayLike,
    trials: npt.ArrayLike,
    high: npt.ArrayLike,
    low: npt.ArrayLike | None,
    alpha: float,
    test: str,
    name: Callable[[int], str],
) -> Finding | None:
    """Each of K counts, ``counts[k]`` of ``trials[k]`` reports, is Bin(trials, s_k) with
    ``low_k <= s_k <= high_k`` whatever the inputs: a count in Bin(trials, high)'s upper
    ``alpha / (2 K)`` tail or in Bin(trials, low)'s lower one fails (Bonferroni: exact;
    ``low`` None: the upper tails only, at ``alpha / K``). ``name(k)`` says what count k
    is about ("item 17 is supported").
    """
    arrays = (counts, trials, high, 0.0 if low is None else low)
    c, n, hi, lo = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in arrays))
    if c.size == 0:
        return None
    share = alpha / (c.size * (1.0 if low is None else 2.0))
    over = c - _criticals(upper_critical, n, hi, share)
    under = np.full(c.shape, -1.0) if low is None else _criticals(lower_critical, n, lo, share) - c
    k = int(np.argmax(np.maximum(over, under)))
    if over.flat[k] < 0 and under.flat[k] < 0:
        return None
    count, m = int(c.flat[k]), int(n.flat[k])
    if over.flat[k] >= 0:
        seen, bound = f"more than {count - int(over.flat[k]) - 1}", f"at most {hi.flat[k]:.4g}"
        p_value = _upper_tail(m, float(hi.flat[k]), count)
    else:
        seen, bound = f"fewer than {count + int(under.flat[k]) + 1}", f"at least {lo.flat[k]:.4g}"
        p_value = _lower_tail(m, float(lo.flat[k]), count)
    return Finding(
        test,
        f"{name(k)} by {count} of {m} reports; an honest report does so with probability "
        f"{bound}, whatever its value ({seen} of {m}: probability below {share:.2g})",
        min(1.0, alpha / share * p_value),
    )


def rare(
    count: int, m: int, probability: float, alpha: float, test: str, what: str
) -> Finding | None:
    """``count`` of m reports did ``what``, which an honest report does with probability at
    most ``probability`` whatever its value: Bin(m, probability)'s upper tail."""
    return count_law(count, m, probability, None, alpha, test, lambda _: what)


def _criticals(
    critical: Callable[[int, float, float], int], n: FloatArray, p: FloatArray, alpha: float
) -> FloatArray:
    """``critical(n_k, p_k, alpha)`` of every k, computed once per distinct pair (the pairs
    as complex numbers: a one-dimensional sort)."""
    pairs, inverse = np.unique((n + 1j * p).ravel(), return_inverse=True)
    values = [critical(int(pair.real), float(pair.imag), alpha) for pair in pairs]
    return np.asarray(values, dtype=np.float64)[inverse.ravel()].reshape(n.shape)


def support_counts(
    counts: npt.NDArray[np.float64], n: int, p: float, q: float, alpha: float
) -> Finding | None:
    """Each item's support count among ``n`` reports of an honest population is
    Bin(n, s) with ``q <= s <= p`` whatever the inputs (:func:`count_law`)."""
    return count_law(counts, n, p, q, alpha, "support count", lambda k: f"item {k} is supported")


def choice_counts(
    counts: npt.ArrayLike, shares: npt.ArrayLike, alpha: float, name: Callable[[int], str]
) -> Finding | None:
    """The parts a composed mechanism's reports chose (a depth, a view, a sketch's row):
    each part's count among n honest reports is Bin(n, share), whatever the inputs, as the
    choice is drawn independently of the value."""
    c = np.asarray(counts, dtype=np.float64)
    return count_law(c, c.sum(), shares, shares, alpha, "choice", name)


Test = Callable[[float], Finding | None]
"""One test of a set of reports at a given false-alarm rate."""


def first_finding(alpha: float, tests: Sequence[Test]) -> Finding | None:
    """Several tests of one set of reports, each at ``alpha / len(tests)`` (Bonferroni):
    the first that fails, its p-value bound scaled to the whole."""
    share = alpha / max(1, len(tests))
    for test in tests:
        found = test(share)
        if found is not None:
            return Finding(found.test, found.reason, min(1.0, found.p_value * len(tests)))
    return None


def composed(
    alpha: float,
    labels: Sequence[str],
    parts: Sequence[Test],
    chosen: npt.ArrayLike | None = None,
    shares: npt.ArrayLike | None = None,
) -> Finding | None:
    """A composed mechanism's reports: how many chose each part (``chosen``, against the
    parts' ``shares``: :func:`choice_counts`), then each part's own law on its reports
    (``parts[k]``, about ``labels[k]``); every test at ``alpha / (1 + parts)``."""
    tests: list[Test] = [
        partial(_part, label, test) for label, test in zip(labels, parts, strict=True)
    ]
    if chosen is not None and shares is not None:
        tests.insert(0, partial(_chosen, labels, chosen, shares))
    return first_finding(alpha, tests)


def _part(label: str, test: Test, alpha: float) -> Finding | None:
    """``test``'s finding, its reason prefixed by the part it is about."""
    found = test(alpha)
    return None if found is None else Finding(found.test, f"{label}: {found.reason}", found.p_value)


def _chosen(
    labels: Sequence[str], counts: npt.ArrayLike, shares: npt.ArrayLike, alpha: float
) -> Finding | None:
    return choice_counts(counts, shares, alpha, lambda k: f"{labels[k]} is chosen")


def bernstein_excess(excess: float, n: int, variance: float, spread: float) -> float:
    """Bernstein's bound on ``P[mean - E[mean] >= excess]`` for the mean of ``n``
    independent reports of variance at most ``variance``, each within ``spread`` of its
    expectation."""
    if excess <= 0.0:
        return 1.0
    return math.exp(-n * excess * excess / (2.0 * variance + 2.0 * spread * excess / 3.0))


# --- the residual: how far forgeries that pass can move an estimate -------------------


def check_fraction(beta: object) -> float:
    """A forged fraction of the reports, ``0 <= beta < 1``."""
    if isinstance(beta, bool) or not isinstance(beta, int | float | np.floating):
        raise ParameterError(f"the forged fraction must be a number, got {beta!r}")
    value = float(beta)
    if not 0.0 <= value < 1.0:
        raise ParameterError(f"the forged fraction must be in [0, 1), got {beta!r}")
    return value


def part_gains(
    weights: FloatArray, counts: FloatArray | None, p: float, q: float, supports: int | None
) -> tuple[FloatArray, FloatArray]:
    """How far an output ``sum_j weights[r, j] y_j`` moves, up and down, per unit of one
    part's reports that are forged: ``y`` the part's debiased support fractions
    ``(C_j / n - q) / (p - q)``, ``counts[r, j]`` items sharing weight ``weights[r, j]``
    (default one each), ``supports`` the number of items every report supports (None: any).

    A forged share ``b`` of the part's reports moves ``y_j`` by ``b (x_j - s_j) / (p - q)``,
    ``x_j`` the share of forged reports supporting j and ``s_j = q + (p - q) f_j`` the
    honest one, ``f`` the honest population's fractions (any distribution): the output
    rises at most ``(max_x w.x - q sum w - (p - q) min w) / (p - q)`` per unit of b and
    falls at most ``(q sum w + (p - q) max w - min_x w.x) / (p - q)``, ``w.x`` ranging over
    what one report can support."""
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    c = np.ones_like(w) if counts is None else np.atleast_2d(np.asarray(counts, np.float64))
    present = c > 0
    highest = np.max(np.where(present, w, -np.inf), axis=1)
    lowest = np.min(np.where(present, w, np.inf), axis=1)
    one = supports == 1  # the common case (randomized response), without sorting
    top, bottom = (highest, lowest) if one else _support_extremes(w, c, supports)
    total = (w * c).sum(axis=1)
    up = (top - q * total - (p - q) * lowest) / (p - q)
    down = (q * total + (p - q) * highest - bottom) / (p - q)
    return up, down


def _support_extremes(
    w: FloatArray, c: FloatArray, supports: int | None
) -> tuple[FloatArray, FloatArray]:
    """Per row, the largest and smallest total weight of the items one report supports:
    any set (``supports`` None), or exactly ``supports`` items (with multiplicity)."""
    if supports is None:
        return (c * np.maximum(w, 0.0)).sum(axis=1), (c * np.minimum(w, 0.0)).sum(axis=1)
    out = []
    for sign in (-1.0, 1.0):  # largest first, then smallest first
        order = np.argsort(sign * w, axis=1, kind="stable")
        ws, cs = np.take_along_axis(w, order, 1), np.take_along_axis(c, order, 1)
        before = np.cumsum(cs, axis=1) - cs
        out.append((np.clip(supports - before, 0.0, cs) * ws).sum(axis=1))
    return out[0], out[1]


def waterfill(gains: FloatArray, shares: FloatArray, beta: float) -> FloatArray:
    """The largest ``sum_v gains_v b_v`` over the ways to spread a forged fraction ``beta``
    of all reports across parts of honest shares ``shares`` (their reports ``shares (1 -
    beta)``), ``b_v = x_v / (h_v + x_v)`` the forged share of part v's reports for x_v of
    the forged ones there and h_v its honest ones (per row of ``gains``, (..., parts)).

    Each term is concave in x_v, so the optimum puts ``x_v = sqrt(g_v h_v / lam) - h_v`` on
    the parts of the largest ``g_v / h_v`` (water-filling), worth ``G - S^2 / (beta + H)``
    over the parts used (sums of g, sqrt(g h) and h); every prefix of that order that keeps
    its x positive is feasible, and the best of them is the optimum. One part: ``g beta``.
    """
    g = np.maximum(np.asarray(gains, dtype=np.float64), 0.0)
    h = np.asarray(shares, dtype=np.float64) * (1.0 - beta)
    order = np.argsort(-g / h, axis=-1, kind="stable")
    gs, hs = np.take_along_axis(g, order, -1), h[order]
    G, S, H = np.cumsum(gs, -1), np.cumsum(np.sqrt(gs * hs), -1), np.cumsum(hs, -1)
    lam = (S / (beta + H)) ** 2
    value = np.where((gs > 0) & (gs > lam * hs), G - S * S / (beta + H), 0.0)
    return np.asarray(np.max(value, axis=-1, initial=0.0))


@dataclass(frozen=True, eq=False)
class LinearShift:
    """How far forged reports can move outputs that are linear in debiased support counts
    of parts chosen at random (views, depths, the sketches): ``up`` and ``down``
    (outputs..., parts) from :func:`part_gains`, ``shares`` each part's probability."""

    up: FloatArray
    down: FloatArray
    shares: FloatArray

    def shifts(self, beta: float) -> tuple[FloatArray, FloatArray]:
        """The largest rise and fall that a forged fraction ``beta`` of all reports can make
        to each output's expectation, whatever the honest population (:func:`waterfill`)."""
        b = check_fraction(beta)
        return waterfill(self.up, self.shares, b), waterfill(self.down, self.shares, b)

    def shift(self, beta: float) -> FloatArray:
        """The larger of :meth:`shifts`: the change a forged fraction ``beta`` can make."""
        return np.maximum(*self.shifts(beta))

    def take(self, index: npt.NDArray[np.int64] | slice) -> LinearShift:
        """The outputs at ``index`` (the first axis)."""
        return LinearShift(self.up[index], self.down[index], self.shares)
