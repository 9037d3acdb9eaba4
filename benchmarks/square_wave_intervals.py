"""Intervals for square wave answers by channel inversion: do they cover, and how wide are they?

EMS (the square wave's served reconstruction) is biased and its bootstrap intervals did not
cover (benchmarks/square_wave.py --parts 2). The candidate here is the unbiased linear
estimate of each answer from the ``d'`` output-bucket counts ``c``: on an inversion grid of
``d`` equal input buckets (``d <= d'``), ``f_hat = pinv(P^T) c / n`` with ``P`` the d x d'
bucket channel (:func:`ldpkit.mechanisms.square_wave.bucket_channel`), and a bin's or range's
fraction ``a^T f_hat = g^T c / n`` with ``g = pinv(P) a``. Its exact variance follows from
the multinomial law of the counts; the interval is the score-type one of
:func:`ldpkit.mechanisms._linear_intervals.score_bounds` (variance and skewness at the
hypothesised value, the law tilted from ``P^T f+``, ``f+`` the clipped inversion estimate),
joined with the normal interval (:func:`hull`), clipped to [0, 1], as the exponential
mechanism serves.

Campaigns draw the counts directly: multinomial(n, lam) over the ``d'`` output buckets.
``lam`` is the population's exact output law, ``P_fine^T f_fine`` over 4,096 input buckets
("fine" truth: the channel sees the real shape within each inversion bucket, so the
model's "uniform within a bucket" error is in the figures), and, as a check, ``P^T f`` on
the inversion grid itself ("grid" truth: the model exactly right).

Measured per population (Beta(2, 5); bimodal 0.5 N(0.25, 0.05) + 0.5 N(0.7, 0.08) clipped),
epsilon and n: the coverage at 95% of each of the 16 equal bins (min and mean over bins) and
of the range [0.25, 0.5), and the mean width of a bin's interval against the hierarchical
histogram's served bin interval (``HierarchicalHistogram.expected(n, truth).histogram(16)``:
its variance at the truth, fan-out 4) at resolution 64 and at its default 1,024. With C
campaigns a coverage of 0.95 has a standard error of sqrt(0.95 x 0.05 / C) (0.011 at 400):
the minimum over 16 bins sits about 2 of them below the mean by chance alone.

Run: ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 15 .venv/bin/python
benchmarks/square_wave_intervals.py [--campaigns 400] [--grids 64,48,32,16] [--eps 1,2,4]
[--ns 10000,100000] [--seed 30]``.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy import stats

sys.path.insert(0, str(Path(__file__).parent))

from distributions import POPULATIONS, Population

from ldpkit.mechanisms._linear_intervals import LinearBounds, hull, score_bounds
from ldpkit.mechanisms.hierarchical import HierarchicalHistogram
from ldpkit.mechanisms.square_wave import SquareWave, bucket_channel

FloatArray = npt.NDArray[np.float64]
RESOLUTION = 64  # the output buckets d' (the reporting resolution)
BINS = 16
RANGE = (0.25, 0.5)
FINE = 4096
Z = float(stats.norm.ppf(0.975))
PEOPLE = {
    "beta(2,5)": Population("beta(2,5)", [(1.0, stats.beta(2.0, 5.0))], []),
    "bimodal": POPULATIONS["bimodal"],
}


def bucket_fractions(people: Population, d: int) -> FloatArray:
    cdf = people.cdf_left(np.arange(d + 1) / d)
    cdf[0], cdf[-1] = 0.0, 1.0
    return np.asarray(np.diff(cdf))


def queries(d: int) -> FloatArray:
    """(BINS + 1, d): the 16 equal bins, then the range, as sums of grid buckets."""
    a = np.zeros((BINS + 1, d))
    per = d // BINS
    for k in range(BINS):
        a[k, k * per : (k + 1) * per] = 1.0
    a[BINS, round(RANGE[0] * d) : round(RANGE[1] * d)] = 1.0
    return a


@dataclass
class Cell:
    cover: FloatArray  # (BINS + 1,) coverage per query
    width: FloatArray  # (BINS + 1,) mean width per query


def intervals(counts: FloatArray, channel: FloatArray, weights: FloatArray, n: int) -> LinearBounds:
    """All campaigns' (rows) bounds of every query at once."""
    lam_hat = counts / n  # (C, d')
    est = lam_hat @ weights.T  # (C, r)
    f_hat = lam_hat @ np.linalg.pinv(channel)  # (C, d): pinv(P^T)^T = pinv(P)
    f_plus = np.clip(f_hat, 0.0, None)
    f_plus /= f_plus.sum(axis=1, keepdims=True)
    law = f_plus @ channel  # (C, d')
    r = weights.shape[0]
    rows_law = np.repeat(law, r, axis=0)
    rows_g = np.tile(weights, (counts.shape[0], 1))
    zeros, ones = np.zeros(rows_g.shape[0]), np.ones(rows_g.shape[0])
    score = score_bounds(est.ravel(), rows_g, rows_law, n, value_range=(zeros, ones))
    mean = np.sum(rows_law * rows_g, axis=1)
    sd = np.sqrt(np.maximum(np.sum(rows_law * rows_g**2, axis=1) - mean**2, 0.0) / n)
    normal = LinearBounds(est.ravel() - Z * sd, est.ravel() + Z * sd, 0.95)
    return hull(score, normal, zeros, ones)


def cell(
    people: Population,
    eps: float,
    n: int,
    d: int,
    campaigns: int,
    fine: bool,
    rng: np.random.Generator,
) -> Cell:
    core = SquareWave(epsilon=eps, bounds=(0.0, 1.0), buckets=d, output_buckets=RESOLUTION)
    if fine:
        big = bucket_channel(core.band, core.p, core.q, FINE, RESOLUTION)
        lam = bucket_fractions(people, FINE) @ big
    else:
        lam = bucket_fractions(people, d) @ core.channel
    a = queries(d)
    truth = a @ bucket_fractions(people, d)
    weights = a @ np.linalg.pinv(core.channel).T  # g = pinv(P) a, one row per query
    counts = rng.multinomial(n, lam / lam.sum(), size=campaigns).astype(np.float64)
    b = intervals(counts, core.channel, weights, n)
    low = b.lower.reshape(campaigns, -1)
    high = b.upper.reshape(campaigns, -1)
    hit = (low <= truth) & (truth <= high)
    return Cell(hit.mean(axis=0), (high - low).mean(axis=0))


def hh_width(people: Population, eps: float, n: int, resolution: int) -> float:
    hh = HierarchicalHistogram(epsilon=eps, bounds=(0.0, 1.0), resolution=resolution)
    ci = hh.expected(n, bucket_fractions(people, resolution)).histogram(BINS).ci()
    return float(np.mean(np.asarray(ci[1]) - np.asarray(ci[0])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaigns", type=int, default=400)
    ap.add_argument("--grids", default="64,48,32,16")
    ap.add_argument("--eps", default="1,2,4")
    ap.add_argument("--ns", default="10000,100000")
    ap.add_argument("--seed", type=int, default=30)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    grids = [int(x) for x in args.grids.split(",")]
    print(f"campaigns {args.campaigns}, d' = {RESOLUTION}, {BINS} bins, range {RANGE}, 95%")
    print("truth: fine = exact output law of the population; grid = P^T f on the grid")
    print(
        "population  eps  n       d  truth  bin cov min/mean  range cov"
        "  sw width  hh64 hh1024  x hh64"
    )
    for name, people in PEOPLE.items():
        for eps in [float(x) for x in args.eps.split(",")]:
            for n in [int(x) for x in args.ns.split(",")]:
                w64 = hh_width(people, eps, n, 64)
                w1024 = hh_width(people, eps, n, 1024)
                for d in grids:
                    for fine in (True, False):
                        c = cell(people, eps, n, d, args.campaigns, fine, rng)
                        width = float(c.width[:BINS].mean())
                        print(
                            f"{name:10s} {eps:4.1f} {n:7d} {d:3d}  {'fine' if fine else 'grid'}"
                            f"   {c.cover[:BINS].min():.3f} / {c.cover[:BINS].mean():.3f}"
                            f"      {c.cover[BINS]:.3f}    {width:.4f}  {w64:.4f} {w1024:.4f}"
                            f"  {width / w64:5.1f}",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
