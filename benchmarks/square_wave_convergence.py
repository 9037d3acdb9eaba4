"""Where EMS stops at its step limit, and how far its estimate still had to move.

For each setting (buckets, epsilon, population, n: one campaign, fixed seed) EMS runs with
the served rule (log-likelihood change under 10^-3 nats, at most 10,000 steps); where it
stops at the limit, it runs on to 4 times the limit, and the table gives the Kolmogorov-
Smirnov distance between the served estimate and the longer run's, beside the served
estimate's KS distance from the truth (the histogram of the values in the buckets): what
a warning (``convergence.converged = false``) is about.

Run: ``.venv/bin/python benchmarks/square_wave_convergence.py`` (about 5 minutes on the
2-core development machine, one BLAS thread); the output is
benchmarks/results/square_wave_convergence.txt.
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"

import numpy as np

from ldpkit.mechanisms.square_wave import DEFAULT_MAX_ITERATIONS, SquareWave


def values(population: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if population == "uniform":
        return rng.uniform(0.0, 1.0, n)
    if population == "point":  # every user at one value
        return np.full(n, 0.37)
    u = np.where(rng.random(n) < 0.5, rng.normal(0.25, 0.05, n), rng.normal(0.7, 0.08, n))
    return np.clip(u, 0.0, 1.0)


def main() -> None:
    header = "buckets   eps population         n  steps  converged  last change  KS to 4x"
    print(header + "  KS to truth")
    for d in (256, 1024):
        for eps in (0.1, 0.5, 1.0, 4.0):
            for population in ("uniform", "bimodal", "point"):
                for n in (10_000, 100_000, 1_000_000):
                    rng = np.random.default_rng(0)
                    sw = SquareWave(epsilon=eps, bounds=(0.0, 1.0), buckets=d)
                    x = values(population, n, rng)
                    counts = sw.counts(sw.perturb(x, rng))
                    fit = sw.estimate_ems(counts)
                    truth = np.cumsum(np.bincount(np.minimum((x * d).astype(int), d - 1),
                                                  minlength=d)) / n  # fmt: skip
                    cdf = np.cumsum(fit.frequencies)
                    further = "-"
                    if not fit.converged:
                        more = sw.estimate_ems(counts, max_iterations=4 * DEFAULT_MAX_ITERATIONS)
                        further = f"{np.max(np.abs(cdf - np.cumsum(more.frequencies))):.4f}"
                    print(
                        f"{d:7d} {eps:5g} {population:10s} {n:9,d} {fit.iterations:6d} "
                        f"{fit.converged!s:>10s} {fit.last_change:12.2g} {further:>9s} "
                        f"{np.max(np.abs(cdf - truth)):12.4f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
