"""Coin flips whose realized probability is known exactly.

numpy's ``Generator.random`` returns ``k / 2**53`` for a uniform 53-bit integer k, so
``rng.random(n) < c`` is true with probability exactly ``ceil(c * 2**53) / 2**53``, a
dyadic rational we can compute in advance. The numeric mechanisms use this to state the
probabilities their samplers really use, rather than those of the real-number formulas:
a coin meant to land with probability p is given a threshold a hair above p, so that the
realized probability is never below p (which is the side privacy needs: a flip, or the
"outside" branch of Piecewise, must not become rarer than the formula says).
"""

from __future__ import annotations

import math

from ..errors import ParameterError

UNIFORM_BITS = 53
"""Resolution of ``Generator.random``: it returns multiples of ``2**-53``."""

MIN_EPSILON = 1e-9
"""Smallest epsilon the numeric mechanisms accept (below it their constants overflow
int64 or the noise swamps any estimate; 1e-9 already means a per-report standard
deviation of about 10^9 times the bounds' width)."""

_SAFETY = 2.0**-48
"""Relative margin above a computed probability: libm's exp/expm1 and the arithmetic
around them err by a few units in the last place (2**-52 each), far below this."""


def realized_at_least(p: float) -> tuple[float, float]:
    """``(c, realized)``: a threshold and the exact ``Pr[rng.random() < c]``,
    ``ceil(c * 2**53) / 2**53``, at least the true probability that ``p`` (in (0, 1),
    computed in floating point within a few ulps) approximates."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {p!r}")
    threshold = min(p * (1.0 + _SAFETY), 1.0)
    scale = 2.0**UNIFORM_BITS
    realized = math.ceil(threshold * scale) / scale  # both steps exact (powers of two)
    return threshold, realized


def check_min_epsilon(name: str, epsilon: float) -> None:
    if epsilon < MIN_EPSILON:
        raise ParameterError(
            f"epsilon must be at least {MIN_EPSILON:g} for {name}, got {epsilon!r}"
        )
