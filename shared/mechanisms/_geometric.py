"""Geometric variates whose every probability is realized to a small relative error.

The discrete Laplace (:mod:`.laplace`) and the discrete Gaussian (:mod:`.gaussian`, as
its proposal) both need ``G`` with ``Pr[G = g] = (1 - a) a^g``, ``a = exp(-rate)``, for
rates far below 1, made from 53-bit uniforms. Plain inversion over millions of outcomes
would realize each of them only to an absolute error of ``2**-53``, a large relative
error in the tail. Instead ``G = L N + R`` with ``L = 2**J`` chosen so that ``a^L`` is in
(1/4, 1/2]: the J bits of R come in chunks of at most 16 bits, each an independent
truncated geometric (the geometric's binary digits factorize), and the block count N is
inverted up to tail probability about ``2**-12`` and, past it, started over
(memorylessness). An inverted outcome of probability P is hit by ``P 2**53`` uniforms up
to a few at its edges, and no inverted outcome has probability below about ``2**-18``,
so every probability of G is realized to a relative error of about ``2**-33`` (each
restart of N adds ~2**-38).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

_CHUNK_BITS = 16  # low part of a geometric: inversion over at most 2**16 values at a time
_TAIL_LOG2 = 12  # block count: inversion up to tail probability ~2**-12, then start over


@dataclass(frozen=True)
class SplitGeometric:
    """Sampler of ``Pr[G = g] = (1 - a) a^g``, g = 0, 1, ..., ``a = exp(-rate)``."""

    rate: float
    chunks: tuple[tuple[int, int, float, float], ...] = field(init=False, repr=False)
    """(offset, width, mu, norm) of each digit group of R."""
    block_bits: int = field(init=False, repr=False)
    block_mu: float = field(init=False, repr=False)
    block_cap: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        lam = float(self.rate)
        if not (math.isfinite(lam) and lam > 0):
            raise ValueError(f"rate must be finite and > 0, got {self.rate!r}")
        # Block L = 2**J with lam * L in [ln 2, 2 ln 2): a^L in (1/4, 1/2].
        bits = max(0, math.ceil(math.log2(math.log(2.0) / lam)))
        chunks: list[tuple[int, int, float, float]] = []
        offset = 0
        while offset < bits:
            width = min(_CHUNK_BITS, bits - offset)
            mu = lam * 2.0**offset  # ratio of this digit group: a^(2**offset)
            chunks.append((offset, width, mu, -math.expm1(-mu * 2.0**width)))
            offset += width
        block_mu = lam * 2.0**bits
        object.__setattr__(self, "rate", lam)
        object.__setattr__(self, "chunks", tuple(chunks))
        object.__setattr__(self, "block_bits", bits)
        object.__setattr__(self, "block_mu", block_mu)
        object.__setattr__(
            self, "block_cap", max(1, math.floor(_TAIL_LOG2 * math.log(2.0) / block_mu))
        )

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        """n independent draws of G."""
        g = np.zeros(n, dtype=np.int64)
        for offset, width, mu, norm in self.chunks:
            # Truncated geometric on 0 .. 2**width - 1 with ratio exp(-mu), by inversion.
            u = rng.random(n)
            part = np.floor(np.log1p(-u * norm) / -mu)
            np.minimum(part, 2.0**width - 1.0, out=part)
            g += part.astype(np.int64) << offset
        # Block count N ~ geometric with ratio rho = exp(-block_mu): values below the cap
        # by inversion; above it add the cap and draw again (N - cap | N >= cap ~ N).
        cap, mu = self.block_cap, self.block_mu
        blocks = np.zeros(n, dtype=np.int64)
        active: IntArray | None = None  # None: everyone
        while True:
            size = n if active is None else active.size
            if size == 0:
                break
            k = np.floor(np.log1p(-rng.random(size)) / -mu)
            over = k >= cap
            k[over] = cap
            if active is None:
                blocks += k.astype(np.int64)
                active = np.flatnonzero(over)
            else:
                blocks[active] += k.astype(np.int64)
                active = active[over]
        g += blocks << self.block_bits
        return g
