"""Hadamard response (HR).

Let ``K`` be the smallest power of two with ``K >= d + 1`` and ``H`` the K x K Sylvester
Hadamard matrix, ``H[r, c] = (-1)^popcount(r & c)``. Item x owns row ``x + 1`` (row 0,
all ones, is skipped): the set ``C_x = {c in [K] : popcount((x + 1) & c) even}`` of
``K / 2`` columns. A user with item x reports one column ``c``: uniform in ``C_x`` with
probability ``p = e^eps / (e^eps + 1)``, uniform in its complement otherwise. Every
output has probability ``2p / K`` or ``2(1 - p) / K``, in ratio ``e^eps``.

A report supports item v when ``c`` is in ``C_v``. Distinct rows of H are orthogonal,
so ``C_x`` and ``C_v`` share exactly ``K / 4`` columns and any other item is supported
with probability ``q = 1/2``: the pure-protocol estimator applies. Reports are 4 bytes
and the collector's work is a histogram over ``K`` plus an O(K log K) transform.

Sampling
--------
Draw ``c`` uniform in ``[K]``; where it falls on the wrong side (in ``C_x`` when the
coin said "complement" or vice versa), flip it to ``c ^ lowbit(x + 1)``, which toggles
the parity of ``popcount((x + 1) & c)``. The flip is a bijection between ``C_x`` and its
complement, so the result is uniform on the chosen side.

Aggregation
-----------
With ``hist`` the histogram of reported columns, the fast Walsh-Hadamard transform gives
``(H hist)[x + 1] = #{reports in C_x} - #{reports outside C_x}``, so item v is supported by
``(n + (H hist)[v + 1]) / 2`` reports.

Wire format
-----------
A report is the column ``c`` as a little-endian uint32; well-formed iff ``c < K``.

References
----------
J. Acharya, Z. Sun, H. Zhang, "Hadamard response: estimating distributions privately,
efficiently, and with little communication", AISTATS 2019.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .. import screening
from ..errors import ParameterError
from ..screening import Finding
from . import _bits
from ._conformance import categorical_cases, chi2
from ._portable import Derived, Words, hex64
from .base import BoolArray, FloatArray, FrequencyOracle, IntArray, LawTest, PlanCase, Reports

REPORT_DTYPE = np.dtype("<u4")
# output_probabilities lists all K columns; refuse beyond this.
MAX_ENUMERATED_COLUMNS = 1 << 16


def fwht(values: npt.ArrayLike) -> npt.NDArray[Any]:
    """Fast Walsh-Hadamard transform in Sylvester (natural) order: ``H @ values``.

    Parameters
    ----------
    values : array_like, shape (K,)
        K must be a power of two. Integer input stays integer (exact).

    Returns
    -------
    ndarray, shape (K,)
        ``out[r] = sum_c (-1)^popcount(r & c) values[c]``, equal to
        ``scipy.linalg.hadamard(K) @ values``, in ``log2 K`` vectorized butterfly steps.
    """
    out = np.array(values, copy=True)
    size = out.shape[0]
    if out.ndim != 1 or size < 1 or size & (size - 1):
        raise ParameterError(f"fwht needs a 1-D array whose length is a power of 2, got {size}")
    half = 1
    while half < size:
        pairs = out.reshape(-1, 2, half)
        top = pairs[:, 0, :].copy()
        bottom = pairs[:, 1, :]
        pairs[:, 0, :] += bottom
        np.subtract(top, bottom, out=bottom)
        half *= 2
    return out


@dataclass(frozen=True, kw_only=True)
class HadamardResponse(FrequencyOracle):
    """Hadamard response (HR): report a column of the Hadamard row that owns the item.

    ``K`` is the smallest power of 2 >= d + 1; ``p = e^eps / (e^eps + 1)``, ``q = 1/2``.
    The variance at f = 0 is ``(e^eps + 1)^2 / (n (e^eps - 1)^2)``: close to the best
    for small eps, with 4-byte reports and an O(n + K log K) aggregation.
    """

    name: ClassVar[str] = "hr"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = categorical_cases("hr")
    aggregate_cost = 1  # one counter per report: the report names one column
    report_dtype = REPORT_DTYPE

    K: int = field(init=False)

    def _support_probabilities(self) -> tuple[float, float]:
        self._set(K=1 << self.domain_size.bit_length())
        return 1.0 / (1.0 + math.exp(-self.epsilon)), 0.5

    @property
    def report_rule(self) -> str:
        return f"a Hadamard column index in 0..{self.K - 1}"

    def _perturb(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[np.uint32]:
        n = values.size
        row = values.astype(np.uint64) + np.uint64(1)
        c = _bits.uniform_u64(rng, n) & np.uint64(self.K - 1)
        inside = (np.bitwise_count(row & c) & np.uint8(1)) == 0
        want = _bits.uniform_u64(rng, n) < np.uint64(self.keep_threshold)
        flip = np.where(inside != want, row & (~row + np.uint64(1)), np.uint64(0))
        return (c ^ flip).astype(REPORT_DTYPE)

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """:meth:`_perturb` of one value, in Python integers (the same words, the same bytes)."""
        draws = _bits.OneDraws(rng)
        row = int(value) + 1
        c = draws.u64() & (self.K - 1)
        inside = (row & c).bit_count() & 1 == 0
        want = draws.u64() < self.keep_threshold
        flip = row & -row if inside != want else 0
        return (c ^ flip).to_bytes(4, "little")

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return np.asarray(reports.astype(np.uint64) < np.uint64(self.K))

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        hist = np.bincount(reports, minlength=self.K).astype(np.int64)
        transformed: npt.NDArray[np.int64] = fwht(hist)
        return np.asarray((reports.shape[0] + transformed[1 : self.domain_size + 1]) / 2.0)

    def screen_reports(self, reports: npt.NDArray[Any], alpha: float) -> Finding | None:
        """Column 0 lies in every item's ``C_x`` (``(x + 1) & 0`` has even parity), and the
        sampler sends it with probability ``2 p' / K`` whatever the input (from ``c = 0``
        kept, or ``c = lowbit(x + 1)`` flipped, each ``p' / K``; ``p' <= p``): a batch's
        count of it is at most Bin(m, 2p / K), tested on its upper tail. The column a
        forger supporting every item would send."""
        count = int(np.count_nonzero(np.asarray(reports) == 0))
        what = "column 0, which supports every item, is sent"
        return screening.rare(count, len(reports), 2.0 * self.p / self.K, alpha, "column 0", what)

    @property
    def distinct_reports(self) -> int:
        return self.K

    def supports(self, value: Any, reports: npt.ArrayLike) -> BoolArray:
        """Whether each reported column lies in ``C_value`` (an even parity of
        ``(value + 1) & column``)."""
        columns = np.asarray(reports).astype(np.uint64)
        return np.asarray((np.bitwise_count(np.uint64(int(value) + 1) & columns) & 1) == 0)

    def output_probabilities(self, value: int) -> tuple[npt.NDArray[np.uint32], FloatArray]:
        """Every possible report (column) for ``value`` and its exact probability.

        Returns
        -------
        reports : ndarray of uint32, shape (K,)
            The columns ``0 .. K - 1``.
        probabilities : ndarray of float64, shape (K,)
            ``2p / K`` on ``C_value``, ``2(1 - p) / K`` elsewhere.
        """
        if self.K > MAX_ENUMERATED_COLUMNS:
            raise ParameterError(
                f"output_probabilities lists all K = {self.K} columns; at most "
                f"{MAX_ENUMERATED_COLUMNS} (domain_size too large)"
            )
        x = int(self._check_values(np.asarray([value]))[0])
        columns = np.arange(self.K, dtype=np.uint64)
        inside = (np.bitwise_count(np.uint64(x + 1) & columns) & np.uint8(1)) == 0
        probs = np.where(inside, 2.0 * self.p / self.K, 2.0 * (1.0 - self.p) / self.K)
        return columns.astype(REPORT_DTYPE), probs

    def covariance(self, frequencies: npt.ArrayLike, n: int = 1) -> FloatArray:
        """Covariance of the d estimated fractions, exactly (the reporters held fixed).

        Per report, ``Cov(S_i, S_j)`` for i != j is 0 unless the reporter's row is
        ``(i + 1) xor (j + 1)``: the three rows are then dependent, ``C_i`` and ``C_j``
        meet inside ``C_x`` (K / 4 of its K / 2 columns), so ``P(both) = p / 2`` against
        ``a_i a_j = 1 / 4``: ``(2p - 1) / 4``. A reporter holding i or j, or any item whose
        row is independent of theirs, adds nothing (``p / 2 - p / 2``, ``1/4 - 1/4``).
        Hence not :meth:`pair_support`'s two constants, but as exact."""
        f = np.asarray(frequencies, dtype=np.float64)
        d, p, q = self.domain_size, self.p, self.q
        rows = np.arange(1, d + 1)
        third = (rows[:, None] ^ rows[None, :]) - 1  # the item owning row (i+1) xor (j+1)
        owned = (third >= 0) & (third < d)  # (-1 on the diagonal: row 0 is nobody's)
        cov = np.where(owned, f[np.clip(third, 0, d - 1)], 0.0) * ((2.0 * p - 1.0) / 4.0)
        np.fill_diagonal(cov, f * p * (1 - p) + (1 - f) * q * (1 - q))
        return np.asarray(cov / (n * (p - q) ** 2))

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {"K": self.K, "keep": hex64(self.keep_threshold)}

    @classmethod
    def portable_item(cls, derived: Derived, d: int, x: int, words: Words) -> bytes:
        """``c = below(K)``; if ``coin(keep)`` disagrees with c being in ``C_x``, flip
        ``c ^= lowbit(x + 1)``: a uint32."""
        row = x + 1
        c = words.below(int(derived["K"]))
        keep = words.coin(derived["keep"])
        inside = (row & c).bit_count() % 2 == 0
        if inside != keep:
            c ^= row & -row
        return c.to_bytes(4, "little")

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """Every column's count against its probability."""
        _, probs = self.output_probabilities(int(value))
        counts = np.bincount(reports.astype(np.int64), minlength=self.K)
        return [("column", *chi2(counts, probs), "")]
