"""Coverage of a distribution's mean and quantile intervals for both estimands (issue 28).

The same campaigns as ``benchmarks/distribution_bins.py``: 64 leaves (fan-out 4) over
[0, 1], Beta(2, 5) values or half of them at 0.4, every aggregate drawn from its exact
law. Each user's value sits at the middle of its leaf, so the mean's point estimate is
unbiased and its interval without the half-leaf widening (``wald``) shows whether the
standard error is right; ``served`` is the interval as answered (half a leaf added each
way). Each estimand is scored against its own truth: the campaign's users' mean and
quantiles (``reporters``), or the population's (``population``).

Printed per cell and estimand: the ratio of the root mean square served ``stderr`` of
the mean to the standard deviation of its error over the campaigns (1 is right; its own
standard error is about ``1 / sqrt(2 campaigns)``), the coverage of the mean's interval
without and with the half leaf, the coverage of the median's and the 0.9 quantile's
intervals, and the reporters' mean interval widths over the population's (the mean's,
the median's, the 0.9 quantile's).

Run: ``python benchmarks/distribution_summaries.py [--campaigns 500]``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).parent))

from distribution_bins import BRANCHING, EPSILONS, LEAVES, POPULATIONS, simulate

from ldpkit.distribution import ESTIMANDS
from ldpkit.estimates import normal_quantile
from ldpkit.mechanisms.hierarchical import HierarchicalHistogram

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

USERS = (300, 3000)
QUANTILES = (0.5, 0.9)


@dataclass
class Summary:
    """One estimand's figures over a cell's campaigns."""

    se_ratio: float
    """Root mean square served stderr of the mean / standard deviation of its error."""
    wald: float
    """Coverage of mean +- z stderr (values at leaf middles: the estimate is unbiased)."""
    served: float
    """Coverage of the mean's served interval (half a leaf added each way)."""
    quantiles: dict[float, float]
    """Coverage of each quantile's interval."""
    mean_width: float
    """Mean width of the mean's served interval."""
    quantile_width: dict[float, float]
    """Mean width of each quantile's interval."""


def quantile_leaf(counts: FloatArray, q: float) -> IntArray:
    """Per row of leaf masses, the leaf holding the q-quantile (inf x with F(x) >= q)."""
    cum = np.cumsum(counts, axis=-1) / counts.sum(axis=-1, keepdims=True)
    return np.argmax(cum >= q - 1e-12, axis=-1)


def run_cell(
    population: str, epsilon: float, n: int, campaigns: int, seed: int, level: float = 0.95
) -> dict[str, Summary]:
    """Every estimand's :class:`Summary` over ``campaigns`` simulated campaigns."""
    m = HierarchicalHistogram(
        epsilon=epsilon, bounds=(0.0, 1.0), resolution=LEAVES, branching=BRANCHING
    )
    leaves = POPULATIONS[population]()
    rng = np.random.Generator(np.random.Philox(key=seed))
    users, aggregates = simulate(m, leaves, n, campaigns, rng)
    middle = (np.arange(LEAVES) + 0.5) / LEAVES
    truth_mean = {
        "reporters": users @ middle / n,
        "population": np.full(campaigns, float(leaves @ middle)),
    }
    masses = {"reporters": users.astype(np.float64), "population": leaves[None, :]}
    z = normal_quantile(level)
    err = {e: np.empty(campaigns) for e in ESTIMANDS}
    se = {e: np.empty(campaigns) for e in ESTIMANDS}
    served = {e: np.zeros(campaigns, dtype=bool) for e in ESTIMANDS}
    width = {e: np.empty(campaigns) for e in ESTIMANDS}
    hit_q = {e: {q: np.zeros(campaigns, dtype=bool) for q in QUANTILES} for e in ESTIMANDS}
    q_width = {e: {q: np.empty(campaigns) for q in QUANTILES} for e in ESTIMANDS}
    for r, aggregate in enumerate(aggregates):
        est = m.estimate(aggregate)
        for e in ESTIMANDS:
            mean, truth = est.mean(estimand=e), float(truth_mean[e][r])
            err[e][r], se[e][r] = mean.mean - truth, mean.stderr
            low, high = mean.ci(level)
            served[e][r], width[e][r] = low <= truth <= high, high - low
            for qe in est.quantiles(QUANTILES, level, estimand=e):
                k = int(quantile_leaf(masses[e][min(r, len(masses[e]) - 1)], qe.q))
                hit_q[e][qe.q][r] = qe.low <= k / LEAVES and (k + 1) / LEAVES <= qe.high
                q_width[e][qe.q][r] = qe.high - qe.low
    return {
        e: Summary(
            se_ratio=float(np.sqrt(np.mean(se[e] ** 2)) / np.std(err[e])),
            wald=float(np.mean(np.abs(err[e]) <= z * se[e])),
            served=float(served[e].mean()),
            quantiles={q: float(hit_q[e][q].mean()) for q in QUANTILES},
            mean_width=float(width[e].mean()),
            quantile_width={q: float(q_width[e][q].mean()) for q in QUANTILES},
        )
        for e in ESTIMANDS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--campaigns", type=int, default=500)
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args(argv)
    r = args.campaigns
    print(
        f"{LEAVES} leaves (fan-out {BRANCHING}) over [0, 1], 95% intervals, {r} campaigns "
        f"per cell (binomial s.e. of 0.95: {math.sqrt(0.95 * 0.05 / r):.4f}; of the se "
        f"ratio: {1 / math.sqrt(2 * r):.3f})\n"
    )
    header = (
        f"{'population':<12}{'eps':>4}{'n':>6}  {'estimand':<11}{'se ratio':>9}"
        f"{'wald':>7}{'served':>8}{'q0.5':>7}{'q0.9':>7}   widths rep/pop: mean q0.5 q0.9"
    )
    print(header)
    print("-" * len(header))
    start = time.perf_counter()
    cells = ((p, e, n) for p in POPULATIONS for e in EPSILONS for n in USERS)
    for i, (population, epsilon, n) in enumerate(cells):
        out = run_cell(population, epsilon, n, r, seed=args.seed * 100 + i)
        rep, pop = out["reporters"], out["population"]
        ratios = [rep.mean_width / pop.mean_width] + [
            rep.quantile_width[q] / pop.quantile_width[q] for q in QUANTILES
        ]
        for e, s in out.items():
            widths = "".join(f"{x:>6.2f}" for x in ratios) if e == "reporters" else ""
            print(
                f"{population:<12}{epsilon:>4g}{n:>6}  {e:<11}{s.se_ratio:>9.3f}"
                f"{s.wald:>7.3f}{s.served:>8.3f}{s.quantiles[0.5]:>7.3f}"
                f"{s.quantiles[0.9]:>7.3f}   {widths:>27}"
            )
    print(f"\n({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
