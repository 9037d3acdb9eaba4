"""What the two integer-grid mechanisms share (:class:`~ldpkit.mechanisms.laplace.LocalLaplace`
and :class:`~ldpkit.mechanisms.gaussian.LocalGaussian`): a value is rounded stochastically
onto ``D = GRID_STEPS`` steps of its bounds (``E[M] = u``), integer noise is added, and
the report is clipped to ``-noise_cap .. D + noise_cap``. Each subclass says how it draws
its noise and what that noise's variance is; the rest (reports, debiasing, variance) is
here, once."""

from __future__ import annotations

import functools
import math
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .. import screening
from ..screening import Finding
from ._bits import OneDraws
from ._conformance import Cdf, binned
from ._portable import Derived, Words
from .base import BoolArray, FloatArray, IntArray, LawTest, NumericMechanism, Reports

REPORT_DTYPE = np.dtype("<i8")
GRID_STEPS = 2**16
EXCESS_TAILS = (1e-2, 1e-4, 1e-8, 1e-16)
"""How rare the distances beyond the grid are that screening counts (see ``excess_levels``)."""


@dataclass(frozen=True, kw_only=True)
class GridMechanism(NumericMechanism):
    grid_steps: ClassVar[int] = GRID_STEPS
    report_dtype = REPORT_DTYPE

    noise_cap: int = field(init=False, repr=False)
    """Valid reports lie in ``-noise_cap .. D + noise_cap``."""

    @abstractmethod
    def noise(self, rng: np.random.Generator, n: int) -> IntArray:
        """n draws of the integer noise."""

    @abstractmethod
    def grid_noise_variance(self) -> float:
        """The noise's variance, in grid steps squared."""

    @abstractmethod
    def noise_tail(self, t: int) -> float:
        """An upper bound on ``P[Z >= t]`` for an integer t >= 1 (the noise is symmetric)."""

    def unit_report_bound(self) -> float:
        """A report within ``-cap .. D + cap`` debiases to ``|y| <= 1 + 2 cap / D``."""
        return 1.0 + 2.0 * self.noise_cap / self.grid_steps

    @functools.cached_property
    def excess_levels(self) -> tuple[tuple[int, float], ...]:
        """``(t, bound)``: distances beyond the grid (in steps) that an honest report reaches
        with probability at most ``bound``, about 10^-2, 10^-4, 10^-8 and 10^-16.

        A report ``Y = M + Z`` with M in ``[0, D]`` lies t or more steps beyond the grid
        (``Y >= D + t`` or ``Y <= -t``) with probability ``S(t + D - M) + S(t + M)``,
        ``S(u) = P[Z >= u]``; S is convex over u >= 1 (the noise's law decreases away from
        0), so this is largest at ``M = 0`` or ``D``: ``S(t) + S(t + D)``, whatever the input.
        """
        out = []
        for target in EXCESS_TAILS:
            low, high = 1, self.noise_cap
            if self._excess_tail(high) > target:
                continue
            while low < high:  # the smallest t whose bound is within the target
                mid = (low + high) // 2
                low, high = (mid + 1, high) if self._excess_tail(mid) > target else (low, mid)
            out.append((low, self._excess_tail(low)))
        return tuple(out)

    def _excess_tail(self, t: int) -> float:
        return self.noise_tail(t) + self.noise_tail(t + self.grid_steps)

    def screen_reports(self, reports: npt.NDArray[Any], alpha: float) -> Finding | None:
        """How far reports lie beyond the grid: the number of a batch's m reports at least
        t steps beyond it is at most Bin(m, bound) for each of :attr:`excess_levels`, whatever
        the inputs (Bonferroni over the levels)."""
        y = np.asarray(reports, dtype=np.int64)
        excess = np.maximum(y - self.grid_steps, -y)
        tests = [
            functools.partial(self._beyond, int(np.count_nonzero(excess >= t)), len(y), t, bound)
            for t, bound in self.excess_levels
        ]
        return screening.first_finding(alpha, tests)

    def _beyond(self, count: int, m: int, t: int, bound: float, alpha: float) -> Finding | None:
        units = t * 2.0 * self.half_range / self.grid_steps
        what = f"a value at least {t} grid steps ({units:.4g} in units) beyond the bounds is sent"
        return screening.rare(count, m, bound, alpha, "beyond the bounds", what)

    @property
    def report_rule(self) -> str:
        return (
            f"an integer in {-self.noise_cap}..{self.grid_steps + self.noise_cap} "
            f"(int64 grid position)"
        )

    def _perturb(self, values: FloatArray, rng: np.random.Generator) -> IntArray:
        n = values.size
        d = self.grid_steps
        lo, hi = self.bounds
        u = np.clip((values - lo) / (hi - lo) * d, 0.0, float(d))
        m = np.floor(u)
        m += rng.random(n) < u - m  # stochastic rounding: E[M] = u
        y = m.astype(np.int64) + self.noise(rng, n)
        return np.asarray(np.clip(y, -self.noise_cap, d + self.noise_cap))

    def round_one(self, value: float, draws: OneDraws) -> int:
        """:meth:`_perturb`'s stochastic rounding of one value, in Python numbers."""
        d = self.grid_steps
        lo, hi = self.bounds
        u = min(max((value - lo) / (hi - lo) * d, 0.0), float(d))
        m = math.floor(u)
        return m + (draws.random() < u - m)

    def report_one(self, rounded: int, noise: int) -> bytes:
        """:meth:`_perturb`'s report of one rounded value and its noise, as bytes."""
        cap = self.noise_cap
        return min(max(rounded + noise, -cap), self.grid_steps + cap).to_bytes(
            8, "little", signed=True
        )

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return np.asarray(
            (reports >= -self.noise_cap) & (reports <= self.grid_steps + self.noise_cap)
        )

    def _debias(self, reports: npt.NDArray[Any]) -> FloatArray:
        return np.asarray(reports, dtype=np.float64) * (2.0 / self.grid_steps) - 1.0

    def unit_variance(self, t: float | npt.ArrayLike) -> Any:
        """Exact variance of one debiased report at unit value t (rounding + noise)."""
        tt = np.clip(np.asarray(t, dtype=np.float64), -1.0, 1.0)
        d = self.grid_steps
        u = (tt + 1.0) * (0.5 * d)
        f = u - np.floor(u)
        var = (2.0 / d) ** 2 * (f * (1.0 - f) + self.grid_noise_variance())
        return float(var) if var.ndim == 0 else var

    def noise_terms(self) -> tuple[float, float, float]:
        """The noise's variance whatever t; rounding adds up to ``(1 / D)^2``."""
        unit = (2.0 / self.grid_steps) ** 2
        return unit * self.grid_noise_variance(), 0.0, unit * 0.25

    def worst_case_variance(self) -> float:
        """Exact maximum over the bounds (rounding variance 1/4 at a half step)."""
        d = self.grid_steps
        return (2.0 / d) ** 2 * (0.25 + self.grid_noise_variance()) * self.half_range**2

    # --- the portable rule and the conformance law -------------------------------------
    @classmethod
    def portable_number(cls, derived: Derived, lo: float, hi: float, x: float, w: Words) -> bytes:
        """x on the grid plus the noise, clamped to ``-cap .. grid_steps + cap``: an int64."""
        y = on_grid(derived, lo, hi, x, w) + cls.portable_noise(derived, w)
        cap, steps = int(derived["cap"]), int(derived["grid_steps"])
        return int(min(max(y, -cap), steps + cap)).to_bytes(8, "little", signed=True)

    @classmethod
    @abstractmethod
    def portable_noise(cls, derived: Derived, words: Words) -> int:
        """One draw of the integer noise by the portable rule."""

    @abstractmethod
    def noise_cdf(self, derived: Derived) -> Cdf:
        """``Pr[Z <= z]`` of the noise (its served constants in ``derived``)."""

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """``M + Z`` binned at its law's quantiles: M the stochastic rounding of u, Z the noise."""
        lo, hi = self.bounds
        steps = self.grid_steps
        u = min(max((self.clipped(value) - lo) / (hi - lo) * steps, 0.0), float(steps))
        m0 = math.floor(u)
        f = u - m0
        z_cdf = self.noise_cdf(derived)

        def cdf(y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            return np.asarray((1.0 - f) * z_cdf(y - m0) + f * z_cdf(y - m0 - 1.0))

        test = binned(reports.astype(np.int64), cdf, -self.noise_cap, steps + self.noise_cap)
        return [("value (binned)", *test, "")]


def on_grid(derived: Derived, lo: float, hi: float, x: float, words: Words) -> int:
    """x on the grid of ``grid_steps`` steps, rounded stochastically (one ``uniform()``)."""
    steps = int(derived["grid_steps"])
    u = min(max((x - lo) / (hi - lo) * steps, 0.0), float(steps))
    m = math.floor(u)
    if words.uniform() < u - m:
        m += 1
    return m
