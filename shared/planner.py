"""How many users a campaign needs, and how wide its intervals will be.

For a frequency oracle the half-width at level ``1 - alpha`` is
``z * sqrt(V(f) / n)`` with ``V(f)`` the per-user variance of an item's fraction at
true fraction ``f``. With ``frequency=None`` the planner takes the worst ``f`` in
[0, 1], so the figure is an upper bound whatever the data.

For a numeric mechanism the variance of one debiased report is the mechanism's noise
variance at the true value plus the spread of the true values themselves. With
``value_std=None`` the planner takes the worst case of both (values at the bounds,
half at each end: std = (hi - lo) / 2), again an upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._validation import check_count, check_level
from .errors import ParameterError
from .estimates import normal_quantile
from .mechanisms import FrequencyOracle, Mechanism, NumericMechanism, mechanism


@dataclass(frozen=True)
class Plan:
    """The expected interval half-width of a campaign, and what it assumed."""

    mechanism: str
    epsilon: float
    n: int
    level: float
    per_user_variance: float
    half_width: float


def _per_user_variance(m: Mechanism, frequency: float | None, value_std: float | None) -> float:
    if isinstance(m, FrequencyOracle):
        if frequency is None:
            return max(float(m.variance(0.0)), float(m.variance(1.0)))
        if not 0.0 <= frequency <= 1.0:
            raise ParameterError(f"frequency must be in [0, 1], got {frequency!r}")
        return float(m.variance(frequency))
    assert isinstance(m, NumericMechanism)
    if value_std is None:
        value_std = m.half_range
    if not (math.isfinite(value_std) and value_std >= 0):
        raise ParameterError(f"value_std must be a finite number >= 0, got {value_std!r}")
    return m.worst_case_variance() + value_std**2


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
    value_std: float | None = None,
) -> Plan:
    """Expected half-width of a ``level`` interval after ``n`` reports."""
    m = _resolve(name, epsilon, domain_size, bounds)
    n = check_count(n)
    level = check_level(level)
    var = _per_user_variance(m, frequency, value_std)
    half = normal_quantile(level) * math.sqrt(var / n)
    return Plan(m.name, m.epsilon, n, level, var, half)


def required_n(
    name: str | Mechanism = "auto",
    *,
    half_width: float,
    epsilon: float | None = None,
    domain_size: int | None = None,
    bounds: tuple[float, float] | None = None,
    level: float = 0.95,
    frequency: float | None = None,
    value_std: float | None = None,
) -> Plan:
    """The smallest n whose expected ``level`` half-width is at most ``half_width``."""
    if not (isinstance(half_width, (int, float)) and math.isfinite(half_width) and half_width > 0):
        raise ParameterError(f"half_width must be a finite number > 0, got {half_width!r}")
    m = _resolve(name, epsilon, domain_size, bounds)
    level = check_level(level)
    var = _per_user_variance(m, frequency, value_std)
    z = normal_quantile(level)
    n = max(1, math.ceil(z * z * var / (half_width * half_width)))
    return Plan(m.name, m.epsilon, n, level, var, z * math.sqrt(var / n))
