"""Duchi et al.'s one-dimensional mechanism for a bounded number.

References
----------
J. C. Duchi, M. I. Jordan, M. J. Wainwright, "Minimax optimal procedures for locally
private estimation", Journal of the American Statistical Association 113(521), 2018.
N. Wang, X. Xiao, Y. Yang, J. Zhao, S. C. Hui, H. Shin, J. Shin, G. Yu, "Collecting and
analyzing multidimensional data with local differential privacy", ICDE 2019 (Sec. III-A
restates the 1-D mechanism used here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._bits import OneDraws
from ._conformance import chi2, numeric_cases
from ._dyadic import realized_at_least
from ._portable import Derived, Words, dyadic53, hex64, unit
from .base import BoolArray, FloatArray, LawTest, NumericMechanism, PlanCase, Reports

REPORT_DTYPE = np.dtype("i1")


def duchi_constants(epsilon: float) -> tuple[float, float, float]:
    """``(threshold, flip, C)`` of Duchi's mechanism as sampled here (:class:`Duchi`,
    "Floating point"): ``flip`` is the exact probability that ``rng.random() < threshold``
    and ``C = 1 / (1 - 2 flip)``."""
    threshold, flip = realized_at_least(1.0 / (1.0 + math.exp(epsilon)))
    return threshold, flip, 1.0 / (1.0 - 2.0 * flip)


def duchi_signs(t: FloatArray, threshold: float, rng: np.random.Generator) -> npt.NDArray[np.int8]:
    """Duchi's ±1 for unit values ``t`` in [-1, 1] (vectorized): the +1 extreme w.p.
    ``(1 + t) / 2``, then flipped w.p. ``flip``, the same law as ``Pr[+1] = 1/2 + t / (2 C)``
    with exact coins, the flip coin (the only one privacy rests on) independent of the input.
    """
    n = t.size
    upper = rng.random(n) < (t + 1.0) * 0.5
    flip = rng.random(n) < threshold
    return np.where(upper != flip, 1, -1).astype(REPORT_DTYPE)


def duchi_sign_one(t: float, threshold: float, draws: OneDraws) -> int:
    """:func:`duchi_signs` of one unit value (the same words, the same sign)."""
    upper = draws.random() < (t + 1.0) * 0.5
    return 1 if upper != (draws.random() < threshold) else -1


def duchi_sign(flip: str, t: float, words: Words) -> int:
    """The portable rule's ±1 for unit value t: the +1 extreme if ``uniform() < (t + 1) / 2``,
    flipped if ``coin(flip)``."""
    upper = words.uniform() < (t + 1.0) * 0.5
    return 1 if upper != words.coin(flip) else -1


def plus_probability(t: float, flip: str) -> float:
    """``Pr[+1]`` at unit value t, with the served ``flip`` threshold."""
    f = int(flip, 16) / 2.0**64
    upper = (t + 1.0) * 0.5
    return upper * (1.0 - f) + (1.0 - upper) * f


def sign_test(reports: npt.NDArray[Any], t: float, flip: str, atom: int) -> LawTest:
    """The law of Duchi's reports ``±atom`` for unit value t (served ``flip`` threshold)."""
    values = reports.astype(np.int64)
    plus = plus_probability(t, flip)
    counts = [int((values == -atom).sum()), int((values == atom).sum())]
    stat, dof = chi2(counts, [1.0 - plus, plus])
    if len(values) != sum(counts):
        stat = math.inf
    return ("sign", stat, dof, "")


@dataclass(frozen=True, kw_only=True)
class Duchi(NumericMechanism):
    """Duchi, Jordan and Wainwright's mechanism: each report is ``+C`` or ``-C``.

    A value x in ``bounds`` maps to ``t = 2 (x - lo) / (hi - lo) - 1`` in [-1, 1]; values
    outside the bounds are clipped to them on the device. The device reports ``+1`` with
    probability ``1/2 + t / (2 C)`` and ``-1`` otherwise, where

    ``C = (e^eps + 1) / (e^eps - 1)``;

    the collector reads a report s as ``s * C``, an unbiased estimate of t with variance
    ``C^2 - t^2`` (largest, ``C^2``, at t = 0).

    Privacy: the report's probability lies between ``(C - 1) / (2 C)`` and
    ``(C + 1) / (2 C)`` whatever the input, and their ratio is ``e^eps``.

    Floating point: only two outputs exist, so the output set cannot depend on the
    input. The sampler picks the +1 extreme with probability ``(1 + t) / 2`` and then
    flips with probability ``flip`` drawn from a 53-bit uniform; ``flip`` is computed
    in advance as an exact dyadic rational at least ``1 / (e^eps + 1)``, so the
    realized ratio ``(1 - flip) / flip`` is at most ``e^eps``, and ``C`` is taken as
    ``1 / (1 - 2 flip)`` so the estimate is unbiased for the sampler actually run (it
    matches the formula above to a relative 2**-47).

    Wire format (protocol v1): one signed byte per report, ``+1`` or ``-1``.

    Screening: both outputs are possible for every input, with probabilities that depend
    on it, so no statistic of one report has a law free of the input and none is tested
    per report; the pooled mean is (:meth:`NumericMechanism.screen_aggregate`). The same
    holds for Piecewise and Hybrid, whose every grid index is possible for every input.
    """

    name: ClassVar[str] = "duchi"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = numeric_cases("duchi")
    report_dtype = REPORT_DTYPE
    report_rule = "+1 or -1 (int8)"

    C: float = field(init=False, repr=False)
    flip_probability: float = field(init=False, repr=False)
    _threshold: float = field(init=False, repr=False)

    def _derive(self) -> None:
        threshold, flip, c = duchi_constants(self.epsilon)
        self._set(_threshold=threshold, flip_probability=flip, C=c)

    def _perturb(self, values: FloatArray, rng: np.random.Generator) -> npt.NDArray[np.int8]:
        return duchi_signs(self.to_unit(values), self._threshold, rng)

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """:meth:`_perturb` of one value, in Python numbers (the same words, the same bytes)."""
        sign = duchi_sign_one(self.unit_one(float(value)), self._threshold, OneDraws(rng))
        return sign.to_bytes(1, "little", signed=True)

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return np.asarray((reports == 1) | (reports == -1))

    def _debias(self, reports: npt.NDArray[Any]) -> FloatArray:
        return np.asarray(reports, dtype=np.float64) * self.C

    def unit_variance(self, t: float | npt.ArrayLike) -> Any:
        """Variance of one debiased report at unit value t: ``C^2 - t^2``."""
        tt = np.asarray(t, dtype=np.float64)
        var = self.C * self.C - tt * tt
        return float(var) if var.ndim == 0 else var

    def noise_terms(self) -> tuple[float, float, float]:
        """``C^2 - t^2``."""
        return self.C * self.C, -1.0, 0.0

    def unit_report_bound(self) -> float:
        return self.C

    def binary_scale(self) -> float:
        """Reports are ``±C``: intervals come from the proportion of +1 reports."""
        return self.C

    def worst_case_variance(self) -> float:
        """``C^2`` (at the midpoint of the bounds), in the metric's units."""
        return self.C * self.C * self.half_range**2

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {"flip": hex64(dyadic53(self.flip_probability)), "scale": self.C}

    @classmethod
    def portable_number(cls, derived: Derived, lo: float, hi: float, x: float, w: Words) -> bytes:
        return duchi_sign(derived["flip"], unit(lo, hi, x), w).to_bytes(1, "little", signed=True)

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        return [sign_test(reports, unit(*self.bounds, self.clipped(value)), derived["flip"], 1)]
