"""What ``auto`` weighs for ordered categories (``ordered = true``): the variance of the
mean rank (ranks 1 .. d, a uniform population, one report) of every candidate, and a
simulated check of those variances (docs/statistics.md, "The exponential mechanism").

The theory column is :meth:`FrequencyOracle.rank_variance`; the simulated one is the
variance of the mean-rank estimate over campaigns of n reports times n (it should match
within its own sampling error, about sqrt(2 / campaigns) relative).

    python benchmarks/exponential_auto.py [--campaigns 400] [--n 2000]
"""

from __future__ import annotations

import argparse

import numpy as np

from ldpkit.mechanisms import ORDERED, choose, mechanism
from ldpkit.mechanisms.base import FrequencyOracle

SETTINGS = ((5, 0.5), (5, 1.0), (5, 2.0), (5, 4.0), (10, 0.5), (10, 1.0), (10, 2.0), (10, 4.0))


def simulated(m: FrequencyOracle, n: int, campaigns: int, rng: np.random.Generator) -> float:
    d = m.domain_size
    values = np.tile(np.arange(d), n // d)
    means = [
        m.mean_rank(m.estimate(m.aggregate(m.perturb(values, rng=rng)))).mean
        for _ in range(campaigns)
    ]
    return float(np.var(means, ddof=1) * values.size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=400)
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(30)
    print("| d | ε | " + " | ".join(ORDERED) + " | auto picks |")
    print("|---" * (len(ORDERED) + 3) + "|")
    for d, eps in SETTINGS:
        cells = []
        for name in ORDERED:
            m = mechanism(name, epsilon=eps, domain_size=d)
            assert isinstance(m, FrequencyOracle)
            theory = m.rank_variance()
            sim = simulated(m, args.n, args.campaigns, rng)
            cells.append(f"{theory:.3g} ({sim:.3g})")
        pick = choose(epsilon=eps, domain_size=d, ordered=True).name
        print(f"| {d} | {eps:g} | " + " | ".join(cells) + f" | {pick} |")


if __name__ == "__main__":
    main()
