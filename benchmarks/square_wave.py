"""The square wave with EMS against the hierarchical histogram, and EMS's bootstrap intervals.

Part 1, accuracy (issue 30). The same users feed both mechanisms: for a Beta(5, 2)
population (the paper's synthetic data) and a bimodal one (0.5 N(0.25, 0.05) + 0.5 N(0.7,
0.08), clipped to [0, 1]), n in {10^4, 10^5, 10^6} and epsilon in {0.5, 1, 2, 4}, every user's
value is perturbed for real by the square wave (1,024 input and output buckets, EMS with the
paper's binomial smoothing, log-likelihood tolerance 1e-3 nats) and by the hierarchical
histogram (ldpkit's default for a distribution: 1,024 leaves, fan-out 4). Errors are against
the population law, in units of the bounds [0, 1], averaged over the campaigns:

- W1: Wasserstein-1 distance between the distribution functions (estimate linear within
  buckets; the hierarchical histogram's made monotone: clipped to [0, 1], the mean of its
  running maximum and its reversed running minimum, as benchmarks/distributions.py does);
- KS: the largest gap between the distribution functions (on a grid of 8,193 points);
- |q|: mean absolute error of the 10th .. 90th percentiles (steps of 10), read from the same
  monotone distribution functions;
- rng: range MSE x 10^4 over 128 random ranges (uniform pairs of leaf edges, drawn once per
  cell); rng.1: mean absolute error of 128 ranges of width 0.1 at random places.

Part 2, intervals. EMS has no closed-form variance. ``SquareWave.bootstrap`` refits EMS on
counts drawn from the fitted channel law (parametric bootstrap) and returns the basic
interval (2 s - q_hi, 2 s - q_lo) and the percentile one (q_lo, q_hi). Their coverage of
the population's fraction below 0.5, median and 90th percentile is measured over
independent campaigns (256 buckets to keep the refits cheap), against the target 0.95.

Run: ``.venv/bin/python benchmarks/square_wave.py [--campaigns 3] [--ns 10000,100000,1000000]
[--big-campaigns 1] [--parts 1,2] [--boot-campaigns 40] [--replicates 50]
[--boot-buckets 256]``; the defaults are the runs in docs/statistics.md (about 5 and 20
minutes on a busy 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# One BLAS thread: EM's two matrix-vector products per step are small, and threads that wait
# for each other on a shared machine made them 20 times slower (wall clock).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy import stats

sys.path.insert(0, str(Path(__file__).parent))

from distributions import POPULATIONS, Population

from ldpkit.mechanisms.hierarchical import HierarchicalHistogram
from ldpkit.mechanisms.square_wave import SquareWave

FloatArray = npt.NDArray[np.float64]
BUCKETS = 1024
QUERIES = 128
LEVELS = np.arange(1, 10) / 10.0
GRID = np.linspace(0.0, 1.0, 8 * BUCKETS + 1)
PEOPLE = {
    "beta(5,2)": Population("beta(5,2)", [(1.0, stats.beta(5.0, 2.0))], []),
    "bimodal": POPULATIONS["bimodal"],
}


# --- reading an estimate's distribution function -------------------------------------------
def monotone(cdf: FloatArray) -> FloatArray:
    clipped = np.clip(cdf, 0.0, 1.0)
    out: FloatArray = 0.5 * (
        np.maximum.accumulate(clipped) + np.minimum.accumulate(clipped[::-1])[::-1]
    )
    return out


def edge_cdf(leaves: FloatArray) -> FloatArray:
    cum = np.concatenate([[0.0], np.cumsum(leaves)])
    cum[-1] = 1.0
    return monotone(cum)


def inverse(cdf: FloatArray, levels: FloatArray) -> FloatArray:
    """Quantiles of a non-decreasing cdf at the leaf edges, linear within leaves."""
    edges = np.linspace(0.0, 1.0, cdf.size)
    k = np.clip(np.searchsorted(cdf, levels, side="left"), 1, cdf.size - 1)
    lo, hi = cdf[k - 1], cdf[k]
    share = np.where(hi > lo, (levels - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0)
    out: FloatArray = edges[k - 1] + share * (edges[k] - edges[k - 1])
    return out


@dataclass
class Truth:
    cdf: FloatArray  # on GRID
    quantiles: FloatArray
    ranges: FloatArray
    widths: FloatArray


@dataclass
class Errors:
    w1: float
    ks: float
    quantile: float
    range_mse: float
    range_01: float


def errors(
    leaves: FloatArray, truth: Truth, a: FloatArray, b: FloatArray, starts: FloatArray
) -> Errors:
    """Errors of bucket fractions ``leaves`` (raw: ranges; monotone cdf: the rest)."""
    cdf = edge_cdf(leaves)
    edges = np.linspace(0.0, 1.0, cdf.size)
    gap = np.abs(np.interp(GRID, edges, cdf) - truth.cdf)
    raw = np.concatenate([[0.0], np.cumsum(leaves)])
    got = raw[b.astype(np.int64)] - raw[a.astype(np.int64)]
    width = np.interp(starts + 0.1, edges, cdf) - np.interp(starts, edges, cdf)
    return Errors(
        w1=float(np.sum((gap[1:] + gap[:-1]) / 2.0 * np.diff(GRID))),
        ks=float(np.max(gap)),
        quantile=float(np.mean(np.abs(inverse(cdf, LEVELS) - truth.quantiles))),
        range_mse=float(np.mean((got - truth.ranges) ** 2)) * 1e4,
        range_01=float(np.mean(np.abs(width - truth.widths))),
    )


def mean_errors(rows: list[Errors]) -> Errors:
    return Errors(*(float(np.mean([getattr(r, k) for r in rows])) for k in Errors.__annotations__))


# --- part 1 --------------------------------------------------------------------------------------
def campaigns_for(n: int, campaigns: int, big: int) -> int:
    return big if n >= 1_000_000 else campaigns


def run_cell(
    pop: Population, epsilon: float, n: int, campaigns: int, seed: int
) -> tuple[Errors, Errors, float, float]:
    rng = np.random.Generator(np.random.Philox(key=seed))
    hh = HierarchicalHistogram(epsilon=epsilon, bounds=(0.0, 1.0), resolution=BUCKETS)
    sw = SquareWave(epsilon=epsilon, bounds=(0.0, 1.0), buckets=BUCKETS)
    i, j = rng.integers(0, BUCKETS + 1, size=(2, 4 * QUERIES))
    keep = i != j
    a = np.minimum(i, j)[keep][:QUERIES].astype(np.float64)
    b = np.maximum(i, j)[keep][:QUERIES].astype(np.float64)
    starts = rng.random(QUERIES) * 0.9
    leaves = pop.leaves(BUCKETS)
    cum = np.concatenate([[0.0], np.cumsum(leaves)])
    truth = Truth(
        cdf=pop.cdf_left(GRID),
        quantiles=np.array([pop.quantile(q) for q in LEVELS]),
        ranges=cum[b.astype(np.int64)] - cum[a.astype(np.int64)],
        widths=pop.cdf_left(starts + 0.1) - pop.cdf_left(starts),
    )
    hh_rows, sw_rows, hh_time, sw_time = [], [], 0.0, 0.0
    for _ in range(campaigns):
        x = pop.draw(rng, n)
        t0 = time.process_time()
        est = hh.estimate(hh.aggregate(hh.perturb(x, rng=rng)))
        t1 = time.process_time()
        fit = sw.estimate_ems(sw.counts(sw.perturb(x, rng)))
        t2 = time.process_time()
        hh_time, sw_time = hh_time + t1 - t0, sw_time + t2 - t1
        hh_rows.append(errors(est.leaves, truth, a, b, starts))
        sw_rows.append(errors(fit.frequencies, truth, a, b, starts))
    return mean_errors(hh_rows), mean_errors(sw_rows), hh_time / campaigns, sw_time / campaigns


def part1(epsilons: list[float], ns: list[int], campaigns: int, big: int) -> None:
    print(
        f"Part 1: square wave + EMS (sw) vs hierarchical histogram (hh), {BUCKETS} buckets, "
        f"{campaigns} campaigns per cell ({big} at n = 10^6), same users, every value "
        "perturbed; errors in units of the bounds; cpu s: perturb + estimate per campaign\n"
    )
    head = (
        f"{'population':<10}{'n':>10}{'eps':>5} | {'W1 hh':>8}{'sw':>8} | {'KS hh':>7}{'sw':>7} |"
        f" {'|q| hh':>8}{'sw':>8} | {'rng hh':>7}{'sw':>7} | {'rng.1 hh':>8}{'sw':>7} |"
        f" {'cpu s hh':>8}{'sw':>6}"
    )
    print(head)
    print("-" * len(head))
    for name, pop in PEOPLE.items():
        for n in ns:
            for eps in epsilons:
                seed = int(eps * 1000) + n + (7 if name == "bimodal" else 0)
                h, s, th, ts = run_cell(pop, eps, n, campaigns_for(n, campaigns, big), seed)
                print(
                    f"{name:<10}{n:>10,}{eps:>5g} | {h.w1:>8.4f}{s.w1:>8.4f} | {h.ks:>7.4f}"
                    f"{s.ks:>7.4f} | {h.quantile:>8.4f}{s.quantile:>8.4f} | {h.range_mse:>7.2f}"
                    f"{s.range_mse:>7.2f} | {h.range_01:>8.4f}{s.range_01:>7.4f} | {th:>8.2f}"
                    f"{ts:>6.2f}",
                    flush=True,
                )
    print()


# --- part 2 --------------------------------------------------------------------------------------
def statistics_of(fit: object) -> FloatArray:
    from ldpkit.mechanisms.square_wave import Reconstruction

    assert isinstance(fit, Reconstruction)
    return np.array([float(fit.cdf(0.5)), *fit.quantile([0.5, 0.9])])


def part2(
    epsilons: list[float], ns: list[int], campaigns: int, replicates: int, buckets: int
) -> None:
    print(
        f"Part 2: parametric bootstrap of EMS ({buckets} buckets, {replicates} refits), "
        f"coverage at 95% over {campaigns} campaigns: basic | percentile interval\n"
    )
    head = (
        f"{'population':<10}{'n':>8}{'eps':>5} | {'F(0.5)':>13} | {'median':>13} | "
        f"{'p90':>13} | {'bias/sd F(.5)':>13}"
    )
    print(head)
    print("-" * len(head))
    for name, pop in PEOPLE.items():
        truth = np.array([pop.cdf_right(0.5), pop.quantile(0.5), pop.quantile(0.9)])
        for n in ns:
            for eps in epsilons:
                rng = np.random.Generator(np.random.Philox(key=int(eps * 100) + n + len(name)))
                sw = SquareWave(epsilon=eps, bounds=(0.0, 1.0), buckets=buckets)
                basic, perc, est = [], [], []
                for _ in range(campaigns):
                    counts = sw.counts(sw.perturb(pop.draw(rng, n), rng))
                    boot = sw.bootstrap(counts, statistics_of, replicates=replicates, rng=rng)
                    basic.append((boot.low <= truth) & (truth <= boot.high))
                    lo, hi = boot.percentile
                    perc.append((lo <= truth) & (truth <= hi))
                    est.append(boot.estimate)
                cb, cp = np.mean(basic, axis=0), np.mean(perc, axis=0)
                e = np.array(est)
                z = (e[:, 0].mean() - truth[0]) / max(float(e[:, 0].std(ddof=1)), 1e-12)
                cells = " | ".join(f"{cb[k]:>5.2f} | {cp[k]:<5.2f}" for k in range(3))
                print(f"{name:<10}{n:>8,}{eps:>5g} | {cells} | {z:>13.2f}", flush=True)
    print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--campaigns", type=int, default=3)
    ap.add_argument("--big-campaigns", type=int, default=1, help="campaigns at n = 10^6")
    ap.add_argument("--ns", default="10000,100000,1000000")
    ap.add_argument("--epsilons", default="0.5,1,2,4")
    ap.add_argument("--parts", default="1,2")
    ap.add_argument("--boot-campaigns", type=int, default=40)
    ap.add_argument("--boot-ns", default="10000,100000")
    ap.add_argument("--boot-epsilons", default="1")
    ap.add_argument("--replicates", type=int, default=50)
    ap.add_argument("--boot-buckets", type=int, default=256)
    args = ap.parse_args(argv)
    parts = {int(p) for p in args.parts.split(",")}
    if 1 in parts:
        ns = [int(v) for v in args.ns.split(",")]
        part1([float(v) for v in args.epsilons.split(",")], ns, args.campaigns, args.big_campaigns)
    if 2 in parts:
        part2(
            [float(v) for v in args.boot_epsilons.split(",")],
            [int(v) for v in args.boot_ns.split(",")],
            args.boot_campaigns,
            args.replicates,
            args.boot_buckets,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
