"""The exponential mechanism against randomized response on ordered categories
(issue 30; docs/statistics.md, "The exponential mechanism: against GRR, OUE and auto").

Two metrics, each on one fixed data set of n users (the same data for every mechanism):

- a 1-5 rating skewed toward 4-5 (f = 0.05, 0.07, 0.13, 0.35, 0.40): the mean rating and
  the share of "4 stars or more";
- a 10-bracket age (f = 0.04, 0.10, 0.16, 0.17, 0.15, 0.13, 0.10, 0.07, 0.05, 0.03): the
  mean bracket and the share of the top 3 brackets.

Mechanisms: the exponential mechanism, calibrated exactly, with the distance score and the
band score (rating b = 2, age b = 1: the band b = 1 channel is singular at d = 5; b = 0 is
GRR), GRR, OUE, what ``ldpkit.mechanism("auto", ...)`` picks for unordered categories and what
``auto`` picks for ordered ones (``choose(..., ordered=True)``, by the mean rank's
variance; the exponential mechanism among its candidates). Every estimate is the
unbiased inversion (for the ldpkit oracles, the weighted sum of the frequency estimate:
``v @ f_hat`` for the mean, ``1[v >= k] @ f_hat`` for the share). MSE is measured over
``runs`` independent perturbations of the same data against its own mean and share; a
measured MSE has a relative standard error of about ``sqrt(2 / runs)``. Printed in units
of 1e-4 (the rating's mean on the 1-5 scale; a share as a fraction).

    python benchmarks/exponential_vs_rr.py [--n 10000 100000] [--runs 200]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

import ldpkit
from ldpkit.mechanisms import choose
from ldpkit.mechanisms.exponential import ExponentialMechanism

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Metric:
    name: str
    law: tuple[float, ...]
    top: int  # the share counts ranks >= top (0-based)
    band: int

    @property
    def d(self) -> int:
        return len(self.law)


METRICS = (
    Metric("rating 1-5", (0.05, 0.07, 0.13, 0.35, 0.40), 3, 2),
    Metric("age 10 brackets", (0.04, 0.10, 0.16, 0.17, 0.15, 0.13, 0.10, 0.07, 0.05, 0.03), 7, 1),
)
EPSILONS = (0.5, 1.0, 2.0, 4.0)


def ldpkit_estimator(name: str, eps: float, d: int) -> tuple[str, object]:
    if name == "auto ordered":  # what auto picks for ``ordered = true`` (by the mean rank)
        picked = choose(epsilon=eps, domain_size=d, ordered=True).name
        m = ldpkit.mechanism(picked, epsilon=eps, domain_size=d)
    else:
        m = ldpkit.mechanism(name, epsilon=eps, domain_size=d)

    def estimate(x: npt.NDArray[np.int64], rng: np.random.Generator) -> FloatArray:
        reports = m.perturb(x, rng=rng)
        return np.asarray(m.estimate(m.aggregate(reports)).frequencies, dtype=np.float64)

    label = f"{name} ({m.name})" if name.startswith("auto") else name
    return label, estimate


def exponential_estimator(eps: float, d: int, band: int | None) -> tuple[str, object]:
    if band is None:
        m = ExponentialMechanism(epsilon=eps, domain_size=d)
        label = "exp distance"
    else:
        m = ExponentialMechanism(epsilon=eps, score="band", band=band, domain_size=d)
        label = f"exp band b={band}"

    def estimate(x: npt.NDArray[np.int64], rng: np.random.Generator) -> FloatArray:
        return m.estimate(m.counts(m.perturb(x, rng=rng))).frequencies

    return label, estimate


def measure(metric: Metric, eps: float, n: int, runs: int) -> dict[str, tuple[float, float]]:
    """{mechanism: (MSE of the mean, MSE of the share)}."""
    d = metric.d
    x = np.random.default_rng(11).choice(d, size=n, p=np.asarray(metric.law))
    ranks = np.arange(d, dtype=np.float64)
    top = (ranks >= metric.top) * 1.0
    truth = np.bincount(x, minlength=d) / n
    estimators = [
        exponential_estimator(eps, d, None),
        exponential_estimator(eps, d, metric.band),
        *(ldpkit_estimator(name, eps, d) for name in ("grr", "oue", "auto", "auto ordered")),
    ]
    out: dict[str, tuple[float, float]] = {}
    for i, (label, estimate) in enumerate(estimators):
        rng = np.random.default_rng([29, i])
        err = np.array([estimate(x, rng) - truth for _ in range(runs)])  # runs x d
        out[label] = (float(np.mean((err @ ranks) ** 2)), float(np.mean((err @ top) ** 2)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    for metric in METRICS:
        for n in args.n:
            print(f"\n{metric.name}, n = {n}: MSE x 1e4, mean / share >= rank {metric.top + 1}")
            header = None
            for eps in EPSILONS:
                res = measure(metric, eps, n, args.runs)
                if header is None:
                    header = [k.split(" (")[0] if k.startswith("auto") else k for k in res]
                    print("| ε | " + " | ".join(header) + " | best mean | best share |")
                    print("|---" * (len(header) + 3) + "|")
                cells = [f"{m * 1e4:.3g} / {s * 1e4:.3g}" for m, s in res.values()]
                labels = list(res)
                best_m = labels[int(np.argmin([v[0] for v in res.values()]))]
                best_s = labels[int(np.argmin([v[1] for v in res.values()]))]
                picked = ", ".join(k for k in labels if k.startswith("auto"))
                row = " | ".join(cells)
                print(f"| {eps:g} | {row} | {best_m} | {best_s} |  ({picked})", flush=True)


if __name__ == "__main__":
    main()
