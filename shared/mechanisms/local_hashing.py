"""Optimized local hashing (OLH).

Each user hashes the item into ``g`` buckets with a hash function of their own, runs
``g``-ary randomized response on the bucket, and sends the hash key with the result.
A report supports item v when v hashes to the reported bucket. With
``g = e^eps + 1`` (rounded to the better neighbouring integer) the variance at f = 0 is
about ``4 e^eps / (n (e^eps - 1)^2)``, as low as OUE's, with 20-byte reports.

Hash family (protocol v1)
-------------------------
Any client, in any language, must reproduce this exactly. All arithmetic is on
unsigned 64-bit integers, wrapping modulo 2^64.

1. Draw ``a`` and ``b`` uniformly from ``[0, 2^64)`` (fresh for every report).
2. For an item ``v`` (``0 <= v < 2^32``), ``h(v) = ((a * v + b) mod 2^64) >> 32``, a
   32-bit value. This is Dietzfelbinger's multiply-add-shift scheme, strongly universal
   from 32-bit keys onto 32-bit values: for ``v != w`` and uniform ``(a, b)``, the pair
   ``(h(v), h(w))`` is uniform on ``[2^32]^2``.
3. ``bucket(v) = (h(v) * g) >> 32``, Lemire's multiply-shift range reduction onto
   ``[0, g)`` (no overflow since ``h(v) < 2^32`` and ``g <= 2^32``). Bucket ``y`` holds
   the hash values ``[ceil(y 2^32 / g), ceil((y + 1) 2^32 / g))``, so every bucket has
   probability ``1/g`` up to ``2^-32``.
4. With probability ``p = e^eps / (e^eps + g - 1)`` report ``y = bucket(x)``; otherwise
   report one of the other ``g - 1`` buckets uniformly.

The bucket count ``g`` is part of the protocol and follows from epsilon alone: of
``floor(e^eps + 1)`` and ``ceil(e^eps + 1)``, each clipped to ``[2, 2^32]``, take the one
with the smaller ``q (1 - q) / (p - q)^2`` (``q = 1/g``, ``p = e^eps / (e^eps + g - 1)``),
the smaller on a tie. For example eps = 0.5, 1, 2, 4 give g = 3, 4, 8, 56.

Test vector (from ``tests/shared/test_categorical_internals.py``)::

    a = 0x9E3779B97F4A7C15    b = 0x0123456789ABCDEF    g = 5

    v             h(v)          bucket(v)
    0             0x01234567    0
    1             0x9F5ABF21    3
    2             0x3D9238DA    1
    3             0xDBC9B294    4
    4             0x7A012C4D    2
    5             0x1838A607    0
    1000          0x09D6C200    0
    4294967295    0xE23647C3    4

Wire format
-----------
A report is the packed little-endian record ``a: u64, b: u64, y: u32`` (20 bytes). It
is well-formed iff ``y < g``; every ``(a, b)`` is possible.

Privacy: given ``(a, b)``, which are independent of the true item, ``y`` is g-ary
randomized response on ``bucket(x)``, whose likelihood ratio is exactly ``e^eps``.

Aggregation
-----------
``bucket(v) = y`` iff ``lo_y <= h(v) < hi_y`` with ``lo_y = ceil(y 2^32 / g)``, that is
iff ``((a v + b - (lo_y << 32)) mod 2^64) < ((hi_y - lo_y) << 32)``. The collector
walks ``v = 0 .. d - 1`` adding ``a`` at each step (no multiplications), over reports in
cache-sized chunks: a compare, a count and an add per (report, item).

References
----------
T. Wang, J. Blocki, N. Li, S. Jha, "Locally differentially private protocols for
frequency estimation", USENIX Security 2017, section 4.4 (OLH).

M. Dietzfelbinger, "Universal hashing and k-wise independent random variables via
integer arithmetic without primes", STACS 1996; M. Thorup, "High speed hashing for
integers and strings", arXiv:1504.06804 (multiply-add-shift).

D. Lemire, "Fast random integer generation in an interval", ACM TOMACS 2019.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .. import screening
from ..errors import ParameterError
from ..screening import Finding
from . import _bits
from ._conformance import categorical_cases, chi2, rr_probabilities
from ._portable import TWO64, Derived, Words, hex64, rr_item
from .base import BoolArray, FloatArray, FrequencyOracle, IntArray, LawTest, PlanCase, Reports

REPORT_DTYPE = np.dtype([("a", "<u8"), ("b", "<u8"), ("y", "<u4")])
"""One OLH report: the hash key (a, b) and the reported bucket y (20 bytes, packed)."""

MAX_BUCKETS = 2**32
# Reports processed together by the aggregation walk (three uint64 arrays in cache).
_AGGREGATE_CHUNK = 1 << 15
# output_probabilities lists every bucket; refuse beyond this.
MAX_ENUMERATED_BUCKETS = 1 << 16

_U32 = np.uint64(32)


def bucket(values: npt.ArrayLike, a: npt.ArrayLike, b: npt.ArrayLike, g: int) -> Any:
    """The OLH bucket of each value under hash keys ``(a, b)``: ``(h(v) * g) >> 32``.

    Parameters
    ----------
    values : array_like of int
        Items, each in ``[0, 2^32)``.
    a, b : array_like of uint64
        Hash keys, broadcast against ``values``.
    g : int
        Number of buckets, ``2 <= g <= 2^32``.

    Returns
    -------
    ndarray of uint64
        ``bucket(v) = (((a v + b) mod 2^64) >> 32) * g >> 32``, in ``[0, g)``.
    """
    v = np.atleast_1d(np.asarray(values)).astype(np.uint64)
    a64 = np.atleast_1d(np.asarray(a, dtype=np.uint64))
    b64 = np.atleast_1d(np.asarray(b, dtype=np.uint64))
    h = (a64 * v + b64) >> _U32
    return (h * np.uint64(g)) >> _U32


def olh_bucket(v: int, a: int, b: int, g: int) -> int:
    """:func:`bucket` of one item, in Python integers (the portable rule)."""
    h = ((a * v + b) % TWO64) >> 32
    return (h * g) >> 32


def bucket_bounds(
    y: npt.ArrayLike, g: int
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """Hash values in bucket ``y`` (``y < g``): ``[lo, hi)`` with ``lo = ceil(y 2^32 / g)``."""
    y64 = np.asarray(y, dtype=np.uint64)
    g64 = np.uint64(g)
    # y 2^32 + g - 1 <= 2^64 - 1 for y < g <= 2^32: no overflow.
    lo = ((y64 << _U32) + (g64 - np.uint64(1))) // g64
    last = y64 + np.uint64(1) == g64
    # hi is lo of y + 1, and 2^32 for the last bucket (where y + 1 = g may be 2^32).
    nxt = np.where(last, np.uint64(0), y64 + np.uint64(1))
    hi = np.where(last, np.uint64(1) << _U32, ((nxt << _U32) + (g64 - np.uint64(1))) // g64)
    return lo, hi


def _olh_variance(epsilon: float, g: int) -> float:
    p = 1.0 / (1.0 + (g - 1) * math.exp(-epsilon))
    q = 1.0 / g
    return q * (1.0 - q) / (p - q) ** 2


def optimal_buckets(epsilon: float) -> int:
    """The bucket count g in {floor, ceil}(e^eps + 1) of smaller variance at f = 0."""
    target = math.exp(epsilon) + 1.0
    candidates = {min(MAX_BUCKETS, max(2, c)) for c in (math.floor(target), math.ceil(target))}
    return min(sorted(candidates), key=lambda g: _olh_variance(epsilon, g))


@dataclass(frozen=True, kw_only=True)
class OptimizedLocalHashing(FrequencyOracle):
    """Optimized local hashing (OLH): g-ary randomized response on a per-user hash.

    ``g`` is chosen from ``e^eps + 1`` (see :func:`optimal_buckets`);
    ``p = e^eps / (e^eps + g - 1)`` and ``q = 1 / g``. The hash family and the report
    layout are specified in the module docstring.
    """

    name: ClassVar[str] = "olh"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = categorical_cases("olh", (0.5, 1.5, 2.0))
    report_dtype = REPORT_DTYPE

    g: int = field(init=False)

    def _support_probabilities(self) -> tuple[float, float]:
        g = optimal_buckets(self.epsilon)
        self._set(g=g)
        return 1.0 / (1.0 + (g - 1) * math.exp(-self.epsilon)), 1.0 / g

    @property
    def report_rule(self) -> str:
        return f"a record (a: u64, b: u64, y: u32) with bucket y in 0..{self.g - 1}"

    def _respond(
        self,
        values: IntArray,
        a: npt.NDArray[np.uint64],
        b: npt.NDArray[np.uint64],
        rng: np.random.Generator,
    ) -> npt.NDArray[Any]:
        """Reports for ``values`` under the given hash keys (randomized response on y)."""
        n = values.size
        true = bucket(values, a, b, self.g)
        keep = _bits.uniform_u64(rng, n) < np.uint64(self.keep_threshold)
        other = rng.integers(0, self.g - 1, size=n, dtype=np.uint64)
        other += other >= true
        out = np.empty(n, dtype=REPORT_DTYPE)
        out["a"] = a
        out["b"] = b
        out["y"] = np.where(keep, true, other)
        return out

    def _perturb(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[Any]:
        n = values.size
        a = _bits.uniform_u64(rng, n)
        return self._respond(values, a, _bits.uniform_u64(rng, n), rng)

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """:meth:`_perturb` of one value, in Python integers (the same words, the same bytes)."""
        draws = _bits.OneDraws(rng)
        a = draws.u64()
        b = draws.u64()
        true = olh_bucket(int(value), a, b, self.g)
        keep = draws.u64() < self.keep_threshold
        other = draws.integers(self.g - 1)
        y = true if keep else other + (other >= true)
        return struct.pack("<QQI", a, b, y)

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return np.asarray(reports["y"].astype(np.uint64) < np.uint64(self.g))

    def screen_reports(self, reports: npt.NDArray[Any], alpha: float) -> Finding | None:
        """Flat keys: a multiplier ``a`` within ``A = 2^64 // (g d)`` of 0 (mod 2^64) moves
        ``a v + b`` by less than ``2^64 / g`` over the domain, so every item hashes into at
        most two buckets (a report then supports all of them or none: a forger's a = 0).
        Honest keys are uniform whatever the input: such an ``a`` has probability
        ``(2 A - 1) / 2^64`` exactly, and a batch's count of them is Bin(m, that)."""
        limit = 2**64 // (self.g * self.domain_size)
        a = np.asarray(reports["a"], dtype=np.uint64)
        flat = int(np.count_nonzero((a < np.uint64(limit)) | (a > np.uint64(2**64 - limit))))
        what = "a key hashing every item into at most two buckets is sent"
        rate = (2 * limit - 1) / 2.0**64
        return screening.rare(flat, len(reports), rate, alpha, "hash key", what)

    def supports(self, value: Any, reports: npt.ArrayLike) -> BoolArray:
        """Whether each report's bucket is ``value``'s under the report's own hash."""
        r = np.asarray(reports)
        return np.asarray(bucket(int(value), r["a"], r["b"], self.g) == r["y"].astype(np.uint64))

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        d = self.domain_size
        counts = np.zeros(d, dtype=np.int64)
        n = reports.shape[0]
        mask = np.empty(min(n, _AGGREGATE_CHUNK), dtype=np.bool_)
        for start in range(0, n, _AGGREGATE_CHUNK):
            chunk = reports[start : start + _AGGREGATE_CHUNK]
            m = chunk.shape[0]
            a = np.ascontiguousarray(chunk["a"], dtype=np.uint64)
            lo, hi = bucket_bounds(chunk["y"], self.g)
            # offset = a v + b - (lo << 32) at v = 0; supports v iff offset < width.
            offset = np.ascontiguousarray(chunk["b"], dtype=np.uint64) - (lo << _U32)
            width = (hi - lo) << _U32
            hit = mask[:m]
            for v in range(d):
                np.less(offset, width, out=hit)
                counts[v] += np.count_nonzero(hit)
                np.add(offset, a, out=offset)
        return counts.astype(np.float64)

    def output_probabilities(
        self, value: int, *, a: int, b: int
    ) -> tuple[npt.NDArray[Any], FloatArray]:
        """Every possible report for ``value`` under hash key ``(a, b)``, with its probability.

        The key itself is uniform and independent of ``value``, so the privacy of OLH
        is the privacy of this conditional distribution over ``y``.

        Parameters
        ----------
        value : int
            The true item.
        a, b : int
            The hash key, each in ``[0, 2^64)``.

        Returns
        -------
        reports : ndarray of REPORT_DTYPE, shape (g,)
            ``(a, b, y)`` for ``y = 0 .. g - 1``.
        probabilities : ndarray of float64, shape (g,)
            ``P(y | value, a, b)``.
        """
        if self.g > MAX_ENUMERATED_BUCKETS:
            raise ParameterError(
                f"output_probabilities lists all g buckets; g must be at most "
                f"{MAX_ENUMERATED_BUCKETS}, got {self.g} (epsilon too large)"
            )
        for key, k in (("a", a), ("b", b)):
            if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k < 2**64:
                raise ParameterError(f"hash key {key} must be an integer in [0, 2**64), got {k!r}")
        x = self._check_values(np.asarray([value]))
        true = int(bucket(x, a, b, self.g)[0])
        probs = np.full(self.g, (1.0 - self.p) / (self.g - 1))
        probs[true] = self.p
        reports = np.empty(self.g, dtype=REPORT_DTYPE)
        reports["a"] = a
        reports["b"] = b
        reports["y"] = np.arange(self.g)
        return reports, probs

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {"g": self.g, "keep": hex64(self.keep_threshold)}

    @classmethod
    def portable_item(cls, derived: Derived, d: int, x: int, words: Words) -> bytes:
        """``a = u64()``, ``b = u64()``, then g-ary RR on x's bucket: the record (a, b, y)."""
        g = int(derived["g"])
        a = words.u64()
        b = words.u64()
        y = rr_item(derived["keep"], g, olh_bucket(x, a, b, g), words)
        return a.to_bytes(8, "little") + b.to_bytes(8, "little") + y.to_bytes(4, "little")

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """The reported bucket relative to the value's under the report's own key, as
        g-ary randomized response; and each of the 128 bits of the keys (a, b) fair."""
        g = self.g
        a = reports["a"].astype(np.uint64)
        b = reports["b"].astype(np.uint64)
        true = bucket(int(value), a, b, g)
        shift = (reports["y"].astype(np.int64) - true.astype(np.int64)) % g
        relative = chi2(np.bincount(shift, minlength=g), rr_probabilities(g, self.p))
        out = [("bucket vs hash", *relative, "")]
        n = len(reports)
        keys = np.stack([a, b], axis=1).view(np.uint8).reshape(n, 16)
        ones = np.unpackbits(keys, axis=1).sum(axis=0).astype(np.float64)
        z2 = (ones - n / 2.0) ** 2 / (n / 4.0)
        out.append(("hash key bits", float(z2.sum()), 128, "each of the 128 bits of (a, b) fair"))
        return out
