"""Screening: does a set of reports follow the law every honest population's reports follow?

A forged report is deniable like an honest one, so one report alone rarely gives a forger
away. But honest reports follow laws that hold *whatever the inputs* (a unary report sets
Bern(p) + Bin(d - 1, q) bits; an item is supported by between a fraction q and a fraction
p of any honest population's reports), and forgeries that move an estimate far must break
them once there are enough of them. Each mechanism states its laws in its own module
(:meth:`~ldpkit.mechanisms.base.Mechanism.screen_reports` on a batch's reports,
:meth:`~ldpkit.mechanisms.base.Mechanism.screen_aggregate` on pooled sufficient
statistics); this module holds what they share: the :class:`Finding` they return and exact
binomial critical counts. Every test is set so that honest reports fail it with
probability at most the ``alpha`` it is given (its false-alarm rate).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .intervals import _binom_pmf, _window

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


def support_counts(
    counts: npt.NDArray[np.float64], n: int, p: float, q: float, alpha: float
) -> Finding | None:
    """Each item's support count among ``n`` reports of an honest population is
    Bin(n, s) with ``q <= s <= p`` whatever the inputs; a count above Bin(n, p)'s upper
    ``alpha / (2 d)`` tail or below Bin(n, q)'s lower one fails (``d = len(counts)``)."""
    d = len(counts)
    if n <= 0 or d == 0:
        return None
    share = alpha / (2.0 * d)
    high, low = upper_critical(n, p, share), lower_critical(n, q, share)
    top = int(np.argmax(counts))
    if counts[top] >= high:
        return Finding(
            "support count",
            f"item {top} is supported by {int(counts[top])} of {n} reports; honest reports "
            f"support an item at most a fraction p = {p:.4g} of the time, whatever their "
            f"values (more than {high - 1} of {n}: probability below {share:.2g})",
            min(1.0, 2.0 * d * _upper_tail(n, p, int(counts[top]))),
        )
    bottom = int(np.argmin(counts))
    if counts[bottom] <= low:
        return Finding(
            "support count",
            f"item {bottom} is supported by {int(counts[bottom])} of {n} reports; honest "
            f"reports support an item at least a fraction q = {q:.4g} of the time, whatever "
            f"their values (fewer than {low + 1} of {n}: probability below {share:.2g})",
            min(1.0, 2.0 * d * _lower_tail(n, q, int(counts[bottom]))),
        )
    return None


def bernstein_excess(excess: float, n: int, variance: float, spread: float) -> float:
    """Bernstein's bound on ``P[mean - E[mean] >= excess]`` for the mean of ``n``
    independent reports of variance at most ``variance``, each within ``spread`` of its
    expectation."""
    if excess <= 0.0:
        return 1.0
    return math.exp(-n * excess * excess / (2.0 * variance + 2.0 * spread * excess / 3.0))
