"""Coverage of a distribution's histogram bins (issue 28): per bin and all bins together.

A distribution metric of 64 leaves (fan-out 4) over [0, 1], 16 equal bins, at every
epsilon in {1, 4, 8} and n in {300, 3000, 30000}, for populations with nearly empty bins:
Beta(2, 5) values, and half of the population at one value (0.4) with the other half
uniform. Each campaign draws its users from the population, then every aggregate from
its exact law (who reports which depth, each depth's oracle; local hashing with its hash
a random function), all campaigns in one vectorized draw; each is estimated on its own.
Both estimands are scored against their own truth: the reporting users' bin fractions
(``reporters``, the default) and the population's (``population``).

Printed per cell: the lowest per-bin coverage at 95% over the 16 bins, and the share of
campaigns whose 16 ``simultaneous=True`` intervals all cover, for each estimand.

Run: ``python benchmarks/distribution_bins.py [--campaigns 1000]`` (about 4 minutes at
2,000 campaigns per cell on the shared 2-core machine).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

from ldpkit.aggregate import Aggregate
from ldpkit.distribution import ESTIMANDS
from ldpkit.mechanisms.hierarchical import HierarchicalHistogram
from ldpkit.mechanisms.randomized_response import GeneralizedRR

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

LEAVES, BRANCHING, BINS = 64, 4, 16
EPSILONS = (1.0, 4.0, 8.0)
USERS = (300, 3000, 30000)


def beta_leaves() -> FloatArray:
    """Beta(2, 5) values: the top bins hold almost nobody (the last about 2e-6)."""
    return np.diff(stats.beta(2, 5).cdf(np.linspace(0.0, 1.0, LEAVES + 1)))


def spike_leaves() -> FloatArray:
    """Half the population at 0.4, the other half uniform: every other bin holds 1/32."""
    out = np.full(LEAVES, 0.5 / LEAVES)
    out[int(0.4 * LEAVES)] += 0.5
    return out


POPULATIONS = {"beta(2,5)": beta_leaves, "half at 0.4": spike_leaves}


def simulate(
    m: HierarchicalHistogram, leaves: FloatArray, n: int, campaigns: int, rng: np.random.Generator
) -> tuple[IntArray, list[Aggregate]]:
    """Every campaign's users per leaf (campaigns, L) and its aggregate, from the exact law:
    users drawn from ``leaves``, each reporting a uniform depth through that depth's oracle."""
    users = rng.multinomial(n, leaves, size=campaigns)  # (R, L)
    return users, reports_of(m, users, rng)


def reports_of(
    m: HierarchicalHistogram, users: IntArray, rng: np.random.Generator
) -> list[Aggregate]:
    """The aggregate of each row of ``users`` (users per leaf), from the exact law: each
    user reports a uniform depth through that depth's oracle."""
    tree, h = m.tree, m.tree.height
    n = int(users[0].sum())
    split = rng.multinomial(users, np.full(h, 1.0 / h))  # (R, L, h): depth of each user
    sums = [split.sum(axis=1).astype(np.float64)]  # reports per depth
    for t, oracle in enumerate(m.oracles, start=1):
        nodes = tree.aggregate_leaves(split[:, :, t - 1].T, t).T.astype(np.int64)  # (R, d)
        if isinstance(oracle, GeneralizedRR):
            d = oracle.domain_size
            kept = rng.binomial(nodes, oracle.p)
            others = (np.ones((d, d)) - np.eye(d)) / (d - 1)
            counts = kept + rng.multinomial(nodes - kept, others).sum(axis=1)
        else:
            n_t = nodes.sum(axis=1, keepdims=True)
            counts = rng.binomial(nodes, oracle.p) + rng.binomial(n_t - nodes, oracle.q)
        sums.append(counts.astype(np.float64))
    table = np.concatenate(sums, axis=1)
    return [Aggregate(n, row) for row in table]


@dataclass
class Cell:
    population: str
    epsilon: float
    n: int
    expected_fewest: float
    """Expected users in the emptiest bin."""
    per_bin: dict[str, FloatArray]
    """Per estimand: each bin's coverage (16,)."""
    joint: dict[str, float]
    """Per estimand: the share of campaigns whose simultaneous intervals all cover."""


def run_cell(
    population: str, epsilon: float, n: int, campaigns: int, seed: int, level: float = 0.95
) -> Cell:
    m = HierarchicalHistogram(
        epsilon=epsilon, bounds=(0.0, 1.0), resolution=LEAVES, branching=BRANCHING
    )
    leaves = POPULATIONS[population]()
    rng = np.random.Generator(np.random.Philox(key=seed))
    users, aggregates = simulate(m, leaves, n, campaigns, rng)
    width = LEAVES // BINS
    truths = {
        "population": leaves.reshape(BINS, width).sum(axis=1)[None, :],
        "reporters": users.reshape(campaigns, BINS, width).sum(axis=2) / n,
    }
    hit = {e: np.zeros((campaigns, BINS), dtype=bool) for e in ESTIMANDS}
    joint = {e: np.zeros(campaigns, dtype=bool) for e in ESTIMANDS}
    for r, aggregate in enumerate(aggregates):
        hist = m.estimate(aggregate).histogram(BINS)
        for e in ESTIMANDS:
            truth = truths[e][min(r, truths[e].shape[0] - 1)]
            low, high = hist.ci(level, estimand=e)
            hit[e][r] = (low <= truth) & (truth <= high)
            low, high = hist.ci(level, simultaneous=True, estimand=e)
            joint[e][r] = bool(np.all((low <= truth) & (truth <= high)))
    fewest = float(leaves.reshape(BINS, width).sum(axis=1).min() * n)
    return Cell(
        population,
        epsilon,
        n,
        fewest,
        {e: hit[e].mean(axis=0) for e in ESTIMANDS},
        {e: float(joint[e].mean()) for e in ESTIMANDS},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--campaigns", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args(argv)
    r = args.campaigns
    # One binomial standard error of a coverage of 0.95 over r campaigns.
    se = math.sqrt(0.95 * 0.05 / r)
    print(
        f"{LEAVES} leaves (fan-out {BRANCHING}) over [0, 1], {BINS} bins, 95% intervals, "
        f"{r} campaigns per cell (binomial s.e. of 0.95: {se:.4f})\n"
    )
    header = (
        f"{'population':<12}{'eps':>4}{'n':>7}{'fewest':>8}   "
        f"{'reporters: bin min':>18}{'joint':>7}   {'population: bin min':>19}{'joint':>7}"
    )
    print(header)
    print("-" * len(header))
    start = time.perf_counter()
    worst = 1.0
    for i, (population, epsilon, n) in enumerate(
        (p, e, n) for p in POPULATIONS for e in EPSILONS for n in USERS
    ):
        c = run_cell(population, epsilon, n, r, seed=args.seed * 100 + i)
        rep, pop = c.per_bin["reporters"], c.per_bin["population"]
        worst = min(worst, rep.min(), pop.min(), *c.joint.values())
        print(
            f"{population:<12}{epsilon:>4g}{n:>7}{c.expected_fewest:>8.2g}   "
            f"{rep.min():>18.3f}{c.joint['reporters']:>7.3f}   "
            f"{pop.min():>19.3f}{c.joint['population']:>7.3f}"
        )
    print(f"\nlowest of all: {worst:.3f}  ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
