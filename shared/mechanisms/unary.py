"""Unary encoding: symmetric (basic RAPPOR) and optimized (OUE).

The true item x becomes the one-hot d-bit vector e_x, and every bit is then flipped
independently: the bit of x is reported as 1 with probability ``p``, every other bit as
1 with probability ``q``. A report supports item v when its bit v is set, so the
generic pure-protocol estimator applies. For any output vector B and inputs x, x', the
likelihood ratio is at most ``p (1 - q) / ((1 - p) q)``, which both variants set to
``e^eps``:

- SUE (basic one-time RAPPOR): ``p = e^(eps/2) / (e^(eps/2) + 1)``, ``q = 1 - p``;
- OUE: ``p = 1/2``, ``q = 1 / (e^eps + 1)``, which minimizes the variance
  ``4 e^eps / (n (e^eps - 1)^2)`` at f = 0 (the same as OLH).

Wire format
-----------
A report is the d-bit vector packed into ``ceil(d / 8)`` bytes in little bit order
(bit j is ``1 << (j % 8)`` of byte ``j // 8``), padding bits zero. It is well-formed iff
the padding bits are zero.

Sampling
--------
The non-true bits are drawn 64 at a time (``_lanes``) by one of three exact plans,
whichever ``_lanes.plan_unary`` expects to be fastest for (eps, d); ``sampling_plan``
says which (kind, m, a, c, block). "threshold": bit j is 1 iff its own 64-bit uniform is
at least ``2^64 - c``, ``c = ceil(q 2^64)`` (``q' = c / 2^64``). "or": a dense part, 1 w.p.
``A = a / 2^m`` (``a = floor(q 2^m)``), ORed with a sparse part, 1 w.p. ``b = c / 2^64``
(an exact binomial count per block of bits, then that many distinct positions;
``q' = A + (1 - A) b``). "and": a dense part with ``a = ceil(q 2^m)``, the sparse bits
cleared from it (``q' = A (1 - b)``).

Each way ``q <= q' < q + 2^-64`` exactly, every bit reads its own randomness, so the
d bits are independent, and the true bit x is then replaced by a separate coin
``w < floor(p 2^64)`` on a fresh word w: ``p' = floor(p 2^64) / 2^64``,
``p - 2^-64 < p' <= p``. ``realized_probabilities`` returns (p', q').

Privacy (the realized epsilon): between inputs x and x' only bits x and x' change law,
so for any output the likelihood ratio is at most ``p' (1 - q') / ((1 - p') q')``. This
increases with p' and decreases with q', so it is at most ``p (1 - q) / ((1 - p) q)``,
which is ``e^eps`` up to the floating-point error in computing p and q (a few ulps):
rounding the thresholds never adds privacy loss. The estimator's p and q differ from the
realized ones by under ``2^-64``.

The draws, for one batch (``perturb`` splits n reports into batches of
``_CHUNK_WORDS // ceil(d / 64)`` reports, each drawn in full before the next): one word
per report for the true bit; then the non-true bits (``_lanes.unary_lanes``: the
threshold, or ``dense_lanes`` then ``sparse_lanes``), each step for all reports of the
batch in order before the next. Bits at and beyond d (the last byte's padding) are
cleared. ``perturb_words`` runs the rule on any word source, for test vectors.

References
----------
U. Erlingsson, V. Pihur, A. Korolova, "RAPPOR: Randomized aggregatable
privacy-preserving ordinal response", ACM CCS 2014.

T. Wang, J. Blocki, N. Li, S. Jha, "Locally differentially private protocols for
frequency estimation", USENIX Security 2017 (SUE and OUE, pure protocols; OUE: 4.4).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .. import screening
from ..errors import ParameterError
from ..intervals import _sum_tails, support_distribution
from ..screening import Finding
from . import _bits, _lanes
from ._conformance import bit_tests, categorical_cases, chi2
from ._portable import Derived, Words, bitmap, ceil64, hex64
from .base import BoolArray, FloatArray, FrequencyOracle, IntArray, LawTest, PlanCase, Reports

# 64-bit words of report per perturb step (512 kB): keeps the working set in cache.
_CHUNK_WORDS = 1 << 16
# output_probabilities enumerates 2^d vectors; refuse beyond this.
MAX_ENUMERATED_BITS = 16


@dataclass(frozen=True, kw_only=True)
class _UnaryEncoding(_lanes.OneRow, _bits.BitmapReports, FrequencyOracle):
    """Shared machinery of SUE and OUE; subclasses give (p, q)."""

    @property
    def report_rule(self) -> str:
        nbytes = _bits.packed_size(self.domain_size)
        return (
            f"{nbytes} bytes holding {self.domain_size} bits in little bit order, "
            "with the padding bits of the last byte zero"
        )

    @functools.cached_property
    def sampling_plan(self) -> _lanes.UnaryPlan:
        """``_lanes.plan_unary``'s plan: how the non-true bits are drawn."""
        return _lanes.plan_unary(self.q, self.domain_size)

    @property
    def realized_probabilities(self) -> tuple[float, float]:
        """``(p', q')``: the sampler's exact probabilities (as floats, for display)."""
        return self.keep_threshold / 2**64, float(self.sampling_plan.probability())

    def _perturb(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
        if values.size == 1:  # a device's report: the same rule, in Python integers
            return self.perturb_one(int(values[0]), self.one_row_queue(rng))
        return self.perturb_words(values, _bits.rng_words(rng))

    def _one_row(self, value: int, queue: _lanes.WordQueue) -> tuple[int, int, int, bool]:
        """One report's row (lane j = bit j) before :func:`_lanes.finish_row` (and its
        arguments)."""
        d = self.domain_size
        true_bit = queue.take_one() < self.keep_threshold
        return _lanes.unary_row(queue, d, self.sampling_plan), d, value, true_bit

    def perturb_words(self, values: IntArray, words: _lanes.WordSource) -> npt.NDArray[np.uint8]:
        """Perturb checked item indices, drawing raw 64-bit words from ``words(count)``.

        This is the sampling rule of the module docstring: the same words in give the
        same reports out, whatever produced them. ``words`` must hand out a fresh array
        each call (the samplers work inside it; :data:`_lanes.WordSource`).
        """
        d = self.domain_size
        width = _lanes.words_per_row(d)
        out = np.empty((values.size, _bits.packed_size(d)), dtype=np.uint8)
        true_threshold = np.uint64(self.keep_threshold)
        rows_per_step = max(1, _CHUNK_WORDS // width)
        plan = self.sampling_plan
        for start in range(0, values.size, rows_per_step):
            x = values[start : start + rows_per_step]
            true_bit = words(x.size) < true_threshold
            packed = _lanes.unary_lanes(words, x.size, d, plan)
            _lanes.clear_padding(packed, d)
            _lanes.set_lanes(packed, x, true_bit)
            out[start : start + x.size] = _lanes.report_bytes_view(packed, d)
        return out

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return _bits.padding_is_zero(reports, self.domain_size)

    def output_probabilities(self, value: int) -> tuple[npt.NDArray[np.uint8], FloatArray]:
        """Every possible report for ``value`` and its exact probability.

        Parameters
        ----------
        value : int
            The true item, in ``0 .. domain_size - 1``.

        Returns
        -------
        reports : ndarray of uint8, shape (2**d, ceil(d / 8))
            All d-bit vectors, packed.
        probabilities : ndarray of float64, shape (2**d,)
            ``P(report | value)`` under the nominal ``p`` and ``q``.
        """
        d = self.domain_size
        if d > MAX_ENUMERATED_BITS:
            raise ParameterError(
                f"output_probabilities enumerates 2**domain_size reports; domain_size must "
                f"be at most {MAX_ENUMERATED_BITS}, got {d}"
            )
        value = int(self._check_values(np.asarray([value]))[0])
        bits = _bits.all_bit_vectors(d)
        one = np.full(d, self.q)
        one[value] = self.p
        probs = np.prod(np.where(bits, one, 1.0 - one), axis=1)
        return _bits.pack_rows(bits), probs

    @functools.cached_property
    def _bits_law(self) -> tuple[int, FloatArray, FloatArray]:
        """``(start, P[K >= start + i], P[K <= start + i])`` for K, the bits one report sets:
        Bern(p) + Bin(d - 1, q) exactly, whatever its input."""
        start, pmf = support_distribution(self.domain_size, 1, self.p, self.q)
        return start, np.cumsum(pmf[::-1])[::-1], np.cumsum(pmf)

    def screen_reports(self, reports: npt.NDArray[Any], alpha: float) -> Finding | None:
        """The bits set: each report's K is Bern(p) + Bin(d - 1, q) and a batch's total
        Bin(m, p) + Bin(m (d - 1), q), exactly and whatever the inputs (the sampler's
        p' <= p and q' < q + 2^-64 change neither by anything a batch can show). Half of
        ``alpha`` tests the batch's fewest and most bits (each side at ``alpha / (4 m)`` per
        report: every bit set, or a forger's targets alone, fails on its own), half its total."""
        bits = _bits.row_popcounts(reports)
        if bits.size == 0:
            return None
        return screening.first_finding(
            alpha, [partial(self._extreme_bits, bits), partial(self._total_bits, bits)]
        )

    def _extreme_bits(self, bits: IntArray, alpha: float) -> Finding | None:
        start, upper, lower = self._bits_law
        m, d = bits.size, self.domain_size
        most, fewest = int(bits.max()), int(bits.min())
        # Counts outside the law's window: its tails there are 0 (beyond) or 1 (before).
        tails = (
            (most, "or more", float(np.append(upper, 0.0)[np.clip(most - start, 0, upper.size)])),
            (
                fewest,
                "or fewer",
                float(np.append(0.0, lower)[np.clip(fewest - start + 1, 0, lower.size)]),
            ),
        )
        for count, side, tail in tails:
            if m * tail <= alpha / 2.0:
                return Finding(
                    "bits set",
                    f"a report sets {count} of its {d} bits; an honest one sets {count} {side} "
                    f"with probability {screening.shown(tail)}, whatever its value (one of "
                    f"{m}: {screening.shown(m * tail)})",
                    min(1.0, 2.0 * m * tail),
                )
        return None

    def _total_bits(self, bits: IntArray, alpha: float) -> Finding | None:
        m, d, total = bits.size, self.domain_size, int(bits.sum())
        one = np.ones(1)
        below, above = _sum_tails(
            total * one, m * one, self.p * one, m * (d - 1) * one, self.q * one
        )
        for tail, side in ((float(above[0]), "or more"), (float(below[0]), "or fewer")):
            if tail <= alpha / 2.0:
                return Finding(
                    "bits set",
                    f"{m} reports set {total} bits in all; honest ones set {total} {side} with "
                    f"probability {screening.shown(tail)}, whatever their values",
                    min(1.0, 2.0 * tail),
                )
        return None

    def pair_support(self) -> tuple[float, float]:
        """Bits are flipped independently: ``(p q, q^2)``."""
        return self.p * self.q, self.q * self.q

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {"p": hex64(self.keep_threshold), "q": hex64(ceil64(self.q))}

    @classmethod
    def portable_item(cls, derived: Derived, d: int, x: int, words: Words) -> bytes:
        """Bit x is ``coin(p)``, then every other bit in order ``coin(q)``: a bitmap."""
        bits = [False] * d
        bits[x] = words.coin(derived["p"])
        for j in range(d):
            if j != x:
                bits[j] = words.coin(derived["q"])
        return bitmap(bits)

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """Each bit's count, and the bits set: Bernoulli(p) + Binomial(d - 1, q), exactly."""
        bits = self.report_bits(reports)
        d, p, q = self.domain_size, self.p, self.q
        law = np.array([1.0 - p, p])
        others = np.array([math.comb(d - 1, j) * q**j * (1 - q) ** (d - 1 - j) for j in range(d)])
        counts = np.bincount(bits.sum(axis=1), minlength=d + 1)
        set_test = ("bits set", *chi2(counts, np.convolve(law, others)), "")
        return [*bit_tests(bits, int(value), p, q), set_test]


@dataclass(frozen=True, kw_only=True)
class SymmetricUnaryEncoding(_UnaryEncoding):
    """Symmetric unary encoding (SUE, basic one-time RAPPOR).

    Every bit of the one-hot vector is kept with probability ``p = e^(eps/2) / (e^(eps/2) + 1)`` and
    flipped otherwise, so ``q = 1 - p``. A report is ``ceil(d / 8)`` bytes.
    """

    name: ClassVar[str] = "sue"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = categorical_cases("sue")

    def _support_probabilities(self) -> tuple[float, float]:
        half = math.exp(-self.epsilon / 2.0)
        p = 1.0 / (1.0 + half)
        return p, half / (1.0 + half)


@dataclass(frozen=True, kw_only=True)
class OptimizedUnaryEncoding(_UnaryEncoding):
    """Optimized unary encoding (OUE).

    The true bit is 1 with probability ``p = 1/2``; every other bit is 1 with
    probability ``q = 1 / (e^eps + 1)``. This minimizes the variance at f = 0 among
    unary encodings: ``4 e^eps / (n (e^eps - 1)^2)``. A report is ``ceil(d / 8)`` bytes.
    """

    name: ClassVar[str] = "oue"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = categorical_cases("oue")

    def _support_probabilities(self) -> tuple[float, float]:
        return 0.5, 1.0 / (math.exp(self.epsilon) + 1.0)
