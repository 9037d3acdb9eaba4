"""Checks shared by every constructor: one place, one wording."""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real

from .errors import ParameterError

MAX_EPSILON = 50.0
MAX_BOUND = 1e100
"""Numeric bounds lie within +-MAX_BOUND: beyond, the variance (range squared) overflows."""


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages about untrusted input."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int of over 4,300 digits, deep nesting
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_float(value: Real) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range
        return -math.inf if value < 0 else math.inf


def check_epsilon(epsilon: object) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, Real):
        raise ParameterError(f"epsilon must be a real number, got {shown(epsilon)}")
    value = _as_float(epsilon)
    if not math.isfinite(value) or value <= 0:
        raise ParameterError(f"epsilon must be finite and > 0, got {shown(epsilon)}")
    if value > MAX_EPSILON:
        # Beyond this a report is essentially the true value and exp(epsilon) loses precision.
        raise ParameterError(f"epsilon must be at most {MAX_EPSILON:g}, got {shown(epsilon)}")
    return value


def check_domain_size(domain_size: object, *, minimum: int = 2) -> int:
    if isinstance(domain_size, bool) or not isinstance(domain_size, Integral):
        raise ParameterError(f"domain_size must be an integer, got {shown(domain_size)}")
    value = int(domain_size)
    if value < minimum:
        raise ParameterError(f"domain_size must be at least {minimum}, got {value}")
    if value > 2**31:
        raise ParameterError(f"domain_size must be at most 2**31, got {value}")
    return value


def check_bounds(bounds: object) -> tuple[float, float]:
    try:
        pair = tuple(bounds) if isinstance(bounds, Iterable) else ()
    except TypeError:  # raised while iterating
        pair = ()
    if len(pair) != 2:
        raise ParameterError(f"bounds must be a pair (lo, hi), got {shown(bounds)}")
    ends: list[float] = []
    for name, v in zip(("lo", "hi"), pair, strict=True):
        if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(_as_float(v)):
            raise ParameterError(f"bounds {name} must be a finite number, got {shown(v)}")
        if abs(_as_float(v)) > MAX_BOUND:
            raise ParameterError(
                f"bounds {name} must lie within +-{MAX_BOUND:g} (the variance of an estimate "
                f"grows with the range squared), got {shown(v)}"
            )
        ends.append(float(v))
    lo_f, hi_f = ends
    if not lo_f < hi_f:
        raise ParameterError(f"bounds must satisfy lo < hi, got lo={lo_f!r}, hi={hi_f!r}")
    return lo_f, hi_f


def check_level(level: object) -> float:
    if isinstance(level, bool) or not isinstance(level, Real):
        raise ParameterError(f"level must be a number in (0, 1), got {shown(level)}")
    value = _as_float(level)
    if not 0.0 < value < 1.0:
        raise ParameterError(f"level must be in (0, 1), got {shown(level)}")
    if 1.0 - (1.0 - value) / 2.0 >= 1.0:  # the normal quantile would be infinite
        raise ParameterError(
            f"level must be below 1 - 2e-16 (its normal quantile is not finite), got {shown(level)}"
        )
    return value


def check_seconds(value: object, name: str, *, zero: bool = False) -> float:
    """A duration: a finite number of seconds, > 0 (``>= 0`` with ``zero``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ParameterError(f"{name} must be a number of seconds, got {shown(value)}")
    seconds = _as_float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise ParameterError(
            f"{name} must be finite and {'>=' if zero else '>'} 0, got {shown(value)}"
        )
    return seconds


def check_delta(delta: object) -> float:
    """The delta a metric allows: 0 (pure epsilon-LDP) or a number in (0, 1)."""
    if isinstance(delta, bool) or not isinstance(delta, int | float):
        raise ParameterError(f"delta must be a number, got {shown(delta)}")
    if not (delta == 0.0 or 0.0 < delta < 1.0):
        raise ParameterError(f"delta must be 0 or in (0, 1), got {float(delta)!r}")
    return float(delta)


def check_positive(value: object, name: str) -> float:
    """A finite number > 0 (an int or a float, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ParameterError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_count(n: object, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, Integral) or int(n) < 1:
        raise ParameterError(f"{name} must be a positive integer, got {shown(n)}")
    return int(n)
