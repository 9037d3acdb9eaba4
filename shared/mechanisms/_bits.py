"""Packed bit vectors: the report layout of unary encoding and subset selection.

A d-bit vector travels as ``ceil(d / 8)`` bytes in *little bit order*: bit ``j`` of the
vector is bit ``j % 8`` (value ``1 << (j % 8)``) of byte ``j // 8``, and the padding
bits ``d .. 8 * ceil(d / 8) - 1`` of the last byte are zero. This is
``numpy.packbits(bits, axis=-1, bitorder="little")``.

The collector counts, for every column j, how many reports have bit j set. Unpacking
10^6 reports of 1024 bits would write 10^9 bytes, so :func:`column_counts` counts in
place with SWAR ("SIMD within a register"): rows are viewed as 64-bit words (narrower
for short rows); for each bit position ``j`` in 0..7, ``(w >> j) & 0x0101010101010101``
leaves one bit per byte lane, and summing at most 255 rows of that cannot carry from
one lane into the next. Each lane of the sum then holds the count of bit ``j`` of its
byte over those rows. Perturbation draws its uniform integers as raw 64-bit words
(:func:`rng_words`: the AES keystream of production's generator, else the bit generator's
``random_raw``), faster than ``Generator.random`` or ``integers``; the samplers that fill
these vectors are in ``_lanes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..randomness import KeyedGenerator

BitMatrix = npt.NDArray[np.uint8]

_RUN = 255  # rows summed per byte lane before it could overflow
_LANE_WORDS = 256  # words side by side: 255 layers of 2 KB (0.5 MB, in L2) per step


def packed_size(bits: int) -> int:
    """Bytes needed for ``bits`` bits: ``ceil(bits / 8)``."""
    return (bits + 7) // 8


def pack_rows(bits: npt.NDArray[np.bool_]) -> BitMatrix:
    """Pack a boolean (n, d) matrix into (n, ceil(d / 8)) bytes, little bit order."""
    return np.packbits(bits, axis=-1, bitorder="little")


def unpack_rows(packed: npt.NDArray[np.uint8], bits: int) -> npt.NDArray[np.bool_]:
    """The inverse of :func:`pack_rows`: an (n, bits) boolean matrix."""
    return np.unpackbits(packed, axis=-1, count=bits, bitorder="little").astype(np.bool_)


def bit(packed: npt.NDArray[np.uint8], index: int) -> npt.NDArray[np.bool_]:
    """Bit ``index`` of each packed row (bit i is bit ``i % 8`` of byte ``i // 8``)."""
    return np.asarray((np.asarray(packed)[:, index // 8] >> (index % 8)) & 1 == 1)


class BitmapReports:
    """What the oracles whose reports are packed bitmaps over the items (unary encodings,
    subset selection) share: a report supports the items whose bits it sets."""

    domain_size: int

    @property
    def report_dtype(self) -> np.dtype[Any]:
        return bitmap_dtype(self.domain_size)

    @property
    def distinct_reports(self) -> int:
        return 1 << self.domain_size  # every bitmap

    def supports(self, value: Any, reports: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        return bit(np.asarray(reports), int(value))

    def report_bits(self, reports: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
        """The reports as an (n, d) boolean matrix."""
        return unpack_rows(reports.reshape(len(reports), -1), self.domain_size)

    def _sums(self, reports: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        return column_counts(reports, self.domain_size).astype(np.float64)


def padding_is_zero(packed: npt.NDArray[np.uint8], bits: int) -> npt.NDArray[np.bool_]:
    """Per row: are the padding bits beyond ``bits`` in the last byte all zero?"""
    n = packed.shape[0]
    spare = 8 * packed.shape[1] - bits
    if spare == 0 or packed.shape[1] == 0:
        return np.ones(n, dtype=np.bool_)
    mask = np.uint8((0xFF << (8 - spare)) & 0xFF)
    return np.asarray((packed[:, -1] & mask) == 0)


def _word_view(packed: npt.NDArray[np.uint8]) -> npt.NDArray[Any]:
    """View contiguous rows as the widest unsigned words that divide the row length."""
    nbytes = packed.shape[1]
    rows = np.ascontiguousarray(packed)
    for width, dtype in ((8, np.uint64), (4, np.uint32), (2, np.uint16)):
        if nbytes % width == 0:
            return rows.view(dtype)
    return rows


def row_popcounts(packed: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """Number of set bits in each row of a 2-D unsigned array (packed bytes or words)."""
    if packed.shape[1] == 0:
        return np.zeros(packed.shape[0], dtype=np.int64)
    words = _word_view(packed) if packed.dtype == np.uint8 else packed
    most = 8 * words.dtype.itemsize * words.shape[1]  # bits in a row
    wide = np.uint16 if most < 1 << 16 else np.uint32 if most < 1 << 32 else np.int64
    # einsum sums a row's byte counts several times faster than sum(axis=1).
    counts: Any = np.einsum("ij->i", np.bitwise_count(words), dtype=wide)
    return np.asarray(counts, dtype=np.int64)


def column_counts(packed: npt.NDArray[np.uint8], bits: int) -> npt.NDArray[np.int64]:
    """How many of the rows ``packed`` (n, ceil(bits / 8), little bit order) have each of
    bits ``0 .. bits - 1`` set (SWAR, no unpacking).

    Rows are viewed as the widest unsigned words dividing their length, and
    ``_LANE_WORDS`` words' worth of rows are laid side by side, 255 such layers deep,
    so that each sum runs down 255 rows along a long contiguous axis. The result does
    not depend on the host's byte order: every byte lane only ever holds bits of the
    same byte.
    """
    n, nbytes = packed.shape
    # Long rows of a length that is not a multiple of 8 are copied, a block at a time,
    # into zero-padded rows of 64-bit words; others are viewed in place.
    pad = nbytes > 8 and nbytes % 8 != 0
    row_bytes = -(-nbytes // 8) * 8 if pad else nbytes
    lane_counts = np.zeros((8, row_bytes), dtype=np.int64)  # [j, byte]: rows with bit j set
    if n == 0 or nbytes == 0:
        return np.zeros(bits, dtype=np.int64)
    words = _word_view(packed) if not pad else np.zeros((0, row_bytes // 8), dtype=np.uint64)
    nwords = words.shape[1]
    ones = words.dtype.type(int.from_bytes(b"\x01" * words.dtype.itemsize, "little"))
    side = max(1, _LANE_WORDS // nwords)  # rows side by side in one layer
    block = _RUN * side
    scratch = np.empty(block * nwords, dtype=words.dtype)
    padded = np.zeros((block, row_bytes), dtype=np.uint8) if pad else None

    def rows(start: int, stop: int) -> npt.NDArray[Any]:
        if padded is None:
            return words[start:stop]
        padded[: stop - start, :nbytes] = packed[start:stop]
        return padded[: stop - start].view(np.uint64)

    def add_layers(layers: npt.NDArray[Any]) -> None:
        # layers: (at most 255, k * nwords) words; each byte lane sums at most 255 bits.
        tmp = scratch[: layers.size].reshape(layers.shape)
        for j in range(8):
            np.right_shift(layers, j, out=tmp, dtype=words.dtype)
            np.bitwise_and(tmp, ones, out=tmp)
            lanes = tmp.sum(axis=0, dtype=words.dtype).view(np.uint8).reshape(-1, row_bytes)
            lane_counts[j] += lanes.sum(axis=0, dtype=np.int64)

    full = n // block
    for b in range(full):
        add_layers(rows(b * block, (b + 1) * block).reshape(_RUN, side * nwords))
    for start in range(full * block, n, _RUN):
        add_layers(rows(start, min(start + _RUN, n)))
    # Column byte * 8 + j is lane_counts[j, byte].
    return np.ascontiguousarray(lane_counts.T).reshape(-1)[:bits]


def bitmap_dtype(bits: int) -> np.dtype[Any]:
    """The report dtype of a packed ``bits``-bit vector: ``ceil(bits / 8)`` uint8."""
    return np.dtype((np.uint8, (packed_size(bits),)))


def all_bit_vectors(bits: int) -> npt.NDArray[np.bool_]:
    """Every ``bits``-bit vector, as rows of a (2**bits, bits) boolean matrix.

    Row ``i`` is the binary expansion of ``i`` with bit ``j`` in column ``j``.
    """
    index = np.arange(1 << bits, dtype=np.int64)[:, None]
    return np.asarray((index >> np.arange(bits, dtype=np.int64)) & 1, dtype=np.bool_)


def threshold64_floor(probability: float) -> int:
    """Largest T with ``T / 2**64 <= probability`` (at most ``2**64 - 1``)."""
    return max(0, min(2**64 - 1, math.floor(probability * 2**64)))


def rng_words(rng: np.random.Generator) -> Callable[[int], npt.NDArray[np.uint64]]:
    """``rng``'s raw 64-bit words, ``words(count)``: a :class:`~ldpkit.randomness.KeyedGenerator`'s
    AES keystream, else the words of its bit generator (fast, exact)."""
    if isinstance(rng, KeyedGenerator):
        return rng.words
    raw = rng.bit_generator.random_raw

    def words(count: int) -> npt.NDArray[np.uint64]:
        return np.asarray(raw(count), dtype=np.uint64)

    return words


def uniform_u64(rng: np.random.Generator, count: int) -> npt.NDArray[np.uint64]:
    """``count`` uniform 64-bit integers: the next ``count`` of :func:`rng_words`."""
    return rng_words(rng)(count)


_UINT32 = 0xFFFFFFFF
_UINT64 = (1 << 64) - 1
_DOUBLE = 1.0 / 9007199254740992.0  # 2**-53


class OneDraws:
    """The draws of one report as Python numbers, with no numpy call but the bit
    generator's: the same words, in the same order and to the same values, as the
    vectorised samplers take from ``rng`` for a batch of one.

    - :meth:`u64` is ``uniform_u64(rng, 1)[0]`` (:func:`rng_words`: a
      :class:`~ldpkit.randomness.KeyedGenerator`'s AES keystream, else the bit generator),
      :meth:`u64s` the next ``count`` of them;
    - :meth:`random` is ``rng.random()``: numpy's double, ``(next64 >> 11) * 2**-53``;
    - :meth:`integers` is ``rng.integers(0, high)``: numpy's Lemire sampler, on 32-bit
      halves of the bit generator's words (low half first) when ``high - 1 < 2**32``.

    ``rng`` must hold no half-used word (``has_uint32`` clear: a new or re-keyed
    generator, as the client uses for every report); the half kept back by
    :meth:`integers` stays here, so ``rng`` is spent after this report.
    """

    __slots__ = ("_half", "_raw", "_words")

    def __init__(self, rng: np.random.Generator) -> None:
        self._words = rng.words if isinstance(rng, KeyedGenerator) else None
        self._raw: Callable[[], int] = rng.bit_generator.random_raw
        self._half: int | None = None

    def u64(self) -> int:
        if self._words is not None:
            return int(self._words(1)[0])
        return self._raw()

    def u64s(self, count: int) -> list[int]:
        """The next ``count`` of :meth:`u64`, in one call (no word read ahead)."""
        # (casts by name: evaluating list[int] here would cost a microsecond a call)
        if self._words is not None:
            return cast("list[int]", self._words(count).tolist())
        many = cast("Callable[[int], npt.NDArray[np.uint64]]", self._raw)
        return cast("list[int]", many(count).tolist())

    def random(self) -> float:
        return (self._raw() >> 11) * _DOUBLE

    def _u32(self) -> int:
        half = self._half
        if half is not None:
            self._half = None
            return half
        word = self._raw()
        self._half = word >> 32
        return word & _UINT32

    def integers(self, high: int) -> int:
        """Uniform on ``0 .. high - 1`` (``high >= 1``), as ``rng.integers(0, high)``."""
        span = high - 1
        if span == 0:
            return 0
        if span < _UINT32:
            excl = span + 1
            m = self._u32() * excl
            if m & _UINT32 < excl:
                threshold = (_UINT32 - span) % excl
                while m & _UINT32 < threshold:
                    m = self._u32() * excl
            return m >> 32
        if span == _UINT32:
            return self._u32()
        if span == _UINT64:
            return self._raw()
        excl = span + 1
        m = self._raw() * excl
        if m & _UINT64 < excl:
            threshold = (_UINT64 - span) % excl
            while m & _UINT64 < threshold:
                m = self._raw() * excl
        return m >> 64
