"""Special functions the core needs without scipy (the base install has none)."""

from __future__ import annotations

import math


def regularized_gamma(a: float, x: float) -> tuple[float, float]:
    """``(P(a, x), Q(a, x))``, the regularized lower and upper incomplete gamma functions.

    By the series for P where ``x < a + 1`` and by the continued fraction for Q (Lentz)
    elsewhere, each where it is accurate, the other as its complement (Numerical Recipes,
    6.2). Both lie in [0, 1]. ``a > 0``; ``x <= 0`` gives ``(0, 1)``.
    """
    if x <= 0:
        return 0.0, 1.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        lower = min(1.0, total * math.exp(log_front))
        return lower, max(0.0, 1.0 - lower)
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    upper = min(1.0, math.exp(log_front) * h)
    return max(0.0, 1.0 - upper), upper
