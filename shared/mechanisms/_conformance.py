"""What the mechanisms' conformance laws share (``ldpkit.conformance`` runs them).

Each mechanism declares the plan's cases for it (:attr:`Mechanism.conformance_cases`:
plain definitions and inputs, as ``MetricDefinition.from_dict`` takes them) and the
tests its reports must pass for one input (:meth:`Mechanism.conformance_tests`): chi-square
goodness of fit against its exact output law, enumerated or binned at its quantiles.
This module holds the statistics and the plan's fixtures they use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .._special import regularized_gamma
from ..errors import ParameterError
from .base import LawTest, PlanCase

Cdf = Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]


# Categories with non-ASCII characters, a quote and a backslash: the fingerprints of
# the plan's definitions exercise the canonical JSON's escaping.
CATEGORIES = ("light", "dark", "système", "日本", "🙂", 'q"\\')
NUMERIC_BOUNDS = (-3.0, 7.0)
WIDE_CATEGORIES = tuple(f"{c}{i}" for c in ("é", "b") for i in range(8))
"""Sixteen categories (d a multiple of 8: a bitmap has no padding bits, so a bitmap in the
wrong bit order is well-formed and only its law can show it)."""
WIDE_EPSILON = 1.0


def case_name(mechanism: str, epsilon: float) -> str:
    return f"{mechanism}-{str(epsilon).replace('.', '_')}"


def categorical_cases(
    mechanism: str,
    epsilons: Sequence[float] = (0.5, 2.0),
    categories: Sequence[str] = CATEGORIES,
    inputs: Sequence[int] = (0, 2, 4),
    *,
    wide: bool = True,
) -> tuple[PlanCase, ...]:
    """A categorical metric per epsilon, reporting the categories numbered ``inputs``, and
    (``wide``) one over :data:`WIDE_CATEGORIES` at :data:`WIDE_EPSILON`."""
    values = tuple(categories[i] for i in inputs)
    cases = [
        PlanCase(
            case_name(mechanism, eps),
            {"kind": "categorical", "categories": list(categories), "epsilon": eps,
             "mechanism": mechanism},
            values,
        )
        for eps in epsilons
    ]  # fmt: skip
    if wide:
        cases.append(
            PlanCase(
                case_name(f"{mechanism}-d16", WIDE_EPSILON),
                {"kind": "categorical", "categories": list(WIDE_CATEGORIES),
                 "epsilon": WIDE_EPSILON, "mechanism": mechanism},
                tuple(WIDE_CATEGORIES[i] for i in (0, 9, 15)),
            )
        )  # fmt: skip
    return tuple(cases)


def numeric_cases(
    mechanism: str, epsilons: Sequence[float] = (0.5, 2.0), **extra: Any
) -> tuple[PlanCase, ...]:
    """A numeric metric over :data:`NUMERIC_BOUNDS` per epsilon (``extra``: a value of
    each key per epsilon), reporting both ends, a point within and one beyond (clipped)."""
    lo, hi = NUMERIC_BOUNDS
    return tuple(
        PlanCase(
            case_name(mechanism, eps),
            {"kind": "numeric", "bounds": [lo, hi], "epsilon": eps, "mechanism": mechanism}
            | {key: values[i] for key, values in extra.items()},
            (lo, 0.123456789, hi, 100.0),
        )
        for i, eps in enumerate(epsilons)
    )


def chi2_sf(statistic: float, dof: int) -> float:
    """Upper tail of the chi-square law (regularized upper incomplete gamma Q(dof/2, x/2))."""
    if dof <= 0:
        raise ParameterError("dof must be positive")
    return regularized_gamma(dof / 2.0, statistic / 2.0)[1]


def chi2(
    counts: npt.ArrayLike, probs: npt.ArrayLike, min_expected: float = 5.0
) -> tuple[float, int]:
    """Chi-square statistic and dof; cells expected below ``min_expected`` are pooled."""
    obs = np.asarray(counts, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    expected = p / p.sum() * obs.sum()
    small = expected < min_expected
    if small.any():
        obs = np.append(obs[~small], obs[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
        if expected[-1] == 0:
            if obs[-1] > 0:
                return math.inf, max(1, obs.size - 2)
            obs, expected = obs[:-1], expected[:-1]
    if expected.size < 2:
        return 0.0, 1
    zero = expected == 0
    if (obs[zero] > 0).any():
        return math.inf, max(1, int((~zero).sum()) - 1)
    stat = float((((obs - expected) ** 2)[~zero] / expected[~zero]).sum())
    return stat, int((~zero).sum()) - 1


def _quantile_bins(cdf: Cdf, lo: int, hi: int, n: int) -> npt.NDArray[np.int64]:
    """Integer upper edges ``e`` (bins ``(e_prev, e]``) near equal-probability quantiles."""
    bins = int(min(40, max(4, n // 60)))
    targets = np.arange(1, bins) / bins
    edges = []
    for target in targets:
        a, b = lo, hi  # cdf(a) < target <= cdf(b)
        while b - a > 1:
            mid = (a + b) // 2
            if cdf(np.array([mid], dtype=np.float64))[0] >= target:
                b = mid
            else:
                a = mid
        edges.append(b)
    return np.unique(np.array(edges, dtype=np.int64))


def binned(values: npt.NDArray[np.int64], cdf: Cdf, lo: int, hi: int) -> tuple[float, int]:
    """Chi-square of integer ``values`` against ``cdf`` on ``lo .. hi``, binned at its quantiles."""
    edges = _quantile_bins(cdf, lo, hi, len(values))
    probs = np.diff(np.concatenate([[0.0], cdf(edges.astype(np.float64)), [1.0]]))
    counts = np.bincount(np.searchsorted(edges, values, side="left"), minlength=edges.size + 1)
    return chi2(counts, np.maximum(probs, 0.0))


def prefixed(name: str, tests: list[LawTest]) -> list[LawTest]:
    """A nested oracle's tests, named after the part of the report they test."""
    return [(f"{name}: {test}", stat, dof, detail) for test, stat, dof, detail in tests]


def bit_tests(bits: npt.NDArray[np.bool_], x: int, p: float, q: float) -> list[LawTest]:
    """Bitmap reports: bit x set with probability p, every other with probability q."""
    n, d = bits.shape
    expected = np.full(d, q)
    expected[x] = p
    ones = bits.sum(axis=0).astype(np.float64)
    # Each bit's count is binomial: sum of squared z-scores is chi-square with d dof.
    z2 = (ones - n * expected) ** 2 / (n * expected * (1.0 - expected))
    return [("bits", float(z2.sum()), d, "")]


def rr_probabilities(g: int, p: float) -> npt.NDArray[np.float64]:
    """g-ary randomized response relative to the truth: shift 0 w.p. p, others alike."""
    probs = np.full(g, (1.0 - p) / (g - 1))
    probs[0] = p
    return probs
