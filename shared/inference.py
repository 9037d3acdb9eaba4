"""Linear inference over partitions of base cells: the engine of structured metrics.

Setting
-------
A user's value is one of ``m`` *base cells* (a leaf of a tree, a cell of a table); ``pi``
is the vector of base-cell fractions among the ``n`` users who reported. A *view* is a
partition of the base cells into groups (the nodes at one depth of a tree, the
categories of one attribute of a table, or the base cells themselves), given as one
integer label per base cell. Each user reports one view, chosen at random with
probability ``w_v`` independently of their value, through a pure frequency oracle over
that view's groups. Per view ``v`` the collector keeps ``n_v`` and the oracle's support
counts, and debiases them into ``y_v`` (unbiased for the groups' fractions among the
users who reported view ``v``).

Estimator
---------
Generalized least squares with the constraint that the base fractions sum to one::

    pi_hat = argmin  sum_v ||y_v - A_v pi||^2 / alpha_v   subject to  1' pi = 1,

with ``A_v`` the 0/1 matrix summing base cells into view v's groups and ``alpha_v`` a
*fixed* working variance per view (its per-item variance at the uniform population,
section "Working variances"). Because the weights do not depend on the data, ``pi_hat``
is an affine function of the ``y_v`` (``pi_hat = M y + c``): exactly unbiased, and every
coarser estimate (a node, a marginal) is a sum of base-cell estimates, so parents equal
the sum of their children by construction. For a tree with equal variances per level
this is the estimator of Hay et al. (VLDB 2010), whose two passes compute the same
least-squares solution; with one view of all base cells it is the projection
``y - (1'y - 1) / m`` (a no-op for GRR and subset selection, whose estimates already sum
to one, and a variance reduction for unary encoding).

Covariance
----------
Conditionally on the view sizes ``n_v`` the assignment of users to views is a uniformly
random partition of the n users, and the oracles' noise is independent across users, so

    Cov(y_v, y_u) = [v == u] (Sigma_v(f_v) / n_v + A_v S A_v' / n_v) - A_v S A_u' / n,

where ``S = n / (n - 1) (diag(pi) - pi pi')`` is the finite-population covariance of a
user's base-cell indicator (the second and third terms are the variance of sampling the
n_v users of view v out of n; they vanish with a single view, n_v = n) and ``Sigma_v(f)``
is the oracle's per-user covariance of its debiased support vector, which for the
exchangeable pure oracles used here (GRR, SUE, OUE, subset selection) is

    Sigma(f) = diag(delta0 + delta1 f) + kappa 1 1' + lambda (1 f' + f 1'),

with constants from the oracle's p, q and pair-support probabilities (see
:class:`NoiseModel`). The variance of any output ``b' y`` then needs only sums of the
coefficients against ``f`` and ``pi``, all linear in pi except for the sampling terms'
squares; so along the path ``pi(theta) = theta u + (1 - theta) o`` (u: the plug-in
population inside the output, rescaled to theta; o: outside, rescaled to 1 - theta) an
output's variance is a quadratic ``v0 + v1 theta + v2 theta^2`` in its own value theta.

Intervals
---------
Score-type: the set of theta in [0, 1] with ``(est - theta)^2 <= z^2 V(theta)``, the
variance taken at the hypothesised value (as in Wilson's interval), not at the estimate.
With one view V depends on theta alone and this is the exact score interval of the
roll-up; with several views the path fixes the rest of the population at its plug-in
shape.

References
----------
M. Hay, V. Rastogi, G. Miklau, D. Suciu, "Boosting the accuracy of differentially private
histograms through consistency", PVLDB 3(1), 2010.

G. Cormode, T. Kulkarni, D. Srivastava, "Answering range queries under local
differential privacy", PVLDB 12(10), 2019 (level sampling with consistency under LDP).

W. Qardaji, W. Yang, N. Li, "Understanding hierarchical methods for differentially
private histograms", PVLDB 6(14), 2013 (weights per level).

T. Wang, M. Lopuhaä-Zwakenberg, Z. Li, B. Skoric, N. Li, "Locally differentially private
frequency estimation with consistency", NDSS 2020 (Norm-Sub).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from .errors import ParameterError
from .screening import LinearShift, part_gains

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MAX_DENSE_CELLS = 1024
"""Designs with several views keep dense (outputs x observations) coefficient matrices;
they are limited to this many base cells (about 10 MB). One view scales to any size."""

Path = Callable[[FloatArray, FloatArray, FloatArray, FloatArray], tuple[FloatArray, FloatArray]]
"""(full, inner, inner_uniform, total) -> (value at theta = 0, slope) of a linear functional."""
_Functional = tuple[FloatArray, FloatArray | None, FloatArray, FloatArray, FloatArray]

IPF_TOLERANCE = 1e-12
IPF_MAX_ITERATIONS = 2000


@dataclass(frozen=True)
class NoiseModel:
    """Per-user covariance of one oracle's *debiased* support vector.

    For a pure oracle a report supports the true item with probability ``p`` and any
    other with ``q``; ``r1`` is the probability that it supports two given items one
    of which is the true one, ``r0`` two given items neither of which is. Averaged over
    users whose items have fractions f, the covariance of the support indicators is
    ``diag(f p(1-p) + (1-f) q(1-q))`` on the diagonal and
    ``kappa + lambda (f_v + f_w)`` off it, with ``kappa = r0 - q^2`` and
    ``lambda = r1 - r0 - q (p - q)``. Dividing by ``(p - q)^2`` gives the debiased form
    ``diag(delta0 + delta1 f) + kappa 1 1' + lambda (1 f' + f 1')`` stored here.
    """

    p: float
    q: float
    r1: float
    r0: float
    supports: int | None = None
    """How many items every report supports, when fixed (``FrequencyOracle.support_size``)."""
    delta0: float = field(init=False)
    delta1: float = field(init=False)
    kappa: float = field(init=False)
    lam: float = field(init=False)

    def __post_init__(self) -> None:
        p, q = self.p, self.q
        scale = 1.0 / (p - q) ** 2
        kappa = self.r0 - q * q
        lam = self.r1 - self.r0 - q * (p - q)
        object.__setattr__(self, "kappa", kappa * scale)
        object.__setattr__(self, "lam", lam * scale)
        object.__setattr__(self, "delta0", (q * (1 - q) - kappa) * scale)
        object.__setattr__(self, "delta1", (p * (1 - p) - q * (1 - q) - 2 * lam) * scale)


def _partition(labels: npt.ArrayLike, m: int, what: str) -> tuple[IntArray, int]:
    array = np.asarray(labels)
    if array.shape != (m,) or array.dtype.kind not in "iu":
        raise ParameterError(f"{what} must be {m} integer labels")
    size = int(array.max()) + 1 if m else 0
    if array.min() < 0 or np.unique(array).size != size:
        raise ParameterError(f"{what} must label its groups 0..k-1, each used")
    return array.astype(np.int64), size


def _partitions(
    partitions: Sequence[npt.ArrayLike], m: int, what: str
) -> tuple[list[IntArray], list[int]]:
    """Labels and group counts of each partition (:func:`_partition`)."""
    parsed = [_partition(labels, m, what) for labels in partitions]
    return [p[0] for p in parsed], [p[1] for p in parsed]


@dataclass(frozen=True)
class Quadratic:
    """Per output: variance ``v0 + v1 theta + v2 theta^2`` along the path of its value,
    and ``correction``, half the largest change one support count makes to the estimate
    (the continuity correction of its interval)."""

    v0: FloatArray
    v1: FloatArray
    v2: FloatArray
    correction: FloatArray | None = None

    def at(self, theta: FloatArray) -> FloatArray:
        return self.v0 + theta * (self.v1 + theta * self.v2)

    def take(self, index: IntArray | slice) -> Quadratic:
        """The outputs at ``index`` (the last axis)."""
        c = None if self.correction is None else self.correction[..., index]
        return Quadratic(self.v0[..., index], self.v1[..., index], self.v2[..., index], c)

    def row(self, r: int) -> Quadratic:
        c = None if self.correction is None else self.correction[r]
        return Quadratic(self.v0[r], self.v1[r], self.v2[r], c)

    def worst(self) -> FloatArray:
        """The largest variance over theta in [0, 1] (ends, or the vertex if inside)."""
        ends = np.maximum(self.v0, self.v0 + self.v1 + self.v2)
        with np.errstate(divide="ignore", invalid="ignore"):
            vertex = np.where(self.v2 < 0, -self.v1 / (2 * self.v2), -1.0)
        inside = (vertex > 0) & (vertex < 1)
        return np.where(inside, np.maximum(ends, self.at(np.clip(vertex, 0, 1))), ends)


@dataclass(frozen=True)
class Skew:
    """The third cumulant of each output's estimate along the path of its value.

    An output is ``sum_v sum_g b_vg y_vg + c``, ``y_v`` view v's debiased support
    fractions from its ``n_v`` users. The estimand is the reporters' own fraction, so the
    users are given and each adds an independent ``W``: it reports view v with
    probability ``w_v`` (the design's weights; ``n_v = w_v n`` users expected), and then
    ``Z_v = sum_g c_g S_g`` with ``c = b_v / ((p - q) n_v)`` and ``S_g`` whether its report
    supports group g. Given the user's base cell j the raw moments of ``Z_v`` follow from
    the oracle's law exactly (:func:`user_moments`: every coefficient of every group, the
    supports' joint moments included), those of W are their mixture over the views, and
    ``kappa_3(W | j) = K_j / n^3``. The estimate's third cumulant is the sum over the
    users, ``n sum_j f_j K_j / n^3``: at value theta the users hold ``theta`` times the
    output's inside population and ``1 - theta`` times its outside one (each spread as
    the plug-in), so it is affine in theta; ``inside`` and ``outside`` (R, outputs) hold
    ``sum_j f_j K_j`` over each side.
    """

    inside: FloatArray
    outside: FloatArray
    n: FloatArray
    """(R, 1): the users."""

    def take(self, index: IntArray | slice) -> Skew:
        """The outputs at ``index`` (the last axis)."""
        return Skew(self.inside[..., index], self.outside[..., index], self.n)

    def row(self, r: int) -> Skew:
        return Skew(self.inside[r], self.outside[r], self.n[r])

    def third_cumulant(self, theta: FloatArray) -> FloatArray:
        """Each output's third cumulant at value ``theta`` (shaped as the outputs)."""
        t = np.clip(np.asarray(theta, dtype=np.float64), 0.0, 1.0)
        out: FloatArray = (t * self.inside + (1.0 - t) * self.outside) / self.n**2
        return out


def _inclusions(size: int, pool: int) -> tuple[float, float, float]:
    """The chance that 1, 2 and 3 given members of a pool are in a uniform random subset
    of ``size`` of its ``pool`` members."""
    out = [1.0, 1.0, 1.0]
    for k in range(3):
        for i in range(k + 1):
            out[k] *= max(size - i, 0) / (pool - i) if pool - i > 0 else 0.0
    return out[0], out[1], out[2]


def user_moments(noise: NoiseModel, b: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``E[Z^k | u]`` for k = 1, 2, 3, with ``Z = sum_g b_g S_g`` one report's weighted
    supports and u the user's true group; ``b`` (outputs, groups), each result the same.

    One support (``supports == 1``, randomized response): ``S_u`` with probability p, any
    other with q. A fixed number s of supports (subset selection): the true group with
    probability p and the rest a uniform subset of the others (s - 1 or s of them),
    whose sums' moments follow from the inclusion chances of 1, 2 and 3 given members.
    Otherwise (unary encodings) every support is independent: p for u, q for the others.
    """
    p, q = noise.p, noise.q
    power = [b, b * b, b * b * b]
    total = [x.sum(axis=1, keepdims=True) for x in power]
    others = [t - x for t, x in zip(total, power, strict=True)]  # Q_k: sums over g != u
    if noise.supports == 1:
        e1, e2, e3 = (p * x + q * o for x, o in zip(power, others, strict=True))
        return e1, e2, e3
    if noise.supports is not None:
        pool = b.shape[1] - 1
        q1, q2, q3 = others

        def subset(size: int) -> tuple[FloatArray, FloatArray, FloatArray]:
            i1, i2, i3 = _inclusions(size, pool)
            t1 = i1 * q1
            t2 = i1 * q2 + i2 * (q1 * q1 - q2)
            t3 = i1 * q3 + 3.0 * i2 * (q2 * q1 - q3) + i3 * (q1**3 - 3.0 * q1 * q2 + 2.0 * q3)
            return t1, t2, t3

        s = int(noise.supports)
        a1, a2, a3 = subset(s - 1)  # with the true group
        o1, o2, o3 = subset(s)  # without it
        with_u = (b + a1, b * b + 2 * b * a1 + a2, b**3 + 3 * b * b * a1 + 3 * b * a2 + a3)
        e1, e2, e3 = (p * w + (1 - p) * o for w, o in zip(with_u, (o1, o2, o3), strict=True))
        return e1, e2, e3
    k1 = p * b + q * others[0]
    k2 = p * (1 - p) * power[1] + q * (1 - q) * others[1]
    k3 = p * (1 - p) * (1 - 2 * p) * power[2] + q * (1 - q) * (1 - 2 * q) * others[2]
    return k1, k2 + k1 * k1, k3 + 3 * k2 * k1 + k1**3


class LinearViews:
    """The GLS estimator of base-cell fractions from several views, and its covariance.

    Parameters
    ----------
    m : int
        The number of base cells.
    views : sequence of label arrays
        One partition of the base cells per view (what a user of that view reports).
    weights : sequence of float
        The probability that a user reports each view (summing to one).
    noises : sequence of NoiseModel
        Each view's oracle noise.
    outputs : sequence of label arrays
        The partitions whose groups are estimated (every depth of a tree; the cells and
        each attribute of a table). Outputs are numbered partition by partition.
    """

    def __init__(
        self,
        m: int,
        views: Sequence[npt.ArrayLike],
        weights: Sequence[float],
        noises: Sequence[NoiseModel],
        outputs: Sequence[npt.ArrayLike],
    ) -> None:
        if not (len(views) == len(weights) == len(noises)) or not views:
            raise ParameterError("each view needs a weight and a noise model")
        self.m = m
        self.view_labels, self.view_sizes = _partitions(views, m, "a view")
        self.weights = np.asarray(weights, dtype=np.float64)
        self.noises = list(noises)
        self.output_labels, self.output_sizes = _partitions(outputs, m, "an output")
        self.output_offsets = np.concatenate([[0], np.cumsum(self.output_sizes)]).astype(int)
        self.n_outputs = int(self.output_offsets[-1])
        self.view_offsets = np.concatenate([[0], np.cumsum(self.view_sizes)]).astype(int)
        self.n_obs = int(self.view_offsets[-1])
        # Membership pairs (output i, base cell j in i): m per output partition.
        self.pair_rows = np.concatenate(
            [off + lab for off, lab in zip(self.output_offsets, self.output_labels, strict=False)]
        )
        self.pair_cols = np.tile(np.arange(m), len(self.output_labels))
        self.output_members = np.bincount(self.pair_rows, minlength=self.n_outputs).astype(float)
        # One view that is a bijection of the base cells: the closed form applies.
        self.single = len(self.view_labels) == 1 and self.view_sizes[0] == m
        if not self.single and m > MAX_DENSE_CELLS:
            raise ParameterError(
                f"designs with several views hold at most {MAX_DENSE_CELLS} base cells, got {m}"
            )

    def working_variances(self) -> FloatArray:
        """Per view, an item's variance at the uniform population with n = 1."""
        alphas = []
        for size, w, noise in zip(self.view_sizes, self.weights, self.noises, strict=True):
            f = 1.0 / size
            noise_part = (noise.delta0 + noise.delta1 * f) / w
            sampling = f * (1.0 / w - 1.0)
            alphas.append(noise_part + sampling)
        return np.asarray(alphas)

    @cached_property
    def _dense(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(B, c, G): outputs = B y + c; G = B expanded to base cells (outputs x m)."""
        m = self.m
        alphas = self.working_variances()
        H = np.zeros((m, m))
        rhs = np.zeros((m + 1, self.n_obs + 1))
        base = np.arange(m)
        for v, labels in enumerate(self.view_labels):
            H += (labels[:, None] == labels[None, :]) / alphas[v]
            rhs[base, self.view_offsets[v] + labels] = 1.0 / alphas[v]
        kkt = np.zeros((m + 1, m + 1))
        kkt[:m, :m] = H
        kkt[:m, m] = 1.0
        kkt[m, :m] = 1.0
        rhs[m, self.n_obs] = 1.0
        try:
            solution = np.linalg.solve(kkt, rhs)
        except np.linalg.LinAlgError:
            raise ParameterError(
                "the views do not identify every base cell (one view must separate them)"
            ) from None
        M, c = solution[:m, : self.n_obs], solution[:m, self.n_obs]
        B = np.empty((self.n_outputs, self.n_obs))
        cout = np.empty(self.n_outputs)
        for k, labels in enumerate(self.output_labels):
            lo = self.output_offsets[k]
            order = np.argsort(labels, kind="stable")
            starts = np.flatnonzero(np.r_[True, np.diff(labels[order]) != 0])
            B[lo : lo + starts.size] = np.add.reduceat(M[order], starts, axis=0)
            cout[lo : lo + starts.size] = np.add.reduceat(c[order], starts)
        G = np.zeros((self.n_outputs, m))
        for v, labels in enumerate(self.view_labels):
            G += B[:, self.view_offsets[v] + labels]
        return B, cout, G

    @cached_property
    def _pairs_sorted(self) -> tuple[IntArray, IntArray]:
        """Membership pairs ordered by output: (base cell of each pair, start of each output)."""
        order = np.argsort(self.pair_rows, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(self.pair_rows[order]) != 0])
        return order, starts

    def sum_outputs(self, base: FloatArray) -> FloatArray:
        """(R, outputs): every output's sum of the base-cell values in ``base`` (R, m)."""
        order, starts = self._pairs_sorted
        return np.add.reduceat(base[:, self.pair_cols[order]], starts, axis=1)

    def _sum_pairs(self, values: FloatArray) -> FloatArray:
        """(R, outputs): per output, the sum of ``values`` (R, pairs) over its pairs."""
        order, starts = self._pairs_sorted
        return np.add.reduceat(values[:, order], starts, axis=1)

    @cached_property
    def whole(self) -> npt.NDArray[np.bool_]:
        """Outputs holding every base cell: everyone, whose fraction is 1 exactly."""
        return self.output_members >= self.m

    def split(self, sums: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(sizes (R, views), counts (R, obs)) from sums holding per view ``[n_v, counts...]``."""
        starts = self.view_offsets[:-1] + np.arange(len(self.view_sizes))
        sizes = sums[:, starts]
        keep = np.ones(sums.shape[1], dtype=bool)
        keep[starts] = False
        return sizes, sums[:, keep]

    def debias(self, counts: FloatArray, sizes: FloatArray) -> FloatArray:
        """(R, obs): per view, unbiased group fractions among that view's users."""
        per_obs = np.repeat(np.arange(len(self.view_sizes)), self.view_sizes)
        p = np.array([nm.p for nm in self.noises])[per_obs]
        q = np.array([nm.q for nm in self.noises])[per_obs]
        with np.errstate(divide="ignore", invalid="ignore"):
            out: FloatArray = (counts / sizes[:, per_obs] - q) / (p - q)
        return out

    def point(self, y: FloatArray) -> FloatArray:
        """(R, outputs): every output's unbiased estimate from debiased ``y`` (R, obs)."""
        if self.single:
            base = y[:, self.view_labels[0]]  # in base-cell order
            base = base - (base.sum(axis=1, keepdims=True) - 1.0) / self.m
            out = self.sum_outputs(base)
        else:
            B, c, _ = self._dense
            out = y @ B.T + c
        out[:, self.whole] = 1.0
        return out

    def base_of(self, outputs: FloatArray, partition: int) -> FloatArray:
        """(R, m): base-cell values from an output partition that is a bijection of them."""
        return outputs[:, self.output_offsets[partition] + self.output_labels[partition]]

    def variance_quadratic(self, pi: FloatArray, sizes: FloatArray, n: FloatArray) -> Quadratic:
        """(R, outputs): each output's variance along the path of its value, around ``pi``.

        ``pi`` (R, m) is a plug-in population (non-negative, summing to one: the consistent
        estimate); ``sizes`` (R, views) the users of each view; ``n`` (R,) their total.
        """
        pi, sizes, n = (np.asarray(a, dtype=np.float64) for a in (pi, sizes, n))
        if self.single:
            single = self._single_quadratic(sizes[:, 0])
            return self._known_total(self._with_correction(single, sizes))
        theta = self.sum_outputs(pi)
        s = self.output_members
        inside_empty = theta <= 0
        outside_empty = theta >= 1
        inside_share = np.where(inside_empty, 1.0, theta)
        outside_share = np.where(outside_empty, 1.0, 1.0 - theta)
        outside_count = np.maximum(self.m - s, 1)

        def path(
            full: FloatArray, inner: FloatArray, inner_unif: FloatArray, total: FloatArray
        ) -> tuple[FloatArray, FloatArray]:
            # Value of a linear functional at u (inside) and o (outside) for every output.
            at_u = np.where(inside_empty, inner_unif, inner / inside_share)
            outside_unif = (total - inner_unif * s) / outside_count
            at_o = np.where(outside_empty, outside_unif, (full - inner) / outside_share)
            return at_o, at_u - at_o

        return self._known_total(self._with_correction(self._assemble(pi, sizes, n, path), sizes))

    def _known_total(self, quadratic: Quadratic) -> Quadratic:
        # An output holding every base cell is everyone: its fraction is 1, exactly.
        if not self.whole.any():
            return quadratic
        zero = np.where(self.whole, 0.0, 1.0)
        c = None if quadratic.correction is None else quadratic.correction * zero
        return Quadratic(quadratic.v0 * zero, quadratic.v1 * zero, quadratic.v2 * zero, c)

    @cached_property
    def _count_steps(self) -> FloatArray:
        """Per view and output: the range of the output's coefficients on that view's
        debiased estimates (the largest change one unit of a support count can make,
        times n_v (p - q)). One view: 1 (a count moves the output by 1 / (n (p - q)))."""
        if self.single:
            return np.ones((1, self.n_outputs))
        return np.array([np.ptp(b, axis=1) for b in self._blocks])

    def _with_correction(self, quadratic: Quadratic, sizes: FloatArray) -> Quadratic:
        delta = np.array([nm.p - nm.q for nm in self.noises])
        scale = 1.0 / (np.maximum(sizes, 1.0) * delta)  # (R, views)
        correction = 0.5 * np.max(self._count_steps[None, :, :] * scale[:, :, None], axis=1)
        return Quadratic(quadratic.v0, quadratic.v1, quadratic.v2, correction)

    def variances_at(self, pi: FloatArray, sizes: FloatArray, n: FloatArray) -> FloatArray:
        """(R, outputs): each output's variance when the population is exactly ``pi``."""
        pi, sizes, n = (np.asarray(a, dtype=np.float64) for a in (pi, sizes, n))
        if self.single:
            single = self._known_total(self._single_quadratic(sizes[:, 0]))
            return single.at(self.sum_outputs(pi))
        quadratic = self._assemble(pi, sizes, n, lambda full, *_: (full, np.zeros_like(full)))
        return self._known_total(quadratic).v0

    def _single_quadratic(self, n: FloatArray) -> Quadratic:
        # b = 1_i - (s/m) 1 sums to zero, so only the diagonal part of the noise counts:
        # V = [delta0 s (1 - s/m) + delta1 ((1 - s/m)^2 theta + (s/m)^2 (1 - theta))] / n.
        noise = self.noises[0]
        share = self.output_members / self.m
        inv = 1.0 / n[:, None]
        v0 = (noise.delta0 * self.output_members * (1 - share) + noise.delta1 * share**2) * inv
        v1 = noise.delta1 * ((1 - share) ** 2 - share**2) * inv
        return Quadratic(v0, v1, np.zeros_like(v0))

    @cached_property
    def _static(self) -> list[_Functional]:
        """Data-independent parts of every linear functional the variance needs.
        For each matrix X (per view: B_v^2 and B_v; then G^2 and G), in view or base-cell
        coordinates: X, the one-hot map from base cells to X's columns (None for base
        coordinates), X at every membership pair, the mean of X over each output's
        members, and each row's sum over base cells."""
        G = self._dense[2]
        rows, cols = self.pair_rows, self.pair_cols
        out: list[_Functional] = []
        matrices: list[tuple[FloatArray, IntArray | None]] = []
        for Bv, view in zip(self._blocks, self.view_labels, strict=True):
            matrices += [(Bv * Bv, view), (Bv, view)]
        matrices += [(G * G, None), (G, None)]
        for X, labels in matrices:
            gathered: FloatArray
            total: FloatArray
            onehot: FloatArray | None = None
            if labels is None:
                gathered = X[rows, cols]
                total = X.sum(axis=1)
            else:
                gathered = X[rows, labels[cols]]
                total = X @ np.bincount(labels, minlength=X.shape[1]).astype(np.float64)
                onehot = np.zeros((self.m, X.shape[1]))
                onehot[np.arange(self.m), labels] = 1.0
            unif = self._sum_pairs(gathered[None, :])[0] / self.output_members
            out.append((np.ascontiguousarray(X.T), onehot, gathered, unif, total))
        return out

    def _assemble(self, pi: FloatArray, sizes: FloatArray, n: FloatArray, path: Path) -> Quadratic:
        static = self._static
        rho = np.where(n > 1, n / np.maximum(n - 1.0, 1.0), 1.0)[:, None]
        inv_n = (1.0 / n)[:, None]
        pi_pairs = pi[:, self.pair_cols]

        # Each view's two matrices map base cells to its columns (G's, last, need not).
        per_view = [pi @ onehot for _, onehot, *_ in static[::2] if onehot is not None]

        def functional(k: int) -> tuple[FloatArray, FloatArray]:
            # Linear functional k at pi: (value at theta = 0, slope) along each output's path.
            XT, onehot, gathered, unif, total = static[k]
            weights = pi if onehot is None else per_view[k // 2]
            full: FloatArray = weights @ XT
            return path(full, self._sum_pairs(gathered * pi_pairs), unif, total)

        R = pi.shape[0]
        q0 = np.zeros((R, self.n_outputs))
        q1 = np.zeros((R, self.n_outputs))
        q2 = np.zeros((R, self.n_outputs))
        for v in range(len(self.view_labels)):
            noise = self.noises[v]
            inv_v = 1.0 / sizes[:, v : v + 1]
            k1, bsum = self._view_sums[v]
            a1, b1 = functional(2 * v)  # sum_u B^2 f_u
            a2, b2 = functional(2 * v + 1)  # sum_u B f_u
            # noise: [delta0 k1 + delta1 P1 + kappa b^2 + 2 lambda b P2] / n_v
            q0 += (noise.delta0 * k1 + noise.delta1 * a1 + noise.kappa * bsum**2) * inv_v
            q0 += 2 * noise.lam * bsum * a2 * inv_v
            q1 += (noise.delta1 * b1 + 2 * noise.lam * bsum * b2) * inv_v
            # sampling of view v's users: rho / n_v (P1 - P2^2)
            q0 += rho * inv_v * (a1 - a2**2)
            q1 += rho * inv_v * (b1 - 2 * a2 * b2)
            q2 -= rho * inv_v * b2**2
        k = 2 * len(self.view_labels)
        a3, b3 = functional(k)
        a4, b4 = functional(k + 1)
        q0 -= rho * inv_n * (a3 - a4**2)
        q1 -= rho * inv_n * (b3 - 2 * a4 * b4)
        q2 += rho * inv_n * b4**2
        return Quadratic(q0, q1, q2)

    @cached_property
    def _user_third(self) -> FloatArray:
        """(outputs, m): ``K_j``, n^3 times the third cumulant of one user's contribution
        to each output given its base cell j (see :class:`Skew`)."""
        raw = np.zeros((3, self.n_outputs, self.m))
        parts = zip(self._blocks, self.view_labels, self.noises, self.weights, strict=True)
        for b, labels, noise, w in parts:
            if w <= 0:
                continue
            for k, e in enumerate(user_moments(noise, b), start=1):
                # E[Z_v^k | j] n^k with c = b / ((p - q) w n), weighted by w.
                raw[k - 1] += w * e[:, labels] / ((noise.p - noise.q) * w) ** k
        m1, m2, m3 = raw
        out: FloatArray = m3 - 3.0 * m1 * m2 + 2.0 * m1**3
        return out

    @cached_property
    def _membership(self) -> FloatArray:
        """(outputs, m): 1 where the base cell is in the output."""
        mine = np.zeros((self.n_outputs, self.m))
        mine[self.pair_rows, self.pair_cols] = 1.0
        return mine

    def skew(self, pi: FloatArray, sizes: FloatArray) -> Skew | None:
        """The :class:`Skew` around the plug-in ``pi`` (R, m), the views' users ``sizes``
        (R, views); None with one view (whose outputs the support-count intervals serve)."""
        if self.single:
            return None
        pi = np.clip(np.asarray(pi, dtype=np.float64), 0.0, None)
        pi = pi / np.maximum(pi.sum(axis=1, keepdims=True), 1e-300)
        n = np.maximum(np.asarray(sizes, dtype=np.float64).sum(axis=1, keepdims=True), 1.0)
        mine, third = self._membership, self._user_third
        theta = pi @ mine.T  # (R, outputs)
        ins = pi @ (third * mine).T
        every = pi @ third.T
        uniform_in = (third * mine).sum(axis=1) / self.output_members
        uniform_out = (third * (1.0 - mine)).sum(axis=1) / np.maximum(
            self.m - self.output_members, 1.0
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            inside = np.where(theta > 1e-12, ins / theta, uniform_in[None])
            outside = np.where(theta < 1 - 1e-12, (every - ins) / (1 - theta), uniform_out[None])
        return Skew(inside, outside, n)

    @cached_property
    def forgery(self) -> LinearShift:
        """How far forged reports can move each output: the outputs are ``sum_v B_v y_v + c``,
        linear in every view's debiased support fractions (:class:`ldpkit.screening.LinearShift`;
        one view: output i's coefficient is ``1 - s_i / m`` on its s_i cells, ``-s_i / m`` on
        the others). An output holding every base cell is 1 whatever the reports."""
        if self.single:
            share = self.output_members / self.m
            weights = np.stack([1.0 - share, -share], axis=1)
            counts = np.stack([self.output_members, self.m - self.output_members], axis=1)
            parts: list[tuple[FloatArray, FloatArray | None, NoiseModel]] = [
                (weights, counts, self.noises[0])
            ]
        else:
            parts = [(b, None, noise) for b, noise in zip(self._blocks, self.noises, strict=True)]
        gains = [part_gains(w, c, nm.p, nm.q, nm.supports) for w, c, nm in parts]
        keep = np.where(self.whole, 0.0, 1.0)[:, None]
        up, down = (np.stack([g[i] for g in gains], axis=1) * keep for i in (0, 1))
        return LinearShift(up, down, self.weights)

    @cached_property
    def _blocks(self) -> list[FloatArray]:
        """``B``'s columns of each view."""
        B = self._dense[0]
        return [B[:, lo:hi] for lo, hi in itertools.pairwise(self.view_offsets)]

    @cached_property
    def _view_sums(self) -> list[tuple[FloatArray, FloatArray]]:
        """Per view, each output's sum of its squared coefficients, and of its coefficients."""
        return [((b**2).sum(axis=1), b.sum(axis=1)) for b in self._blocks]


def _score_roots(
    estimate: FloatArray, quadratic: Quadratic, z: float | FloatArray
) -> tuple[FloatArray, FloatArray]:
    """The theta in [0, 1] with ``(estimate - theta)^2 <= z^2 V(theta)`` (no correction)."""
    est = estimate
    z2 = z * z
    a = 1.0 - z2 * quadratic.v2
    b = -(2.0 * est + z2 * quadratic.v1)
    c = est * est - z2 * quadratic.v0
    disc = b * b - 4.0 * a * c
    ok = (a > 0) & (disc >= 0)
    root = np.sqrt(np.where(ok, disc, 0.0))
    # Stable roots: q = -(b + sign(b) sqrt(disc)) / 2; roots q / a and c / q.
    sign = np.where(b >= 0, 1.0, -1.0)
    qq = -0.5 * (b + sign * root)
    safe_a = np.where(a > 0, a, 1.0)
    safe_q = np.where(qq != 0, qq, 1.0)
    r1 = np.where(ok, qq / safe_a, np.nan)
    r2 = np.where(ok & (qq != 0), c / safe_q, r1)
    low = np.where(ok, np.clip(np.minimum(r1, r2), 0.0, 1.0), np.where(est > 1, 1.0, 0.0))
    high = np.where(ok, np.clip(np.maximum(r1, r2), 0.0, 1.0), np.where(est < 0, 0.0, 1.0))
    return np.where(a <= 0, 0.0, low), np.where(a <= 0, 1.0, high)


def score_interval(
    estimate: FloatArray, quadratic: Quadratic, z: float | FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Continuity-corrected score interval, per output, within [0, 1].

    The theta with ``(|estimate - theta| - c)_+^2 <= z^2 V(theta)``, ``V`` the variance
    at theta itself (Wilson's idea) and ``c`` the continuity correction (half the
    largest change one support count makes to the estimate). The correction matters
    only where a few flipped reports move the estimate by more than the noise: high
    epsilon with few users, where the estimate lives on a coarse lattice; elsewhere it
    is a small fraction of the width (it shrinks as 1/n, the width as 1/sqrt(n)).

    Where no theta in [0, 1] passes (an estimate far below 0 or above 1) the interval is
    the nearer end, ``[0, 0]`` or ``[1, 1]``. Where ``z^2 v2 >= 1`` (a handful of reports)
    the test cannot bound theta and the interval is ``[0, 1]``.
    """
    est = np.asarray(estimate, dtype=np.float64)
    corr = np.zeros_like(est) if quadratic.correction is None else quadratic.correction
    low, _ = _score_roots(est - corr, quadratic, z)
    _, high = _score_roots(est + corr, quadratic, z)
    low = np.minimum(low, np.clip(est - corr, 0.0, 1.0))
    high = np.maximum(high, np.clip(est + corr, 0.0, 1.0))
    bad = ~np.isfinite(est) | ~np.isfinite(quadratic.v0)
    return np.where(bad, np.nan, low), np.where(bad, np.nan, high)


def grouped_norm_sub(values: FloatArray, groups: IntArray, targets: FloatArray) -> FloatArray:
    """Norm-Sub within each group: ``max(v - delta_g, 0)`` summing exactly to ``targets[g]``.

    The Euclidean projection of each group's values onto the simplex scaled to its
    target (Wang et al., NDSS 2020, per group). Rounding residue is put on each group's
    largest value, so every group sums to its target to the last bit of float64.
    """
    v = np.asarray(values, dtype=np.float64)
    g = np.asarray(groups, dtype=np.int64)
    t = np.asarray(targets, dtype=np.float64)
    if not np.all(np.isfinite(v)) or not np.all(np.isfinite(t)):
        return np.full(v.shape, np.nan)
    order = np.lexsort((-v, g))
    vs, gs = v[order], g[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    group_of_start = gs[starts]
    run = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, vs.size]))
    cumulative = np.cumsum(vs)
    before = np.r_[0.0, cumulative][starts]
    within = cumulative - before[run]
    rank = np.arange(vs.size) - starts[run] + 1
    deltas = (within - t[gs]) / rank
    positive = vs - deltas > 0
    # The last positive rank of each run (a prefix; at least rank 1 when the target > 0).
    last = np.full(starts.size, -1)
    idx = np.flatnonzero(positive)
    np.maximum.at(last, run[idx], idx)
    delta_run = np.where(last >= 0, deltas[np.maximum(last, 0)], np.inf)
    result_sorted = np.maximum(vs - delta_run[run], 0.0)
    result_sorted[t[gs] <= 0] = 0.0
    # Exact sums: put the residue on the first (largest) element of each run.
    sums = np.add.reduceat(result_sorted, starts)
    target_run = np.maximum(t[group_of_start], 0.0)
    result_sorted[starts] += target_run - sums
    out = np.empty_like(v)
    out[order] = np.maximum(result_sorted, 0.0)
    return out


def _finite_rows(arrays: Sequence[FloatArray]) -> npt.NDArray[np.bool_]:
    ok = np.ones(arrays[0].shape[0], dtype=bool)
    for a in arrays:
        ok &= np.all(np.isfinite(a), axis=1)
    return ok


def tree_consistent(
    values: Sequence[FloatArray], parents: Sequence[IntArray], root: float = 1.0
) -> list[FloatArray]:
    """Top-down Norm-Sub: non-negative estimates in which every parent is the exact sum
    of its children and the top level sums to ``root``.

    Parameters
    ----------
    values : per depth (1 = top), the estimates of the nodes at that depth, shape
        (R, nodes) for R trees at once (or (nodes,) for one).
    parents : per depth, each node's parent index at the depth above (0 at depth 1).

    Each group of siblings is projected onto the simplex scaled to its parent's
    consistent value, from the top down, so a level is never changed by the levels below
    it: the top levels keep their (more accurate) estimates and corrections stay local.
    Rows holding a non-finite value come out all NaN.
    """
    one = np.ndim(values[0]) == 1
    rows = [np.atleast_2d(np.asarray(v, dtype=np.float64)) for v in values]
    R = rows[0].shape[0]
    ok = _finite_rows(rows)
    out: list[FloatArray] = []
    above: FloatArray = np.full((int(ok.sum()), 1), root)
    for vals, par in zip(rows, parents, strict=True):
        v = vals[ok]
        width = above.shape[1]
        groups = (np.arange(v.shape[0])[:, None] * width + par[None, :]).ravel()
        current: FloatArray = grouped_norm_sub(v.ravel(), groups, above.ravel()).reshape(v.shape)
        full = np.full((R, vals.shape[1]), np.nan)
        full[ok] = current
        out.append(full[0] if one else full)
        above = current
    return out


def ipf(
    seed: FloatArray,
    partitions: Sequence[IntArray],
    targets: Sequence[FloatArray],
    *,
    tolerance: float = IPF_TOLERANCE,
    max_iterations: int = IPF_MAX_ITERATIONS,
) -> FloatArray:
    """Iterative proportional fitting: scale a positive seed to the given group totals.

    Each pass rescales the cells of every group of every partition in turn so that the
    group sums to its target; the limit is the table closest to the seed in
    Kullback-Leibler divergence with those margins (Deming and Stephan 1940; Csiszar
    1975). Stops after a pass in which every group was already within ``tolerance`` of
    its target before being rescaled. The result is
    normalized to sum to one. ``seed`` may be (R, cells) with targets (R, groups): R
    tables at once; rows holding a non-finite value come out all NaN.
    """
    one = np.ndim(seed) == 1
    cells = np.atleast_2d(np.array(seed, dtype=np.float64))
    goals = [np.atleast_2d(np.asarray(t, dtype=np.float64)) for t in targets]
    ok = _finite_rows([cells, *goals])
    work = cells[ok]
    goals_ok = [g[ok] for g in goals]
    onehots = []
    for labels, goal in zip(partitions, goals_ok, strict=True):
        onehot = np.zeros((labels.size, goal.shape[1]))
        onehot[np.arange(labels.size), labels] = 1.0
        onehots.append(onehot)
    # Each table stops on its own (R tables at once used to run until the slowest had
    # converged: an over-time answer's or a simulation's thousands of rows paid for one).
    active = np.arange(work.shape[0])
    for _ in range(max_iterations):
        if active.size == 0:
            break
        part = work[active]
        gap = np.zeros(active.size)
        for labels, goal, onehot in zip(partitions, goals_ok, onehots, strict=True):
            wanted = goal[active]
            sums = part @ onehot
            gap = np.maximum(gap, np.max(np.abs(sums - wanted), axis=1, initial=0.0))
            factor = np.divide(wanted, sums, out=np.zeros_like(wanted), where=sums > 0)
            part *= factor[:, labels]
        work[active] = part
        # A table whose every margin was already fitted before this pass rescaled it is done.
        active = active[gap > tolerance]
    total = work.sum(axis=1, keepdims=True)
    work = np.divide(work, total, out=work, where=total > 0)
    out = np.full(cells.shape, np.nan)
    out[ok] = work
    return out[0] if one else out
