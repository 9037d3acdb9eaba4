"""The alternatives to the hierarchical histogram that benchmarks/distributions.py compares.

Each takes true values in [0, 1] (already clipped) and returns estimated leaf fractions
over ``L`` equal leaves, perturbing every user's value for real (vectorized), so that the
comparison is of the methods themselves. None of these is offered by ldpkit: the naive
baseline loses on every range wider than a few leaves, Haar/DHT is a b = 2 hierarchy
with a fixed (non-optimal) weighting, and Square Wave with EM smoothing is nonlinear and
biased, so its answers have no honest interval.

References
----------
G. Cormode, T. Kulkarni, D. Srivastava, "Answering range queries under local differential
privacy", PVLDB 12(10), 2019 (flat OUE, HH, Haar/DHT with Hadamard randomized response).
Z. Li, T. Wang, M. Lopuhaä-Zwakenberg, N. Li, B. Škoric, "Estimating numerical
distributions under local differential privacy", SIGMOD 2020 (Square Wave, EMS).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ldpkit.mechanisms.hadamard import fwht

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def leaves_of(x: FloatArray, L: int) -> IntArray:
    return np.minimum((x * L).astype(np.int64), L - 1)


# --- naive baseline: OUE over the finest bins --------------------------------------------
def flat_oue_from_counts(
    leaf_counts: IntArray, epsilon: float, rng: np.random.Generator
) -> FloatArray:
    """OUE over L leaves, from the exact law of its support counts.

    OUE's bits are independent given the values, so the support count of leaf v is
    ``Bin(m_v, 1/2) + Bin(n - m_v, q)`` with m_v the users in v, independently across
    leaves: the same law as perturbing every user, at O(L) cost.
    """
    n = int(leaf_counts.sum())
    q = 1.0 / (math.exp(epsilon) + 1.0)
    support = rng.binomial(leaf_counts, 0.5) + rng.binomial(n - leaf_counts, q)
    out: FloatArray = (support / n - q) / (0.5 - q)
    return out


def flat_oue_variance(leaves: FloatArray, epsilon: float, n: int) -> FloatArray:
    """Per-leaf (v(f) + f) / n and the f f' term: Var of a range = q' C q."""
    q = 1.0 / (math.exp(epsilon) + 1.0)
    p = 0.5
    own = (leaves * p * (1 - p) + (1 - leaves) * q * (1 - q)) / (p - q) ** 2
    out: FloatArray = (own + leaves) / n
    return out


# --- Haar / discrete Haar transform with Hadamard randomized response -------------------
def haar(x: FloatArray, L: int, epsilon: float, rng: np.random.Generator) -> FloatArray:
    """DHT (Cormode et al. 2019): each user reports one level of Haar coefficients.

    ``L = 2^h``. A user at level l (uniform in 1..h) holds the coefficient vector over
    the ``2^(l-1)`` nodes at depth l - 1 with one nonzero entry, +1 if the value is in
    the node's left half and -1 if in its right half. It is sent with Hadamard
    randomized response: a uniform row r of the ``2^(l-1)`` Hadamard matrix, and the sign
    ``H[r, j] s`` kept with probability ``e^eps / (e^eps + 1)``. The unbiased
    coefficients are ``(e^eps + 1) / (e^eps - 1) H' t / n_l`` (t: signed sums per row),
    and the leaves follow from the root's known mass 1 by halving: left child
    ``(parent + c) / 2``, right child ``(parent - c) / 2``.
    """
    h = round(math.log2(L))
    n = x.size
    leaf = leaves_of(x, L)
    level = rng.integers(1, h + 1, size=n)
    keep = rng.random(n) < math.exp(epsilon) / (math.exp(epsilon) + 1.0)
    scale = (math.exp(epsilon) + 1.0) / (math.exp(epsilon) - 1.0)
    mass = np.ones(1)
    for lvl in range(1, h + 1):
        sel = level == lvl
        k = 1 << (lvl - 1)
        node = leaf[sel] >> (h - lvl + 1)
        sign = np.where((leaf[sel] >> (h - lvl)) & 1, -1, 1)
        r = rng.integers(0, k, size=node.size)
        parity = np.bitwise_count((r & node).astype(np.uint64)) & 1
        bit = sign * np.where(parity == 1, -1, 1) * np.where(keep[sel], 1, -1)
        t = np.bincount(r, weights=bit, minlength=k)
        n_l = max(1, node.size)
        coef = scale * fwht(t) / n_l
        child = np.empty(2 * k)
        child[0::2] = (mass + coef) / 2.0
        child[1::2] = (mass - coef) / 2.0
        mass = child
    return mass


# --- Square Wave with EM smoothing ------------------------------------------------------
def square_wave(
    x: FloatArray,
    L: int,
    epsilon: float,
    rng: np.random.Generator,
    *,
    tolerance: float = 1e-2,
    max_iterations: int = 10_000,
) -> FloatArray:
    """Square Wave (Li et al. 2020) with expectation maximization and smoothing (EMS).

    ``b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps))``; the output is uniform
    within b of the value with probability ``2 b p``, ``p = e^eps / (2 b e^eps + 1)``,
    else uniform on the rest of ``[-b, 1 + b]``. The outputs are counted in L equal
    buckets; EM estimates the L input bins (inputs at bin centres), each step followed by
    a ``(1, 2, 1) / 4`` smoothing; it stops when the log-likelihood of all n reports
    gains less than ``tolerance`` nats in a step.
    """
    e = math.exp(epsilon)
    b = (epsilon * e - e + 1.0) / (2.0 * e * (e - 1.0 - epsilon))
    p = e / (2.0 * b * e + 1.0)
    q = 1.0 / (2.0 * b * e + 1.0)
    n = x.size
    near = rng.random(n) < 2.0 * b * p
    u = rng.random(n)
    # Near: uniform on [x - b, x + b]. Far: uniform on [-b, x - b) and (x + b, 1 + b],
    # of lengths x and 1 - x.
    out = np.where(near, x - b + 2.0 * b * u, np.where(u < x, -b + u, x + b + (u - x)))
    buckets = np.minimum(((out + b) / (1.0 + 2.0 * b) * L).astype(np.int64), L - 1)
    counts = np.bincount(buckets, minlength=L).astype(np.float64)
    # Transition M[j, i]: P(bucket j | input at the centre of bin i), exact overlaps.
    edges = -b + (1.0 + 2.0 * b) * np.arange(L + 1) / L
    centres = (np.arange(L) + 0.5) / L
    lo_e, hi_e = edges[:-1, None], edges[1:, None]
    inside = np.clip(np.minimum(hi_e, centres + b) - np.maximum(lo_e, centres - b), 0.0, None)
    M = inside * p + ((hi_e - lo_e) - inside) * q
    theta = np.full(L, 1.0 / L)
    last = -math.inf
    for _ in range(max_iterations):
        predicted = M @ theta
        loglik = float(counts @ np.log(np.maximum(predicted, 1e-300)))
        theta = theta * (M.T @ (counts / np.maximum(predicted, 1e-300))) / n
        padded = np.concatenate([theta[:1], theta, theta[-1:]])
        theta = (padded[:-2] + 2.0 * padded[1:-1] + padded[2:]) / 4.0
        theta /= theta.sum()
        if loglik - last < tolerance:
            break
        last = loglik
    return theta
