"""Distributions of a number: the tree, consistent inference, and the answers with intervals.

A distribution mechanism (:mod:`ldpkit.mechanisms.hierarchical`) cuts the bounds
``[lo, hi]`` into ``resolution`` equal *leaves* and arranges them in a tree of fan-out
``branching``. Depth 0 is the root (the whole range, whose fraction is 1 and is never
reported); depths ``1 .. height`` are reported, depth ``height`` being the leaves. A node
at depth ``t`` covers ``branching ** (height - t)`` consecutive leaves (the last node of a
depth may cover fewer when ``resolution`` is not a power of ``branching``).

Each user reports one depth; the collector gets, per depth, an unbiased estimate of
every node's fraction with (nearly) equal noise variance across the depth's nodes.
:class:`TreeSmoother` turns these into *consistent* leaf fractions, the generalized least
squares fit of Hay, Rastogi, Miklau and Suciu (VLDB 2010) extended to unequal variances
per depth and to a root known to be 1: every node equals the sum of its children, and the
leaves sum to 1. It is the two-pass algorithm for a tree of independent observations
(bottom-up inverse-variance pooling of a node with the sum of its children, then top-down
distribution of each parent's residual in proportion to the children's variances), and
it is linear in the depth estimates, so the variance of every answer is a quadratic form
in the depth covariances (:meth:`TreeSmoother.adjoint` gives its coefficients).

Estimand. Answers are about the distribution of the values *clipped to the bounds* (as
the device clips them): by default the reporting users' own (``estimand="reporters"``:
the users are given; which depth each reports and the mechanisms vary), or the population
they were drawn from (``"population"``: the sampling of users adds to the variance).
Every interval (bins, ranges, the mean, the quantiles) takes the estimand; the bins' and
ranges' ``stderr`` is the estimator's own (the population's).

Leaves are ``[e_k, e_{k+1})`` with ``e_k = lo + k (hi - lo) / resolution``, except the
last, which is closed at ``hi`` (values at ``hi``, or clipped to it, fall there). A range
``[a, b)`` with ``b >= hi`` therefore includes ``hi``.

References
----------
G. Cormode, T. Kulkarni, D. Srivastava, "Answering range queries under local differential
privacy", PVLDB 12(10), 2019.
M. Hay, V. Rastogi, G. Miklau, D. Suciu, "Boosting the accuracy of differentially private
histograms through consistency", PVLDB 3(1), 2010.
R. S. Woodruff, "Confidence intervals for medians and other position measures", JASA 47,
1952 (quantile intervals by inverting the distribution function's interval).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from numbers import Integral, Real
from typing import Any

import numpy as np
import numpy.typing as npt

from . import ranking
from ._json import finite_or_none
from ._validation import check_level
from .errors import ParameterError
from .estimates import ConfidenceInterval, normal_quantile
from .intervals import linear_interval
from .ranking import MostCommon, Ranks
from .screening import LinearShift, check_fraction, part_gains

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MAX_RESOLUTION = 4096
"""Largest number of leaves: aggregating the hashed (OLH) depths takes O(n x nodes) work,
about 1 s per 10^6 reports at 1,024 leaves."""

MAX_BINS = 4096
"""Largest number of bins a histogram query may ask for."""

# Range queries evaluated together (a (resolution, chunk) matrix at a time).
_BAND_CHUNK = 512
# The same for their intervals' cumulants, which hold several such matrices per depth.
_CUMULANT_CHUNK = 128

Shift = Callable[[float], Any]
"""beta -> how far a forged fraction beta of the reports can move an answer (or answers)."""


def _forgery_shift(shift: Shift | None, beta: float) -> Any:
    if shift is None:
        raise ParameterError("this answer was read back without its estimate: no forgery shift")
    return shift(beta)


def _check_int(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ParameterError(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if not low <= v <= high:
        raise ParameterError(f"{name} must be between {low} and {high}, got {v}")
    return v


@dataclass(frozen=True)
class Tree:
    """A tree of fan-out ``branching`` over ``resolution`` leaves (see the module doc).

    Depth-indexed sequences here have ``height + 1`` entries, entry 0 being the root.
    """

    resolution: int
    branching: int
    height: int = field(init=False)
    sizes: tuple[int, ...] = field(init=False, repr=False)
    """Leaves per (full) node at each depth; ``sizes[0] = branching ** height``."""
    counts: tuple[int, ...] = field(init=False, repr=False)
    """Nodes at each depth; ``counts[0] = 1`` and ``counts[height] = resolution``."""

    def __post_init__(self) -> None:
        resolution = _check_int(self.resolution, "resolution", 2, MAX_RESOLUTION)
        branching = _check_int(self.branching, "branching", 2, resolution)
        height = 1
        while branching**height < resolution:
            height += 1
        sizes = tuple(branching ** (height - t) for t in range(height + 1))
        counts = tuple(-(-resolution // s) for s in sizes)
        object.__setattr__(self, "resolution", resolution)
        object.__setattr__(self, "branching", branching)
        object.__setattr__(self, "height", height)
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "counts", counts)

    @property
    def nodes(self) -> int:
        """Nodes at depths 1 .. height (what the reports are about)."""
        return sum(self.counts[1:])

    def leaf_counts(self, depth: int) -> IntArray:
        """Leaves under each node at ``depth``."""
        size = self.sizes[depth]
        starts = np.arange(self.counts[depth], dtype=np.int64) * size
        return np.minimum(starts + size, self.resolution) - starts

    def child_starts(self, depth: int) -> IntArray:
        """Index at ``depth + 1`` of each depth-``depth`` node's first child."""
        return np.arange(self.counts[depth], dtype=np.int64) * self.branching

    def parents(self, depth: int) -> IntArray:
        """Index at ``depth - 1`` of each node's parent."""
        return np.arange(self.counts[depth], dtype=np.int64) // self.branching

    def node_of_leaf(self, leaves: npt.ArrayLike, depth: int) -> IntArray:
        """The node at ``depth`` holding each leaf."""
        return np.asarray(leaves, dtype=np.int64) // self.sizes[depth]

    def aggregate_leaves(self, leaves: FloatArray, depth: int) -> FloatArray:
        """Sum leaf values (shape (resolution,) or (resolution, k)) into the nodes at depth."""
        starts = np.arange(self.counts[depth], dtype=np.int64) * self.sizes[depth]
        return np.add.reduceat(leaves, starts, axis=0)


def leaf_edges(bounds: tuple[float, float], resolution: int) -> FloatArray:
    """The ``resolution + 1`` leaf edges ``lo + k (hi - lo) / resolution`` (last exactly hi)."""
    lo, hi = bounds
    out: FloatArray = lo + (hi - lo) * np.arange(resolution + 1) / resolution
    out[-1] = hi
    return out


def leaf_index(values: FloatArray, bounds: tuple[float, float], resolution: int) -> IntArray:
    """The leaf of each value (already clipped to the bounds).

    A value on a leaf edge belongs to the leaf above it, ``hi`` to the last leaf; the
    edges are exactly those of :func:`leaf_edges`, so a histogram whose bins are whole
    leaves counts every value where its edges say.
    """
    lo, hi = bounds
    edges = leaf_edges(bounds, resolution)
    k = np.floor((values - lo) / (hi - lo) * resolution).astype(np.int64)
    np.clip(k, 0, resolution - 1, out=k)
    # Rounding can put a value next to an edge on the wrong side of it: step over.
    k += (values >= edges[k + 1]) & (k < resolution - 1)
    k -= values < edges[k]
    return k


def _col(v: FloatArray, like: FloatArray) -> FloatArray:
    """``v`` shaped to broadcast against ``like`` along its first axis."""
    return v if like.ndim == 1 else v[:, None]


class TreeSmoother:
    """Consistent leaves from per-depth node estimates of known per-depth variance.

    Parameters
    ----------
    tree : Tree
    variances : sequence of float, one per depth 1 .. height
        The noise variance of each node estimate at that depth (the weight of the
        depth in the least squares); ``inf`` for a depth that nobody reported.

    Notes
    -----
    Bottom-up, a node's estimate from its own subtree is the inverse-variance average
    of its observation ``x`` (variance ``s``) and the sum ``S`` of its children's
    subtree estimates (variance ``W``, the sum of theirs): ``z = alpha x + beta S`` with
    ``alpha = W / (s + W)``, ``beta = s / (s + W)``, variance ``s W / (s + W)``. Top-down,
    from the root's known total 1, each child gets its subtree estimate plus the share
    ``V_child / W_parent`` of its parent's residual (final value minus the sum of the
    children's subtree estimates). With every depth observed this is the generalized least
    squares solution under the constraints (the tests compare it with a dense solve);
    where no depth at or below a node was observed, its children split it in proportion
    to their number of leaves (uniform within the node), which is biased, and is the
    same convention as for a bin edge that cuts a leaf.
    """

    def __init__(self, tree: Tree, variances: Sequence[float]) -> None:
        h = tree.height
        if len(variances) != h:
            raise ParameterError(f"need {h} variances (depths 1..{h}), got {len(variances)}")
        s = [math.inf, *(float(v) for v in variances)]
        for v in s[1:]:
            if not (v > 0):  # also rejects NaN
                raise ParameterError(f"variances must be > 0 (inf for no data), got {v!r}")
        self.tree = tree
        self.variances = tuple(s)
        # informed[t]: some depth >= t was observed (else the subtree is split uniformly).
        informed = [False] * (h + 2)
        for t in range(h, 0, -1):
            informed[t] = informed[t + 1] or math.isfinite(s[t])
        self.informed = tuple(informed[: h + 1])
        self.alpha, self.beta, self.subtree_variance = _bottom_up(tree, s, self.informed)
        self.gamma = _shares(tree, self.subtree_variance, self.informed)

    def forward(self, estimates: Sequence[FloatArray], root: float = 1.0) -> FloatArray:
        """Consistent leaf values from per-depth estimates (depths 1..height).

        Each estimate has shape (nodes,) or (nodes, k) for k sets at once; entries of
        unobserved depths are ignored.
        """
        return self.forward_all(estimates, root)[-1]

    def forward_all(self, estimates: Sequence[FloatArray], root: float = 1.0) -> list[FloatArray]:
        """The consistent value of every node, per depth 0 (the root) .. height."""
        tree, h = self.tree, self.tree.height
        if len(estimates) != h:
            raise ParameterError(f"need {h} arrays of estimates, got {len(estimates)}")
        x = [np.zeros(1), *(np.asarray(e, dtype=np.float64) for e in estimates)]
        for t in range(1, h + 1):
            if not math.isfinite(self.variances[t]):
                x[t] = np.zeros_like(x[t])
        z: list[FloatArray] = [np.zeros(1)] * (h + 1)
        z[h] = _col(self.alpha[h], x[h]) * x[h]
        for t in range(h - 1, 0, -1):
            children = np.add.reduceat(z[t + 1], tree.child_starts(t), axis=0)
            z[t] = _col(self.alpha[t], x[t]) * x[t] + _col(self.beta[t], children) * children
        shape = (1,) if x[h].ndim == 1 else (1, x[h].shape[1])
        u = [np.full(shape, float(root))]
        for t in range(1, h + 1):
            residual = u[-1] - np.add.reduceat(z[t], tree.child_starts(t - 1), axis=0)
            u.append(z[t] + _col(self.gamma[t], z[t]) * residual[tree.parents(t)])
        return u

    def adjoint(self, query: npt.ArrayLike) -> list[FloatArray]:
        """Coefficients of each depth's estimates in ``query . leaves``.

        ``forward`` is affine, ``leaves = sum_t T_t x_t + c``; this returns ``T_t' query``
        for t = 1 .. height (index 0 of the list is the root, always zero), for a query of
        shape (resolution,) or (resolution, k).
        """
        tree, h = self.tree, self.tree.height
        gu = np.asarray(query, dtype=np.float64)
        if gu.shape[0] != tree.resolution:
            raise ParameterError(f"query needs {tree.resolution} rows, got {gu.shape[0]}")
        gz: list[FloatArray] = [np.zeros(1)] * (h + 1)
        for t in range(h, 0, -1):
            g_parent = np.add.reduceat(_col(self.gamma[t], gu) * gu, tree.child_starts(t - 1))
            gz[t] = gu - g_parent[tree.parents(t)]
            gu = g_parent
        gx: list[FloatArray] = [np.zeros(1)] * (h + 1)
        for t in range(1, h):
            gx[t] = _col(self.alpha[t], gz[t]) * gz[t]
            gz[t + 1] = gz[t + 1] + (_col(self.beta[t], gz[t]) * gz[t])[tree.parents(t + 1)]
        gx[h] = _col(self.alpha[h], gz[h]) * gz[h]
        return gx


def _bottom_up(
    tree: Tree, s: list[float], informed: tuple[bool, ...]
) -> tuple[list[FloatArray], list[FloatArray], list[FloatArray]]:
    """Per depth, :class:`TreeSmoother`'s ``alpha``, ``beta`` and subtree variances, from
    the depth variances ``s`` (index 0, the root: unobserved)."""
    h = tree.height
    alpha: list[FloatArray] = [np.zeros(1)] * (h + 1)
    beta: list[FloatArray] = [np.zeros(1)] * (h + 1)
    var: list[FloatArray] = [np.zeros(1)] * (h + 1)
    alpha[h] = np.full(tree.counts[h], 1.0 if math.isfinite(s[h]) else 0.0)
    var[h] = np.full(tree.counts[h], s[h])
    for t in range(h - 1, 0, -1):
        n_t = tree.counts[t]
        if not informed[t + 1]:
            alpha[t] = np.full(n_t, 1.0 if math.isfinite(s[t]) else 0.0)
            beta[t] = np.zeros(n_t)
            var[t] = np.full(n_t, s[t])
            continue
        w = np.add.reduceat(var[t + 1], tree.child_starts(t))
        if math.isfinite(s[t]):
            alpha[t] = w / (s[t] + w)
            beta[t] = s[t] / (s[t] + w)
            var[t] = s[t] * w / (s[t] + w)
        else:
            alpha[t], beta[t], var[t] = np.zeros(n_t), np.ones(n_t), w
    return alpha, beta, var


def _shares(tree: Tree, var: list[FloatArray], informed: tuple[bool, ...]) -> list[FloatArray]:
    """Per depth, each node's share ``gamma`` of its parent's residual (top-down)."""
    gamma: list[FloatArray] = [np.zeros(1)] * (tree.height + 1)
    for t in range(1, tree.height + 1):
        parent = tree.parents(t)
        if informed[t]:
            w = np.add.reduceat(var[t], tree.child_starts(t - 1))
            gamma[t] = var[t] / w[parent]
        else:
            leaves = tree.leaf_counts(t).astype(np.float64)
            gamma[t] = leaves / tree.leaf_counts(t - 1)[parent]
    return gamma


def _around(
    values: FloatArray, first: IntArray, node: IntArray, last: IntArray
) -> tuple[FloatArray, FloatArray]:
    """Sums of ``values`` over the siblings before ``node`` (from ``first``) and after it
    (to ``last``, excluded)."""
    c = np.concatenate([[0.0], np.cumsum(values)])
    return c[node] - c[first], c[last] - c[node + 1]


def _checked_edges(
    edges: Sequence[float] | npt.ArrayLike, bounds: tuple[float, float]
) -> FloatArray:
    """Histogram edges: 2 .. MAX_BINS + 1 numbers, increasing strictly, within the bounds."""
    lo, hi = bounds
    e = np.asarray(edges, dtype=object if not isinstance(edges, np.ndarray) else None)
    try:
        cuts = np.array([_check_number(v, "every edge") for v in np.ravel(e)])
    except TypeError:
        raise ParameterError(f"edges must be a sequence of numbers, got {edges!r}") from None
    if cuts.size < 2 or cuts.size > MAX_BINS + 1:
        raise ParameterError(
            f"edges must hold between 2 and {MAX_BINS + 1} numbers, got {cuts.size}"
        )
    if not bool(np.all(np.diff(cuts) > 0)):
        raise ParameterError("edges must increase strictly")
    if cuts[0] < lo or cuts[-1] > hi:
        raise ParameterError(
            f"edges must lie within the bounds [{lo}, {hi}], got {cuts[0]}..{cuts[-1]}"
        )
    return cuts


@dataclass(frozen=True)
class LevelNoise:
    """How one depth's node estimates vary: its oracle's (p, q), its reports n, its kind.

    ``exclusive`` oracles (randomized response) name one node per report, so the support
    counts are multinomial with cell probabilities ``pi = q + (p - q) f``:
    ``Cov(f_hat) = (diag(pi) - pi pi') / (n (p - q)^2)``. Otherwise (local hashing, with
    its hash taken as a random function) each report supports the true node with
    probability p and every other node independently with probability q, which gives
    ``Cov(f_hat) = (diag(v(f) + f) - f f') / n`` with
    ``v(f) = (f p (1 - p) + (1 - f) q (1 - q)) / (p - q)^2`` the oracle's own variance;
    the ``f`` and ``f f'`` terms are the sampling of users.
    """

    oracle: str
    p: float
    q: float
    exclusive: bool
    n: float
    """Reports at this depth (a real number when planning with expected counts)."""

    def bound_terms(self) -> tuple[float, float]:
        """(V, K) with ``coef' Cov coef <= (V sum(coef^2) + K max(coef^2)) / n`` for any data.

        The covariance is affine in the node fractions f (which sum to 1) less a
        non-negative ``(sum coef f)^2`` term; dropping that term and putting all the mass
        on the node of the largest coefficient bounds it whatever the data.
        """
        p, q = self.p, self.q
        if self.exclusive:
            return q / (p - q) ** 2, 1.0 / (p - q)
        slope = (p * (1 - p) - q * (1 - q)) / (p - q) ** 2 + 1.0
        return q * (1 - q) / (p - q) ** 2, max(slope, 0.0)

    def terms(self, f: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(A, B) with ``coef' Cov coef = sum(coef^2 A) - (sum(coef B))^2``."""
        if self.n == 0:
            return np.zeros(f.shape), np.zeros(f.shape)
        p, q = self.p, self.q
        f = np.clip(f, 0.0, 1.0)
        if self.exclusive:
            pi = q + (p - q) * f
            return pi / (self.n * (p - q) ** 2), pi / (math.sqrt(self.n) * (p - q))
        own = (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (p - q) ** 2
        return (own + f) / self.n, f / math.sqrt(self.n)

    def quadratic(self, coef: FloatArray, f: FloatArray) -> FloatArray:
        """``coef' Cov coef`` per column of ``coef`` (shape (nodes,) or (nodes, k))."""
        a, b = self.terms(f)
        square = (coef * coef * _col(a, coef)).sum(axis=0)
        linear = (coef * _col(b, coef)).sum(axis=0)
        out: FloatArray = np.maximum(square - linear * linear, 0.0)
        return out


def depth_cumulants(
    noise: LevelNoise, coef: FloatArray, f: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Variance, third cumulant and sampling variance of ``coef . x`` per column, ``x``
    one depth's debiased node fractions from ``noise.n`` users drawn from the node
    fractions ``f`` (columns of ``f`` sum to 1; shapes (nodes, k)).

    One user adds ``Z = sum_v c_v S_v`` with ``c = coef / (n (p - q))`` and ``S_v`` whether
    the report supports node v. Given the user's node u, ``S_u ~ Bernoulli(p)`` and (local
    hashing, the hash a random function) every other ``S_v ~ Bernoulli(q)`` independently,
    or (randomized response) one other node with probability q each. Mixed over u ~ f:
    the cumulants of a sum of n independent users are n times one user's. The sampling
    variance is ``n Var_u(E[Z | u])``, the part that the choice of users makes.
    """
    scaled = _DepthSums(noise, coef)
    return scaled.cumulants(scaled.moments(f))


class _DepthSums:
    """One depth's scaled coefficients ``c`` and their power sums, for
    :func:`depth_cumulants` at any node fractions: Z's moments are linear in the sums
    ``M_k = sum_v f_v c_v^k`` (k = 1, 2, 3), so fractions affine in a parameter give
    moments affine in it."""

    def __init__(self, noise: LevelNoise, coef: FloatArray) -> None:
        self.noise = noise
        self.empty = noise.n == 0
        self.c = coef / (float(noise.n) * (noise.p - noise.q)) if not self.empty else coef
        self.powers = (self.c, self.c * self.c, self.c * self.c * self.c)
        self.sums = tuple(x.sum(axis=0) for x in self.powers)  # C_k = sum_v c_v^k

    def moments(self, f: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``(M_1, M_2, M_3)`` at node fractions f (clipped at 0)."""
        g = np.clip(f, 0.0, None)
        m1, m2, m3 = ((g * x).sum(axis=0) for x in self.powers)
        return m1, m2, m3

    def cumulants(
        self, m: tuple[FloatArray, FloatArray, FloatArray]
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """n times one user's variance, third cumulant and sampling variance, from M_k.
        (Cumulants do not move with a shift: Z is taken less ``q C_1``, local hashing.)"""
        m1, m2, m3 = m
        if self.empty:
            zero = np.zeros_like(m1)
            return zero, zero.copy(), zero.copy()
        p, q, n = self.noise.p, self.noise.q, float(self.noise.n)
        r = p - q
        c1, c2, c3 = self.sums
        if self.noise.exclusive:  # Z = c_V, V = u w.p. p, each other node w.p. q
            e1, e2, e3 = q * c1 + r * m1, q * c2 + r * m2, q * c3 + r * m3
        else:  # given u: mean r c_u, variance b C2 + (a - b) c_u^2, third t0 + t1 c_u^3
            a, b = p * (1.0 - p), q * (1.0 - q)
            s0, s1 = b * c2, a - b
            t0, t1 = b * (1.0 - 2.0 * q) * c3, a * (1.0 - 2.0 * p) - b * (1.0 - 2.0 * q)
            e1 = r * m1
            e2 = s0 + (s1 + r * r) * m2
            e3 = t0 + t1 * m3 + 3.0 * (s0 * r * m1 + s1 * r * m3) + r**3 * m3
        var = e2 - e1 * e1
        third = e3 - 3.0 * e1 * e2 + 2.0 * e1**3
        sampling = r * r * (m2 - m1 * m1)
        return n * var, n * third, n * sampling


_THETAS = np.array([0.0, 1.0 / 3.0, 0.5, 2.0 / 3.0, 1.0])
"""Where the cumulants are evaluated: 0, 1/2, 1 fit the variance's quadratic, 0, 1/3, 2/3,
1 the third cumulant's cubic."""


def _by_depth(tree: Tree, leaves: FloatArray) -> list[FloatArray]:
    """Leaf values (L, k) summed into the nodes of every depth (index t; 0 unused), each
    depth from the one below (a node's children are consecutive)."""
    out = [leaves] * (tree.height + 1)
    for t in range(tree.height - 1, 0, -1):
        below, b = out[t + 1], tree.branching
        full = below.shape[0] // b
        summed = below[: full * b].reshape(full, b, -1).sum(axis=1)
        if below.shape[0] > full * b:  # the last node holds fewer children
            summed = np.concatenate([summed, below[full * b :].sum(axis=0, keepdims=True)])
        out[t] = summed
    return out


def _spread(mass: FloatArray, support: FloatArray) -> FloatArray:
    """Each column of ``mass`` scaled to sum to 1, or ``support`` scaled so where it is 0."""
    total = mass.sum(axis=0)
    fallback = support / np.maximum(support.sum(axis=0), 1e-300)
    out: FloatArray = np.where(total > 0, mass / np.where(total > 0, total, 1.0), fallback)
    return out


def _spread_variance(coef: FloatArray, f: FloatArray) -> FloatArray:
    """``Var_f(coef) = sum_v f_v coef_v^2 - (sum_v f_v coef_v)^2`` per column of ``coef``
    (shape (nodes,) or (nodes, k)), ``f`` the node fractions (nodes,)."""
    g = _col(f, coef)
    first = (g * coef).sum(axis=0)
    out: FloatArray = np.maximum((g * coef * coef).sum(axis=0) - first * first, 0.0)
    return out


def _check_number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ParameterError(f"{name} must be a finite number, got {value!r}")
    return float(value)


SCORE = "score"
"""Interval method of ranges and bins: the score test with the variance and skewness of the
estimate at the hypothesised fraction (:meth:`DistributionEstimate.range_bounds`)."""
SCORE_WIDENED = "score, widened to whole leaves"
"""Interval method for ranges that cut a leaf: from the lower bound of the largest range
of whole leaves inside to the upper bound of the smallest range of whole leaves around."""
REPORTERS = "reporters"
"""Estimand: the distribution of the reporting users' own values (the default)."""
POPULATION = "population"
"""Estimand: the distribution of the population the reporting users were drawn from."""
ESTIMANDS = (REPORTERS, POPULATION)


def check_estimand(value: object) -> str:
    """``"reporters"`` or ``"population"``, else a :class:`ParameterError`."""
    if value not in ESTIMANDS:
        raise ParameterError(f"estimand must be 'reporters' or 'population', got {value!r}")
    return str(value)


Bounder = Callable[[float, int, str], tuple[FloatArray, FloatArray]]
"""(level, comparisons, estimand) -> the low and high ends of some ranges' intervals."""


def _bounder(bounder: Bounder | None) -> Bounder:
    if bounder is None:
        raise ParameterError("this answer was read back without its estimate: no interval")
    return bounder


BAND_INVERSION = "inverted cdf band at leaf edges"
"""Quantile interval method: per depth, the hull of the nodes that can hold the quantile
given the distribution function's pointwise intervals at their edges (Bonferroni over
the depths); the intersection over the depths."""
MEAN_WIDENED = "wald, widened by half a leaf"
"""Mean interval method: Wald, widened by half a leaf each way (the values' positions
within their leaves are unknown; this bounds the bias of placing them at the middle)."""


@dataclass(frozen=True)
class RangeEstimate:
    """The estimated fraction of values in ``[lower, upper)`` (``hi`` included at the top).

    ``estimate`` is unbiased when the range's ends fall on leaf edges; a leaf the range
    cuts counts in proportion to the part of it inside (uniform within the leaf), which
    is biased by at most that leaf's share. ``stderr`` is the estimator's standard error.
    The interval is honest either way: when an end cuts a leaf it runs from the lower
    bound for the whole leaves inside to the upper bound for the whole leaves around
    (``inner`` and ``outer``), within [0, 1] (see :meth:`DistributionEstimate.range_bounds`).
    """

    lower: float
    upper: float
    estimate: float
    stderr: float
    inner: tuple[float, float]
    """(estimate, stderr) for the largest run of whole leaves inside the range."""
    outer: tuple[float, float]
    """(estimate, stderr) for the smallest run of whole leaves around the range."""
    method: str
    _shift: Shift | None = field(default=None, repr=False, compare=False)
    _bounds: Bounder | None = field(default=None, repr=False, compare=False)

    def forgery_shift(self, beta: float) -> float:
        """How far a forged fraction ``beta`` of the reports can move :attr:`estimate`
        (:meth:`DistributionEstimate.query_shift`)."""
        return float(_forgery_shift(self._shift, beta))

    def ci(self, level: float = 0.95, *, estimand: str = REPORTERS) -> ConfidenceInterval:
        """The ``level`` interval for the fraction of the reporting users' values in the
        range (``estimand="reporters"``) or of the population's (``"population"``)."""
        low, high = _bounder(self._bounds)(check_level(level), 1, check_estimand(estimand))
        return ConfidenceInterval(float(low[0]), float(high[0]))

    def to_dict(self, level: float = 0.95, *, estimand: str = REPORTERS) -> dict[str, Any]:
        low, high = self.ci(level, estimand=estimand)
        return _range_dict(
            self.lower, self.upper, self.estimate, self.stderr, float(low), float(high)
        )


def _range_dict(
    lower: float, upper: float, estimate: float, stderr: float, low: float, high: float
) -> dict[str, Any]:
    """A range's or a bin's fields in an answer."""
    return {
        "lower": float(lower),
        "upper": float(upper),
        "estimate": finite_or_none(estimate),
        "stderr": finite_or_none(stderr),
        "low": finite_or_none(low),
        "high": finite_or_none(high),
    }


def _range_estimates(
    ranges: Sequence[tuple[float, float]],
    r: dict[str, FloatArray],
    shift: Callable[[float, float, float], FloatArray],
    bounds: Callable[..., tuple[FloatArray, FloatArray]],
) -> list[RangeEstimate]:
    """The :class:`RangeEstimate` of each ``(lower, upper)`` from the arrays ``r`` of
    :meth:`DistributionEstimate._ranges`; ``shift(lower, upper, beta)`` its forgery shift,
    ``bounds(at, level, comparisons, estimand)`` its interval."""
    return [
        RangeEstimate(
            lower=a,
            upper=b,
            estimate=float(r["estimate"][i]),
            stderr=float(r["stderr"][i]),
            inner=(float(r["inner"][i, 0]), float(r["inner"][i, 1])),
            outer=(float(r["outer"][i, 0]), float(r["outer"][i, 1])),
            method=SCORE_WIDENED if bool(r["cut"][i]) else SCORE,
            _shift=partial(shift, a, b),
            _bounds=partial(bounds, r["at"][i : i + 1]),
        )
        for i, (a, b) in enumerate(ranges)
    ]


@dataclass(frozen=True, eq=False)
class HistogramEstimate:
    """Fractions of values in consecutive bins ``[edges[i], edges[i + 1])`` (the last bin closed at
    its upper edge when that is ``hi``); each bin is a :class:`RangeEstimate` computed together."""

    edges: FloatArray
    estimates: FloatArray
    stderr: FloatArray
    inner: FloatArray
    """(bins, 2): estimate and stderr of the whole leaves inside each bin."""
    outer: FloatArray
    """(bins, 2): the same for the whole leaves around each bin."""
    aligned: bool
    """Every edge is a leaf edge (no bin's interval is widened)."""
    _shift: Shift | None = field(default=None, repr=False)
    _bounds: Bounder | None = field(default=None, repr=False)
    _cache: dict[tuple[float, bool, str], ConfidenceInterval] = field(
        default_factory=dict, repr=False
    )

    def forgery_shift(self, beta: float) -> FloatArray:
        """How far a forged fraction ``beta`` of the reports can move each bin's estimate
        (:meth:`DistributionEstimate.query_shift`)."""
        return np.asarray(_forgery_shift(self._shift, beta))

    @property
    def lower(self) -> FloatArray:
        return self.edges[:-1]

    @property
    def upper(self) -> FloatArray:
        return self.edges[1:]

    @property
    def method(self) -> str:
        return SCORE if self.aligned else SCORE_WIDENED

    def ci(
        self, level: float = 0.95, *, simultaneous: bool = False, estimand: str = REPORTERS
    ) -> ConfidenceInterval:
        """Per-bin intervals within [0, 1] for the reporting users' fractions
        (``estimand="reporters"``) or the population's (``"population"``); with
        ``simultaneous=True`` each at level ``1 - (1 - level) / bins`` (Bonferroni), so that
        all bins are covered together with probability at least ``level``."""
        key = (check_level(level), bool(simultaneous), check_estimand(estimand))
        if key not in self._cache:
            comparisons = self.estimates.size if simultaneous else 1
            low, high = _bounder(self._bounds)(key[0], comparisons, key[2])
            self._cache[key] = ConfidenceInterval(low, high)
        return self._cache[key]

    def items(
        self, level: float = 0.95, *, simultaneous: bool = False, estimand: str = REPORTERS
    ) -> list[dict[str, Any]]:
        """One plain dict per bin: lower, upper, estimate, stderr, low, high (the intervals
        all bins' together with ``simultaneous``)."""
        low, high = self.ci(level, simultaneous=simultaneous, estimand=estimand)
        columns = (self.lower, self.upper, self.estimates, self.stderr, low, high)
        rows = zip(*(np.asarray(c).tolist() for c in columns), strict=True)
        return [_range_dict(*row) for row in rows]

    def difference_variance(self, i: npt.NDArray[np.int64], j: npt.NDArray[np.int64]) -> FloatArray:
        """A bound on the variance of the difference of two bins: ``(sd_i + sd_j)^2``
        (correlation -1, :func:`ldpkit.ranking.from_stderr`) at their plug-in errors."""
        sd = self.stderr
        return ranking.from_stderr(lambda a, b: sd[a])(i, j)

    def most_common(self, level: float = 0.95) -> MostCommon:
        """The bin of largest estimate and the bins that could hold the most values at
        ``level`` (:func:`ldpkit.ranking.most_common`). Meant for bins on leaf edges
        (:attr:`aligned`): a bin that cuts a leaf is read within it, and biased."""
        return ranking.most_common(self.estimates, self.difference_variance, level)

    def ranks(self, level: float = 0.95, *, top: int = ranking.TOP) -> Ranks:
        """Rank intervals of the ``top`` bins, holding together at ``level``."""
        return ranking.ranks(self.estimates, self.difference_variance, level, top=top)


@dataclass(frozen=True)
class QuantileEstimate:
    """The ``q``-quantile ``inf{x : P(X <= x) >= q}`` with a ``level`` interval.

    ``value`` reads the distribution function, made non-decreasing and linear within
    each leaf, at ``q``. ``low`` and ``high`` are leaf edges. At every depth t of the tree
    the quantile lies in a node ``[s, e]`` with ``P(X < s) <= q <= P(X < e)``; the depth's
    interval is the hull of the nodes for which neither inequality is rejected by the
    pointwise interval of the distribution function (each at level
    ``1 - (1 - level) / height``), and the answer is the intersection over the depths.
    For the true node each side fails with probability ``(1 - level) / (2 height)`` at most,
    so the intersection covers the quantile with probability ``level`` or more, whatever
    the values do within a leaf. The coarse depths keep the leaves' noise from spreading
    the interval when n is small; the leaves refine it when n is large. Each depth only
    looks at the nodes inside the interval kept so far (the true node of a depth lies in
    the true node of the depth above), which also keeps the work small.
    """

    q: float
    value: float
    low: float
    high: float
    level: float
    method: str = BAND_INVERSION
    estimand: str = REPORTERS
    """Whose quantile the interval is about: the reporting users' values or the population's."""
    _shift: Shift | None = field(default=None, repr=False, compare=False)

    def ci(self) -> ConfidenceInterval:
        return ConfidenceInterval(self.low, self.high)

    def forgery_shift(self, beta: float) -> float:
        """How far a forged fraction ``beta`` of the reports can move :attr:`value`, in the
        metric's units (:meth:`DistributionEstimate.quantile_shift`)."""
        return float(_forgery_shift(self._shift, beta))

    def to_dict(self) -> dict[str, Any]:
        return {
            "q": self.q,
            "value": finite_or_none(self.value),
            "low": finite_or_none(self.low),
            "high": finite_or_none(self.high),
        }


@dataclass(frozen=True)
class DistributionMean:
    """The mean of the clipped values, from the same reports as the distribution.

    ``mean`` places every leaf's mass at its middle; ``stderr`` is the standard error of
    that estimator. The values' positions within their leaves are unknown, which can
    shift the true mean by up to ``half_leaf`` either way: the interval adds it.
    """

    mean: float
    stderr: float
    """About the :attr:`estimand`'s mean."""
    half_leaf: float
    method: str = MEAN_WIDENED
    estimand: str = REPORTERS
    """Whose mean the interval is about: the reporting users' or the population's."""
    _shift: Shift | None = field(default=None, repr=False, compare=False)

    def forgery_shift(self, beta: float) -> float:
        """How far a forged fraction ``beta`` of the reports can move :attr:`mean`, in the
        metric's units (:meth:`DistributionEstimate.query_shift` of the leaves' middles)."""
        return float(_forgery_shift(self._shift, beta))

    def ci(self, level: float = 0.95) -> ConfidenceInterval:
        half = normal_quantile(level) * self.stderr + self.half_leaf
        return ConfidenceInterval(self.mean - half, self.mean + half)


@dataclass(frozen=True, eq=False)
class DistributionEstimate:
    """The estimated distribution of a number, with every answer's standard error.

    Attributes
    ----------
    mechanism, epsilon : the mechanism that produced the reports and its per-report epsilon.
    n : number of reports.
    bounds : (lo, hi), the range the values were clipped to.
    tree : the tree of leaves; ``resolution`` leaves of width ``(hi - lo) / resolution``.
    leaves : the consistent estimate of each leaf's fraction (unbiased; may be < 0; sums
        to 1). Every node of the tree is the sum of its leaves.
    depth_counts : reports per depth 1 .. height.
    levels : the noise model of each depth 1 .. height.

    Answers: :meth:`histogram`, :meth:`fraction`, :meth:`cdf`, :meth:`quantile`,
    :meth:`mean`; :meth:`to_dict` gives them as plain JSON-ready values.
    """

    mechanism: str
    epsilon: float
    n: int
    bounds: tuple[float, float]
    tree: Tree
    leaves: FloatArray
    depth_counts: tuple[int, ...]
    levels: tuple[LevelNoise, ...]
    smoother: TreeSmoother = field(repr=False)

    @cached_property
    def _plug(self) -> list[FloatArray]:
        """Node fractions plugged into the variance formulas: the consistent estimate."""
        return [
            np.clip(np.nan_to_num(self.tree.aggregate_leaves(self.leaves, t)), 0.0, 1.0)
            for t in range(1, self.tree.height + 1)
        ]

    @property
    def resolution(self) -> int:
        return self.tree.resolution

    @property
    def edges(self) -> FloatArray:
        """The ``resolution + 1`` leaf edges."""
        return leaf_edges(self.bounds, self.resolution)

    @property
    def leaf_width(self) -> float:
        lo, hi = self.bounds
        return (hi - lo) / self.resolution

    @property
    def supported_bins(self) -> tuple[int, ...]:
        """Histograms whose bins are whole nodes of the tree (node counts per depth)."""
        return self.tree.counts[1:]

    def variance(self, query: npt.ArrayLike, estimand: str = POPULATION) -> FloatArray:
        """Variance of ``query . leaves`` for a query on the leaves, (L,) or (L, k), as an
        estimate of the population's ``query . fractions`` (``estimand="population"``, the
        estimator's own variance) or of the reporting users' (``"reporters"``: see
        :meth:`_for_reporters`), at the plugged-in fractions."""
        coef = self.smoother.adjoint(query)
        total: FloatArray = np.zeros(() if np.ndim(query) == 1 else np.shape(query)[1])
        sampling: FloatArray = np.zeros_like(total)
        for t, noise in enumerate(self.levels, start=1):
            total = total + noise.quadratic(coef[t], self._plug[t - 1])
            if noise.n > 0:
                sampling = sampling + _spread_variance(coef[t], self._users[t - 1]) / noise.n
        if check_estimand(estimand) == POPULATION:
            return total
        h = np.asarray(query, dtype=np.float64)
        return self._for_reporters(total, sampling, _spread_variance(h, self._raw_leaves))

    @cached_property
    def _users(self) -> list[FloatArray]:
        """Per depth 1 .. height, the plugged-in node fractions scaled to sum to 1: the
        users' law over the nodes, whose ``Var_f(coef)`` is the sampling part of a depth."""
        return [f / f.sum() if f.sum() > 0 else f for f in self._plug]

    @property
    def _raw_leaves(self) -> FloatArray:
        """The leaf estimates unclipped: the users' spread of a query, ``sum f h^2 - (sum f
        h)^2``, is unbiased from them (clipping the negative leaves at 0 adds mass at the
        far ends and overstates it, by a quarter for a mean at eps 4, n 2,000)."""
        return np.nan_to_num(self.leaves)

    def _for_reporters(
        self, population: FloatArray, sampling: FloatArray, spread: FloatArray
    ) -> FloatArray:
        """The variance about the reporting users' own answer from the population's.

        With ``S`` the part of the population's variance that the sampling of the users
        makes (``sum_t Var_f(coef_t) / n_t``) and ``spread`` the users' own variance of the
        query ``Var_f(h)``, the reporters' is ``population + (S - spread) / (n - 1)``: the
        users are given, and only their random split over the depths remains (Neyman's
        allocation variance, as in :meth:`cumulant_polynomials`)."""
        n = float(self.n)
        out: FloatArray = np.maximum(population + (sampling - spread) / max(n - 1.0, 1.0), 0.0)
        return out

    def _positions(self, x: npt.ArrayLike) -> FloatArray:
        """Values as positions in leaf units, clipped to [0, resolution]. A position within
        1e-9 leaf of a leaf edge is that edge: a decimal edge such as 8.4 on [0, 120] with
        100 leaves is 7.000000000000001 in floating point, and must not read as cutting a
        leaf (whose interval is widened to the leaves around it)."""
        lo, hi = self.bounds
        pos = (np.asarray(x, dtype=np.float64) - lo) / (hi - lo) * self.resolution
        edge = np.rint(pos)
        pos = np.where(np.abs(pos - edge) <= 1e-9, edge, pos)
        return np.clip(pos, 0.0, float(self.resolution))

    def _range_queries(self, start: FloatArray, stop: FloatArray) -> FloatArray:
        """(L, k): the share of each leaf inside each [start, stop) in leaf units."""
        k = np.arange(self.resolution, dtype=np.float64)[:, None]
        out: FloatArray = np.clip(np.minimum(k + 1.0, stop) - np.maximum(k, start), 0.0, 1.0)
        return out

    def _answer(self, start: FloatArray, stop: FloatArray) -> tuple[FloatArray, FloatArray]:
        if self.n == 0:
            nan = np.full(start.shape, np.nan)
            return nan, nan.copy()
        est = np.empty(start.shape)
        var = np.empty(start.shape)
        for first in range(0, start.size, _BAND_CHUNK):
            part = slice(first, first + _BAND_CHUNK)
            queries = self._range_queries(start[part], stop[part])
            est[part] = self.leaves @ queries
            var[part] = self.variance(queries)
        return est, np.sqrt(var)

    def _range_positions(
        self, lower: FloatArray, upper: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        a, b = self._positions(lower), self._positions(upper)
        # The last leaf is closed at hi: a range starting at hi still holds that leaf.
        return np.where(a >= self.resolution, np.nextafter(float(self.resolution), 0.0), a), b

    def _ranges(self, lower: FloatArray, upper: FloatArray) -> dict[str, FloatArray]:
        a, b = self._range_positions(lower, upper)
        inner_a, inner_b = np.ceil(a), np.floor(b)
        inner_b = np.maximum(inner_b, inner_a)
        outer_a, outer_b = np.floor(a), np.ceil(b)
        cut = (a != np.floor(a)) | (b != np.floor(b))
        if bool(np.any(cut)):
            # One pass for the ranges and the whole-leaf ranges inside and around them.
            k = a.size
            est3, se3 = self._answer(
                np.concatenate([a, inner_a, outer_a]), np.concatenate([b, inner_b, outer_b])
            )
            est, inner_est, outer_est = est3[:k], est3[k : 2 * k], est3[2 * k :]
            se, inner_se, outer_se = se3[:k], se3[k : 2 * k], se3[2 * k :]
        else:
            est, se = self._answer(a, b)
            inner_est, inner_se, outer_est, outer_se = est, se, est, se
        return {
            "estimate": est,
            "stderr": se,
            "inner": np.stack([inner_est, inner_se], axis=-1),
            "outer": np.stack([outer_est, outer_se], axis=-1),
            "cut": cut,
            "at": np.stack([inner_a, inner_b, outer_a, outer_b], axis=-1),
        }

    def fraction(self, lower: float, upper: float) -> RangeEstimate:
        """The fraction of values in ``[lower, upper)`` (``upper >= hi`` includes ``hi``)."""
        return self.fractions([(lower, upper)])[0]

    def fractions(self, ranges: Sequence[tuple[float, float]]) -> list[RangeEstimate]:
        """:meth:`fraction` of several ranges ``(lower, upper)`` at once."""
        lo, hi = self.bounds
        pairs = []
        for pair in ranges:
            try:
                lower, upper = pair
            except (TypeError, ValueError):
                raise ParameterError(
                    f"a range must be a pair (lower, upper), got {pair!r}"
                ) from None
            a = _check_number(lower, "lower")
            b = _check_number(upper, "upper")
            if not a < b:
                raise ParameterError(f"a range needs lower < upper, got [{a!r}, {b!r})")
            if b <= lo or a > hi:
                raise ParameterError(
                    f"the range [{a!r}, {b!r}) does not overlap the bounds [{lo}, {hi}]"
                )
            pairs.append((a, b))
        if not pairs:
            return []
        ends = np.array(pairs)
        return _range_estimates(
            pairs, self._ranges(ends[:, 0], ends[:, 1]), self.range_shift, self.range_bounds
        )

    def histogram(
        self, bins: int | None = None, *, edges: Sequence[float] | npt.ArrayLike | None = None
    ) -> HistogramEstimate:
        """Fractions in ``bins`` equal bins over the bounds (default 16), or between ``edges``.

        ``edges`` must increase strictly and lie within the bounds (at least two). Bins
        whose edges are leaf edges get unbiased estimates and Wald intervals; others are
        read uniformly within the leaves they cut (see :class:`RangeEstimate`).
        """
        if edges is not None and bins is not None:
            raise ParameterError("give bins or edges, not both")
        if edges is not None:
            cuts = _checked_edges(edges, self.bounds)
        else:
            lo, hi = self.bounds
            count = 16 if bins is None else _check_int(bins, "bins", 1, MAX_BINS)
            cuts = lo + (hi - lo) * np.arange(count + 1) / count
            cuts[-1] = hi
        r = self._ranges(cuts[:-1], cuts[1:])
        return HistogramEstimate(
            edges=cuts,
            estimates=r["estimate"],
            stderr=r["stderr"],
            inner=r["inner"],
            outer=r["outer"],
            aligned=not bool(np.any(r["cut"])),
            _shift=partial(self.range_shift, cuts[:-1], cuts[1:]),
            _bounds=partial(self.range_bounds, r["at"]),
        )

    def range_bounds(
        self, at: FloatArray, level: float, comparisons: int, estimand: str
    ) -> tuple[FloatArray, FloatArray]:
        """Intervals of ranges from the whole-leaf ranges inside and around each: ``at`` is
        (k, 4), the leaf positions ``inner_a, inner_b, outer_a, outer_b``. The low end is the
        lower score bound of ``[inner_a, inner_b)``, the high end the upper score bound of
        ``[outer_a, outer_b)`` (both the same range when the range cuts no leaf).

        Each bound inverts the score test of its range's fraction theta, the estimate's
        variance and third cumulant taken at theta (:meth:`cumulant_polynomials`), not at
        the estimate: a nearly empty bin's estimate of about 0 has a plug-in variance of
        about 0 too, and a Wald interval there misses from above (issue 28).
        """
        if self.n == 0:
            nan = np.full(at.shape[0], np.nan)
            return nan, nan.copy()
        low = self._score_bounds(at[:, 0], at[:, 1], level, comparisons, estimand, False)
        high = self._score_bounds(at[:, 2], at[:, 3], level, comparisons, estimand, True)
        return low, np.maximum(high, low)

    @cached_property
    def _cumulants(self) -> dict[bytes, tuple[FloatArray, FloatArray, FloatArray]]:
        """:meth:`_population_cumulants` of whole-leaf ranges, by their ends' bytes."""
        return {}

    def _score_bounds(
        self,
        start: FloatArray,
        stop: FloatArray,
        level: float,
        comparisons: int,
        estimand: str,
        upper: bool,
    ) -> FloatArray:
        out = np.empty(start.size)
        for first in range(0, start.size, _CUMULANT_CHUNK):
            part = slice(first, first + _CUMULANT_CHUNK)
            queries = self._range_queries(start[part], stop[part])
            key = np.stack([start[part], stop[part]]).tobytes()
            if key not in self._cumulants:
                self._cumulants[key] = self._population_cumulants(queries)
            variance, third = self._polynomials(*self._cumulants[key], estimand)
            out[part] = linear_interval(
                self.leaves @ queries,
                1.0 / self.n,
                variance,
                third,
                level=level,
                comparisons=comparisons,
                upper=upper,
            )
        # Nothing inside: exactly 0 (the low end); everything: exactly 1.
        out = np.where(stop <= start, 0.0, out)
        return np.where((start <= 0) & (stop >= self.resolution), 1.0, out)

    def cumulant_polynomials(
        self, queries: FloatArray, estimand: str = REPORTERS
    ) -> tuple[FloatArray, FloatArray]:
        """Variance (k, 3) and third cumulant (k, 4) of each whole-leaf query's estimate as
        polynomials in the query's true fraction theta (lowest power first).

        Under the hypothesis theta the leaves inside the query share theta in proportion to
        the estimate (clipped at 0; evenly where it is all 0) and those outside share
        ``1 - theta`` likewise; the node fractions are then affine in theta, the variance a
        quadratic and the third cumulant a cubic (:func:`depth_cumulants`, per depth given
        its reports), found from their values at 3 and 4 thetas.

        ``estimand="population"`` counts the sampling of the users from the population.
        ``"reporters"`` takes the users as given: only which depth each reports (a random
        split, n_t of them at depth t) and the mechanisms vary. With ``h`` the query's 0/1
        on a user's leaf and S the population's sampling variance, the split's variance
        is ``n / (n - 1) (S - Var(h) / n)`` (Neyman's allocation variance; the weighted
        depths sum to h for every user, the estimate being unbiased), so the variance is
        the population's plus ``(S - theta (1 - theta)) / (n - 1)``; the third cumulant
        is the population's less the users' own, ``theta (1 - theta) (1 - 2 theta) / n^2``.
        """
        return self._polynomials(*self._population_cumulants(queries), estimand)

    def _population_cumulants(
        self, queries: FloatArray
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Variance, third cumulant and sampling variance (each (5, k)) of the queries'
        estimates for the population at the fractions :data:`_THETAS`."""
        coef = self.smoother.adjoint(queries)
        base = np.clip(np.nan_to_num(self.leaves), 0.0, None)[:, None]
        inside = _spread(base * queries, queries)
        outside = _spread(base * (1.0 - queries), 1.0 - queries)
        out = np.zeros((3, _THETAS.size, queries.shape[1]))
        outside_nodes, inside_nodes = _by_depth(self.tree, outside), _by_depth(self.tree, inside)
        for t, noise in enumerate(self.levels, start=1):
            sums = _DepthSums(noise, coef[t])
            # The power sums are linear in the fractions, which are affine in theta.
            at0 = sums.moments(outside_nodes[t])
            at1 = sums.moments(inside_nodes[t])
            for i, th in enumerate(_THETAS):
                m = tuple((1.0 - th) * x0 + th * x1 for x0, x1 in zip(at0, at1, strict=True))
                out[:, i] += np.array(sums.cumulants(m))
        return out[0], out[1], out[2]

    def _polynomials(
        self, var: FloatArray, third: FloatArray, sampling: FloatArray, estimand: str
    ) -> tuple[FloatArray, FloatArray]:
        """(k, 3) and (k, 4) coefficients from the values at :data:`_THETAS`."""
        th = _THETAS[:, None]
        if estimand == REPORTERS:
            n = float(self.n)
            var = var + (sampling - th * (1.0 - th)) / max(n - 1.0, 1.0)
            third = third - th * (1.0 - th) * (1.0 - 2.0 * th) / n**2
        at_v, at_k = [0, 2, 4], [0, 1, 3, 4]
        v_poly = np.linalg.solve(np.vander(_THETAS[at_v], 3, increasing=True), var[at_v])
        k_poly = np.linalg.solve(np.vander(_THETAS[at_k], 4, increasing=True), third[at_k])
        return np.asarray(v_poly.T, dtype=np.float64), np.asarray(k_poly.T, dtype=np.float64)

    def cdf(self, x: npt.ArrayLike) -> RangeEstimate | list[RangeEstimate]:
        """``P(X < x)`` (``P(X <= hi)`` = 1 at ``hi``) as range estimates of ``[lo, x)``."""
        lo, hi = self.bounds
        values = np.atleast_1d(np.asarray(x, dtype=np.float64))
        if not bool(np.all(np.isfinite(values))):
            raise ParameterError("cdf points must be finite numbers")
        points = np.clip(values, lo, hi)
        r = self._ranges(np.full(points.shape, lo), points)
        ranges = [(lo, float(v)) for v in values]
        out = _range_estimates(ranges, r, self.range_shift, self.range_bounds)
        return out[0] if np.ndim(x) == 0 else out

    @cached_property
    def _edge_cdf(self) -> FloatArray:
        """``P(X < e)`` at every leaf edge (1 at hi)."""
        cdf = np.concatenate([[0.0], np.cumsum(self.leaves)])
        cdf[-1] = 1.0
        return cdf

    @cached_property
    def _edge_stderr(self) -> dict[str, FloatArray]:
        """Standard error of ``P(X < e)`` at every leaf edge, all in one pass, per estimand."""
        return {
            e: np.sqrt(self.prefix_variance(np.arange(self.resolution + 1), e)) for e in ESTIMANDS
        }

    def _depth_terms(self, sampling: bool) -> tuple[list[FloatArray], list[FloatArray]]:
        """Per depth (index 0 the root), the (A, B) of ``coef' Cov coef = sum(coef^2 A) -
        (sum(coef B))^2``: of the estimate's covariance, or (``sampling``) of the part the
        sampling of users makes, ``Var_f(coef) / n_t``."""
        A, B = [np.zeros(1)], [np.zeros(1)]
        for t, noise in enumerate(self.levels, start=1):
            f = self._plug[t - 1]
            if not sampling:
                a, b = noise.terms(f)
            elif noise.n > 0:
                g = self._users[t - 1]
                a, b = g / noise.n, g / math.sqrt(noise.n)
            else:
                a, b = np.zeros(f.shape), np.zeros(f.shape)
            A.append(a)
            B.append(b)
        return A, B

    @cached_property
    def _subtree_sums(
        self,
    ) -> dict[bool, tuple[list[FloatArray], list[dict[int, FloatArray]], list[FloatArray]]]:
        """Per node w: Q(w) and R_t(w) for t >= depth(w) (see :meth:`prefix_variance`), and
        its own ``alpha^2 A``; for the estimate's covariance (key False) and for its
        sampling part (True)."""
        return {sampling: self._sums_of(*self._depth_terms(sampling)) for sampling in (False, True)}

    def _sums_of(
        self, A: list[FloatArray], B: list[FloatArray]
    ) -> tuple[list[FloatArray], list[dict[int, FloatArray]], list[FloatArray]]:
        tree, sm = self.tree, self.smoother
        h = tree.height
        Q: list[FloatArray] = [np.zeros(1)] * (h + 1)
        R: list[dict[int, FloatArray]] = [{} for _ in range(h + 1)]
        own = [sm.alpha[t] ** 2 * A[t] for t in range(h + 1)]
        Q[h] = sm.alpha[h] ** 2 * A[h]
        R[h][h] = sm.alpha[h] * B[h]
        for m in range(h - 1, 0, -1):
            starts = tree.child_starts(m)
            Q[m] = sm.alpha[m] ** 2 * A[m] + sm.beta[m] ** 2 * np.add.reduceat(Q[m + 1], starts)
            R[m][m] = sm.alpha[m] * B[m]
            for t in range(m + 1, h + 1):
                R[m][t] = sm.beta[m] * np.add.reduceat(R[m + 1][t], starts)
        return Q, R, own

    def prefix_variance(self, at: npt.ArrayLike, estimand: str = POPULATION) -> FloatArray:
        """Variance of ``P(X < e_j)`` for leaf edges j, in O(height^2) each, about the
        population's (``estimand="population"``) or the reporting users' distribution
        function (``"reporters"``, as :meth:`variance`).

        For the prefix of leaves ``[0, j)``, the top-down half of the adjoint is nonzero
        only on the children of ``S_t``, the node holding leaf j at each depth t, and
        each such child w passes its coefficient ``G(w)`` down its subtree scaled by the
        products of ``beta`` along the way. With ``Q(w)`` (the subtree's sum of
        ``(alpha beta...)^2 A``) and ``R_t(w)`` (its depth-t sum of ``alpha beta... B``)
        precomputed bottom-up, the variance is a sum over the path of the siblings'
        ``G^2 Q`` and the path nodes' own ``G^2 alpha^2 A``, less the squared per-depth sums
        of ``G R``. The sampling part is the same sum with the sampling's (A, B). The tests
        compare both with the dense adjoint.
        """
        estimand = check_estimand(estimand)
        js = np.asarray(at, dtype=np.int64)
        inside = (js > 0) & (js < self.tree.resolution)
        safe = np.where(inside, js, 1)
        out = np.maximum(self._prefix_variance(safe, False), 0.0)
        if estimand == REPORTERS:
            below = np.clip(np.concatenate([[0.0], np.cumsum(self._raw_leaves)]), 0.0, 1.0)[safe]
            spread = np.maximum(below - below * below, 0.0)
            out = self._for_reporters(out, self._prefix_variance(safe, True), spread)
        return np.where(inside, out, 0.0)

    def _prefix_variance(self, j: IntArray, sampling: bool) -> FloatArray:
        tree, sm = self.tree, self.smoother
        h = tree.height
        Q, R, own_part = self._subtree_sums[sampling]
        # S[t]: index of the depth-t node holding leaf j (the root at t = 0).
        S = [j // tree.sizes[t] for t in range(h + 1)]
        first = [S[0], *(S[t - 1] * tree.branching for t in range(1, h + 1))]
        r = self._path_shares(S, first)
        square = np.zeros(j.size)
        linear = {t: np.zeros(j.size) for t in range(1, h + 1)}
        g_path = np.zeros(j.size)  # total adjoint at S[t - 1] (0 at the root)
        for m in range(1, h + 1):
            incoming = (sm.beta[m - 1][S[m - 1]] * g_path) if m > 1 else np.zeros(j.size)
            g_before = 1.0 - r[m - 1] + incoming
            g_after = -r[m - 1] + incoming
            g_path = r[m] - r[m - 1] + incoming
            last = np.minimum(first[m] + tree.branching, tree.counts[m])
            q_before, q_after = _around(Q[m], first[m], S[m], last)
            own = own_part[m][S[m]]  # the path node alone: its children follow
            square += g_before**2 * q_before + g_after**2 * q_after + g_path**2 * own
            for t in range(m, h + 1):
                r_before, r_after = _around(R[m][t], first[m], S[m], last)
                term = g_before * r_before + g_after * r_after
                if t == m:
                    term = term + g_path * R[m][m][S[m]]
                linear[t] += term
        return square - sum(v * v for v in linear.values())

    def _path_shares(self, S: list[IntArray], first: list[IntArray]) -> list[FloatArray]:
        """``r[t]``: the top-down adjoint at ``S[t]`` (the share of S[t] below j, after
        the gammas), for t = height .. 0."""
        h = self.tree.height
        r: list[FloatArray] = [np.zeros(S[0].size)] * (h + 1)
        for t in range(h - 1, -1, -1):
            g = self.smoother.gamma[t + 1]
            cum = np.concatenate([[0.0], np.cumsum(g)])
            before = cum[S[t + 1]] - cum[first[t + 1]]  # gammas of S's siblings before it
            r[t] = before + g[S[t + 1]] * r[t + 1]
        return r

    def edge_band(self, estimand: str = REPORTERS) -> tuple[FloatArray, FloatArray]:
        """``P(X < e)`` and its standard error at every leaf edge, about the reporting
        users' distribution function (the default) or the population's."""
        return self._edge_cdf, self._edge_stderr[check_estimand(estimand)].copy()

    def quantile(
        self, q: float, level: float = 0.95, *, estimand: str = REPORTERS
    ) -> QuantileEstimate:
        """The ``q``-quantile (0 < q < 1) with its ``level`` interval (see QuantileEstimate),
        of the reporting users' values (``estimand="reporters"``) or the population's."""
        qq = _check_number(q, "q")
        if not 0.0 < qq < 1.0:
            raise ParameterError(f"q must be in (0, 1), got {q!r}")
        level = check_level(level)
        estimand = check_estimand(estimand)
        shift = partial(self.quantile_shift, qq)
        if self.n == 0:
            return QuantileEstimate(
                qq, math.nan, math.nan, math.nan, level, estimand=estimand, _shift=shift
            )
        tree = self.tree
        # Bonferroni over the depths: each depth's test has level 1 - alpha / height.
        z = normal_quantile(level, comparisons=tree.height)
        cdf, band = self.edge_band(estimand)  # every edge in one pass (O(height^2) each)
        edges = self.edges
        j, k = 0, self.resolution  # leaf edges bounding the quantile
        for t in range(1, tree.height + 1):
            # The depth-t nodes inside [j, k] (j and k are edges of depth t - 1 nodes).
            size = tree.sizes[t]
            at = np.unique(np.minimum(np.arange(j, k + size, size), k))
            se, c = band[at], cdf[at]
            # Node m can hold the quantile iff P(X < start) <= q <= P(X < end): keep the
            # nodes where neither side is rejected. The last node whose start is not
            # rejected always qualifies (j's is not: it qualified at depth t - 1).
            possible = np.flatnonzero((c[:-1] - z * se[:-1] <= qq) & (c[1:] + z * se[1:] >= qq))
            j, k = int(at[possible[0]]), int(at[possible[-1] + 1])
        value = min(max(self._read_quantile(qq), float(edges[j])), float(edges[k]))
        return QuantileEstimate(
            qq, value, float(edges[j]), float(edges[k]), level, estimand=estimand, _shift=shift
        )

    @cached_property
    def _monotone_cdf(self) -> FloatArray:
        """The cdf at the leaf edges made non-decreasing: the mean of its running maximum
        and its running minimum from the right."""
        clipped = np.clip(self._edge_cdf, 0.0, 1.0)
        return 0.5 * (np.maximum.accumulate(clipped) + np.minimum.accumulate(clipped[::-1])[::-1])

    def _read_quantile(self, q: float) -> float:
        """The point estimate of the q-quantile: :attr:`_monotone_cdf`, linear within leaves,
        read at q (the bounds beyond 0 and 1)."""
        mono, edges = self._monotone_cdf, self.edges
        i = int(np.searchsorted(mono, q, side="left"))  # first edge with mono >= q
        if i == 0 or i > self.resolution:
            return float(edges[min(i, self.resolution)])
        step = mono[i] - mono[i - 1]
        share = (q - mono[i - 1]) / step if step > 0 else 1.0
        return float(edges[i - 1] + share * (edges[i] - edges[i - 1]))

    # --- the residual: how far forged reports can move the answers --------------------
    def _forgery(self, queries: FloatArray) -> LinearShift:
        """The forgery gains of leaf queries (L, k): an answer ``query . leaves`` is
        ``sum_t coef_t . x_t + c`` in the depths' debiased support fractions x_t (the
        smoother's adjoint; unbiased for any depth counts, so honest reports add no shift)."""
        coef = self.smoother.adjoint(queries)
        gains = [
            part_gains(coef[t].T, None, noise.p, noise.q, 1 if noise.exclusive else None)
            for t, noise in enumerate(self.levels, start=1)
        ]
        up, down = (np.stack([g[i] for g in gains], axis=1) for i in (0, 1))
        return LinearShift(up, down, np.full(self.tree.height, 1.0 / self.tree.height))

    def query_shift(self, queries: npt.ArrayLike, beta: float) -> Any:
        """The largest change a forged fraction ``beta`` of the n reports (any the mechanism
        accepts, at whichever depths suit them) can make to each expected ``query . leaves``,
        whatever the honest population: :class:`ldpkit.screening.LinearShift`, each depth
        chosen with probability ``1 / height``, a randomized-response depth's report
        supporting one node and a hashed one's any set. ``queries``: (L,) or (L, k)."""
        b = check_fraction(beta)
        q = np.asarray(queries, dtype=np.float64)
        cols = q.reshape(self.resolution, -1)
        parts = range(0, cols.shape[1], _BAND_CHUNK)
        out = np.concatenate([self._forgery(cols[:, i : i + _BAND_CHUNK]).shift(b) for i in parts])
        return float(out[0]) if q.ndim == 1 else out

    def range_shift(self, lower: npt.ArrayLike, upper: npt.ArrayLike, beta: float) -> Any:
        """:meth:`query_shift` of the fractions in ``[lower, upper)`` (scalars or arrays),
        read as :meth:`fraction` reads them (a cut leaf in proportion)."""
        a, b = self._range_positions(np.atleast_1d(lower), np.atleast_1d(upper))
        out = self.query_shift(self._range_queries(a, b), beta)
        return float(out[0]) if np.ndim(lower) == 0 else out

    @cached_property
    def _edge_forgery(self) -> LinearShift:
        """:meth:`_forgery` of ``P(X < e)`` at every leaf edge."""
        leaf = np.arange(self.resolution)[:, None]
        parts = [
            self._forgery(
                (leaf < np.arange(i, min(i + _BAND_CHUNK, self.resolution + 1))).astype(float)
            )
            for i in range(0, self.resolution + 1, _BAND_CHUNK)
        ]
        up, down = (np.concatenate([getattr(s, side) for s in parts]) for side in ("up", "down"))
        return LinearShift(up, down, parts[0].shares)

    def quantile_shift(self, q: float, beta: float) -> float:
        """How far a forged fraction ``beta`` of the reports can move the q-quantile's point
        estimate, in the metric's units. Forgeries move ``P(X < e)`` by at most ``s`` at
        every leaf edge e (the largest :meth:`query_shift` over the edges), and so the
        monotone cdf the point estimate reads, linear within leaves; the quantile of a cdf
        within ``s`` of F lies between F's ``(q - s)``- and ``(q + s)``-quantiles: the
        larger distance of those from F's q-quantile, F the estimated cdf."""
        s = float(np.max(self._edge_forgery.shift(beta)))
        if self.n == 0:
            return math.nan
        here = self._read_quantile(q)
        return max(self._read_quantile(q + s) - here, here - self._read_quantile(q - s))

    def _mean_shift(self, beta: float) -> float:
        middle = np.arange(self.resolution, dtype=np.float64) + 0.5
        return float(self.leaf_width * self.query_shift(middle, beta))

    def quantiles(
        self, qs: Sequence[float], level: float = 0.95, *, estimand: str = REPORTERS
    ) -> list[QuantileEstimate]:
        return [self.quantile(q, level, estimand=estimand) for q in qs]

    def mean(self, *, estimand: str = REPORTERS) -> DistributionMean:
        """The mean of the clipped values, every leaf's mass at its middle (see class doc);
        its standard error about the reporting users' mean (``estimand="reporters"``) or
        the population's (``"population"``)."""
        estimand = check_estimand(estimand)
        lo, _ = self.bounds
        w = self.leaf_width
        if self.n == 0:
            return DistributionMean(
                math.nan, math.nan, w / 2.0, estimand=estimand, _shift=self._mean_shift
            )
        middle = np.arange(self.resolution, dtype=np.float64) + 0.5
        mean = lo + w * float(self.leaves @ middle)
        se = w * math.sqrt(float(self.variance(middle, estimand)))
        return DistributionMean(mean, se, w / 2.0, estimand=estimand, _shift=self._mean_shift)

    def to_dict(
        self,
        level: float = 0.95,
        *,
        bins: int | None = None,
        edges: Sequence[float] | None = None,
        quantiles: Sequence[float] = (),
        range_: tuple[float, float] | None = None,
        estimand: str = REPORTERS,
        simultaneous: bool = False,
    ) -> dict[str, Any]:
        """The answers as plain JSON-ready values (non-finite numbers become None).
        ``simultaneous``: the bins' intervals cover all bins together at ``level``.

        Keys: mechanism, epsilon, n, level, estimand, bounds, resolution, items (one per
        bin: lower, upper, estimate, stderr, low, high), mean, mean_stderr, mean_low,
        mean_high, methods; ``quantiles`` (q, value, low, high) when asked;
        ``range`` (lower, upper, estimate, stderr, low, high) when ``range_`` is given.
        ``estimand`` (``"reporters"`` or ``"population"``) is what every interval is about:
        the bins', the range's, the mean's (and ``mean_stderr``) and the quantiles'.
        """
        level = check_level(level)
        estimand = check_estimand(estimand)
        hist = self.histogram(bins, edges=edges)
        mean = self.mean(estimand=estimand)
        mean_low, mean_high = mean.ci(level)
        out: dict[str, Any] = {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "n": self.n,
            "level": level,
            "estimand": estimand,
            "bounds": [self.bounds[0], self.bounds[1]],
            "resolution": self.resolution,
            "simultaneous": bool(simultaneous),
            "items": hist.items(level, simultaneous=simultaneous, estimand=estimand),
            "mean": finite_or_none(mean.mean),
            "mean_stderr": finite_or_none(mean.stderr),
            "mean_low": finite_or_none(float(mean_low)),
            "mean_high": finite_or_none(float(mean_high)),
            "methods": {"items": hist.method, "mean": mean.method},
        }
        if quantiles:
            out["quantiles"] = [
                qe.to_dict() for qe in self.quantiles(quantiles, level, estimand=estimand)
            ]
            out["methods"]["quantiles"] = BAND_INVERSION
        if range_ is not None:
            try:
                lower, upper = range_
            except (TypeError, ValueError):
                raise ParameterError(
                    f"range must be a pair (lower, upper), got {range_!r}"
                ) from None
            r = self.fraction(lower, upper)
            out["range"] = r.to_dict(level, estimand=estimand)
            out["methods"]["range"] = r.method
        return out
