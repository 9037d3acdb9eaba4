"""The narrowest bias-bounded interval any linear estimate of a square wave range share can
have: a lower bound for benchmarks/square_wave_intervals.py ``--part bias``.

That benchmark widens the channel inversion's estimate ``g . c / n`` (``g = pinv(P) a`` on a
grid of d input buckets) by the bound ``sum_k m_k e_k`` on its bias, ``e_k`` the largest
``|w(x) - 1_range(x)|`` over bucket k (:meth:`SquareWave.bucket_deviation`), and finds it
7-90 times the hierarchical histogram's width. Here ``g`` is not the inversion's: it is
chosen to minimise the half-width itself, ``z sd(g) + sum_k m_k e_k(g)``, with the
population's true output law (for ``sd``) and true masses ``m_k`` on a fine grid of 256
buckets: a convex programme (``sd`` a Euclidean norm of ``g``, each ``e_k`` a largest
absolute value of linear functions of ``g`` at the channel's corners, the grid's edges and
either side of the range's ends). No collector knows those masses, so this is the oracle:
no interval built this way (a linear estimate and a mass-weighted bound) is narrower.
Widths against the hierarchical histogram's served interval for the same range (the
narrower of 64 and 1,024 leaves), ``d' = 64`` output buckets as in the other benchmark.

Needs cvxpy (not a dependency of ldpkit: ``.venv/bin/pip install cvxpy``). Run:
``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 15 .venv/bin/python
benchmarks/square_wave_designed.py`` (about 30 seconds).
"""

from __future__ import annotations

import importlib
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).parent))

from square_wave_intervals import FINE, PEOPLE, FloatArray, bucket_fractions, hh_range_width

from ldpkit.mechanisms.square_wave import SquareWave, bucket_channel

cp: Any = importlib.import_module("cvxpy")  # optional, and untyped: not ldpkit's
RESOLUTION, GRID = 64, 256
RANGES = {"[0.25, 0.5)": (0.25, 0.5), "[0, 0.5)": (0.0, 0.5)}
Z = float(stats.norm.ppf(0.975))


def designed(
    core: SquareWave, lam: FloatArray, mass: FloatArray, n: int, span: tuple[float, float]
) -> tuple[float, float]:
    """(z sd, bias bound) of the linear estimate with the narrowest oracle interval."""
    lo, hi = span
    x = np.unique(np.concatenate([core.corners(), np.arange(GRID + 1) / GRID, [lo, hi]]))
    law = core.point_channel(x)
    inside = ((x >= lo) & (x < hi)).astype(np.float64)
    step = ((x == lo) & (lo > 0)) | ((x == hi) & (hi < 1))
    right = np.minimum(np.floor(x * GRID + 1e-9).astype(np.int64), GRID - 1)
    left = np.maximum(np.ceil(x * GRID - 1e-9).astype(np.int64) - 1, 0)
    rows, targets, buckets = [], [], []
    for i in range(x.size):
        for k in {int(right[i]), int(left[i])}:
            for v in (0.0, 1.0) if step[i] else (float(inside[i]),):
                rows.append(i)
                targets.append(v)
                buckets.append(k)
    cov = (np.diag(lam) - np.outer(lam, lam)) / n
    root = np.linalg.cholesky(cov + 1e-14 * np.eye(lam.size))
    g, t = cp.Variable(lam.size), cp.Variable(GRID)
    bias = cp.abs(law[rows] @ g - np.asarray(targets)) <= t[np.asarray(buckets)]
    cp.Problem(cp.Minimize(Z * cp.norm(root.T @ g) + mass @ t), [bias]).solve()
    sd = float(np.sqrt(g.value @ cov @ g.value))
    return Z * sd, float(mass @ t.value)


def main() -> None:
    print(f"oracle-best linear estimate, d' = {RESOLUTION}, bias bound on {GRID} buckets, 95%")
    print("population  eps  n       range        z sd    bound   width   hh      x hh")
    for name, people in PEOPLE.items():
        mass = bucket_fractions(people, GRID)
        for eps in (1.0, 2.0, 4.0):
            core = SquareWave(epsilon=eps, bounds=(0.0, 1.0), buckets=2, output_buckets=RESOLUTION)
            big = bucket_channel(core.band, core.p, core.q, FINE, RESOLUTION)
            lam = bucket_fractions(people, FINE) @ big
            for n in (10_000, 100_000):
                for label, span in RANGES.items():
                    zsd, bound = designed(core, lam, mass, n, span)
                    hh = min(hh_range_width(people, eps, n, span, k) for k in (64, 1024))
                    width = 2.0 * (zsd + bound)
                    print(
                        f"{name:10s} {eps:4.1f} {n:7d}  {label:11s} {zsd:.4f}  {bound:.4f}"
                        f"  {width:.4f}  {hh:.4f}  {width / hh:5.1f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
