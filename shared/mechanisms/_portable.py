"""The word primitives of the portable sampling rules (docs/protocol.md).

Every mechanism states its portable rule (:meth:`Mechanism.portable_report`) with these:
one report at a time, on a stream of uniform 32-bit words, using only integer
arithmetic, IEEE-754 double ``+ - * /``, ``floor`` and comparisons. ``ldpkit.portable``
is the framework that runs them; this module is what the mechanism modules share (they
cannot import ``ldpkit.portable``, which finds them through the registry).

Primitives (``words`` yields uint32):

- ``u64()``: ``lo + 2**32 * hi`` of the next two words (``lo`` first);
- ``coin(T)``: ``u64() < T`` for a 64-bit threshold ``T`` (served as 16 hex digits);
  true with probability exactly ``T / 2**64``;
- ``uniform()``: ``(u64() >> 11) / 2**53``, a multiple of ``2**-53`` in [0, 1);
- ``below(n)`` (``1 <= n <= 2**32``): draw a word ``w`` until ``w < 2**32 - 2**32 mod n``
  and answer ``w mod n`` (exactly uniform).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..errors import ParameterError

TWO32 = 1 << 32
TWO64 = 1 << 64
WordSource = Callable[[], int]
"""Yields the next uniform 32-bit word."""
Derived = Mapping[str, Any]
"""A served definition's ``derived`` object (or a nested oracle's part of it)."""


def hex64(threshold: int) -> str:
    """A 64-bit threshold as served: 16 lowercase hex digits."""
    if not 0 <= threshold < TWO64:
        raise ParameterError(f"threshold {threshold} is not a 64-bit value")
    return f"{threshold:016x}"


def ceil64(probability: float) -> int:
    """Smallest T with ``T / 2**64 >= probability`` (exact: a float times 2**64 is exact)."""
    return min(TWO64 - 1, math.ceil(probability * TWO64))


def dyadic53(probability: float) -> int:
    """``T`` with ``coin(T)`` equal to ``uniform() < probability`` (numpy's coin)."""
    return math.ceil(probability * 2.0**53) << 11


class Words:
    """The primitives of the module docstring over a source of 32-bit words."""

    def __init__(self, source: WordSource) -> None:
        self._next = source
        self.used = 0

    def word(self) -> int:
        w = int(self._next())
        if not 0 <= w < TWO32:
            raise ParameterError(f"a word must be a 32-bit unsigned integer, got {w}")
        self.used += 1
        return w

    def u64(self) -> int:
        lo = self.word()
        return lo + (self.word() << 32)

    def coin(self, threshold: str) -> bool:
        return self.u64() < int(threshold, 16)

    def uniform(self) -> float:
        return (self.u64() >> 11) / 2.0**53

    def below(self, n: int) -> int:
        return below_any(self, n)  # one word a draw for n <= 2**32


def word_list(words: list[int]) -> WordSource:
    """A word source over a fixed list (test vectors); running out is an error."""
    it: Iterator[int] = iter(words)

    def take() -> int:
        try:
            return next(it)
        except StopIteration:
            raise ParameterError("the word stream ran out") from None

    return take


def os_words() -> WordSource:
    """Words from the OS CSPRNG (how a device runs the rules)."""
    return lambda: int.from_bytes(os.urandom(4), "little")


def bounded(definition: Mapping[str, Any], value: Any) -> tuple[float, float, float]:
    """``(lo, hi, x)``: a served definition's bounds and the number clipped to them."""
    lo, hi = (float(b) for b in definition["bounds"])
    return lo, hi, min(max(float(value), lo), hi)


def unit(lo: float, hi: float, x: float) -> float:
    """x on the unit scale ``[-1, 1]`` of the bounds."""
    half = (hi - lo) / 2.0
    return min(max((x - lo) / half - 1.0, -1.0), 1.0)


def rr_item(keep: str, d: int, x: int, w: Words) -> int:
    """d-ary randomized response: x if ``coin(keep)``, else one of the other d - 1."""
    if w.coin(keep):
        return x
    other = w.below(d - 1)
    return other + (other >= x)


def bitmap(bits: list[bool]) -> bytes:
    """Bits packed in little bit order (bit j is ``1 << (j % 8)`` of byte ``j // 8``)."""
    out = bytearray((len(bits) + 7) // 8)
    for j, b in enumerate(bits):
        if b:
            out[j >> 3] |= 1 << (j & 7)
    return bytes(out)


def splitmix64(seed: int, count: int, first: int = 0) -> list[int]:
    """Outputs ``first .. first + count - 1`` of SplitMix64 from ``seed`` (output i alone
    depends on i, so a row's words need not compute the rows before it)."""
    out = []
    for i in range(first, first + count):
        z = (seed + (i + 1) * 0x9E3779B97F4A7C15) % TWO64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % TWO64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % TWO64
        out.append(z ^ (z >> 31))
    return out


def below_any(w: Words, n: int) -> int:
    """``below(n)`` for any ``n >= 1``: ``W`` words (the first least significant) make
    a number below ``2**(32 W) >= n``, drawn again at or above the largest multiple of
    n there (for ``n <= 2**32`` this is ``below``)."""
    count = max(1, -(-(n - 1).bit_length() // 32))
    span = 1 << (32 * count)
    limit = span - span % n
    while True:
        value = 0
        for i in range(count):
            value |= w.word() << (32 * i)
        if value < limit:
            return value % n


def bernoulli(w: Words, x: int, q: int) -> bool:
    """True with probability ``x / q`` (``0 <= x <= q``); no word when it is 0 or 1."""
    if x <= 0:
        return False
    return x >= q or below_any(w, q) < x


def taylor_bernoulli(w: Words, x: int, q: int) -> bool:
    """True with probability ``exp(-x / q)`` for ``0 <= x <= q`` (Canonne, Kamath, Steinke
    2020, Algorithm 1): ``k = 1``; while ``bernoulli(x, q)`` and ``bernoulli(1, k)``:
    ``k += 1``; true iff k ends odd (``Pr[k > j] = (x / q)^j / j!``)."""
    k = 1
    while bernoulli(w, x, q) and bernoulli(w, 1, k):
        k += 1
    return k % 2 == 1


def exp_bernoulli(w: Words, x: int, q: int) -> bool:
    """True with probability ``exp(-x / q)`` for integers ``x >= 0``, ``q >= 1``:
    ``floor(x / q)`` coins of ``e^-1`` (stopping at the first false), then the coin of
    the remainder."""
    whole, rest = divmod(x, q)
    for _ in range(whole):
        if not taylor_bernoulli(w, 1, 1):
            return False
    return taylor_bernoulli(w, rest, q)


def discrete_laplace(t: int, w: Words) -> int:
    """``Pr[Z = z] ∝ exp(-|z| / t)`` (CKS Algorithm 2 with s = 1)."""
    while True:
        u = below_any(w, t)
        if not taylor_bernoulli(w, u, t):
            continue
        v = 0
        while taylor_bernoulli(w, 1, 1):
            v += 1
        x = u + t * v
        negative = below_any(w, 2) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def discrete_gaussian(t: int, m: int, w: Words) -> int:
    """``Pr[Z = z] ∝ exp(-z^2 / (2 t m))`` (CKS Algorithm 3): a discrete Laplace of scale
    t, kept with probability ``exp(-(|Z| - m)^2 / (2 t m))``."""
    while True:
        z = discrete_laplace(t, w)
        b = abs(abs(z) - m)
        if exp_bernoulli(w, b * b, 2 * t * m):
            return z
