"""Subset selection (k-subset mechanism).

Each user reports a set of exactly ``k`` items. The true item is in it with probability
``p = k e^eps / (k e^eps + d - k)``; the rest of the set is filled with items drawn
uniformly without replacement from the other ``d - 1``. Every k-subset containing x is
equally likely, and so is every k-subset without x, with probabilities in ratio
``p (d - k) / ((1 - p) k) = e^eps``: the mechanism is eps-LDP, tightly.

A report supports item v when v is in the set. The true item is supported with
probability ``p``, any other item with
``q = p (k - 1) / (d - 1) + (1 - p) k / (d - 1)``, so the pure-protocol estimator applies.
``k`` is part of the protocol and follows from (eps, d): of ``floor(d / (e^eps + 1))``
and ``ceil(d / (e^eps + 1))``, each clipped to ``[1, d - 1]``, the one with the smaller
variance at f = 0, ``q (1 - q) / (p - q)^2``, the smaller on a tie. For example
(eps, d) = (1, 16), (1, 1024), (4, 1024) give k = 4, 275, 18. With k = 1 this is k-ary
randomized response; Ye and Barg show that k near ``d / (e^eps + 1)`` is order-optimal
for every eps.

Wire format
-----------
The set as a d-bit vector packed in little bit order into ``ceil(d / 8)`` bytes (as
unary encoding). Well-formed iff the padding bits are zero and exactly ``k`` bits are
set.

Sampling
--------
Whether x is in the set is decided by a 64-bit threshold ``floor(p 2^64)``. The other
members are drawn with Floyd's algorithm, vectorized over reports: for
``j = d - 1 - k' .. d - 2`` draw ``t`` uniform in ``[0, j]`` and add ``t`` unless it is
already in, else ``j``, where ``k'`` is k - 1 or k and the d - 1 other items are
numbered 0 .. d - 2 by letting item d - 1 stand in for x. That is ``k`` vectorized steps
per chunk of reports, whatever the number of reports.

References
----------
S. Wang, L. Huang, P. Wang, Y. Nie, H. Xu, W. Yang, X.-Y. Li, C. Qiao, "Mutual
information optimally local private discrete distribution estimation",
arXiv:1607.08025, 2016.

M. Ye, A. Barg, "Optimal schemes for discrete distribution estimation under locally
differential privacy", IEEE Trans. Inf. Theory 64(8), 2018.

J. Bentley, R. Floyd, "Programming pearls: a sample of brilliance", CACM 30(9), 1987.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from . import _bits
from .base import BoolArray, FloatArray, FrequencyOracle, IntArray

# Membership flags handled per perturb step (one byte each).
# Up to this many values at once (a device reporting) take the O(d) argpartition path.
_FEW_REPORTS = 16
_CHUNK_CELLS = 1 << 21
# Floyd steps whose random draws are made together (about 0.5 MB at 2048 rows).
_STEPS_PER_DRAW = 32
# output_probabilities lists every k-subset; refuse beyond this many.
MAX_ENUMERATED_SUBSETS = 1 << 16


def _support(epsilon: float, d: int, k: int) -> tuple[float, float]:
    # p = k e^eps / (k e^eps + d - k), written to stay finite for large epsilon.
    p = k / (k + (d - k) * math.exp(-epsilon))
    q = (p * (k - 1) + (1.0 - p) * k) / (d - 1)
    return p, q


def _variance_at_zero(epsilon: float, d: int, k: int) -> float:
    p, q = _support(epsilon, d, k)
    return q * (1.0 - q) / (p - q) ** 2


def optimal_subset_size(epsilon: float, domain_size: int) -> int:
    """The k in {floor, ceil}(d / (e^eps + 1)), clipped to [1, d - 1], of least variance."""
    d = domain_size
    target = d / (math.exp(epsilon) + 1.0)
    candidates = {min(d - 1, max(1, c)) for c in (math.floor(target), math.ceil(target))}
    return min(sorted(candidates), key=lambda k: _variance_at_zero(epsilon, d, k))


@dataclass(frozen=True, kw_only=True)
class SubsetSelection(FrequencyOracle):
    """Subset selection (SS): report a random k-subset that favours the true item.

    ``k`` is chosen from ``d / (e^eps + 1)`` (see :func:`optimal_subset_size`);
    ``p = k e^eps / (k e^eps + d - k)`` and
    ``q = p (k - 1) / (d - 1) + (1 - p) k / (d - 1)``.

    Parameters
    ----------
    epsilon : float
        The privacy parameter, > 0.
    domain_size : int
        The number of items d; a report is ``ceil(d / 8)`` bytes with k bits set.

    References
    ----------
    M. Ye, A. Barg, "Optimal schemes for discrete distribution estimation under locally
    differential privacy", IEEE Trans. Inf. Theory 2018.
    """

    name: ClassVar[str] = "ss"

    k: int = field(init=False)

    def _support_probabilities(self) -> tuple[float, float]:
        k = optimal_subset_size(self.epsilon, self.domain_size)
        object.__setattr__(self, "k", k)
        return _support(self.epsilon, self.domain_size, k)

    @property
    def report_dtype(self) -> np.dtype[Any]:
        return _bits.bitmap_dtype(self.domain_size)

    @property
    def report_rule(self) -> str:
        nbytes = _bits.packed_size(self.domain_size)
        return (
            f"{nbytes} bytes holding {self.domain_size} bits in little bit order with "
            f"exactly {self.k} bits set and the padding bits of the last byte zero"
        )

    def _perturb(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
        if values.size <= _FEW_REPORTS:
            return self._perturb_few(values, rng)
        d, k = self.domain_size, self.k
        n = values.size
        out = np.empty((n, _bits.packed_size(d)), dtype=np.uint8)
        threshold = np.uint64(_bits.threshold64_floor(self.p))
        rows = max(1, _CHUNK_CELLS // d)
        member = np.zeros(rows * d, dtype=np.bool_)
        for start in range(0, n, rows):
            x = values[start : start + rows]
            m = x.size
            base = np.arange(m, dtype=np.int64) * d
            cells = member[: m * d]
            cells[:] = False
            inside = _bits.uniform_u64(rng, m) < threshold
            # Floyd over the d - 1 other items, numbered 0 .. d - 2 with item d - 1
            # standing in at index x (swapped back below). Rows with x inside need
            # k - 1 others and skip the first step.
            first = d - 1 - k
            for block in range(first, d - 1, _STEPS_PER_DRAW):
                steps = np.arange(block, min(block + _STEPS_PER_DRAW, d - 1))
                draws = _bits.uniform_below(rng, steps + 1, m)
                for j, pick in zip(steps.tolist(), draws, strict=True):
                    pick += base
                    np.copyto(pick, base + j, where=cells[pick])
                    cells[pick if j > first else pick[~inside]] = True
            cells[base + (d - 1)] = cells[base + x]
            cells[base + x] = inside
            out[start : start + m] = _bits.pack_rows(cells.reshape(m, d))
        return out

    def _perturb_few(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
        """The device's path (one or a few values): O(d) per report, no loop over k.

        The same coin decides whether the true item is in; then the k smallest of d
        uniform keys pick the members, the true item's key forced below (in) or above
        (out) every other, so the others form a uniform (k - 1)- or k-subset.
        """
        d, k = self.domain_size, self.k
        n = values.size
        inside = _bits.uniform_u64(rng, n) < np.uint64(_bits.threshold64_floor(self.p))
        keys = rng.random((n, d))
        rows = np.arange(n)
        keys[rows, values] = np.where(inside, -1.0, 2.0)
        chosen = np.argpartition(keys, k - 1, axis=1)[:, :k]
        cells = np.zeros((n, d), dtype=np.bool_)
        cells[rows[:, None], chosen] = True
        return _bits.pack_rows(cells)

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        padding = _bits.padding_is_zero(reports, self.domain_size)
        return np.asarray(padding & (_bits.row_popcounts(reports) == self.k))

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        return _bits.column_counts(reports, self.domain_size).astype(np.float64)

    def output_probabilities(self, value: int) -> tuple[npt.NDArray[np.uint8], FloatArray]:
        """Every k-subset (the only possible reports) for ``value``, with its probability.

        Parameters
        ----------
        value : int
            The true item.

        Returns
        -------
        reports : ndarray of uint8, shape (C(d, k), ceil(d / 8))
            Every k-subset as a packed bitmap, in lexicographic order of members.
        probabilities : ndarray of float64, shape (C(d, k),)
            ``p / C(d - 1, k - 1)`` for subsets containing ``value``, else
            ``(1 - p) / C(d - 1, k)``.
        """
        d, k = self.domain_size, self.k
        total = math.comb(d, k)
        if total > MAX_ENUMERATED_SUBSETS:
            raise ParameterError(
                f"output_probabilities lists all C(d, k) = {total} subsets; at most "
                f"{MAX_ENUMERATED_SUBSETS} (domain_size too large)"
            )
        x = int(self._check_values(np.asarray([value]))[0])
        members = np.array(list(itertools.combinations(range(d), k)), dtype=np.int64)
        bits = np.zeros((total, d), dtype=np.bool_)
        bits[np.arange(total)[:, None], members] = True
        probs = np.where(
            bits[:, x],
            self.p / math.comb(d - 1, k - 1),
            (1.0 - self.p) / math.comb(d - 1, k),
        )
        return _bits.pack_rows(bits), probs
