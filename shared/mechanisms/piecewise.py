"""The Piecewise mechanism (PM) and the Hybrid mechanism (HM) of Wang et al.

Both report a continuous value in ``[-C, C]``; here it is snapped to a fixed grid by
unbiased stochastic rounding and sent as the integer grid index, so the set of possible
reports is the same for every input and the wire carries integers.

References
----------
N. Wang, X. Xiao, Y. Yang, J. Zhao, S. C. Hui, H. Shin, J. Shin, G. Yu, "Collecting and
analyzing multidimensional data with local differential privacy", ICDE 2019
(Algorithm 2: PM; Sec. III-C: HM; Lemma 1 and Eq. (6): their variances).
J. C. Duchi, M. I. Jordan, M. J. Wainwright, "Minimax optimal procedures for locally
private estimation", JASA 2018 (the other half of HM).
I. Mironov, "On significance of the least significant bits for differential privacy",
CCS 2012 (why the output is snapped to a grid).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._bits import OneDraws
from ._conformance import Cdf, binned, numeric_cases
from ._dyadic import realized_at_least
from ._portable import Derived, Words, dyadic53, hex64, unit
from .base import BoolArray, FloatArray, LawTest, NumericMechanism, PlanCase, Reports
from .duchi import (
    duchi_constants,
    duchi_sign,
    duchi_sign_one,
    duchi_signs,
    plus_probability,
    sign_test,
)

REPORT_DTYPE = np.dtype("<i4")

HALF_CELLS = 2**19
"""PM's grid: ``[-C, C]`` in ``2 * HALF_CELLS = 2**20`` cells of width ``C / 2**19``;
reports are indices in ``-HALF_CELLS .. HALF_CELLS``. Part of protocol v1."""

HYBRID_THRESHOLD = 0.61
"""Below this epsilon (Wang et al.'s eps*), HM is Duchi's mechanism alone."""


def _frac_moment(a: FloatArray, b: FloatArray) -> FloatArray:
    """``∫_a^b s(y) (1 - s(y)) dy`` with ``s(y) = y - floor(y)``, for ``a <= b``.

    Over a whole cell the integrand integrates to 1/6; ``s^2/2 - s^3/3`` is its
    antiderivative within a cell.
    """
    fa, fb = np.floor(a), np.floor(b)
    sa, sb = a - fa, b - fb
    return np.asarray((fb - fa) / 6.0 + sb * sb * (0.5 - sb / 3.0) - sa * sa * (0.5 - sa / 3.0))


@dataclass(frozen=True)
class _PMGrid:
    """PM with parameter epsilon, snapped to the grid ``step * k``, ``|k| <= bound``.

    All lengths below are in grid steps. PM's output is uniform on the inside interval
    ``[l, l + w_in]`` with probability ``1 - q`` and uniform on ``[-c, l) ∪ (l + w_in, c]``
    (total length ``w_out``) with probability q, where ``c = C / step``,
    ``w_in = (C - 1) / step``, ``w_out = (C + 1) / step`` and ``l = l(t) / step``.
    """

    epsilon: float
    step: float
    bound: int

    @property
    def e_half(self) -> float:
        return math.exp(self.epsilon / 2.0)

    @property
    def C(self) -> float:  # noqa: N802 - the paper's name
        """``(e^{eps/2} + 1) / (e^{eps/2} - 1) = coth(eps / 4)``."""
        return 1.0 / math.tanh(self.epsilon / 4.0)

    @property
    def outside_probability(self) -> float:
        """``1 / (e^{eps/2} + 1)``: the real-number formula."""
        return 1.0 / (1.0 + self.e_half)

    @property
    def c_plus_minus_1(self) -> tuple[float, float]:
        """``(C + 1, C - 1)``: ``2 / (1 - e^{-eps/2})`` and ``2 / (e^{eps/2} - 1)``."""
        return 2.0 / -math.expm1(-self.epsilon / 2.0), 2.0 / math.expm1(self.epsilon / 2.0)

    def inside_start(self, t: FloatArray) -> FloatArray:
        """``l(t) = (C + 1) / 2 * t - (C - 1) / 2``, in grid steps."""
        c_plus_1, c_minus_1 = self.c_plus_minus_1
        return np.asarray((0.5 * c_plus_1 * t - 0.5 * c_minus_1) / self.step)

    @property
    def widths(self) -> tuple[float, float]:
        """``(w_in, w_out) = ((C - 1) / step, (C + 1) / step)``, in grid steps."""
        c_plus_1, c_minus_1 = self.c_plus_minus_1
        return c_minus_1 / self.step, c_plus_1 / self.step

    def sample(self, t: FloatArray, rng: np.random.Generator) -> npt.NDArray[np.int32]:
        """PM outputs for unit values ``t``, stochastically rounded to grid indices."""
        n = t.size
        threshold, _ = realized_at_least(self.outside_probability)
        w_in, w_out = self.widths
        c = self.C / self.step
        outside = rng.random(n) < threshold
        u = rng.random(n)
        lo = np.clip(self.inside_start(t), -c, c - w_in)
        # Each output is start + offset: inside, offset in [0, w_in); outside, the left
        # piece [-c, lo) has length (1 + t) w_out / 2 and the right one starts at lo + w_in.
        along = u * w_out
        left = lo + c
        start = np.where(outside, np.where(along < left, -c, lo + w_in), lo)
        offset = np.where(outside, np.where(along < left, along, along - left), u * w_in)
        # Stochastic rounding of y = start + offset is floor(y + U), U uniform on [0, 1).
        # Split off the integer part of the start first: the rest is small, so the sum
        # that decides the rounding keeps its precision even when w_in is tiny.
        anchor = np.floor(start)
        index = anchor + np.floor((start - anchor) + offset + rng.random(n))
        np.clip(index, -self.bound, self.bound, out=index)
        return index.astype(np.int32)

    def sample_one(self, t: float, draws: OneDraws) -> int:
        """:meth:`sample` of one unit value, in Python floats (the same words and
        operations, so the same index)."""
        threshold, _ = realized_at_least(self.outside_probability)
        w_in, w_out = self.widths
        c = self.C / self.step
        outside = draws.random() < threshold
        u = draws.random()
        c_plus_1, c_minus_1 = self.c_plus_minus_1
        lo = min(max((0.5 * c_plus_1 * t - 0.5 * c_minus_1) / self.step, -c), c - w_in)
        along = u * w_out
        left = lo + c
        if not outside:
            start, offset = lo, u * w_in
        elif along < left:
            start, offset = -c, along
        else:
            start, offset = lo + w_in, along - left
        anchor = float(math.floor(start))
        index = anchor + math.floor((start - anchor) + offset + draws.random())
        return int(min(max(index, -self.bound), self.bound))

    def base_variance(self, t: FloatArray) -> FloatArray:
        """Var of PM's continuous output (Wang et al., Lemma 1), in t units."""
        e = self.e_half
        em1 = math.expm1(self.epsilon / 2.0)
        return np.asarray(t * t / em1 + (e + 3.0) / (3.0 * em1 * em1))

    def snap_variance(self, t: FloatArray) -> FloatArray:
        """Exact variance added by the stochastic rounding, in t units.

        Rounding y adds ``s (1 - s) step^2`` with s its fractional part, mean zero; the
        output's density is piecewise constant, so its expectation is a sum of
        ``∫ s (1 - s)`` over the pieces.
        """
        w_in, w_out = self.widths
        c = self.C / self.step
        q = self.outside_probability
        lo = np.clip(self.inside_start(t), -c, c - w_in)
        hi = lo + w_in
        edge_lo = np.full_like(lo, -c)
        edge_hi = np.full_like(lo, c)
        moment = (1.0 - q) / w_in * _frac_moment(lo, hi) + q / w_out * (
            _frac_moment(edge_lo, lo) + _frac_moment(hi, edge_hi)
        )
        return np.asarray(moment * self.step**2)


def pm_constants(grid: _PMGrid) -> dict[str, Any]:
    """What the portable rule of PM needs of its grid (``derived``)."""
    _, outside = realized_at_least(grid.outside_probability)
    c_plus_1, c_minus_1 = grid.c_plus_minus_1
    w_in, w_out = grid.widths
    return {
        "outside": hex64(dyadic53(outside)),
        "c_plus_1": c_plus_1,
        "c_minus_1": c_minus_1,
        "step": grid.step,
        "c": grid.C / grid.step,
        "w_in": w_in,
        "w_out": w_out,
        "bound": grid.bound,
    }


def _inside_start(derived: Derived, t: float) -> float:
    """PM's ``l(t)`` in grid steps, within ``[-c, c - w_in]``."""
    lo = (0.5 * derived["c_plus_1"] * t - 0.5 * derived["c_minus_1"]) / derived["step"]
    return float(min(max(lo, -derived["c"]), derived["c"] - derived["w_in"]))


def pm_index(derived: Derived, t: float, words: Words) -> int:
    """The portable rule of PM: its grid index for unit value t (see :class:`Piecewise`)."""
    c, w_in, w_out = derived["c"], derived["w_in"], derived["w_out"]
    outside = words.coin(derived["outside"])
    u = words.uniform()
    lo = _inside_start(derived, t)
    if outside:
        along = u * w_out
        left = lo + c
        start, offset = (-c, along) if along < left else (lo + w_in, along - left)
    else:
        start, offset = lo, u * w_in
    anchor = math.floor(start)
    index = anchor + math.floor((start - anchor) + offset + words.uniform())
    bound = int(derived["bound"])
    return int(min(max(index, -bound), bound))


def pm_cdf(derived: Derived, t: float) -> Cdf:
    """``Pr[index <= k]`` of PM on its grid (stochastic rounding of the continuous output)."""
    c, w_in, w_out = derived["c"], derived["w_in"], derived["w_out"]
    q = int(derived["outside"], 16) / 2.0**64
    lo = _inside_start(derived, t)
    pieces = [
        (-c, lo, q * (lo + c) / w_out),
        (lo, lo + w_in, 1.0 - q),
        (lo + w_in, c, q * (c - lo - w_in) / w_out),
    ]

    def excess(s: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        # E[(s - v)^+], v the continuous output: piecewise quadratic.
        total = np.zeros_like(s)
        for a, b, mass in pieces:
            if mass <= 0 or b <= a:
                continue
            inside = (s - a) ** 2 / (2.0 * (b - a))
            after = s - (a + b) / 2.0
            total += mass * np.where(s <= a, 0.0, np.where(s >= b, after, inside))
        return total

    def cdf(k: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        # floor(v + U) <= k iff v + U < k + 1: Pr = ∫_k^{k+1} F_v(s) ds.
        return np.clip(excess(k + 1.0) - excess(k), 0.0, 1.0)

    return cdf


@dataclass(frozen=True, kw_only=True)
class Piecewise(NumericMechanism):
    """Wang et al.'s Piecewise Mechanism (PM), snapped to a grid of ``2**20`` cells.

    A value x in ``bounds`` maps to ``t = 2 (x - lo) / (hi - lo) - 1`` in [-1, 1]; values
    outside the bounds are clipped to them on the device. With ``e = e^{eps/2}``,
    ``C = (e + 1) / (e - 1)``, ``l(t) = (C + 1) / 2 t - (C - 1) / 2`` and
    ``r(t) = l(t) + C - 1``, PM outputs v uniform on ``[l, r]`` with probability
    ``e / (e + 1)`` and uniform on ``[-C, l) ∪ (r, C]`` otherwise. The densities inside
    and outside are ``e (e - 1) / (2 (e + 1))`` and ``(e - 1) / (2 e (e + 1))``, ratio
    ``e^2 = e^eps`` whatever t is: PM is eps-LDP. ``E[v] = t`` and (Lemma 1)

    ``Var v = t^2 / (e - 1) + (e + 3) / (3 (e - 1)^2)``.

    Snapping: v is stochastically rounded to the grid ``k h``, ``h = C / 2**19``,
    ``|k| <= 2**19`` (``±C`` are grid points): to ``floor(v / h)`` or the next point,
    the upper one with probability ``frac(v / h)``. This is post-processing (privacy
    kept), keeps the mean exact, and adds ``frac (1 - frac) h^2 <= h^2 / 4`` of variance,
    which :meth:`unit_variance` includes exactly (its mean over v's piecewise-uniform
    law, close to ``h^2 / 6``). The report is the index k; the estimate is ``k h``.

    Floating point: the continuous output is never sent. It is drawn from 53-bit
    uniforms, in grid steps, as the left end of its piece (``-C`` or an end of the
    inside interval: a function of the input alone) plus an offset within the piece,
    and rounded as ``floor(start) + floor(frac(start) + offset + U)``. Splitting off
    ``floor(start)`` keeps the rounding decision accurate to ~``2**-51`` of a step when
    the inside interval is narrower than a step (large eps), where the neighbouring
    indices' probabilities are tiny. Every grid index has positive probability for
    every input, and each index's realized probability is within a relative
    ``~1.5 * 2**-31 e^{eps/2}`` of the exact law's, whose ratios are at most ``e^eps``
    (the outside branch's coin is set so that its realized probability is never below
    ``1 / (e^{eps/2} + 1)``). The realized mechanism is thus
    ``(eps + 2**-29 e^{eps/2})``-LDP: an excess of ~1e-8 at eps = 1 to 4, ~1e-4 at
    eps = 21; past eps of about 30 (no meaningful privacy anyway) the bound is void.

    Wire format (protocol v1): one little-endian int32 per report, ``|k| <= 2**19``.

    Screening: every index is possible for every input (see Duchi's): nothing is tested
    per report; the pooled mean is (:meth:`NumericMechanism.screen_aggregate`).
    """

    name: ClassVar[str] = "piecewise"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = numeric_cases("piecewise")
    report_dtype = REPORT_DTYPE

    C: float = field(init=False, repr=False)
    step: float = field(init=False, repr=False)
    """Grid step h in t units: ``C / 2**19``."""
    _grid: _PMGrid = field(init=False, repr=False)

    def _derive(self) -> None:
        c = 1.0 / math.tanh(self.epsilon / 4.0)
        grid = _PMGrid(self.epsilon, c / HALF_CELLS, HALF_CELLS)
        self._set(C=c, step=grid.step, _grid=grid)

    @property
    def report_rule(self) -> str:
        return f"an integer grid index in {-HALF_CELLS}..{HALF_CELLS} (int32)"

    def _perturb(self, values: FloatArray, rng: np.random.Generator) -> npt.NDArray[np.int32]:
        return self._grid.sample(self.to_unit(values), rng)

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """:meth:`_perturb` of one value, in Python numbers (the same words, the same bytes)."""
        index = self._grid.sample_one(self.unit_one(float(value)), OneDraws(rng))
        return index.to_bytes(4, "little", signed=True)

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return np.asarray((reports >= -HALF_CELLS) & (reports <= HALF_CELLS))

    def _debias(self, reports: npt.NDArray[Any]) -> FloatArray:
        return np.asarray(reports, dtype=np.float64) * self.step

    def unit_variance(self, t: float | npt.ArrayLike) -> Any:
        """``t^2 / (e - 1) + (e + 3) / (3 (e - 1)^2)`` plus the exact snapping variance."""
        tt = np.clip(np.asarray(t, dtype=np.float64), -1.0, 1.0)
        var = self._grid.base_variance(tt) + self._grid.snap_variance(tt)
        return float(var) if var.ndim == 0 else var

    def unit_report_bound(self) -> float:
        return HALF_CELLS * self.step

    def noise_terms(self) -> tuple[float, float, float]:
        """Lemma 1's ``(e + 3) / (3 (e - 1)^2) + t^2 / (e - 1)``; snapping adds ``<= h^2 / 4``."""
        em1 = math.expm1(self.epsilon / 2.0)
        constant = (math.exp(self.epsilon / 2.0) + 3.0) / (3.0 * em1 * em1)
        return constant, 1.0 / em1, self.step**2 / 4.0

    def worst_case_variance(self) -> float:
        """PM's variance at ``|t| = 1`` plus ``h^2 / 4``, in the metric's units.

        The first term is the exact maximum of Lemma 1's formula; ``h^2 / 4`` bounds the
        snapping term (whose maximum is near ``h^2 / 6``), so this is an upper bound
        exceeding the maximum by a relative 1e-12 or less.
        """
        unit = float(self._grid.base_variance(np.ones(1))[0]) + self.step**2 / 4.0
        return unit * self.half_range**2

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {**pm_constants(self._grid), "scale": self.step}

    @classmethod
    def portable_number(cls, derived: Derived, lo: float, hi: float, x: float, w: Words) -> bytes:
        return pm_index(derived, unit(lo, hi, x), w).to_bytes(4, "little", signed=True)

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """The grid index binned at the quantiles of its exact law."""
        pm = pm_cdf(derived, unit(*self.bounds, self.clipped(value)))
        bound = int(derived["bound"])
        return [("index (binned)", *binned(reports.astype(np.int64), pm, -bound - 1, bound), "")]


@dataclass(frozen=True, kw_only=True)
class Hybrid(NumericMechanism):
    """Wang et al.'s Hybrid Mechanism (HM): PM or Duchi's mechanism, chosen at random.

    A value x in ``bounds`` maps to t in [-1, 1] as for :class:`Piecewise`; values
    outside the bounds are clipped to them on the device. For ``eps > 0.61`` the device
    runs PM(eps) with probability ``alpha = 1 - e^{-eps/2}`` and Duchi(eps) otherwise;
    for ``eps <= 0.61`` it always runs Duchi (alpha = 0). Both are unbiased for t and
    eps-LDP, and so is their mixture (its weights do not depend on the input). With
    ``e = e^{eps/2}`` and ``C_d = (e^eps + 1) / (e^eps - 1)``, its variance is

    ``alpha (t^2 / (e - 1) + (e + 3) / (3 (e - 1)^2)) + (1 - alpha) (C_d^2 - t^2)``

    (the mixture of two unbiased estimates of t). For ``eps > 0.61`` the t^2 terms
    cancel, ``alpha / (e - 1) = 1 - alpha = 1 / e``, leaving the constant
    ``(e + 3) / (3 e (e - 1)) + C_d^2 / e`` of Wang et al.'s Eq. (6); HM's worst case is
    below both PM's and Duchi's.

    One report type for both branches: a grid index k on the grid ``k h`` chosen so that
    Duchi's outputs ``±C_d`` are the grid points ``±m`` exactly (``h = C_d / m``,
    ``m = floor(2**19 C_d / C_pm)``) while ``|k| <= ceil(C_pm / h)`` covers PM's range
    ``[-C_pm, C_pm]`` (``C_pm = (e + 1) / (e - 1)``). PM's output is stochastically
    rounded to this grid as in :class:`Piecewise` (its exact extra variance, times alpha,
    is included); Duchi's needs no rounding. The estimate is ``k h``.

    Floating point: PM's branch is drawn and rounded as in :class:`Piecewise`, with the
    same realized guarantee (``eps + 2**-29 e^{eps/2}``); Duchi's branch as in
    :class:`~ldpkit.mechanisms.duchi.Duchi` (exact dyadic flip probability, ``C_d``
    matched to it). The branch coin's realized probability differs from alpha by at most
    2**-53, which changes neither the mean nor the privacy (weights independent of the
    input), only the variance, negligibly.

    Wire format (protocol v1): one little-endian int32 per report,
    ``|k| <= ceil(C_pm / h)`` (about ``2**19``); for ``eps <= 0.61`` (Duchi's branch alone)
    exactly ``±m``: any other index is no honest report and is refused.

    Screening: as for Piecewise, nothing per report; the pooled mean is tested.
    """

    name: ClassVar[str] = "hybrid"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = numeric_cases("hybrid")
    report_dtype = REPORT_DTYPE

    alpha: float = field(init=False, repr=False)
    """Probability of the PM branch: ``1 - e^{-eps/2}`` above eps = 0.61, else 0."""
    C_pm: float = field(init=False, repr=False)
    C_duchi: float = field(init=False, repr=False)
    step: float = field(init=False, repr=False)
    """Grid step h in t units: ``C_duchi / duchi_index``."""
    duchi_index: int = field(init=False, repr=False)
    """m: Duchi's outputs are the indices ``±m``."""
    bound: int = field(init=False, repr=False)
    """Largest valid ``|k|``: ``ceil(C_pm / h)``."""
    _grid: _PMGrid = field(init=False, repr=False)
    _flip_threshold: float = field(init=False, repr=False)

    def _derive(self) -> None:
        eps = self.epsilon
        alpha = -math.expm1(-eps / 2.0) if eps > HYBRID_THRESHOLD else 0.0
        c_pm = 1.0 / math.tanh(eps / 4.0)
        flip_threshold, _, c_duchi = duchi_constants(eps)
        m = max(1, math.floor(HALF_CELLS * c_duchi / c_pm))
        step = c_duchi / m
        bound = math.ceil(c_pm / step)
        self._set(alpha=alpha, C_pm=c_pm, C_duchi=c_duchi, step=step, duchi_index=m, bound=bound)
        self._set(_grid=_PMGrid(eps, step, bound), _flip_threshold=flip_threshold)

    @property
    def report_rule(self) -> str:
        if self.alpha == 0.0:
            return f"the grid index {-self.duchi_index} or {self.duchi_index} (int32)"
        return f"an integer grid index in {-self.bound}..{self.bound} (int32)"

    def _perturb(self, values: FloatArray, rng: np.random.Generator) -> npt.NDArray[np.int32]:
        t = self.to_unit(values)
        use_pm = rng.random(t.size) < self.alpha
        # Duchi's branch for everyone (cheap), PM's only where it is used.
        index = duchi_signs(t, self._flip_threshold, rng).astype(np.int32) * np.int32(
            self.duchi_index
        )
        if self.alpha > 0.0:
            chosen = np.flatnonzero(use_pm)
            index[chosen] = self._grid.sample(t[chosen], rng)
        return index

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """:meth:`_perturb` of one value, in Python numbers (the same words, the same bytes)."""
        t = self.unit_one(float(value))
        draws = OneDraws(rng)
        use_pm = draws.random() < self.alpha
        index = duchi_sign_one(t, self._flip_threshold, draws) * self.duchi_index
        if self.alpha > 0.0 and use_pm:
            index = self._grid.sample_one(t, draws)
        return index.to_bytes(4, "little", signed=True)

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        if self.alpha == 0.0:  # Duchi alone (eps <= 0.61): only its two outputs exist
            return np.asarray(np.abs(reports.astype(np.int64)) == self.duchi_index)
        return np.asarray((reports >= -self.bound) & (reports <= self.bound))

    def _debias(self, reports: npt.NDArray[Any]) -> FloatArray:
        return np.asarray(reports, dtype=np.float64) * self.step

    def unit_variance(self, t: float | npt.ArrayLike) -> Any:
        """The mixture's variance (see the class doc), snapping included exactly."""
        tt = np.clip(np.asarray(t, dtype=np.float64), -1.0, 1.0)
        var = (1.0 - self.alpha) * (self.C_duchi**2 - tt * tt)
        if self.alpha > 0.0:
            var = var + self.alpha * (self._grid.base_variance(tt) + self._grid.snap_variance(tt))
        return float(var) if var.ndim == 0 else var

    def noise_terms(self) -> tuple[float, float, float]:
        """The mixture's ``A + B t^2`` (B = 0 above eps = 0.61, -1 below, where HM is Duchi)."""
        duchi = self.C_duchi**2
        if self.alpha == 0.0:
            return duchi, -1.0, 0.0
        em1 = math.expm1(self.epsilon / 2.0)
        pm_constant = (math.exp(self.epsilon / 2.0) + 3.0) / (3.0 * em1 * em1)
        a = self.alpha * pm_constant + (1.0 - self.alpha) * duchi
        b = self.alpha / em1 - (1.0 - self.alpha)
        return a, b, self.alpha * self.step**2 / 4.0

    def unit_report_bound(self) -> float:
        """``bound h``; ``C_duchi`` at eps <= 0.61, where only Duchi's ``±m`` are valid."""
        return (self.bound if self.alpha > 0.0 else self.duchi_index) * self.step

    def binary_scale(self) -> float | None:
        """At eps <= 0.61 HM is Duchi's mechanism: reports are ``±C_duchi``."""
        return self.C_duchi if self.alpha == 0.0 else None

    def worst_case_variance(self) -> float:
        """Largest variance over the bounds, in the metric's units.

        Without the snapping term the variance is constant in t for eps > 0.61 and
        largest at t = 0 below it; the snapping term is bounded by ``alpha h^2 / 4``, so
        this is exact up to a relative 1e-12 (an upper bound).
        """
        one, zero = np.ones(1), np.zeros(1)
        if self.alpha > 0.0:
            at_one = float(self._grid.base_variance(one)[0]) + self.step**2 / 4.0
            unit = max(
                self.alpha * at_one + (1.0 - self.alpha) * (self.C_duchi**2 - 1.0),
                self.alpha * (float(self._grid.base_variance(zero)[0]) + self.step**2 / 4.0)
                + (1.0 - self.alpha) * self.C_duchi**2,
            )
        else:
            unit = self.C_duchi**2
        return unit * self.half_range**2

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {
            **pm_constants(self._grid),
            "pm": hex64(dyadic53(self.alpha)),
            "flip": hex64(dyadic53(duchi_constants(self.epsilon)[1])),
            "duchi_index": self.duchi_index,
            "scale": self.step,
        }

    @classmethod
    def portable_number(cls, derived: Derived, lo: float, hi: float, x: float, w: Words) -> bytes:
        """PM's index if ``coin(pm)``, else Duchi's sign times ``duchi_index``."""
        t = unit(lo, hi, x)
        if w.coin(derived["pm"]):
            index = pm_index(derived, t, w)
        else:
            index = duchi_sign(derived["flip"], t, w) * int(derived["duchi_index"])
        return index.to_bytes(4, "little", signed=True)

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """Duchi's sign law at eps <= 0.61; above, the mixture's index binned."""
        t = unit(*self.bounds, self.clipped(value))
        if self.alpha == 0.0:
            return [sign_test(reports, t, derived["flip"], self.duchi_index)]
        pm = pm_cdf(derived, t)
        alpha = int(derived["pm"], 16) / 2.0**64
        plus = plus_probability(t, derived["flip"])
        atom = self.duchi_index

        def mixture(k: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            duchi = np.where(k >= atom, 1.0, np.where(k >= -atom, 1.0 - plus, 0.0))
            return alpha * pm(k) + (1.0 - alpha) * duchi

        bound = int(derived["bound"])
        values = reports.astype(np.int64)
        return [("index (binned)", *binned(values, mixture, -bound - 1, bound), "")]
