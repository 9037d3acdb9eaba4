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
Bits are drawn by comparing uniform integers from the bit generator with fixed
thresholds: the non-true bits are 1 with probability ``ceil(q 2^32) / 2^32`` and the
true bit with probability ``floor(p 2^64) / 2^64``. Both roundings (below 2.4e-10)
can only lower the likelihood ratio, so the sampler never exceeds ``eps``.

References
----------
U. Erlingsson, V. Pihur, A. Korolova, "RAPPOR: Randomized aggregatable
privacy-preserving ordinal response", ACM CCS 2014.

T. Wang, J. Blocki, N. Li, S. Jha, "Locally differentially private protocols for
frequency estimation", USENIX Security 2017 (SUE and OUE, pure protocols).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from . import _bits
from .base import BoolArray, FloatArray, FrequencyOracle, IntArray

# Bits randomized per step of perturb: 32 bits of randomness each, about 4 MB.
_CHUNK_BITS = 1 << 20
# output_probabilities enumerates 2^d vectors; refuse beyond this.
MAX_ENUMERATED_BITS = 16


@dataclass(frozen=True, kw_only=True)
class _UnaryEncoding(FrequencyOracle):
    """Shared machinery of SUE and OUE; subclasses give (p, q)."""

    @property
    def report_dtype(self) -> np.dtype[Any]:
        return _bits.bitmap_dtype(self.domain_size)

    @property
    def report_rule(self) -> str:
        nbytes = _bits.packed_size(self.domain_size)
        return (
            f"{nbytes} bytes holding {self.domain_size} bits in little bit order, "
            "with the padding bits of the last byte zero"
        )

    def _perturb(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
        d = self.domain_size
        n = values.size
        out = np.empty((n, _bits.packed_size(d)), dtype=np.uint8)
        other = np.uint32(_bits.threshold32_ceil(self.q))
        true = np.uint64(_bits.threshold64_floor(self.p))
        rows = max(1, _CHUNK_BITS // d)
        for start in range(0, n, rows):
            x = values[start : start + rows]
            m = x.size
            bits = _bits.uniform_u32(rng, m * d).reshape(m, d) < other
            bits[np.arange(m), x] = _bits.uniform_u64(rng, m) < true
            out[start : start + m] = _bits.pack_rows(bits)
        return out

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return _bits.padding_is_zero(reports, self.domain_size)

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        return _bits.column_counts(reports, self.domain_size).astype(np.float64)

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


@dataclass(frozen=True, kw_only=True)
class SymmetricUnaryEncoding(_UnaryEncoding):
    """Symmetric unary encoding (SUE, basic one-time RAPPOR).

    Every bit of the one-hot vector is kept with probability
    ``p = e^(eps/2) / (e^(eps/2) + 1)`` and flipped otherwise, so ``q = 1 - p``.

    Parameters
    ----------
    epsilon : float
        The privacy parameter, > 0.
    domain_size : int
        The number of items d; a report is ``ceil(d / 8)`` bytes.

    References
    ----------
    U. Erlingsson, V. Pihur, A. Korolova, "RAPPOR", ACM CCS 2014.
    """

    name: ClassVar[str] = "sue"

    def _support_probabilities(self) -> tuple[float, float]:
        half = math.exp(-self.epsilon / 2.0)
        p = 1.0 / (1.0 + half)
        q = half / (1.0 + half)
        return p, q


@dataclass(frozen=True, kw_only=True)
class OptimizedUnaryEncoding(_UnaryEncoding):
    """Optimized unary encoding (OUE).

    The true bit is 1 with probability ``p = 1/2``; every other bit is 1 with
    probability ``q = 1 / (e^eps + 1)``. This minimizes the variance at f = 0 among
    unary encodings: ``4 e^eps / (n (e^eps - 1)^2)``.

    Parameters
    ----------
    epsilon : float
        The privacy parameter, > 0.
    domain_size : int
        The number of items d; a report is ``ceil(d / 8)`` bytes.

    References
    ----------
    T. Wang, J. Blocki, N. Li, S. Jha, "Locally differentially private protocols for
    frequency estimation", USENIX Security 2017, section 4.4.
    """

    name: ClassVar[str] = "oue"

    def _support_probabilities(self) -> tuple[float, float]:
        return 0.5, 1.0 / (math.exp(self.epsilon) + 1.0)
