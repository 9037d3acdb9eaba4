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

``--part bias`` measures the honest alternative (issue 30, second attempt): the same
inversion estimate of a range share, widened by a bound on its bias from the values' places
within the inversion buckets. For a user at ``x`` the estimate's expectation is
``w(x) = g . point_channel(x)``, so its bias is ``sum_k integral_{bucket k} (w - 1_range) dF``,
at most ``B = sum_k m_k e_k`` with ``m_k`` the mass in bucket k and ``e_k`` the largest
``|w(x) - 1_range(x)|`` over it (exact: :meth:`SquareWave.bucket_deviation`). The interval
is ``estimate -+ (z sd + B)``, clipped to [0, 1], in two versions:

- **oracle**: ``B`` from the population's true masses (not available to a collector: the
  narrowest any version of this construction can be, a lower bound on its width);
- **honest**: ``B`` replaced by an upper confidence bound at level ``beta = 0.01`` of
  ``integral E dF`` (``E(x) = e_k`` on bucket k): a majorant ``phi(x) = h . point_channel(x)
  >= E(x)`` everywhere (a linear programme over ``h`` on the channel's corners and the grid's
  edges, minimising ``integral phi`` over the uniform law, ``|h_j| <= 10``), so
  ``integral E dF <= E[h . c / n]``, whose normal upper bound at ``beta`` holds for every
  population; capped by ``max_k e_k`` (true for any population); the variance part then
  spends ``alpha - beta`` (``z = z_{1 - 0.02}``).

Ranges: ``[0.25, 0.5)`` (aligned with the grid's edges when 4 divides d) and
``[0.2929, 0.5477)`` (never aligned: the inversion's query then takes each edge bucket's
covered share), and ``[0, 0.5)``, the distribution function at 0.5 (one edge only). For
each grid d the mean half-width; the table keeps the grid with the narrowest oracle
interval, its coverage (oracle and honest) over the campaigns, and its width against the
hierarchical histogram's interval for the same range (64 and 1,024 leaves; the ratios are
to the narrower).

Run: ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 15 .venv/bin/python
benchmarks/square_wave_intervals.py [--campaigns 400] [--grids 64,48,32,16] [--eps 1,2,4]
[--ns 10000,100000] [--seed 30]``; ``--part bias --campaigns 300 --grids 8,16,24,32,40,48,56``
for the bias-bounded intervals (``--resolution 1024`` for the served default d').
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
from scipy import optimize, stats

sys.path.insert(0, str(Path(__file__).parent))

from distributions import POPULATIONS, Population

from ldpkit.mechanisms._linear_intervals import LinearBounds, hull, score_bounds
from ldpkit.mechanisms.hierarchical import HierarchicalHistogram
from ldpkit.mechanisms.square_wave import SquareWave, bucket_channel, optimal_band

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


RANGES = {"aligned": (0.25, 0.5), "unaligned": (0.2929, 0.5477), "cdf(0.5)": (0.0, 0.5)}
ALPHA, BETA, H = 0.05, 0.01, 10.0
Z_SPLIT = float(stats.norm.ppf(1.0 - (ALPHA - BETA) / 2.0))
Z_BETA = float(stats.norm.ppf(1.0 - BETA))


def range_query(d: int, lower: float, upper: float) -> FloatArray:
    """Each grid bucket's covered share of ``[lower, upper)``."""
    e = np.arange(d + 1) / d
    return np.asarray(np.clip(np.minimum(e[1:], upper) - np.maximum(e[:-1], lower), 0, None) * d)


def majorant(core: SquareWave, dev: FloatArray) -> FloatArray:
    """``h`` with ``h . point_channel(x) >= dev[k(x)]`` for every x, least ``integral`` under
    the uniform law: the point channel is linear between its corners and ``dev`` constant
    between the grid's edges, so the constraints at those points (an edge takes the larger
    of its two buckets) hold everywhere."""
    d = dev.size
    grid = np.arange(d + 1) / d
    x = np.unique(np.concatenate([core.corners(), grid]))
    right = np.minimum(np.floor(x * d + 1e-9).astype(np.int64), d - 1)
    left = np.maximum(np.ceil(x * d - 1e-9).astype(np.int64) - 1, 0)
    need = np.maximum(dev[right], dev[left])
    law = core.point_channel(x)
    mean_law = core.channel.mean(axis=0)
    res = optimize.linprog(mean_law, A_ub=-law, b_ub=-need, bounds=(-H, H), method="highs")
    if not res.success:  # the constant max(dev) is always feasible
        return np.full(core.outputs, float(dev.max()))
    return np.asarray(res.x)


def bias_cell(
    people: Population,
    eps: float,
    n: int,
    d: int,
    resolution: int,
    span: tuple[float, float],
    counts: FloatArray,
) -> dict[str, FloatArray | float]:
    """Oracle and honest bias-bounded intervals of every campaign (rows of ``counts``)."""
    core = SquareWave(epsilon=eps, bounds=(0.0, 1.0), buckets=d, output_buckets=resolution)
    g = np.linalg.pinv(core.channel) @ range_query(d, *span)
    dev = core.bucket_deviation(g, span[0], span[1], d)
    lam_hat = counts / n
    est = lam_hat @ g
    sd = np.sqrt(np.maximum(lam_hat @ g**2 - est**2, 0.0) / n)
    oracle_b = float(bucket_fractions(people, d) @ dev)
    h = majorant(core, dev)
    hb = lam_hat @ h
    h_sd = np.sqrt(np.maximum(lam_hat @ h**2 - hb**2, 0.0) / n)
    honest_b = np.minimum(hb + Z_BETA * h_sd, dev.max())
    truth = float(np.diff(people.cdf_left(np.asarray(span)))[0])
    out: dict[str, FloatArray | float] = {"oracle_b": oracle_b, "sd": float(sd.mean())}
    for name, half in (("oracle", Z * sd + oracle_b), ("honest", Z_SPLIT * sd + honest_b)):
        low, high = np.clip(est - half, 0.0, 1.0), np.clip(est + half, 0.0, 1.0)
        out[name + "_cover"] = float(np.mean((low <= truth) & (truth <= high)))
        out[name + "_width"] = float(np.mean(high - low))
    out["honest_b"] = float(honest_b.mean())
    return out


def hh_range_width(
    people: Population, eps: float, n: int, span: tuple[float, float], leaves: int
) -> float:
    """The served interval's width for the range (a cut leaf widens it to the whole-leaf
    ranges inside and around it: honest for any placement within the leaf)."""
    hh = HierarchicalHistogram(epsilon=eps, bounds=(0.0, 1.0), resolution=leaves)
    ci = hh.expected(n, bucket_fractions(people, leaves)).fraction(*span).ci()
    return float(ci[1] - ci[0])


def bias_part(args: argparse.Namespace, rng: np.random.Generator) -> None:
    grids = [int(x) for x in args.grids.split(",")]
    res = args.resolution
    print(
        f"bias-bounded range intervals: campaigns {args.campaigns}, d' = {res}, 95% "
        f"(oracle: true masses; honest: majorant UCB at beta = {BETA})"
    )
    print(
        "population  eps  n       range      best d  oracle B  z sd    oracle cov/width"
        "  honest cov/width (B)  hh64   hh1024  oracle/hh  honest/hh"
    )
    for name, people in PEOPLE.items():
        for eps in [float(x) for x in args.eps.split(",")]:
            fine = bucket_fractions(people, FINE) @ bucket_channel(
                optimal_band(eps), *_pq(eps), FINE, res
            )
            for n in [int(x) for x in args.ns.split(",")]:
                draws = rng.multinomial(n, fine / fine.sum(), size=args.campaigns)
                counts = draws.astype(np.float64)
                for label, span in RANGES.items():
                    cells = {d: bias_cell(people, eps, n, d, res, span, counts) for d in grids}
                    best = min(cells, key=lambda k: float(cells[k]["oracle_width"]))
                    c = cells[best]
                    h64 = hh_range_width(people, eps, n, span, 64)
                    h1024 = hh_range_width(people, eps, n, span, 1024)
                    hw = min(h64, h1024)
                    print(
                        f"{name:10s} {eps:4.1f} {n:7d}  {label:9s}  {best:4d}   "
                        f"{c['oracle_b']:.4f}  {Z * c['sd']:.4f}  "
                        f"{c['oracle_cover']:.3f} / {c['oracle_width']:.4f}   "
                        f"{c['honest_cover']:.3f} / {c['honest_width']:.4f} ({c['honest_b']:.3f})"
                        f"  {h64:.4f} {h1024:.4f}  {c['oracle_width'] / hw:6.1f}    "
                        f"{c['honest_width'] / hw:6.1f}",
                        flush=True,
                    )


def _pq(eps: float) -> tuple[float, float]:
    core = SquareWave(epsilon=eps, bounds=(0.0, 1.0), buckets=2)
    return core.p, core.q


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("inversion", "bias"), default="inversion")
    ap.add_argument("--campaigns", type=int, default=400)
    ap.add_argument("--grids", default="64,48,32,16")
    ap.add_argument("--eps", default="1,2,4")
    ap.add_argument("--ns", default="10000,100000")
    ap.add_argument("--resolution", type=int, default=RESOLUTION)
    ap.add_argument("--seed", type=int, default=30)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.part == "bias":
        bias_part(args, rng)
        return
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
