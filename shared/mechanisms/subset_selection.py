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
Whether x is in the set is a coin ``w < floor(p 2^64)`` on a fresh word w. The other
``k' = k - [x in]`` members are chosen among the d - 1 other items (``_lanes``): a dense
start sets each bit independently with probability ``a / 2^m <= k / (d - 1)`` (chosen once
per (eps, d) by ``_lanes.plan_subset``), the padding cleared and bit x set, so that it
counts as in and no addition picks it; a report whose start has more than ``k'`` others,
or fewer than ``k' - G`` (about one sd below the start's mean count), draws its start
again. Then, in steps, every report short of ``k' + 1`` set bits draws one candidate,
uniform over the d items (``_lanes.change_lanes``), and ORs it in while it is short; the
coin then sets bit x. When the dense start is empty (``a = 0``, small k) the ``k'``
others are drawn at once instead: ``k'`` candidates, kept iff all are valid, distinct and
not x, else all drawn again. Nothing in this treats one of the d - 1 other items
differently from another (redrawing a start that is too full or too empty only
conditions on its size), and it stops at exactly ``k'`` members, so the others form a
uniformly random ``k'``-subset, exactly; with the coin, every k-subset with x has
probability ``p' / C(d - 1, k - 1)`` and every one without, ``(1 - p') / C(d - 1, k)``,
where ``p' = floor(p 2^64) / 2^64`` (``p - 2^-64 < p' <= p``).

Privacy (the realized epsilon): the ratio of those two probabilities over all inputs is
``p' (d - k) / ((1 - p') k) <= p (d - k) / ((1 - p) k) = e^eps`` (up to the floating-point
error in p): rounding the coin down never adds privacy loss.

The draws, for one batch (``perturb`` splits n reports into batches of
``max(_MIN_CHUNK_ROWS, _CHUNK_WORDS // ceil(d / 64))`` reports, each drawn in full before
the next): one word per report for the coin; m rounds of ``ceil(d / 64)`` words per
report for the dense start, and again for the reports whose start was too full or too
empty (in order) until none is; then blocks of additions, each drawing eight candidate
values for each report still drawing, step-major (of the A reports drawing, step s of the
i-th is value ``s A + i``; lowest bits of each word first); or, with ``a = 0``, rounds in
which every report not yet done draws ``k'`` values.

References
----------
S. Wang, L. Huang, P. Wang, Y. Nie, H. Xu, W. Yang, X.-Y. Li, C. Qiao, "Mutual
information optimally local private discrete distribution estimation",
arXiv:1607.08025, 2016.

M. Ye, A. Barg, "Optimal schemes for discrete distribution estimation under locally
differential privacy", IEEE Trans. Inf. Theory 64(8), 2018.

D. Lemire, "Fast random integer generation in an interval", ACM TOMACS 29(1), 2019
(the exact multiply-shift rule for uniform candidates).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from . import _bits, _lanes
from ._conformance import bit_tests, categorical_cases
from ._portable import Derived, Words, bitmap, hex64
from .base import BoolArray, FloatArray, FrequencyOracle, IntArray, LawTest, PlanCase, Reports

# 64-bit words of report per perturb step (2 MB): bounds the working set.
_CHUNK_WORDS = 1 << 18
_MIN_CHUNK_ROWS = 2048  # the additions take one step per missing lane, whatever the batch's
# size: wide rows (d = 65536: 64 rows per 2**18 words) would pay each step's fixed cost for
# a handful of reports; more rows than this, and each candidate's word misses the cache
# (d = 65536, eps = 1: 31.2k reports/s at 1024 rows, 32.6k at 2048, 28.7k at 4096)
# output_probabilities lists every k-subset; refuse beyond this many.
MAX_ENUMERATED_SUBSETS = 1 << 16


def _support(epsilon: float, d: int, k: int) -> tuple[float, float]:
    # p = k e^eps / (k e^eps + d - k), written to stay finite for large epsilon.
    p = k / (k + (d - k) * math.exp(-epsilon))
    return p, (p * (k - 1) + (1.0 - p) * k) / (d - 1)


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
class SubsetSelection(_lanes.OneRow, _bits.BitmapReports, FrequencyOracle):
    """Subset selection (SS): report a random k-subset that favours the true item.

    ``k`` is chosen from ``d / (e^eps + 1)`` (see :func:`optimal_subset_size`);
    ``p = k e^eps / (k e^eps + d - k)`` and
    ``q = p (k - 1) / (d - 1) + (1 - p) k / (d - 1)``. A report is ``ceil(d / 8)`` bytes
    with k bits set.

    Screening: ``check_reports`` refuses any report without exactly k bits set, and every
    k-subset is a possible report of every input, so nothing more is tested per report;
    the support counts are, pooled (:meth:`FrequencyOracle.screen_aggregate`).
    """

    name: ClassVar[str] = "ss"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = categorical_cases("ss")

    k: int = field(init=False)

    def _support_probabilities(self) -> tuple[float, float]:
        k = optimal_subset_size(self.epsilon, self.domain_size)
        self._set(k=k)
        return _support(self.epsilon, self.domain_size, k)

    @property
    def report_rule(self) -> str:
        nbytes = _bits.packed_size(self.domain_size)
        return (
            f"{nbytes} bytes holding {self.domain_size} bits in little bit order with "
            f"exactly {self.k} bits set and the padding bits of the last byte zero"
        )

    @functools.cached_property
    def sampling_plan(self) -> _lanes.SubsetPlan:
        """The dense start: bits set w.p. ``a / 2^m``, kept iff it lacks at most G others
        (``_lanes.plan_subset``; sets the draws, not the law)."""
        return _lanes.plan_subset(self.k, self.domain_size - 1)

    def _perturb(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
        if values.size == 1:  # a device's report: the same rule, in Python integers
            return self.perturb_one(int(values[0]), self.one_row_queue(rng))
        return self.perturb_words(values, _bits.rng_words(rng))

    def perturb_words(self, values: IntArray, words: _lanes.WordSource) -> npt.NDArray[np.uint8]:
        """Perturb checked item indices, drawing raw 64-bit words from ``words(count)``.

        This is the sampling rule of the module docstring: the same words in give the
        same reports out, whatever produced them. ``words`` must hand out a fresh array
        each call (the samplers work inside it; :data:`_lanes.WordSource`).
        """
        d, k = self.domain_size, self.k
        width = _lanes.words_per_row(d)
        out = np.empty((values.size, _bits.packed_size(d)), dtype=np.uint8)
        threshold = np.uint64(self.keep_threshold)
        a = self.sampling_plan.dense
        rows_per_step = max(_MIN_CHUNK_ROWS, _CHUNK_WORDS // width)
        for start in range(0, values.size, rows_per_step):
            x = values[start : start + rows_per_step]
            r = x.size
            inside = words(r) < threshold
            target = k - inside.astype(np.int64)
            if a == 0:  # no dense start: all k' others at once
                packed = np.zeros((r, width), dtype=np.uint64)
                _lanes.distinct_lanes(words, packed, d, target, forbidden=x)
            else:  # bit x counts as one of the target + 1 until the coin sets it
                packed, have = self._dense_start(words, x, target)
                _lanes.change_lanes(words, packed, d, target + 1, have=have)
            _lanes.set_lanes(packed, x, inside)
            out[start : start + r] = _lanes.report_bytes_view(packed, d)
        return out

    def _dense_start(
        self, words: _lanes.WordSource, x: IntArray, target: IntArray
    ) -> tuple[Any, IntArray]:
        """Dense start for each report with bit x set (so that additions never pick x),
        drawn again while its count of others is outside ``[target - G, target]``; and
        each row's count of set lanes."""
        d = self.domain_size
        m, a, window = self.sampling_plan
        width = _lanes.words_per_row(d)
        packed = _lanes.dense_lanes(words, x.size, width, m, a)
        have = np.empty(x.size, dtype=np.int64)
        todo = np.arange(x.size)
        fresh = packed
        while True:
            _lanes.clear_padding(fresh, d)
            _lanes.set_lanes(fresh, x[todo], np.ones(todo.size, dtype=np.bool_))
            counts = _bits.row_popcounts(fresh)
            if fresh is not packed:
                packed[todo] = fresh
            have[todo] = counts
            short = target[todo] + 1 - counts
            todo = todo[(short < 0) | (short > window)]
            if not todo.size:
                return packed, have
            fresh = _lanes.dense_lanes(words, todo.size, width, m, a)

    def _one_row(self, value: int, queue: _lanes.WordQueue) -> tuple[int, int, int, bool]:
        """One report's row (lane j = bit j) before :func:`_lanes.finish_row` (and its
        arguments)."""
        d, k = self.domain_size, self.k
        inside = queue.take_one() < self.keep_threshold
        target = k - inside
        m, a, window = self.sampling_plan
        if a == 0:  # no dense start
            return _lanes.distinct_row(queue, 0, d, target, value), d, value, inside
        width = _lanes.words_per_row(d)
        keep = (1 << d) - 1  # the padding cleared
        mask = 1 << value
        while True:
            # x counts as in: additions never pick it
            row = (_lanes.dense_row(queue, width, m, a) & keep) | mask
            if 0 <= target + 1 - row.bit_count() <= window:
                break
        return _lanes.change_row(queue, row, d, target + 1), d, value, inside

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        padding = _bits.padding_is_zero(reports, self.domain_size)
        return np.asarray(padding & (_bits.row_popcounts(reports) == self.k))

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
            bits[:, x], self.p / math.comb(d - 1, k - 1), (1.0 - self.p) / math.comb(d - 1, k)
        )
        return _bits.pack_rows(bits), probs

    @property
    def support_size(self) -> int:
        return self.k

    def pair_support(self) -> tuple[float, float]:
        """The true item is in w.p. p and the set filled without replacement:
        ``r1 = p (k - 1) / (d - 1)``, ``r0 = (p (k - 1)(k - 2) + (1 - p) k (k - 1)) /
        ((d - 1)(d - 2))``."""
        p, d, k = self.p, self.domain_size, self.k
        r1 = p * (k - 1) / (d - 1)
        r0 = (p * (k - 1) * (k - 2) + (1 - p) * k * (k - 1)) / ((d - 1) * (d - 2)) if d > 2 else 0.0
        return r1, r0

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {"k": self.k, "in": hex64(self.keep_threshold)}

    @classmethod
    def portable_item(cls, derived: Derived, d: int, x: int, words: Words) -> bytes:
        """x is in iff ``coin(in)``; the others are a uniform subset of the d - 1 other
        items, by Floyd's algorithm: a bitmap of k bits set."""
        inside = words.coin(derived["in"])
        others = int(derived["k"]) - int(inside)
        # The d - 1 items other than x are numbered 0 .. d - 2 (number i: item i + (i >= x)).
        chosen: set[int] = set()
        for j in range(d - 1 - others, d - 1):
            t = words.below(j + 1)
            chosen.add(j if t in chosen else t)
        bits = [False] * d
        bits[x] = inside
        for i in chosen:
            bits[i + (i >= x)] = True
        return bitmap(bits)

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """Bit x set w.p. p, every other w.p. q (the exactly-k bits are checked with the
        reports' validity, by check_reports)."""
        return bit_tests(self.report_bits(reports), int(value), self.p, self.q)
