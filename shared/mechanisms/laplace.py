"""The Laplace mechanism, made discrete so that floating point cannot leak the input.

References
----------
C. Dwork, F. McSherry, K. Nissim, A. Smith, "Calibrating noise to sensitivity in private
data analysis", TCC 2006 (the Laplace mechanism).
I. Mironov, "On significance of the least significant bits for differential privacy",
ACM CCS 2012 (why ``x + Laplace`` in doubles is not private).
A. Ghosh, T. Roughgarden, M. Sundararajan, "Universally utility-maximizing privacy
mechanisms", STOC 2009 (the geometric, or discrete Laplace, mechanism).
C. L. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential privacy",
NeurIPS 2020 (Sec. 5: sampling discrete Laplace as a difference of geometrics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._bits import OneDraws, uniform_u64
from ._conformance import Cdf, numeric_cases
from ._grid import GRID_STEPS as GRID_STEPS  # D: part of protocol v1
from ._grid import REPORT_DTYPE as REPORT_DTYPE
from ._grid import GridMechanism
from ._portable import Derived, Words, hex64
from .base import IntArray, PlanCase


def _threshold(probability: float) -> int:
    """The 64-bit coin threshold nearest ``probability`` (in (0, 1))."""
    return min(2**64 - 1, round(probability * 2**64))


TAIL_CAP = 48.0
"""A report is valid if it lies within ``TAIL_CAP / lambda`` grid steps of the grid
(lambda = epsilon / D): genuine noise goes further with probability ``2 e^-48 < 1e-20``,
and the device clamps it there anyway (post-processing)."""
_JOINT_DIGIT_WORDS = 1 << 16  # up to this many digit words, drawn in one call


def geometric(derived: Derived, words: Words) -> int:
    """The portable rule of ``Pr[G = g] = (1 - a) a^g``: its binary digits (a coin of
    each ``digits`` threshold), then its block count (coins of ``block`` until one fails)."""
    g = 0
    digits = derived["digits"]
    for j, threshold in enumerate(digits):
        if words.coin(threshold):
            g += 1 << j
    while words.coin(derived["block"]):
        g += 1 << len(digits)
    return g


@dataclass(frozen=True, kw_only=True)
class LocalLaplace(GridMechanism):
    """Value plus Laplace noise, realized exactly on an integer grid (the geometric mechanism).

    A value x in ``bounds`` (values outside are clipped to them on the device) maps to
    ``u = (x - lo) / (hi - lo) * D`` in [0, D], with ``D = GRID_STEPS = 2**16``. The
    device sends the integer

    ``Y = M + Z``,

    where ``M = floor(u) + Bernoulli(u - floor(u))`` is u stochastically rounded to the
    grid and Z is two-sided geometric ("discrete Laplace"),
    ``Pr[Z = z] = (1 - a) / (1 + a) * a^|z|`` with ``a = exp(-eps / D)``. In the
    metric's units this is the classic mechanism with sensitivity ``hi - lo``: the noise
    has variance ``(hi - lo)^2 / D^2 * 2 a / (1 - a)^2 -> 2 ((hi - lo) / eps)^2`` as D
    grows.

    Estimation: ``t_hat = 2 Y / D - 1`` is unbiased for ``t = 2 (x - lo) / (hi - lo) - 1``
    (``E[M] = u``, ``E[Z] = 0``) with variance

    ``(2 / D)^2 * (f (1 - f) + 2 a / (1 - a)^2)``, ``f = u - floor(u)``,

    the first term from the rounding, at most ``(1 / D)^2`` in t units.

    Privacy (exact epsilon): for any output y and any grid points ``m, m'`` in [0, D],
    ``Pr[Z = y - m] / Pr[Z = y - m'] = a^(|y - m| - |y - m'|) <= a^-|m - m'| <= e^eps``.
    Whatever x is, ``Pr[Y = y | x]`` is an average of ``Pr[Z = y - m]`` over m in [0, D]
    (weights ``Pr[M = m | x]``), so it lies between the smallest and the largest of those
    values, whose ratio is at most ``e^eps``: ``Pr[Y = y | x] <= e^eps Pr[Y = y | x']``.
    The rounding is a randomized pre-processing whose output stays on the grid, which is
    all the argument needs; it is what keeps the estimate unbiased. Clamping Y to the
    valid range is post-processing.

    Floating point (Mironov 2012): reports are integers, and every integer has positive
    probability for every input, so no output can rule an input out. The geometric
    variates are made from their binary digits, which are independent: ``G = R + L N``
    with ``L = 2**J`` chosen so that ``a^L`` is in (1/4, 1/2]; digit j of R (j < J) is a
    coin with probability ``a^(2^j) / (1 + a^(2^j)) = 1 / (1 + e^(lambda 2^j))``, in
    [1/3, 1/2], and the block count N counts coins of probability ``a^L`` until the
    first that fails. Every coin compares a 64-bit word with a 64-bit threshold
    (:attr:`digit_thresholds`, :attr:`block_threshold`, computed once and served to
    clients in the definition), so each realizes its probability to a relative error
    below ``2**-62``, and every probability of Z within the clamp to a relative error of
    about ``J 2**-61``: the realized mechanism is ``(eps + 1e-15)``-LDP, with no delta.
    This is the portable rule of docs/protocol.md (``ldpkit.portable``). The mapping
    from x to the distribution of M may be off by rounding; the argument above holds for
    any distribution of M on the grid.

    Wire format (protocol v1): one little-endian int64 per report. Valid reports lie in
    ``-cap .. D + cap`` with ``cap = ceil(TAIL_CAP * D / eps)``.
    """

    name: ClassVar[str] = "laplace"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = numeric_cases("laplace")
    decay: float = field(init=False, repr=False)
    """``a = exp(-eps / D)``: the geometric's ratio."""
    digit_thresholds: tuple[int, ...] = field(init=False, repr=False)
    """64-bit thresholds of the geometric's binary digits (``J`` of them)."""
    block_threshold: int = field(init=False, repr=False)
    """64-bit threshold of one more block of ``2**J`` in the geometric."""
    _lam: float = field(init=False, repr=False)

    def _derive(self) -> None:
        lam = self.epsilon / self.grid_steps
        self._set(_lam=lam, decay=math.exp(-lam), noise_cap=math.ceil(TAIL_CAP / lam))
        # Block L = 2**J with lam * L in [ln 2, 2 ln 2): a^L in (1/4, 1/2].
        bits = max(0, math.ceil(math.log2(math.log(2.0) / lam)))
        digits = tuple(_threshold(1.0 / (1.0 + math.exp(lam * 2.0**j))) for j in range(bits))
        self._set(digit_thresholds=digits, block_threshold=_threshold(math.exp(-lam * 2.0**bits)))

    def _geometric(self, rng: np.random.Generator, n: int) -> IntArray:
        """n draws of G with ``Pr[G = g] = (1 - a) a^g``, g = 0, 1, ... (see class doc)."""
        digits = len(self.digit_thresholds)
        if digits * n <= _JOINT_DIGIT_WORDS:
            # Few draws (a device's report): every digit's words in one call, the same
            # words in the same order as the loop below (digit j reads words j n .. j n + n
            # - 1); about 17 numpy calls fewer per report.
            words = uniform_u64(rng, digits * n).reshape(digits, n)
            below = words < np.array(self.digit_thresholds, dtype=np.uint64)[:, None]
            shifted = below.astype(np.int64) << np.arange(digits, dtype=np.int64)[:, None]
            g: IntArray = shifted.sum(axis=0, dtype=np.int64)
        else:
            g = np.zeros(n, dtype=np.int64)
            for j, threshold in enumerate(self.digit_thresholds):
                g |= (uniform_u64(rng, n) < np.uint64(threshold)).astype(np.int64) << j
        block = np.int64(1) << len(self.digit_thresholds)
        active = np.arange(n)
        while active.size:
            more = uniform_u64(rng, active.size) < np.uint64(self.block_threshold)
            active = active[more]
            g[active] += block
        return g

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """:meth:`_perturb` of one value, in Python numbers (the same words, the same bytes)."""
        draws = OneDraws(rng)
        rounded = self.round_one(float(value), draws)
        g = [0, 0]  # _geometric(rng, 2): digit j reads words 2 j, 2 j + 1
        thresholds = self.digit_thresholds
        words = draws.u64s(2 * len(thresholds))
        for j, threshold in enumerate(thresholds):
            g[0] |= (words[2 * j] < threshold) << j
            g[1] |= (words[2 * j + 1] < threshold) << j
        block = 1 << len(self.digit_thresholds)
        active = [0, 1]
        while active:
            active = [i for i in active if draws.u64() < self.block_threshold]
            for i in active:
                g[i] += block
        return self.report_one(rounded, g[0] - g[1])

    def noise(self, rng: np.random.Generator, n: int) -> IntArray:
        """n draws of the two-sided geometric: the difference of two geometrics."""
        g = self._geometric(rng, 2 * n)
        return g[:n] - g[n:]

    def noise_tail(self, t: int) -> float:
        """``P[Z >= t] = a^t / (1 + a)``; the coins realize it to a relative ``J 2^-61``,
        which the factor ``1 + 1e-12`` covers."""
        return math.exp(-self._lam * t) / (1.0 + self.decay) * (1.0 + 1e-12)

    def grid_noise_variance(self) -> float:
        """``2 a / (1 - a)^2 = 1 / (2 sinh^2(lambda / 2))``: Var Z in grid steps squared."""
        return 0.5 / math.sinh(self._lam / 2.0) ** 2

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {
            "grid_steps": self.grid_steps,
            "cap": self.noise_cap,
            "digits": [hex64(t) for t in self.digit_thresholds],
            "block": hex64(self.block_threshold),
        }

    @classmethod
    def portable_noise(cls, derived: Derived, words: Words) -> int:
        """The difference of two geometrics, the first drawn first."""
        return geometric(derived, words) - geometric(derived, words)

    def noise_cdf(self, derived: Derived) -> Cdf:
        lam = self._lam
        one_plus_a = 1.0 + math.exp(-lam)

        def z_cdf(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            neg = np.exp(np.minimum(z, 0.0) * lam) / one_plus_a
            pos = 1.0 - np.exp(-(np.maximum(z, 0.0) + 1.0) * lam) / one_plus_a
            return np.asarray(np.where(z < 0, neg, pos))

        return z_cdf
