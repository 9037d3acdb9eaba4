"""Distributions of a number: accuracy, honesty and speed of the hierarchical histogram.

Part 1, the grid (issue 15). For populations uniform, normal, exponential (skewed),
bimodal and spiky (half the users at one value), epsilon in {0.5, 1, 2, 4} and n in
{10^4, 10^5, 10^6}, with 1,024 leaves over bounds [0, 1] (every error below is therefore
in units of the bounds), 100 campaigns per cell (200 when drawn from the law):

- MSE/th: mean squared error of 128 random ranges (uniform pairs of leaf edges, drawn
  once per cell) divided by the mean of their theoretical variances (the estimator's
  covariance at the true population); target [0.9, 1.1];
- W1: Wasserstein-1 distance between the estimated distribution (its distribution
  function made non-decreasing, linear within leaves) and the truth;
- |med|, |p90|: absolute error of the median and the 90th percentile;
- cov rng / q / bin: coverage of the 95% intervals of the ranges, of the median and p90
  (pooled), and of the 16 histogram bins; target >= 0.93 in every cell;
- flat/hh: MSE of the naive baseline (OUE over the 1,024 leaves, ranges summed) over
  the MSE of the hierarchical histogram, on the ranges wider than 1/8 of the bounds, the
  same users and queries; target > 1.

Cells with n <= 10^5 perturb every user's value for real. Cells with n = 10^6 draw the
aggregate from its exact law instead (users per depth multinomial, nodes multinomial,
GRR counts by keeping or moving each user, OLH support counts as independent binomials,
which is OLH's law when its hash is a random function), 10^4 times faster; ``--real``
perturbs them too. The naive baseline always uses the exact law of OUE's counts (OUE's
bits are independent given the values), for the same users.

Part 2, the choice of estimator: range MSE (all random ranges, and those wider than
1/8) at n = 10^5 for HH with fan-out 2, 4, 8 and 16, the discrete Haar transform (DHT),
Square Wave with EM smoothing (SW-EMS) and the naive baseline, every user perturbed;
then n x MSE of HH and SW-EMS as n grows (part 2b), which shows SW-EMS's bias.

Part 3, speed: aggregation and estimation of 10^6 real reports with 1,024 leaves
(target under 1 s; wall and CPU seconds, since the machine may be shared), and the
answers of a default query (16 bins and the mean) and of one with quantiles. Medians of
3 runs.

Run: ``.venv/bin/python benchmarks/distributions.py [--quick] [--real] [--campaigns R]
[--parts 1,2,3]``. ``--quick`` is a smoke run (about a minute).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

sys.path.insert(0, str(Path(__file__).parent))

from _distribution_methods import (
    flat_oue_from_counts,
    haar,
    leaves_of,
    square_wave,
)

import ldpkit
from ldpkit.aggregate import Aggregate
from ldpkit.distribution import DistributionEstimate
from ldpkit.mechanisms.hierarchical import HierarchicalHistogram
from ldpkit.mechanisms.randomized_response import GeneralizedRR

FloatArray = npt.NDArray[np.float64]
BOUNDS = (0.0, 1.0)
LEAVES = 1024
QUERIES = 128
QUANTILES = (0.5, 0.9)


# --- populations with exact answers ------------------------------------------------------
@dataclass
class Population:
    """A mixture of continuous parts (clipped to [0, 1]) and atoms."""

    name: str
    parts: list[tuple[float, Any]]  # (weight, frozen scipy distribution)
    atoms: list[tuple[float, float]]  # (weight, value)

    def draw(self, rng: np.random.Generator, n: int) -> FloatArray:
        weights = [w for w, _ in self.parts] + [w for w, _ in self.atoms]
        which = rng.choice(len(weights), size=n, p=np.array(weights) / sum(weights))
        x = np.empty(n)
        for i, (_, dist) in enumerate(self.parts):
            sel = which == i
            x[sel] = dist.rvs(size=int(sel.sum()), random_state=rng)
        for j, (_, value) in enumerate(self.atoms):
            x[which == len(self.parts) + j] = value
        return np.clip(x, *BOUNDS)

    def cdf_left(self, x: FloatArray) -> FloatArray:
        """P(X < x) for the clipped X."""
        x = np.asarray(x, dtype=np.float64)
        out = np.zeros(x.shape)
        for w, dist in self.parts:
            out += w * np.where(x <= 0.0, 0.0, np.where(x > 1.0, 1.0, dist.cdf(x)))
        for w, value in self.atoms:
            out += w * (value < x)
        return out

    def cdf_right(self, x: float) -> float:
        """P(X <= x) for the clipped X."""
        out = 0.0
        for w, dist in self.parts:
            out += w * (0.0 if x < 0.0 else 1.0 if x >= 1.0 else float(dist.cdf(x)))
        for w, value in self.atoms:
            out += w * (value <= x)
        return out

    def quantile(self, q: float) -> float:
        """inf {x : P(X <= x) >= q}, by bisection (exact to 1e-15)."""
        lo, hi = 0.0, 1.0
        if self.cdf_right(0.0) >= q:
            return 0.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if self.cdf_right(mid) >= q:
                hi = mid
            else:
                lo = mid
        return hi

    def leaves(self, L: int) -> FloatArray:
        edges = np.arange(L + 1) / L
        cdf = self.cdf_left(edges)
        cdf[-1] = 1.0  # the last leaf is closed at hi
        return np.diff(cdf)


POPULATIONS = {
    "uniform": Population("uniform", [(1.0, stats.uniform(0.0, 1.0))], []),
    "normal": Population("normal", [(1.0, stats.norm(0.5, 0.15))], []),
    "exponential": Population("exponential", [(1.0, stats.expon(scale=0.15))], []),
    "bimodal": Population(
        "bimodal", [(0.5, stats.norm(0.25, 0.05)), (0.5, stats.norm(0.7, 0.08))], []
    ),
    "spiky": Population("spiky", [(0.5, stats.uniform(0.0, 1.0))], [(0.5, 0.4)]),
}


# --- aggregates ----------------------------------------------------------------------------
def simulated_aggregate(
    m: HierarchicalHistogram, leaves: FloatArray, n: int, rng: np.random.Generator
) -> Aggregate:
    """An aggregate of n reports drawn from its exact law (OLH: hash as a random function)."""
    tree = m.tree
    h = tree.height
    per_depth = rng.multinomial(n, np.full(h, 1.0 / h))
    sums: list[FloatArray] = [per_depth.astype(np.float64)]
    for t, (oracle, n_t) in enumerate(zip(m.oracles, per_depth, strict=True), start=1):
        node_p = np.clip(tree.aggregate_leaves(leaves, t), 0.0, None)
        users = rng.multinomial(n_t, node_p / node_p.sum())
        if isinstance(oracle, GeneralizedRR):
            d = oracle.domain_size
            kept = rng.binomial(users, oracle.p)
            others = (np.ones((d, d)) - np.eye(d)) / (d - 1)
            moved = rng.multinomial(users - kept, others).sum(axis=0)
            counts = kept + moved
        else:
            counts = rng.binomial(users, oracle.p) + rng.binomial(n_t - users, oracle.q)
        sums.append(counts.astype(np.float64))
    return Aggregate(n, np.concatenate(sums))


def random_ranges(rng: np.random.Generator, L: int, k: int) -> tuple[FloatArray, FloatArray]:
    """k uniform pairs i < j of leaf edges, as (start, stop) in leaf units."""
    i = rng.integers(0, L + 1, size=4 * k)
    j = rng.integers(0, L + 1, size=4 * k)
    keep = i != j
    a, b = np.minimum(i, j)[keep][:k], np.maximum(i, j)[keep][:k]
    return a.astype(np.float64), b.astype(np.float64)


def range_answers(leaves: FloatArray, a: FloatArray, b: FloatArray) -> FloatArray:
    cdf = np.concatenate([[0.0], np.cumsum(leaves)])
    out: FloatArray = cdf[b.astype(np.int64)] - cdf[a.astype(np.int64)]
    return out


def wasserstein(est: DistributionEstimate, x: FloatArray, truth: FloatArray) -> float:
    """W1 between the estimate (non-decreasing, linear in leaves) and the truth at x."""
    cdf, _ = est.edge_band()
    clipped = np.clip(cdf, 0.0, 1.0)
    mono = 0.5 * (np.maximum.accumulate(clipped) + np.minimum.accumulate(clipped[::-1])[::-1])
    gap = np.abs(np.interp(x, est.edges, mono) - truth)
    return float(np.sum((gap[1:] + gap[:-1]) / 2.0 * np.diff(x)))


# --- part 1 ----------------------------------------------------------------------------------
@dataclass
class Cell:
    population: str
    epsilon: float
    n: int
    source: str
    mse_ratio: float
    w1: float
    median_error: float
    p90_error: float
    range_coverage: float
    quantile_coverage: float
    bin_coverage: float
    flat_over_hh: float

    def misses(self) -> list[str]:
        out = []
        if not 0.9 <= self.mse_ratio <= 1.1:
            out.append("MSE/th")
        for name, value in (
            ("rng", self.range_coverage),
            ("q", self.quantile_coverage),
            ("bin", self.bin_coverage),
        ):
            if value < 0.93:
                out.append(f"cov {name}")
        if not self.flat_over_hh > 1.0:
            out.append("flat")
        return out


def run_cell(
    pop: Population, epsilon: float, n: int, campaigns: int, real: bool, seed: int
) -> Cell:
    rng = np.random.Generator(np.random.Philox(key=seed))
    m = HierarchicalHistogram(epsilon=epsilon, bounds=BOUNDS, resolution=LEAVES, branching=4)
    truth_leaves = pop.leaves(LEAVES)
    theory = m.expected(n, truth_leaves)
    a, b = random_ranges(rng, LEAVES, QUERIES)
    wide = (b - a) > LEAVES / 8
    truth = range_answers(truth_leaves, a, b)
    theory_var = theory.variance(theory._range_queries(a, b))
    edges16 = np.linspace(0.0, 1.0, 17)
    bin_truth = np.diff(np.append(pop.cdf_left(edges16[:-1]), 1.0))
    q_truth = np.array([pop.quantile(q) for q in QUANTILES])
    fine = np.linspace(0.0, 1.0, 8 * LEAVES + 1)
    fine_truth = pop.cdf_left(fine)
    errors, flat_errors, covered, bins_cov, q_cov, w1, q_err = [], [], [], [], [], [], []
    for _ in range(campaigns):
        if real:
            x = pop.draw(rng, n)
            agg = m.aggregate(m.perturb(x, rng=rng))
            counts = np.bincount(leaves_of(x, LEAVES), minlength=LEAVES)
        else:
            agg = simulated_aggregate(m, truth_leaves, n, rng)
            counts = rng.multinomial(n, truth_leaves)
        est = m.estimate(agg)
        answers = est.fractions(list(zip(a / LEAVES, b / LEAVES, strict=True)))
        got = np.array([r.estimate for r in answers])
        cis = np.array([r.ci(estimand="population") for r in answers])  # truths: the population's
        errors.append(got - truth)
        covered.append((cis[:, 0] <= truth) & (truth <= cis[:, 1]))
        low, high = est.histogram(16).ci(estimand="population")
        bins_cov.append((low <= bin_truth) & (bin_truth <= high))
        qs = est.quantiles(QUANTILES)
        q_cov.append([q.low <= t <= q.high for q, t in zip(qs, q_truth, strict=True)])
        q_err.append([abs(q.value - t) for q, t in zip(qs, q_truth, strict=True)])
        w1.append(wasserstein(est, fine, fine_truth))
        flat = flat_oue_from_counts(counts, epsilon, rng)
        flat_errors.append(range_answers(flat, a, b) - truth)
    err = np.array(errors)
    flat_err = np.array(flat_errors)
    return Cell(
        population=pop.name,
        epsilon=epsilon,
        n=n,
        source="reports" if real else "law",
        mse_ratio=float(np.mean(err**2) / np.mean(theory_var)),
        w1=float(np.mean(w1)),
        median_error=float(np.mean(np.array(q_err)[:, 0])),
        p90_error=float(np.mean(np.array(q_err)[:, 1])),
        range_coverage=float(np.mean(covered)),
        quantile_coverage=float(np.mean(q_cov)),
        bin_coverage=float(np.mean(bins_cov)),
        flat_over_hh=float(np.mean(flat_err[:, wide] ** 2) / np.mean(err[:, wide] ** 2)),
    )


def part1(
    epsilons: list[float], ns: list[int], campaigns: int, real_all: bool, law_campaigns: int
) -> list[Cell]:
    print(
        f"Part 1: {LEAVES} leaves, fan-out 4, {QUERIES} random ranges, {campaigns} campaigns "
        f"per cell ({law_campaigns} when drawn from the law; errors in units of the bounds)\n"
    )
    header = (
        f"{'population':<12}{'eps':>4}{'n':>10} {'src':<7}{'MSE/th':>7}{'W1':>9}{'|med|':>9}"
        f"{'|p90|':>9}{'cov rng':>8}{'q':>6}{'bin':>6}{'flat/hh':>8}  targets"
    )
    print(header)
    print("-" * len(header))
    cells = []
    for n in ns:
        for pop in POPULATIONS.values():
            for eps in epsilons:
                real = real_all or n <= 100_000
                seed = int(eps * 1000) + n + 7 * len(cells)
                cell = run_cell(pop, eps, n, campaigns if real else law_campaigns, real, seed)
                cells.append(cell)
                missed = cell.misses()
                print(
                    f"{cell.population:<12}{eps:>4g}{n:>10,} {cell.source:<7}"
                    f"{cell.mse_ratio:>7.3f}{cell.w1:>9.5f}{cell.median_error:>9.5f}"
                    f"{cell.p90_error:>9.5f}{cell.range_coverage:>8.3f}"
                    f"{cell.quantile_coverage:>6.3f}{cell.bin_coverage:>6.3f}"
                    f"{cell.flat_over_hh:>8.1f}  " + ("! " + ", ".join(missed) if missed else "ok"),
                    flush=True,
                )
    good = sum(1 for c in cells if not c.misses())
    print(f"\n{good} of {len(cells)} cells meet every target\n")
    return cells


# --- part 2 ----------------------------------------------------------------------------------
Method = Callable[[FloatArray, float, np.random.Generator], FloatArray]


def hh_method(branching: int) -> Method:
    def run(x: FloatArray, eps: float, rng: np.random.Generator) -> FloatArray:
        m = HierarchicalHistogram(
            epsilon=eps, bounds=BOUNDS, resolution=LEAVES, branching=branching
        )
        return m.estimate(m.aggregate(m.perturb(x, rng=rng))).leaves

    return run


METHODS: dict[str, Method] = {
    "hh b=2": hh_method(2),
    "hh b=4": hh_method(4),
    "hh b=8": hh_method(8),
    "hh b=16": hh_method(16),
    "haar": lambda x, eps, rng: haar(x, LEAVES, eps, rng),
    "sw-ems": lambda x, eps, rng: square_wave(x, LEAVES, eps, rng),
    "flat oue": lambda x, eps, rng: flat_oue_from_counts(
        np.bincount(leaves_of(x, LEAVES), minlength=LEAVES), eps, rng
    ),
}


def part2(epsilons: list[float], n: int, campaigns: int) -> None:
    print(
        f"Part 2: range MSE x 10^4 at n = {n:,}, {LEAVES} leaves, {campaigns} campaigns, "
        f"{QUERIES} random ranges (all | wider than 1/8), every user perturbed\n"
    )
    results: dict[tuple[str, str, float], tuple[float, float]] = {}
    for p_index, pop in enumerate(POPULATIONS.values()):
        truth_leaves = pop.leaves(LEAVES)
        for eps in epsilons:
            rng = np.random.Generator(np.random.Philox(key=1000 + p_index * 10 + int(eps * 2)))
            a, b = random_ranges(rng, LEAVES, QUERIES)
            wide = (b - a) > LEAVES / 8
            truth = range_answers(truth_leaves, a, b)
            samples = [pop.draw(rng, n) for _ in range(campaigns)]
            for name, method in METHODS.items():
                errs = np.array([range_answers(method(x, eps, rng), a, b) - truth for x in samples])
                results[(name, pop.name, eps)] = (
                    float(np.mean(errs**2)),
                    float(np.mean(errs[:, wide] ** 2)),
                )
    header = f"{'method':<10}" + "".join(f"{'eps=' + format(e, 'g'):>16}" for e in epsilons)
    for title, pops in (
        ("mean over the five populations", list(POPULATIONS)),
        ("spiky only", ["spiky"]),
    ):
        print(f"{title}:")
        print(header)
        print("-" * len(header))
        for name in METHODS:
            cells = []
            for eps in epsilons:
                alls = [results[(name, p, eps)][0] for p in pops]
                wides = [results[(name, p, eps)][1] for p in pops]
                cells.append(f"{1e4 * np.mean(alls):>8.3f} |{1e4 * np.mean(wides):>6.2f}")
            print(f"{name:<10}" + "".join(f"{c:>16}" for c in cells))
        print()


def part2b(ns: list[int], campaigns: int) -> None:
    print(
        "Part 2b: n x range MSE at eps = 1 (constant for an unbiased estimator; growing "
        f"when bias dominates), {campaigns} campaigns\n"
    )
    header = f"{'method':<10}{'population':<12}" + "".join(f"{f'n={n:,}':>14}" for n in ns)
    print(header)
    print("-" * len(header))
    for name in ("hh b=4", "sw-ems"):
        for pop_name in ("normal", "spiky"):
            pop = POPULATIONS[pop_name]
            truth_leaves = pop.leaves(LEAVES)
            row = []
            for n in ns:
                rng = np.random.Generator(np.random.Philox(key=77 + n))
                a, b = random_ranges(rng, LEAVES, QUERIES)
                truth = range_answers(truth_leaves, a, b)
                errs = np.array(
                    [
                        range_answers(METHODS[name](pop.draw(rng, n), 1.0, rng), a, b) - truth
                        for _ in range(campaigns)
                    ]
                )
                row.append(f"{n * float(np.mean(errs**2)):>14.3f}")
            print(f"{name:<10}{pop_name:<12}" + "".join(row), flush=True)
    print()


# --- part 3 ----------------------------------------------------------------------------------
def median_time(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def median_cpu(fn: Callable[[], Any], runs: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds (CPU time is what this process used: the machine is shared)."""
    walls, cpus, result = [], [], None
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def part3(n: int, runs: int) -> int:
    """Speed at n; returns how many epsilons were over 1 s of CPU."""
    print(f"Part 3: speed at n = {n:,}, {LEAVES} leaves, median of {runs} runs (wall / CPU)\n")
    rng = np.random.Generator(np.random.Philox(key=3))
    over = 0
    for eps in (1.0, 4.0):
        m = HierarchicalHistogram(epsilon=eps, bounds=BOUNDS, resolution=LEAVES)
        x = POPULATIONS["bimodal"].draw(rng, n)
        perturb_s, reports = median_time(lambda m=m, x=x: m.perturb(x, rng=rng), 1)
        agg_w, agg_c, agg = median_cpu(lambda m=m, r=reports: m.aggregate(r), runs)
        est_w, est_c, est = median_cpu(lambda m=m, g=agg: m.estimate(g), runs)
        default_s, _ = median_time(lambda e=est: e.to_dict(), runs)
        quant_s, _ = median_time(
            lambda m=m, g=agg: m.estimate(g).to_dict(quantiles=[0.5, 0.9], range_=(0.2, 0.3)),
            runs,
        )
        total_w, total_c = agg_w + est_w, agg_c + est_c
        flag = "ok" if total_c < 1.0 else "! over 1 s of CPU"
        over += total_c >= 1.0
        print(
            f"eps={eps:g}: oracles {m.depth_oracles()}; perturb {perturb_s:.2f} s; aggregate "
            f"{agg_w:.3f} / {agg_c:.3f} s + estimate {est_w:.4f} / {est_c:.4f} s = "
            f"{total_w:.3f} / {total_c:.3f} s ({flag}); answers: 16 bins + mean "
            f"{1e3 * default_s:.1f} ms, + quantiles and a range (fresh estimate) "
            f"{1e3 * quant_s:.1f} ms"
        )
    print()
    return over


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small grid")
    parser.add_argument("--real", action="store_true", help="perturb every user at 10^6 too")
    parser.add_argument("--campaigns", type=int, default=None, help="campaigns per cell")
    parser.add_argument("--parts", default="1,2,3", help="which parts to run")
    args = parser.parse_args(argv)
    parts = {int(p) for p in args.parts.split(",") if p.strip()}
    if args.quick:
        epsilons, ns, campaigns, law = [1.0, 4.0], [10_000], args.campaigns or 30, 30
        alt_eps, alt_n, alt_campaigns, runs = [1.0], 20_000, 2, 1
    else:
        epsilons, ns = [0.5, 1.0, 2.0, 4.0], [10_000, 100_000, 1_000_000]
        campaigns, law = args.campaigns or 100, args.campaigns or 200
        alt_eps, alt_n, alt_campaigns, runs = [0.5, 1.0, 2.0, 4.0], 100_000, 10, 3
    print(f"ldpkit {ldpkit.__version__}; numpy {np.__version__}\n")
    missed = 0
    if 1 in parts:
        missed += sum(1 for cell in part1(epsilons, ns, campaigns, args.real, law) if cell.misses())
    if 2 in parts:
        part2(alt_eps, alt_n, alt_campaigns)
        part2b([10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000], alt_campaigns)
    if 3 in parts:
        missed += part3(1_000_000, runs)
    return 1 if missed else 0  # a missed target fails the run


if __name__ == "__main__":
    raise SystemExit(main())
