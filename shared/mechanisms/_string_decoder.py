"""Decoding ``prefix_sketch`` aggregates: the walk down the prefix tree (collector side).

Per sketch the aggregate holds the count of every (row, bucket) cell. For a key v with
bucket ``b_j(v)`` in row j, the support ``C_v = sum_j count[j, b_j(v)]`` debiases, as in
OLH, to ``r_v = (C_v / n_s - q) / (p - q)`` with ``q = 1/g``. Its expectation is
``sum_x f_x beta(v, x)`` with ``beta(v, x) = (W(v, x) - q) / (1 - q)`` and ``W(v, x)`` the
share of the sketch's reports in rows where v and x share a bucket (``beta(v, v) = 1``;
random hashing makes the others 0 on average, a fixed family does not).

:meth:`_Level.evaluate` therefore solves ``beta_HH f_H = r_H`` over the heavy candidates
H (at most ``MAX_HEAVY``, those ``Z_HEAVY`` null standard errors above 0, chosen twice),
subtracts their expected counts from the sketch, and estimates every other candidate
from the residual (adding back ``sum f_H q / (1 - q)``, the share random hashing would
have given them). What is left over (the tail's collisions and the oracle's noise) is
measured by estimating ``DECOYS`` random keys nobody holds: their mean square is the null
variance, floored at the random-hashing formula. A key that shares a bucket with a heavy
key in some rows also inherits the spread of that key's row counts, which the decoys'
average does not hold: :meth:`_Level.collision_var` adds it per key.

The walk (module docstring of :mod:`.strings`; :func:`walk_scaled` for the ``"scaled"``
cut, :func:`walk` for the first rule) keeps a beam of ``beam_width(k)`` prefixes, each
at least ``Z_KEEP`` null standard errors above 0 and, for text (``text``), a prefix of
valid UTF-8 that can complete within its length (:func:`_viable`); complete strings that clear
``Z_PREFILTER`` are pooled over the levels that see them whole, and
their pooled support must clear a Bonferroni cutoff over the complete strings a null
walk would test, so that at most ``FALSE_FIND_RATE`` strings nobody holds are expected
in an answer. The estimation sketch removes the collisions of the strings significant
in the walk (the same solve) and estimates every complete string and any named one;
under the scaled cut a complete string is found when the walk's levels and the
estimation sketch together clear the same cutoff (:meth:`_Finished.joined`), under the
first rule when the walk's levels do. The answer lists
the first k found strings that the estimation sketch confirms above the threshold, by
:func:`above_threshold` (under the scaled cut ranked by the walk's and the estimation
sketch's estimates combined; under the first rule in the walk's order). Each listed
string carries ``evidence_z``, its find test's tail probability as a normal z
(:meth:`_Finished.evidence_z`; docs/statistics.md, "How strong a listing is").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache, partial
from statistics import NormalDist
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .._special import regularized_gamma
from ..aggregate import Aggregate
from ..heavy_hitters import (
    FALSE_FIND_RATE,
    Z_KEEP,
    Z_PREFILTER,
    HeavyHitters,
    StringEstimate,
    StringSketch,
    VarianceModel,
    beam_width,
    detection_thresholds,
    find_z,
    model_tests,
    oracle_variance,
    scaled_detection_thresholds,
)
from ._utf8 import UTF8_DUE, UTF8_NEXT, UTF8_REJECT, utf8_states
from .base import BoolArray, FloatArray, IntArray

KeyArray = npt.NDArray[np.uint8]
U64Array = npt.NDArray[np.uint64]

LEVEL = 0.95
"""Confidence level of the items' intervals in an answer."""
DECOYS = 1024
"""Keys no device holds, estimated at every level to measure the null variance."""
MAX_HEAVY = 128
"""Largest set of heavy keys whose collisions are removed jointly at one level."""
Z_HEAVY = 4.0
"""A candidate this many null standard errors above 0 counts as heavy for the correction."""
_NORMAL = NormalDist()
LIST_FDR = 0.1
"""False discovery rate of listing a found string as above the threshold (the listing rule)."""


class SketchFamily(StringSketch, Protocol):
    """What decoding reads of the mechanism (``PrefixSketch``): its parameters and its
    public hash family (the decoder imports nothing of the mechanism's module)."""

    @property
    def seed(self) -> int: ...
    @property
    def g(self) -> int: ...
    @property
    def p(self) -> float: ...
    @property
    def q(self) -> float: ...
    @property
    def sketches(self) -> int: ...
    @property
    def text(self) -> bool: ...
    def rows_of(self, sketch: int) -> int: ...
    def sketch_slice(self, sketch: int) -> slice: ...
    def kept_bytes(self, sketch: Any, length: Any) -> IntArray: ...
    def sketch_keys(self, sketch: int) -> tuple[U64Array, U64Array]: ...
    def key_accumulators(self, sketch: int, keys: KeyArray) -> U64Array: ...
    def to_buckets(self, acc: U64Array) -> U64Array: ...


Encoder = Callable[[Sequence[bytes]], KeyArray]
"""Strings -> their keys: how the answer estimates strings an analyst names."""


@dataclass
class _Level:
    """One sketch's counts and the heavy-string correction (see the module docstring)."""

    m: SketchFamily
    sketch: int
    counts: FloatArray  # (R, g)
    row_n: FloatArray = field(init=False)
    n: float = field(init=False)
    residual: FloatArray = field(init=False)
    heavy_total: float = 0.0
    heavy_est: FloatArray | None = None
    heavy_flat: IntArray | None = None
    null_var: float = math.nan

    _heavy_of: tuple[Callable[[IntArray], KeyArray], IntArray] | None = None
    _first_cells: IntArray | None = None

    @property
    def rows(self) -> int:
        return int(self.counts.shape[0])

    @property
    def heavy_keys(self) -> KeyArray | None:
        """Keys of the heavy candidates of the last :meth:`evaluate`, built on demand (only
        the estimation sketch's queries ask; the walk evaluates a level many times)."""
        if self._heavy_of is None:
            return None
        take, heavy = self._heavy_of
        return take(heavy)

    @cached_property
    def decoy_flat(self) -> IntArray:
        """:meth:`flat` of the decoys, hashed once (the walk evaluates a level many times)."""
        return self.flat(_decoy_keys(self.m.seed, self.m.max_length, self.sketch))

    def __post_init__(self) -> None:
        self.row_n = self.counts.sum(axis=1)
        self.n = float(self.row_n.sum())
        self.residual = self.counts

    @property
    def formula_var(self) -> float:
        return float(oracle_variance(0.0, self.n, self.m.p, self.m.q)) if self.n > 0 else math.inf

    def _flat(self, acc: U64Array) -> IntArray:
        """Buckets from accumulators, offset by row: indices into the flattened counts."""
        m = self.m
        m.to_buckets(acc)
        acc += (np.arange(self.rows, dtype=np.uint64) * np.uint64(m.g))[None, :]
        return acc.view(np.int64)

    def flat(self, keys: KeyArray) -> IntArray:
        """Cell index (row offset + bucket) of each key in every row: (n, R)."""
        return self._flat(self.m.key_accumulators(self.sketch, keys))

    def first_flat(self, keys: KeyArray, others: KeyArray) -> IntArray:
        """:meth:`flat` of the first step's candidates ``keys`` (those of
        :func:`_first_level_keys` this level cuts after one byte: the same in both walks,
        hashed once), followed by that of ``others``."""
        if self._first_cells is None:
            self._first_cells = self.flat(keys)
        if not len(others):
            return self._first_cells
        return np.concatenate([self._first_cells, self.flat(others)])

    def children_flat(self, parents: KeyArray, position: int, others: KeyArray) -> IntArray:
        """:meth:`flat` of :func:`_children` ``(parents, position)``, hashed incrementally,
        followed by :meth:`flat` of ``others`` (in one array: no copy of the children's).
        A child differs from its parent (zero there) only in byte ``position``, so its
        accumulator is the parent's plus ``a_i (byte << 8 (position mod 4))`` for the word
        ``i = position // 4`` holding it."""
        m = self.m
        a, _ = m.sketch_keys(self.sketch)
        parent = m.key_accumulators(self.sketch, parents)
        shifted = (np.arange(256, dtype=np.uint64) << np.uint64(8 * (position % 4)))[:, None]
        n_children = parent.shape[0] * 256
        acc = np.empty((n_children + len(others), self.rows), dtype=np.uint64)
        with np.errstate(over="ignore"):
            step = shifted * a[None, :, position // 4]
            np.add(
                parent[:, None, :],
                step[None, :, :],
                out=acc[:n_children].reshape(parent.shape[0], 256, self.rows),
            )
        acc[n_children:] = m.key_accumulators(self.sketch, others)
        return self._flat(acc)

    def support(self, counts: FloatArray, flat: IntArray) -> FloatArray:
        # einsum sums a row about 2.5x faster than ndarray.sum (no pairwise blocking);
        # the rows are short (R terms), so the rounding is as good. The cells are in range
        # by construction: mode="clip" skips take's bounds check (a third of its time).
        return np.asarray(np.einsum("ij->i", np.take(counts.reshape(-1), flat, mode="clip")))

    def debias(self, support: FloatArray) -> FloatArray:
        m = self.m
        return (support / self.n - m.q) / (m.p - m.q)

    def _solve(self, flat_h: IntArray, raw_h: FloatArray) -> FloatArray:
        m = self.m
        beta = (shared_weight(flat_h, flat_h, self.row_n / self.n) - m.q) / (1.0 - m.q)
        return solve_small(beta, raw_h)

    def _residual(self, flat_h: IntArray, f_h: FloatArray) -> FloatArray:
        m = self.m
        q_other = (1.0 - m.p) / (m.g - 1)
        residual = self.counts.copy()
        per_row = (f_h[:, None] * self.row_n[None, :]) * (m.p - q_other)
        np.add.at(residual.reshape(-1), flat_h, -per_row)
        return residual

    def evaluate(
        self,
        flat: IntArray,
        take: Callable[[IntArray], KeyArray],
        heavy: IntArray | None = None,
        rounds: int = 2,
    ) -> FloatArray:
        """Corrected estimates of the candidates whose cells are ``flat``; ``take(index)``
        gives their keys. ``heavy`` (indices) is fixed, or chosen from the data: from the
        raw estimates, then (``rounds = 2``) again from the corrected ones."""
        self._no_heavy(take)
        if self.n == 0:
            self.null_var = math.inf
            return np.full(flat.shape[0], np.nan)
        raw = self.debias(self.support(self.counts, flat))
        floor = Z_HEAVY * math.sqrt(self.formula_var)
        chosen = heavy is None
        if heavy is None:
            heavy = _top(raw, MAX_HEAVY, floor)
        est = raw
        for rnd in range(rounds if chosen else 1):
            if heavy.size == 0:
                self._no_heavy(take)
                break
            f_h = self._solve(flat[heavy], raw[heavy])
            self.residual, self.heavy_total = self._residual(flat[heavy], f_h), float(f_h.sum())
            self._heavy_of, self.heavy_est, self.heavy_flat = (take, heavy), f_h, flat[heavy]
            if chosen and rnd < rounds - 1:
                # Which candidates are heavy after the correction: only those the
                # correction could lift over the floor need their corrected estimates
                # (the same values and choice as estimating all; see _could_pass).
                could = self._could_pass(raw, floor)
                could[heavy] = True
                maybe = np.flatnonzero(could)
                part = self._from_residual(flat[maybe])
                part[np.searchsorted(maybe, heavy)] = f_h
                again = maybe[_top(part, MAX_HEAVY, floor)]
                if not np.array_equal(np.sort(again), np.sort(heavy)):
                    heavy = again
                    continue
            est = self._from_residual(flat)
            est[heavy] = f_h
            break
        decoys = self._from_residual(self.decoy_flat)
        self.null_var = max(float(np.mean(decoys * decoys)), self.formula_var)
        return est

    def _no_heavy(self, take: Callable[[IntArray], KeyArray]) -> None:
        self.residual, self.heavy_total, self.heavy_flat = self.counts, 0.0, None
        self._heavy_of, self.heavy_est = (take, np.zeros(0, np.int64)), np.zeros(0)

    def stats(self) -> _LevelStats:
        """Pooling statistics of this level after :meth:`evaluate`."""
        m = self.m
        scale = self.n * (m.p - m.q)
        # An overestimated heavy total (a few hundred reports) can push this below 0;
        # a count's mean cannot be, and a negative one made the null variance negative.
        null_mean = max(0.0, self.n * m.q - scale * self.heavy_total * m.q / (1 - m.q))
        poisson = max(null_mean, 1e-300) / scale**2  # the estimate's variance if Poisson
        return _LevelStats(self.null_var, scale, null_mean, max(1.0, self.null_var / poisson))

    def _could_pass(self, raw: FloatArray, floor: float) -> BoolArray:
        """Candidates whose estimate from the current residual may exceed ``floor``.
        That estimate is ``raw`` less the correction's cells summed over the candidate's rows
        (scaled) plus ``heavy_total q / (1 - q)``; a row can raise it by at most the largest amount
        the correction added to any of its cells (0 if it only removed), so candidates below
        ``floor`` by more than that sum cannot pass (with a margin for rounding)."""
        m = self.m
        added = np.max(self.residual - self.counts, axis=1, initial=0.0)
        lift = float(added.sum()) / (self.n * (m.p - m.q)) + self.heavy_total * m.q / (1 - m.q)
        return raw + lift > floor - 1e-9 * (1.0 + abs(floor))

    def _from_residual(self, flat: IntArray) -> FloatArray:
        q = self.m.q
        return self.debias(self.support(self.residual, flat)) + self.heavy_total * q / (1 - q)

    def estimate_keys(self, keys: KeyArray) -> tuple[FloatArray, FloatArray]:
        """Estimates of arbitrary keys after :meth:`evaluate` (heavy ones from the solve),
        and the variance their collisions with heavy keys add (see :meth:`collision_var`)."""
        flat = self.flat(keys)
        est = self._from_residual(flat)
        own = np.full(len(keys), -1, dtype=np.int64)
        heavy_keys = self.heavy_keys
        if heavy_keys is not None and self.heavy_est is not None and len(heavy_keys):
            index = {bytes(k): i for i, k in enumerate(heavy_keys)}
            for row, key in enumerate(keys):
                i = index.get(bytes(key))
                if i is not None:
                    est[row] = self.heavy_est[i]
                    own[row] = i
        return est, self.collision_var(flat, own)

    def collision_var(self, flat: IntArray, own: IntArray) -> FloatArray:
        """Variance a key's collisions with the heavy keys add beyond the decoys' average.
        In a row where key v shares x's bucket, a report supports v with probability
        ``P = q_o + f_x (p - q_o)`` instead of ``q_o`` (x's devices, a random share f_x of
        the row, report their bucket w.p. p; ``q_o = (1 - p) / (g - 1)``): each report's
        indicator varies by ``P (1 - P) - q_o (1 - q_o) = f_x (p - q_o) (1 - 2 q_o -
        f_x (p - q_o))`` more (the number of x's devices and their own coins both), so the
        debiased estimate by that times ``W(v, x) / (n (p - q)^2)``, with ``W`` the share of
        reports in rows where they collide. Random hashing would give ``W = q`` on average,
        which the decoys' null variance already holds, so only the excess over ``q`` is
        added. (Summed over x: at most the joint excess, as the x's share their rows' devices.)
        ``own[i]`` is the heavy index of key i itself (its own column is skipped), or -1."""
        out = np.zeros(flat.shape[0])
        if self.heavy_flat is None or self.heavy_est is None or not len(self.heavy_est):
            return out
        m = self.m
        f_h = np.clip(self.heavy_est, 0.0, 1.0)
        q_other = (1.0 - m.p) / (m.g - 1)
        lift = m.p - q_other
        per_share = f_h * lift * (1.0 - 2.0 * q_other - f_h * lift) / (m.p - m.q) ** 2
        share = shared_weight(flat, self.heavy_flat, self.row_n / self.n)
        rows = np.flatnonzero(own >= 0)
        share[rows, own[rows]] = 0.0
        return np.asarray((np.maximum(share - m.q, 0.0) * per_share).sum(axis=1) / self.n)


DENSE_MATCHES = 1 << 16
"""Up to this many (key, key, row) triples :func:`shared_weight` compares them all."""


def shared_weight(flat_a: IntArray, flat_b: IntArray, weights: FloatArray) -> FloatArray:
    """``W[i, j] = sum_r weights[r] [flat_a[i, r] == flat_b[j, r]]``: the weight of the rows
    where key i of a and key j of b share a bucket.
    A cell index holds its row, so equal cells are matches in one row: b's cells are
    sorted once and each of a's looked up (collisions are rare, about one row in g), in
    blocks of a that bound the matches held at once."""
    size_a, rows = flat_a.shape
    size_b = flat_b.shape[0]
    if size_a * size_b * rows <= DENSE_MATCHES:
        # Small (the heavy solve, a few keys): compare every pair in every row; the matches
        # come by pair, then row, as below, so bincount makes the same sums bit for bit.
        a, b, row = np.nonzero(flat_a[:, None, :] == flat_b[None, :, :])
        sums = np.bincount(a * size_b + b, weights=weights[row], minlength=size_a * size_b)
        return np.asarray(sums, dtype=np.float64).reshape(size_a, size_b)
    out = np.zeros(size_a * size_b)
    if size_a == 0 or size_b == 0:
        return out.reshape(size_a, size_b)
    cells = flat_b.reshape(-1)
    order = np.argsort(cells, kind="stable")
    ordered = cells[order]
    block = max(1, (1 << 20) // (rows * (1 + size_b // 8)))
    for start in range(0, size_a, block):
        part = flat_a[start : start + block].reshape(-1)
        low = np.searchsorted(ordered, part, side="left")
        count = np.searchsorted(ordered, part, side="right") - low
        entry = np.repeat(np.arange(part.size), count)  # a's (key, row) entry of each match
        offset = np.arange(entry.size) - np.repeat(np.cumsum(count) - count, count)
        other = order[np.repeat(low, count) + offset]  # b's (key, row) entry
        pair = (start + entry // rows) * size_b + other // rows
        out += np.bincount(pair, weights=weights[entry % rows], minlength=out.size)
    return out.reshape(size_a, size_b)


SOLVE_BLOCK = 64
"""Largest system given to LAPACK at once: larger ones start OpenBLAS's threads, which
cost ten to a hundred times the work on a busy machine (128 unknowns: 6 ms against 0.04)."""


def solve_small(a: FloatArray, b: FloatArray) -> FloatArray:
    """``a x = b`` for the small systems here (at most ``MAX_HEAVY`` unknowns, close to the
    identity): LAPACK on blocks of at most ``SOLVE_BLOCK`` unknowns (by the Schur
    complement), or, for a singular system (keys alike in every row), elimination that
    gives least-squares-like zeros (:func:`_eliminate`)."""
    try:
        x = _solve_blocked(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    except np.linalg.LinAlgError:
        return _eliminate(a, b)
    return x if bool(np.all(np.isfinite(x))) else _eliminate(a, b)


def _solve_blocked(a: FloatArray, b: FloatArray) -> FloatArray:
    size = b.shape[0]
    if size <= SOLVE_BLOCK:
        return np.asarray(np.linalg.solve(a, b), dtype=np.float64)
    half = size // 2
    top, right, left, bottom = a[:half, :half], a[:half, half:], a[half:, :half], a[half:, half:]
    solved = np.linalg.solve(top, np.column_stack([right, b[:half]]))
    lower = _solve_blocked(bottom - left @ solved[:, :-1], b[half:] - left @ solved[:, -1])
    upper = solved[:, -1] - solved[:, :-1] @ lower
    return np.concatenate([upper, lower])


def _eliminate(a: FloatArray, b: FloatArray) -> FloatArray:
    """``a x = b`` by Gaussian elimination with partial pivoting, in plain numpy; a column
    with no pivot left gets a zero."""
    size = b.shape[0]
    aug = np.concatenate([a, b[:, None]], axis=1).astype(np.float64)
    for col in range(size):
        pivot = col + int(np.argmax(np.abs(aug[col:, col])))
        if abs(aug[pivot, col]) < 1e-12:
            aug[col:, col] = 0.0
            continue
        if pivot != col:
            aug[[col, pivot]] = aug[[pivot, col]]
        below = aug[col + 1 :, col] / aug[col, col]
        aug[col + 1 :, col:] -= below[:, None] * aug[col, col:]
    x = np.zeros(size)
    for row in range(size - 1, -1, -1):
        diag = aug[row, row]
        if abs(diag) >= 1e-12:
            x[row] = (aug[row, -1] - float(np.dot(aug[row, row + 1 : size], x[row + 1 :]))) / diag
    return x


def _top(values: FloatArray, count: int, floor: float) -> IntArray:
    """Indices of the (at most) ``count`` largest values above ``floor``."""
    above = np.flatnonzero(values > floor)
    if above.size > count:
        above = above[np.argpartition(values[above], -count)[-count:]]
    return above.astype(np.int64)


@lru_cache(maxsize=256)
def _decoy_keys(seed: int, max_length: int, sketch: int) -> KeyArray:
    """Distinct random keys of impossible lengths (> max_length): no device holds them.
    Only their first word is nonzero (a length byte above max_length, three random
    bytes), which makes them cheap to hash; the family is strongly universal, so their
    buckets are as random as any key's. They depend only on public parameters, so they
    are drawn once per (seed, max_length, sketch) and reused (read-only)."""
    rng = np.random.Generator(np.random.Philox(key=[seed & (2**64 - 1), 0x5EED + sketch]))
    low = np.unique(rng.integers(0, 1 << 24, size=2 * DECOYS))[:DECOYS]  # distinct
    keys = np.zeros((DECOYS, max_length + 1), dtype=np.uint8)
    keys[:, 0] = rng.integers(max_length + 1, 256, size=DECOYS, dtype=np.uint8)
    for i in range(1, min(4, max_length + 1)):
        keys[:, i] = (low >> (8 * (i - 1))) & 0xFF
    keys.flags.writeable = False
    return keys


_SUMS = ("weighted", "precision", "excess", "null_mean", "null_var")


@dataclass
class _Finished:
    """Complete strings followed through the levels from their own on.
    Besides the inverse-variance pooled estimate (for ranking), each keeps the excess of
    its support over the null, ``sum_t n_t (p - q) est_t``, and the null's mean and
    variance of the support: the test of :func:`poisson_upper_tail` needs counts."""

    keys: KeyArray
    weighted: FloatArray  # sum of est_t / var_t
    precision: FloatArray  # sum of 1 / var_t
    excess: FloatArray  # sum of n_t (p - q) est_t
    null_mean: FloatArray  # sum of lambda_t
    null_var: FloatArray  # sum of kappa_t lambda_t

    @classmethod
    def empty(cls, width: int) -> _Finished:
        z = np.zeros(0)
        return cls(np.zeros((0, width), np.uint8), z, z, z, z, z)

    def add(self, est: FloatArray, stats: _LevelStats, index: IntArray | None = None) -> None:
        take = slice(None) if index is None else index
        self.weighted[take] += est / stats.var
        self.precision[take] += 1.0 / stats.var
        self.excess[take] += est * stats.scale
        self.null_mean[take] += stats.null_mean
        self.null_var[take] += stats.null_mean * stats.dispersion

    def extend(self, keys: KeyArray, est: FloatArray, stats: _LevelStats) -> None:
        size = len(self.keys)
        for name in _SUMS:
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros(len(keys))]))
        self.keys = np.concatenate([self.keys, keys])
        self.add(est, stats, np.arange(size, size + len(keys)))

    def append(self, keys: KeyArray, sums: _Pooled, index: IntArray) -> None:
        """Add strings ``keys`` with the pooled sums of candidates ``index``."""
        for name in _SUMS:
            setattr(self, name, np.concatenate([getattr(self, name), getattr(sums, name)[index]]))
        self.keys = np.concatenate([self.keys, keys])

    def joined(self, est: FloatArray, stats: _LevelStats, extra: FloatArray) -> _Finished:
        """These strings' statistics with another sketch's estimates ``est`` of them added
        (a level's ``stats``, and ``extra`` the variance each string's own collisions with
        the heavy strings add there, see :meth:`_Level.collision_var`)."""
        var = stats.var + extra
        return _Finished(
            self.keys,
            self.weighted + est / var,
            self.precision + 1.0 / var,
            self.excess + est * stats.scale,
            self.null_mean + stats.null_mean,
            self.null_var + stats.null_mean * stats.dispersion + extra * stats.scale**2,
        )

    def keep(self, index: IntArray) -> None:
        for name in ("keys", *_SUMS):
            setattr(self, name, getattr(self, name)[index])

    def keep_best(self, count: int) -> None:
        """Keep the ``count`` strings of largest pooled z (all if there are no more)."""
        if len(self.keys) > count:
            z = self.estimate / self.sd
            self.keep(np.argsort(-z, kind="stable")[:count])

    @property
    def estimate(self) -> FloatArray:
        return self.weighted / self.precision

    @property
    def sd(self) -> FloatArray:
        return 1.0 / np.sqrt(self.precision)

    def significant(self, alpha: float) -> BoolArray:
        """Whether each string's pooled support has a null tail probability (quasi-Poisson,
        :func:`poisson_upper_tail`) of at most ``alpha``.
        The tail ``P(a, x)`` (regularized lower incomplete gamma, ``a`` the count and ``x``
        the mean) is at least the first term of its series, ``x^a e^-x / Gamma(a + 1)``:
        when that bound is above ``alpha`` the string is not significant and the series is
        not summed (most of the walk's complete strings are noise)."""
        out = np.zeros(len(self.keys), dtype=bool)
        log_alpha = math.log(alpha)
        for i in range(len(self.keys)):
            mean, var = float(self.null_mean[i]), float(self.null_var[i])
            if mean > 0 and self.excess[i] <= 2.0 * math.sqrt(var):
                continue  # within 2 null sds: p > 0.02 (a Poisson right tail is no lighter)
            if mean <= 0 or var <= 0:
                out[i] = self.excess[i] > 0  # p = 0 (or 1 when there is no excess)
                continue
            dispersion = var / mean
            count = (mean + float(self.excess[i])) / dispersion
            x = mean / dispersion
            if count * math.log(x) - x - math.lgamma(count + 1.0) > log_alpha:
                continue
            out[i] = poisson_upper_tail(count, x) <= alpha
        return out

    def evidence_z(self, index: IntArray) -> FloatArray:
        """The strength of the find test of strings ``index``: its tail probability
        (:meth:`significant`) as a normal z, ``z = Phi^-1(1 - p)``. A string is found when
        ``p <= alpha``, that is when this is at least ``normal_upper(alpha)`` (the answer's
        ``find_z``); +inf where the level measured no null (no tail to compare with)."""
        out = np.empty(len(index))
        for row, i in enumerate(index):
            mean, var, excess = float(self.null_mean[i]), float(self.null_var[i]), self.excess[i]
            if mean <= 0 or var <= 0:
                out[row] = math.inf if excess > 0 else -math.inf
                continue
            dispersion = var / mean
            log_p = log_poisson_upper_tail((mean + float(excess)) / dispersion, mean / dispersion)
            out[row] = z_of_log_tail(log_p)
        return out


@dataclass(frozen=True)
class _LevelStats:
    """What pooling needs of one level: null variance, support scale, null mean, dispersion."""

    var: float
    scale: float  # n (p - q): support per unit of estimate
    null_mean: float  # expected residual support of a key nobody holds
    dispersion: float  # measured null variance over the Poisson one (>= 1)


def poisson_upper_tail(count: float, mean: float) -> float:
    """``P(X >= count)`` for ``X ~ Poisson(mean)``, continuous in ``count`` (> 0): the
    regularized lower incomplete gamma function ``P(count, mean)``."""
    return 1.0 if count <= 0 else regularized_gamma(count, mean)[0]


def log_poisson_upper_tail(count: float, mean: float) -> float:
    """``log P(X >= count)`` (:func:`poisson_upper_tail`), finite where the tail is below the
    smallest double: by the series of ``P(count, mean)`` in logs where ``mean < count + 1``
    (elsewhere the tail is not small)."""
    if count <= 0:
        return 0.0
    if mean <= 0:
        return -math.inf
    if mean >= count + 1.0:
        return math.log(max(poisson_upper_tail(count, mean), 1e-300))
    term = total = 1.0 / count
    a = count
    for _ in range(10_000):
        a += 1.0
        term *= mean / a
        total += term
        if term < total * 1e-15:
            break
    return min(0.0, math.log(total) + count * math.log(mean) - mean - math.lgamma(count))


def z_of_log_tail(log_p: float) -> float:
    """The z with ``P(Z > z) = exp(log_p)``, Z standard normal: the inverse where the tail is
    a double, else Newton's method on ``log P(Z > z) ~ log(phi(z) / z (1 - 1/z^2 + 3/z^4))``
    (its log within 1e-8 there, z > 37)."""
    if log_p > -690.0:
        p = min(max(math.exp(log_p), 1e-300), 1.0 - 1e-16)
        return -_NORMAL.inv_cdf(p)
    if log_p == -math.inf:
        return math.inf
    z = math.sqrt(-2.0 * log_p)
    for _ in range(50):
        series = 1.0 - 1.0 / z**2 + 3.0 / z**4
        value = -0.5 * z * z - math.log(z) - 0.5 * math.log(2.0 * math.pi) + math.log(series)
        step = (value - log_p) / (-z - 1.0 / z)
        z -= step
        if abs(step) < 1e-12 * z:
            break
    return z


def _first_level_keys(max_length: int) -> KeyArray:
    """Every (length, first byte) pair, and the empty string."""
    width = max_length + 1
    lengths = np.repeat(np.arange(1, max_length + 1), 256)
    firsts = np.tile(np.arange(256), max_length)
    keys = np.zeros((lengths.size + 1, width), dtype=np.uint8)
    keys[1:, 0] = lengths
    keys[1:, 1] = firsts
    return keys


def _viable(m: SketchFamily, parents: KeyArray, j: int) -> BoolArray | None:
    """Which of step j's candidates an honest client could send (None: all, ``text`` off).
    At j = 1 ``parents`` are :func:`_first_level_keys` (the candidates), later the beam
    (the candidates its 256 children each, in :func:`_take_children`'s order). A
    candidate (length L, bytes 1..j) is viable when its bytes are a prefix of valid UTF-8
    whose open character can end within the L - j bytes left: at j = L, valid UTF-8."""
    if not m.text:
        return None
    length = parents[:, 0].astype(np.int64)
    if j == 1:
        state = UTF8_NEXT[0, parents[:, 1]]
        viable = (state != UTF8_REJECT) & (UTF8_DUE[state] <= length - 1)
        return np.asarray(viable | (length == 0))  # the empty string: nothing to check
    state = UTF8_NEXT[utf8_states(parents, j - 1)].reshape(-1)  # (P, 256) children
    left = np.repeat(length - j, 256)
    return np.asarray((state != UTF8_REJECT) & (UTF8_DUE[state] <= left))


def _take_rows(keys: KeyArray, index: IntArray) -> KeyArray:
    return keys[index]


def _take_children(beam: KeyArray, position: int, index: IntArray) -> KeyArray:
    """Keys of children ``index`` of the beam: child i extends prefix i // 256 by i % 256."""
    keys = beam[index // 256].copy()
    keys[:, position] = (index % 256).astype(np.uint8)
    return keys


def _key_taker(
    n_young: int, young_keys: Callable[[IntArray], KeyArray], old_keys: KeyArray, width: int
) -> Callable[[IntArray], KeyArray]:
    """The keys of candidate indices: the first ``n_young`` are new keys built on demand by
    ``young_keys``, the rest index ``old_keys``."""

    def take(index: IntArray) -> KeyArray:
        out = np.empty((index.size, width), dtype=np.uint8)
        young = index < n_young
        out[young] = young_keys(index[young])
        out[~young] = old_keys[index[~young] - n_young]
        return out

    return take


def walk(m: SketchFamily, levels: list[_Level]) -> tuple[_Finished, list[float], list[float]]:
    """Find complete strings that stand out, level by level (see the module docstring):
    those strings, and per level the null sigma and the beam's cutoff."""
    width = m.max_length + 1
    k_beam = beam_width(m.k)
    finished = _Finished.empty(width)
    beam = np.zeros((0, width), np.uint8)
    sigmas: list[float] = []
    cutoffs: list[float] = []
    for t in range(1, m.max_length + 1):
        level = levels[t]
        old_keys = finished.keys
        child_keys: Callable[[IntArray], KeyArray]
        if t == 1:
            first = _first_level_keys(m.max_length)
            child_length = first[:, 0]
            child_keys = partial(_take_rows, first)
            n_children = len(first)
            flat = level.flat(np.concatenate([first, old_keys]))
        else:
            child_length = np.repeat(beam[:, 0], 256)
            child_keys = partial(_take_children, beam, t)
            n_children = len(beam) * 256
            flat = level.children_flat(beam, t, old_keys)
        est = level.evaluate(flat, _key_taker(n_children, child_keys, old_keys, width))
        sd = math.sqrt(level.null_var)
        sigmas.append(sd)
        if not math.isfinite(sd):
            cutoffs.append(math.inf)
            beam = beam[:0]
            continue
        child_est, old_est = est[:n_children], est[n_children:]
        viable = _viable(m, first if t == 1 else beam, t)
        if viable is not None:
            child_est[~viable] = -math.inf  # as in ScaledWalk.step
        stats = level.stats()
        finished.add(old_est, stats)
        complete = child_length <= t
        new = np.flatnonzero(complete & (child_est > Z_PREFILTER * sd))
        finished.extend(child_keys(new), child_est[new], stats)
        open_ = np.flatnonzero(~complete)
        keep = open_[_top(child_est[open_], k_beam, Z_KEEP * sd)]
        passing = int(np.count_nonzero(child_est[open_] > Z_KEEP * sd))
        cutoffs.append(float(np.min(child_est[keep])) if passing > k_beam else Z_KEEP * sd)
        beam = child_keys(keep)
        finished.keep_best(4 * k_beam)
    return finished, sigmas, cutoffs


def _cut_keys(keys: KeyArray, kept: IntArray) -> KeyArray:
    """Keys with bytes after ``kept`` (per key) zeroed."""
    positions = np.arange(keys.shape[1])[None, :]
    return np.where(positions <= kept[:, None], keys, 0).astype(np.uint8)


def _unique_rows(keys: KeyArray) -> KeyArray:
    """Distinct keys (rows), by their bytes (``np.unique(axis=0)`` is ten times slower)."""
    rows = np.ascontiguousarray(keys).view(np.dtype((np.void, keys.shape[1]))).reshape(-1)
    _, first = np.unique(rows, return_index=True)
    return keys[np.sort(first)]


FIRST_WALK_BEAM = 8
"""Beam of the first walk under the scaled cut, which only looks for the heavy strings
(``Z_HEAVY`` standard errors up) to correct for in the second: their prefixes are near
the top of every step, and a narrow beam makes that walk cheap."""


@dataclass
class _Pooled:
    """One step's candidates pooled over the levels that cut them there: as
    :class:`_Finished`'s sums, ``weighted`` and ``excess`` per candidate, the others per
    group (a candidate at step 1, a parent later: a level adds to its 256 children alike,
    so that is summed per parent and spread after the levels, the same sums in order)."""

    weighted: FloatArray
    excess: FloatArray
    precision: FloatArray
    null_mean: FloatArray
    null_var: FloatArray

    @classmethod
    def zeros(cls, size: int, groups: int) -> _Pooled:
        return cls(np.zeros(size), np.zeros(size), *(np.zeros(groups) for _ in range(3)))

    def add(self, group: IntArray, member: IntArray, est: FloatArray, stats: _LevelStats) -> None:
        self.weighted[group] += est / stats.var
        self.excess[group] += est * stats.scale
        self.precision[member] += 1.0 / stats.var
        self.null_mean[member] += stats.null_mean
        self.null_var[member] += stats.null_mean * stats.dispersion

    def spread(self) -> None:
        """Per-parent sums to each of its 256 children."""
        for name in ("precision", "null_mean", "null_var"):
            setattr(self, name, np.repeat(getattr(self, name), 256))

    @property
    def z(self) -> FloatArray:
        """Pooled z of each candidate (-inf where no level saw it)."""
        seen = self.precision > 0
        return np.where(
            seen, self.weighted / np.sqrt(np.where(seen, self.precision, 1.0)), -math.inf
        )


def walk_scaled(
    m: SketchFamily, levels: list[_Level], prior: KeyArray | None = None, beam: int = 0
) -> ScaledWalk:
    """Find complete strings under the ``"scaled"`` cut, by prefix length j = 1 .. M.
    A candidate (length L, bytes 1..j) is estimated at every level that cuts length-L
    strings after j bytes and pooled by inverse variance; the beam keeps the ``beam_width``
    open prefixes of largest pooled z (their sd depends on L). A level holds cuts of
    strings of every length, so the heavy-key correction at a level also fixes the heavy
    strings already known (``prior``, and those found so far), cut where that level cuts
    them. A complete string (j = L) is pooled over the levels that see it whole."""
    walked = ScaledWalk(m, levels, prior, beam)
    for j in range(1, m.max_length + 1):
        if j > 1 and len(walked.prefixes) == 0:
            # Nothing of these lengths stood out: the beam did not cut (as in walk).
            walked.step_z.append(Z_KEEP)
            continue
        walked.step(j)
    return walked


class ScaledWalk:
    """:func:`walk_scaled`'s state between steps and its result: the beam (``prefixes``),
    the heavy strings known so far (``known``, ``known_bytes`` of each: its length or the
    step that found its prefix), the ``finished`` strings, and for the null model the
    measured ``level_sigmas`` (per level 1 .. M) and ``step_z`` (per step j = 1 .. M: the
    z a prefix needed to stay in the beam)."""

    def __init__(
        self, m: SketchFamily, levels: list[_Level], prior: KeyArray | None, beam: int
    ) -> None:
        big_m = m.max_length
        self.m = m
        self.levels, self.width, self.rounds = levels, big_m + 1, 1 if beam else 2
        self.k_beam = beam or beam_width(m.k)
        self.finished = _Finished.empty(self.width)
        self.known = np.zeros((0, self.width), np.uint8) if prior is None else prior
        self.known_bytes = self.known[:, 0].astype(np.int64)
        # Measured at each level the walk evaluates; the formula's (random hashing) where
        # it evaluates none (say level M when no beam prefix has length M).
        self.level_sigmas = [math.sqrt(levels[t].formula_var) for t in range(1, big_m + 1)]
        self.step_z: list[float] = []
        self.prefixes = np.zeros((0, self.width), np.uint8)
        self.first = _first_level_keys(big_m)
        # kept[t, L]: the bytes level t keeps of a string of L bytes (looked up, not recomputed)
        self.kept = m.kept_bytes(np.arange(big_m + 1)[:, None], np.arange(self.width)[None, :])

    def step(self, j: int) -> None:
        """Extend the beam by byte j: finish the complete candidates, keep the best open."""
        sums = self._pool(j)
        z = sums.z
        viable = _viable(self.m, self.first if j == 1 else self.prefixes, j)
        if viable is not None:
            # A candidate no honest client could complete is no candidate: it takes no
            # place in the beam and never finishes (estimated alongside, it costs nothing).
            z[~viable] = -math.inf
        length = self.first[:, 0] if j == 1 else np.repeat(self.prefixes[:, 0], 256)
        complete = length <= j
        keys_of = (
            partial(_take_rows, self.first) if j == 1 else partial(_take_children, self.prefixes, j)
        )
        new = np.flatnonzero(complete & (z > Z_PREFILTER))
        self.finished.append(keys_of(new), sums, new)
        open_ = np.flatnonzero(~complete & (z > Z_KEEP))
        keep = open_[_top(z[open_], self.k_beam, -math.inf)]
        self.step_z.append(float(np.min(z[keep])) if open_.size > self.k_beam else Z_KEEP)
        heavy = np.concatenate([keep[z[keep] > Z_HEAVY], new[z[new] > Z_HEAVY]])
        self.known = np.concatenate([self.known, keys_of(heavy)])
        self.known_bytes = np.concatenate([self.known_bytes, np.full(heavy.size, j, np.int64)])
        self.prefixes = keys_of(keep)
        self.finished.keep_best(4 * self.k_beam)

    def _pool(self, j: int) -> _Pooled:
        """Step j's candidates (every first byte at j = 1, else the beam's children)
        estimated at every level that cuts their length after j bytes, pooled."""
        parents = self.first if j == 1 else self.prefixes
        parents_length = parents[:, 0].astype(np.int64)
        sums = _Pooled.zeros(len(parents) * (1 if j == 1 else 256), len(parents))
        known_length = self.known[:, 0].astype(np.int64)
        for t in range(1, len(self.levels)):
            # parents (j > 1) or candidates (j = 1) whose length this level cuts after j bytes
            kept = self.kept[t, parents_length]
            if j == 1:
                member = np.flatnonzero((kept == 1) | (parents_length == 0))
            else:
                member = np.flatnonzero(kept == j)
            if member.size:
                self._pool_level(t, j, member, self._known_cuts(t, j, known_length), sums)
        if j > 1:
            sums.spread()
        return sums

    def _known_cuts(self, t: int, j: int, known_length: IntArray) -> KeyArray:
        """The known heavy strings as level t cuts them, where their bytes are known and
        they are not among this step's candidates (corrected at t alongside them)."""
        cut = self.kept[t, known_length]
        usable = np.flatnonzero((cut <= self.known_bytes) & (cut != j))
        extra = self.known[usable]
        return _unique_rows(_cut_keys(extra, cut[usable])) if len(extra) else extra

    def _pool_level(self, t: int, j: int, member: IntArray, extra: KeyArray, sums: _Pooled) -> None:
        """Add level t's estimates of the ``member`` candidates (j = 1) or parents' children."""
        level = self.levels[t]
        group_keys: Callable[[IntArray], KeyArray]
        if j == 1:
            group = member
            sub = self.first[member]
            flat = level.first_flat(sub, extra)
            group_keys = partial(_take_rows, sub)
        else:
            parents = self.prefixes[member]
            group = (member[:, None] * 256 + np.arange(256)[None, :]).reshape(-1)
            flat = level.children_flat(parents, j, extra)
            group_keys = partial(_take_children, parents, j)
        take = _key_taker(group.size, group_keys, extra, self.width)
        est = level.evaluate(flat, take, rounds=self.rounds)[: group.size]
        if math.isfinite(level.null_var):
            self.level_sigmas[t - 1] = math.sqrt(level.null_var)
            sums.add(group, member, est, level.stats())


def decode(m: SketchFamily, agg: Aggregate, encode: Encoder) -> HeavyHitters:
    """The answer from an aggregate (see module); ``encode`` keys the strings an analyst names."""
    levels = [
        _Level(m, s, agg.sums[m.sketch_slice(s)].reshape(m.rows_of(s), m.g))
        for s in range(m.sketches)
    ]
    estimation = levels[0]
    alpha = FALSE_FIND_RATE / model_tests(m)
    if m.cut == "scaled":
        found = _walk_twice(m, levels)
        fin = found.finished
    else:
        fin, sigmas, cutoffs = walk(m, levels)
    # The strings significant on the walk alone are the heavy ones of the estimation sketch.
    selected = np.flatnonzero(fin.significant(alpha))
    selected = selected[np.argsort(-fin.estimate[selected], kind="stable")]
    confirm = _Confirmation(estimation, fin.keys, selected[:MAX_HEAVY])
    tested = fin  # the strings' statistics the find test read
    if m.cut == "scaled":
        selected, sigma_e, tested = _found_jointly(fin, confirm, selected, alpha)
        thresholds = scaled_detection_thresholds(
            found.level_sigmas, found.step_z, Z_PREFILTER, find_z(m), sigma_e
        )
    else:
        confirm.add_collisions(selected)
        thresholds = detection_thresholds(sigmas, cutoffs, Z_PREFILTER, find_z(m))
    model = variance_model(m, estimation, agg.n)
    listed = _listed(m, fin, confirm, selected, model, min(thresholds))
    return HeavyHitters(
        mechanism=m.name,
        epsilon=m.epsilon,
        n=agg.n,
        k=m.k,
        max_length=m.max_length,
        items=confirm.items(listed, model, tested.evidence_z(listed)),
        threshold=min(thresholds),
        thresholds=thresholds,
        level=LEVEL,
        n_estimation=int(estimation.n),
        variance_model=model,
        find_z=find_z(m),
        _estimate_keys=partial(_estimate_named, estimation, encode) if estimation.n > 0 else None,
    )


def _estimate_named(
    level: _Level, encode: Encoder, values: Sequence[bytes]
) -> tuple[FloatArray, FloatArray]:
    """A result's estimates of named strings (a function, not a closure: the collector
    keeps results pickled)."""
    return level.estimate_keys(encode(values))


def _walk_twice(m: SketchFamily, levels: list[_Level]) -> ScaledWalk:
    """Under the scaled cut, walk twice: the second walk corrects every level for the heavy strings
    the first found, cut where that level cuts them (a level mixes the cuts of all lengths)."""
    first = walk_scaled(m, levels, beam=FIRST_WALK_BEAM).finished
    strong = np.flatnonzero(first.estimate / first.sd > Z_HEAVY)
    strong = strong[np.argsort(-first.estimate[strong], kind="stable")][:MAX_HEAVY]
    return walk_scaled(m, levels, prior=first.keys[strong])


class _Confirmation:
    """The estimation sketch's estimates of the walk's complete strings (``heavy``, those
    significant on the walk alone, solved for), and the variance each string's collisions
    with them add (:meth:`_Level.collision_var`), computed where needed."""

    def __init__(self, level: _Level, keys: KeyArray, heavy: IntArray) -> None:
        self.level, self.keys = level, keys
        self.flat = level.flat(keys)
        self.est = level.evaluate(self.flat, partial(np.take, keys, axis=0), heavy=heavy)
        self.own = np.full(len(keys), -1, dtype=np.int64)
        self.own[heavy] = np.arange(heavy.size)
        self.extra = np.zeros(len(keys))

    def add_collisions(self, index: IntArray) -> None:
        if len(index):
            self.extra[index] = self.level.collision_var(self.flat[index], self.own[index])

    def items(
        self, listed: IntArray, model: VarianceModel, evidence: FloatArray
    ) -> tuple[StringEstimate, ...]:
        est, extra = self.est[listed], self.extra[listed]
        low, high = model.interval(est, LEVEL, extra)
        se = model.stderr(est, extra)
        return tuple(
            StringEstimate(
                _key_bytes(self.keys[i]), float(e), float(s), float(lo), float(hi), float(z)
            )
            for i, e, s, lo, hi, z in zip(listed, est, se, low, high, evidence, strict=True)
        )


def _found_jointly(
    fin: _Finished, confirm: _Confirmation, selected: IntArray, alpha: float
) -> tuple[IntArray, float, _Finished]:
    """Under the scaled cut, the found strings (by decreasing pooled estimate), the estimation
    sketch's null sigma and the statistics the test read (``fin`` joined). Finding tests the
    walk's evidence and the estimation sketch's together (their devices are disjoint): the
    same Bonferroni level over the same tests, the complete key's few levels joined by a
    quarter of the devices (docs/statistics.md, "Found")."""
    level = confirm.level
    sigma_e = math.sqrt(level.null_var) if level.n > 0 else math.inf
    if not (len(fin.keys) and math.isfinite(sigma_e)):
        confirm.add_collisions(selected)
        return selected, sigma_e, fin
    stats = level.stats()
    # A string's collision term only adds variance: those that fail without it fail with
    # it, and it is computed for the others.
    maybe = np.flatnonzero(fin.joined(confirm.est, stats, confirm.extra).significant(alpha))
    confirm.add_collisions(maybe)
    both = fin.joined(confirm.est, stats, confirm.extra)
    found = maybe[both.significant(alpha)[maybe]]
    return found[np.argsort(-fin.estimate[found], kind="stable")], sigma_e, both


def _listed(
    m: SketchFamily,
    fin: _Finished,
    confirm: _Confirmation,
    selected: IntArray,
    model: VarianceModel,
    threshold: float,
) -> IntArray:
    """The listing rule (docs/statistics.md, "Which found strings are listed"): the first
    k found strings, in the walk's order, that the estimation sketch (devices that took
    no part in finding them) confirms above the threshold; by decreasing estimate."""
    est, extra = confirm.est[selected], confirm.extra[selected]
    kept = np.flatnonzero(above_threshold(est, model.stderr(threshold, extra), threshold))
    if m.cut == "scaled":
        # A complete key is pooled over fewer levels under this cut: the first k by the
        # inverse-variance combination of the walk's estimate and the estimation sketch's.
        var_e = model.stderr(est[kept], extra[kept]) ** 2
        var_w = fin.sd[selected[kept]] ** 2
        walked = fin.estimate[selected[kept]]
        combined = (walked / var_w + est[kept] / var_e) / (1 / var_w + 1 / var_e)
        kept = kept[np.argsort(-combined, kind="stable")]
    kept = kept[: m.k]  # positions in ``selected``
    return selected[kept[np.argsort(-est[kept], kind="stable")]]


def above_threshold(estimate: FloatArray, null_sd: FloatArray, threshold: float) -> BoolArray:
    """Which found strings the data show to be above ``threshold``: Benjamini-Hochberg.
    Each string tests ``f <= threshold`` one-sidedly, ``z = (estimate - threshold) / null_sd`` with
    the standard error at the threshold (as a score test); the strings rejected at false discovery
    rate ``LIST_FDR`` are kept: among those kept, the expected share whose frequency is at or below
    the threshold is at most ``LIST_FDR``. NaN estimates (no estimation data) are never kept."""
    size = len(estimate)
    keep = np.zeros(size, dtype=bool)
    if size == 0:
        return keep
    p_values = np.ones(size)
    for i in range(size):  # a few hundred found strings at most
        e, sd = float(estimate[i]), float(null_sd[i])
        if math.isfinite(e) and sd > 0:
            p_values[i] = 0.5 * math.erfc((e - threshold) / (sd * math.sqrt(2.0)))
        elif math.isfinite(e) and e > threshold:
            p_values[i] = 0.0
    order = np.argsort(p_values, kind="stable")
    passing = np.flatnonzero(p_values[order] <= LIST_FDR * np.arange(1, size + 1) / size)
    if passing.size:
        keep[order[: passing[-1] + 1]] = True
    return keep


def variance_model(m: SketchFamily, estimation: _Level, n: int) -> VarianceModel:
    """``V(f) = v0 + v1 f - v2 f^2`` for estimates from the estimation sketch."""
    n_e = estimation.n
    if n_e <= 0:
        return VarianceModel(math.inf, 0.0, 0.0)
    p, q = m.p, m.q
    sampling = max(1.0 / n_e - 1.0 / n, 0.0)
    slope = (p * (1 - p) - q * (1 - q)) / (n_e * (p - q) ** 2)
    return VarianceModel(estimation.null_var, slope + sampling, sampling)


def _key_bytes(key: KeyArray) -> bytes:
    return bytes(key[1 : 1 + int(key[0])])
