"""Coverage of ``prefix_sketch``'s 95% intervals for found strings, over many campaigns.

The population of ``heavy_hitters.py`` (Zipf(1.1) over 10^5 generated words of 1..16
bytes). Each campaign draws n fresh users, a fresh public hash family (the intervals
promise coverage over families and devices alike) and fresh device randomness, runs the
real sampler and decoder, and checks each found string's interval against its true
fraction among the n users. Per (epsilon, n) it prints the pooled coverage of found
items, the campaigns' median coverage, the mean and sd of the z-scores
``(estimate - truth) / stderr`` (1 and 0 when honest), and found items per campaign.

Items of one campaign are not independent (they share the hash family and the heavy
strings' correction), so the binomial standard error printed is a lower bound; the
spread of per-campaign coverage is shown too.

``--one-family`` keeps hash family 0 for every campaign: coverage for the family a
deployment uses. ``--estimation-rows R`` overrides the estimation sketch's rows (an
experiment: it changes the report layout).

Run: ``.venv/bin/python benchmarks/strings_coverage.py [--epsilons 2,4,8] [--ns 1e5,1e6]
[--campaigns 100] [--k 20] [--seed 1] [--one-family] [--estimation-rows R]``.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from heavy_hitters import MAX_LENGTH, population

import ldpkit.mechanisms.strings as strings
from ldpkit.mechanisms.strings import PrefixSketch, encode_strings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epsilons", default="2,4,8")
    parser.add_argument("--ns", default="1e5,1e6")
    parser.add_argument("--campaigns", type=int, default=100)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--one-family", action="store_true", help="hash family 0 throughout")
    parser.add_argument("--estimation-rows", type=int, default=None)
    args = parser.parse_args()
    if args.estimation_rows is not None:
        rows = args.estimation_rows
        strings.default_estimation_rows = lambda g, r: rows  # read when a sketch is made
    words, probs = population()
    keys, _ = encode_strings(words, MAX_LENGTH)
    print(
        f"{'eps':>4} {'n':>8} {'found':>6} {'covered':>8} {'cover':>6} {'±se':>6} "
        f"{'median':>6} {'z_mean':>7} {'z_sd':>5} {'decode_s':>8}"
    )
    for eps in (float(e) for e in args.epsilons.split(",")):
        for n in (int(float(v)) for v in args.ns.split(",")):
            covered = found = 0
            per: list[float] = []
            zs: list[float] = []
            times: list[float] = []
            for c in range(args.campaigns):
                seed = args.seed * 100_000 + c
                rng = np.random.default_rng(seed)
                users = rng.choice(len(words), size=n, p=probs)
                truth = np.bincount(users, minlength=len(words)) / n
                m = PrefixSketch(
                    epsilon=eps, max_length=MAX_LENGTH, k=args.k, seed=0 if args.one_family else c
                )
                reports = m._perturb(keys[users], rng)  # keys encoded once for speed
                agg = m.aggregate(reports)
                start = time.perf_counter()
                result = m.estimate(agg)
                times.append(time.perf_counter() - start)
                index = {w: i for i, w in enumerate(words)}
                hits = 0
                for it in result.items:
                    i = index.get(it.value)
                    f = truth[i] if i is not None else 0.0
                    hits += it.low <= f <= it.high
                    if it.stderr > 0:
                        zs.append((it.estimate - f) / it.stderr)
                covered += hits
                found += len(result.items)
                if result.items:
                    per.append(hits / len(result.items))
            cover = covered / found if found else math.nan
            se = math.sqrt(0.95 * 0.05 / found) if found else math.nan
            print(
                f"{eps:>4g} {n:>8d} {found / args.campaigns:>6.1f} {covered:>4d}/{found:<4d}"
                f"{cover:>6.3f} {se:>6.3f} {np.median(per):>6.3f} {np.mean(zs):>+7.3f} "
                f"{np.std(zs):>5.2f} {np.median(times):>8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
