"""Coverage of the found strings' 95% intervals, pooled over many campaigns.

``benchmarks/heavy_hitters.py`` reports coverage over its few repeats (about 20 items
each), which cannot tell 0.92 from 0.95. This runs C campaigns of n users from the same
Zipf(1.1) population over 10^5 words, each with fresh users, randomness and public hash
family, and prints for the items found: the coverage of their intervals of the fraction
among the n users, and the mean and standard deviation of
``z = (estimate - truth) / stderr`` (0 and 1 when the estimates are unbiased and their
standard errors right). ``--rows R`` overrides the sketches' hash rows (an experiment:
it changes the report layout).

Run: ``.venv/bin/python benchmarks/strings_coverage.py [--epsilon 4] [--campaigns 30]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from heavy_hitters import population

import ldpkit.mechanisms.strings as strings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--campaigns", type=int, default=30)
    parser.add_argument("--seed", type=int, default=5000)
    parser.add_argument("--rows", type=int, default=None)
    args = parser.parse_args()
    if args.rows is not None:
        rows = args.rows
        strings.default_rows = lambda g: rows  # read by PrefixSketch when it is made
    words, probs = population()
    values = np.array(words, dtype=object)
    z, covered = [], 0
    for c in range(args.campaigns):
        rng = np.random.default_rng(args.seed + c)
        users = rng.choice(len(words), args.n, p=probs)
        m = strings.PrefixSketch(epsilon=args.epsilon, max_length=16, k=args.k, seed=77 + c)
        result = m.estimate(m.aggregate(m.perturb(values[users], rng=rng)))
        counts = np.bincount(users, minlength=len(words)) / args.n
        truth = {words[i]: float(counts[i]) for i in np.flatnonzero(counts)}
        for item in result.items:
            t = truth.get(item.value, 0.0)
            z.append((item.estimate - t) / item.stderr)
            covered += item.low <= t <= item.high
    zs = np.array(z)
    print(
        f"epsilon {args.epsilon:g}, n {args.n:,}, k {args.k}, {args.campaigns} campaigns, "
        f"rows {m.rows}: {zs.size} items found, coverage {covered / max(zs.size, 1):.3f}, "
        f"mean z {zs.mean():+.3f}, sd z {zs.std():.3f}"
    )


if __name__ == "__main__":
    main()
