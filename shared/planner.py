"""How many users a campaign needs, and how wide its intervals will be.

The planner uses the intervals the estimates really give (:mod:`ldpkit.intervals`), not
``z`` times a plug-in standard error: the expected half-width ``E[(high - low) / 2]``
over the distribution of what is counted.

- Frequency oracles: at an assumed item frequency ``f`` (the fraction of users holding
  the item), over the distribution of its support count. With ``frequency=None`` the
  planner takes the ``f`` in [0, 1] whose expected half-width is largest, an upper bound
  whatever the data, and says which ``f`` that was; it also gives what a rare item
  (``f = 0``) would see, which at high epsilon can be far less.
- Numeric mechanisms: the estimand is the reporters' mean, so only the mechanism's noise
  counts; the planner takes its worst case over the bounds. Duchi's binary reports are
  planned as the interval on their proportion at 1/2, its widest.

``required_n`` searches n with the same computation, so ``plan(n=required_n(...).n)``
meets the half-width asked for exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ._validation import check_count, check_level, check_positive
from .errors import ParameterError
from .intervals import KNOWN_VARIANCE, Bounds, binomial_interval, normal_quantile, support_interval
from .intervals import support_distribution as _support_distribution
from .mechanisms import FrequencyOracle, Mechanism, NumericMechanism, mechanism

# Above this variance of the count the half-width is a smooth function of the count, and
# its value at the expected count is its expectation to within O(1 / variance).
_SMOOTH_VARIANCE = 1e5
_FREQUENCY_GRID = (0.0, *np.linspace(0.05, 0.95, 19).tolist(), 1.0)
_MAX_N = 10**12
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Plan:
    """The expected interval half-width of a campaign, and what it assumed.

    Attributes
    ----------
    mechanism, epsilon, n, level : the campaign.
    half_width : expected half-width of a ``level`` interval (a fraction for categorical
        metrics, the metric's units for numeric ones).
    interval : the method those intervals use there ("score", "exact", "known-variance").
    frequency : categorical only: the item frequency assumed (the worst case unless one
        was given).
    per_user_variance : the variance of one user's contribution at that point (the
        estimate's variance times n).
    rare_item_half_width : categorical only: the expected half-width for an item nobody
        holds (f = 0).
    rare_item_n : from :func:`required_n`, categorical only: the n a rare item needs for
        the same half-width.
    """

    mechanism: str
    epsilon: float
    n: int
    level: float
    half_width: float
    interval: str
    frequency: float | None
    per_user_variance: float
    rare_item_half_width: float | None = None
    rare_item_n: int | None = None


def _frequency_half_width(m: FrequencyOracle, n: int, f: float, level: float) -> tuple[float, str]:
    own = m.planned_half_width(n, f, level)
    if own is not None:
        return own
    holders = round(f * n)
    var = n * float(m.variance(holders / n, n)) * n * (m.p - m.q) ** 2
    if var >= _SMOOTH_VARIANCE:
        mean = n * (m.q + holders / n * (m.p - m.q))
        b = support_interval(np.array([mean]), n, m.p, m.q, level=level)
        return float(b.high[0] - b.low[0]) / 2.0, str(b.methods()[0])
    counts, weights = _likely_counts(n, holders, m.p, m.q)
    return _expected_half_width(weights, support_interval(counts, n, m.p, m.q, level=level))


def _numeric_half_width(m: NumericMechanism, n: int, level: float) -> tuple[float, str]:
    scale = m.binary_scale()
    if scale is None:
        a, b, extra = m.noise_terms()
        per_user = (a + max(b, 0.0) + extra) * m.half_range**2
        return normal_quantile(level) * math.sqrt(per_user / n), KNOWN_VARIANCE
    # Binary reports at theta = 1/2 (everyone at the midpoint): the +1 count is Bin(n, 1/2).
    if n / 4.0 >= _SMOOTH_VARIANCE:
        counts, weights = np.array([n / 2.0]), np.ones(1)
    else:
        counts, weights = _likely_counts(n, n, 0.5, 0.5)  # Bin(n, 1/2) + Bin(0, 1/2)
    theta_half, method = _expected_half_width(weights, binomial_interval(counts, n, level=level))
    return 2.0 * scale * theta_half * m.half_range, method


def _likely_counts(n: int, holders: int, p: float, q: float) -> tuple[Floats, Floats]:
    """The support counts of non-negligible probability, and their probabilities."""
    start, pmf = _support_distribution(n, holders, p, q)
    keep = pmf > 1e-12 * float(pmf.max())
    return start + np.flatnonzero(keep).astype(np.float64), pmf[keep] / float(pmf[keep].sum())


def _expected_half_width(weights: Floats, bounds: Bounds) -> tuple[float, str]:
    """The expected half-width of the ``bounds`` of counts of probability ``weights``, and
    the method most of them use."""
    method = "exact" if float(np.sum(weights * bounds.exact)) >= 0.5 else "score"
    return float(np.sum(weights * (bounds.high - bounds.low))) / 2.0, method


def _check_frequency(frequency: float | None) -> float | None:
    if frequency is None:
        return None
    if isinstance(frequency, bool) or not isinstance(frequency, int | float):
        raise ParameterError(f"frequency must be a number in [0, 1], got {frequency!r}")
    if not 0.0 <= frequency <= 1.0:
        raise ParameterError(f"frequency must be in [0, 1], got {frequency!r}")
    return float(frequency)


def _worst_frequency(m: FrequencyOracle, n: int, level: float) -> tuple[float, str, float]:
    """``(half_width, method, f)`` at the f in [0, 1] of largest expected half-width."""
    widths = [(*_frequency_half_width(m, n, f, level), f) for f in _FREQUENCY_GRID]
    half, method, f = max(widths, key=lambda w: w[0])
    # Refine around the best grid point (the half-width is smooth in f except where
    # clipping at 0 or 1 sets in).
    step = 0.025
    for _ in range(4):
        for g in (f - step, f + step):
            if 0.0 <= g <= 1.0:
                h, meth = _frequency_half_width(m, n, g, level)
                if h > half:
                    half, method, f = h, meth, g
        step /= 2.0
    return half, method, f


def _evaluate(
    m: Mechanism, n: int, level: float, frequency: float | None, *, rare: bool = True
) -> Plan:
    if isinstance(m, FrequencyOracle):
        if frequency is None:
            half, method, f = _worst_frequency(m, n, level)
        else:
            f = frequency
            half, method = _frequency_half_width(m, n, f, level)
        rare_half = None
        if rare:
            rare_half = half if f == 0.0 else _frequency_half_width(m, n, 0.0, level)[0]
        return Plan(m.name, m.epsilon, n, level, half, method, f, float(m.variance(f)), rare_half)
    if not isinstance(m, NumericMechanism):
        raise ParameterError(
            f"plan() and required_n() cover categorical and numeric mechanisms; for "
            f"{m.name!r} use plan_distribution, plan_structured or plan_strings"
        )
    half, method = _numeric_half_width(m, n, level)
    return Plan(m.name, m.epsilon, n, level, half, method, None, m.worst_case_variance())


def _resolve(
    name: str | Mechanism,
    epsilon: float | None,
    domain_size: int | None,
    bounds: tuple[float, float] | None,
) -> Mechanism:
    if isinstance(name, Mechanism):
        return name
    if epsilon is None:
        raise ParameterError("epsilon is required when the mechanism is given by name")
    return mechanism(name, epsilon=epsilon, domain_size=domain_size, bounds=bounds)


def plan(
    name: str | Mechanism = "auto",
    *,
    n: int,
    epsilon: float | None = None,
    domain_size: int | None = None,
    bounds: tuple[float, float] | None = None,
    level: float = 0.95,
    frequency: float | None = None,
) -> Plan:
    """Expected half-width of a ``level`` interval after ``n`` reports."""
    m = _resolve(name, epsilon, domain_size, bounds)
    n = check_count(n)
    if n > _MAX_N:
        raise ParameterError(f"n must be at most {_MAX_N:.0e}, got {n}")
    return _evaluate(m, n, check_level(level), _check_frequency(frequency))


def _search(m: Mechanism, target: float, level: float, frequency: float | None, start: int) -> int:
    """The smallest n >= start whose half-width at ``frequency`` is at most ``target``."""

    def fits(n: int) -> bool:
        return _evaluate(m, n, level, frequency, rare=False).half_width <= target

    lo, hi = start - 1, start  # lo does not fit (or is below start), hi is probed next
    while not fits(hi):
        if hi >= _MAX_N:
            raise ParameterError(
                f"no n up to {_MAX_N:.0e} reaches a half-width of {target:g} with "
                f"{m.name} at epsilon {m.epsilon:g}"
            )
        lo, hi = hi, min(hi * 2, _MAX_N)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _smallest_n(m: Mechanism, target: float, level: float, frequency: float | None) -> Plan:
    """The smallest n (searched) whose planned half-width is at most ``target``.

    For the worst case over f, search at a fixed f (the worst at the last n tried): any n
    whose worst case fits also fits at that f, so the search never passes the answer;
    then check the worst case there and go on from that n if it moved.
    """
    if not isinstance(m, FrequencyOracle) or frequency is not None:
        return _evaluate(m, _search(m, target, level, frequency, 1), level, frequency)
    n = 1
    f = _worst_frequency(m, n, level)[2]
    while True:
        n = _search(m, target, level, f, n)
        worst = _evaluate(m, n, level, None)
        if worst.half_width <= target:
            return worst
        assert worst.frequency is not None
        f = worst.frequency


def required_n(
    name: str | Mechanism = "auto",
    *,
    half_width: float,
    epsilon: float | None = None,
    domain_size: int | None = None,
    bounds: tuple[float, float] | None = None,
    level: float = 0.95,
    frequency: float | None = None,
) -> Plan:
    """The smallest n whose expected ``level`` half-width is at most ``half_width``.

    The search assumes the half-width shrinks as n grows (it does, up to the small
    wobble of discrete counts); whatever n it returns meets the target exactly, since
    :func:`plan` computes the same figure.
    """
    half_width = check_positive(half_width, "half_width")
    m = _resolve(name, epsilon, domain_size, bounds)
    level = check_level(level)
    frequency = _check_frequency(frequency)
    found = _smallest_n(m, float(half_width), level, frequency)
    if not isinstance(m, FrequencyOracle):
        return found
    rare = found if frequency == 0.0 else _smallest_n(m, float(half_width), level, 0.0)
    return replace(found, rare_item_n=rare.n)
