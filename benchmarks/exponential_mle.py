"""Coverage of the exponential mechanism's constrained maximum-likelihood frequencies with
profile-likelihood intervals (docs/statistics.md, "The exponential mechanism: maximum
likelihood"), beside the served inversion (score) interval: the distance score, d in
{5, 10, 32}, epsilon in {1, 4, 8}, n in {200, 2000, 20000}, two populations per cell:

- ``zeros``: a Dirichlet(1) law (seed 3) with item 0 set to 0 and item 1 to 0.002;
- ``certain``: item 0 holds 0.97, item 1 holds 0, the others share 0.03 equally.

Per cell and population: the smallest per-item coverage at 95% (and that item's true
share) of the profile interval as served (:func:`ldpkit.mechanisms._profile.profile_bounds`
at :func:`~ldpkit.mechanisms._profile.profile_z`: the boundary's threshold where the
estimate has a share at 0), of the
Wald interval ``f_ml -/+ z se`` (observed information, clipped to [0, 1]) and of the
served inversion interval (score-type, :meth:`LinearEstimate.interval`); and the median
over campaigns and items of the profile interval's width over the served one's.
A coverage from R campaigns has a standard error of about sqrt(0.05 * 0.95 / R)
(0.013 at R = 300).

A campaign's output counts are drawn as Multinomial(n, P^T f), the law of the counts of n
reports of users drawn from f.

    python benchmarks/exponential_mle.py [--runs 300] [--d 5 10 32] [--seed 5]
"""

from __future__ import annotations

import argparse

import numpy as np
import numpy.typing as npt

from ldpkit.intervals import normal_quantile
from ldpkit.mechanisms._linear_intervals import LinearBounds, hull, score_bounds
from ldpkit.mechanisms._profile import fit, observed_stderr, profile_bounds, profile_z
from ldpkit.mechanisms.exponential import ExponentialMechanism, model_law

FloatArray = npt.NDArray[np.float64]
CHUNK = 40  # campaigns solved together (memory: 2d problems of d x d each)


def population(d: int, kind: str) -> FloatArray:
    if kind == "zeros":
        f = np.random.default_rng(3).dirichlet(np.ones(d))
        f[0], f[1] = 0.0, 0.0
        f *= (1.0 - 0.002) / f.sum()
        f[1] = 0.002
        return f
    f = np.full(d, 0.03 / (d - 2))
    f[0], f[1] = 0.97, 0.0
    return f


def served(m: ExponentialMechanism, counts: FloatArray, z: float) -> tuple[FloatArray, FloatArray]:
    """The served inversion intervals of every item of every campaign (as
    benchmarks/exponential_coverage.py computes :func:`item_intervals`)."""
    runs, d = counts.shape[0], m.items
    n = counts.sum(axis=1, keepdims=True)
    a = m._left_inverse()
    obs = counts / n
    est = obs @ a.T
    cov_out = (obs[:, :, None] * np.eye(d)[None] - obs[:, :, None] * obs[:, None, :]) / (
        n[:, :, None] - 1
    )
    se = np.sqrt(np.clip(np.einsum("km,rmo,ko->rk", a, cov_out, a), 0.0, None))
    low, high = np.zeros(runs * d), np.ones(runs * d)
    rows = score_bounds(
        est.reshape(-1), np.tile(a, (runs, 1)), np.repeat(model_law(m, est), d, axis=0),
        int(n[0, 0]), value_range=(low, high),
    )  # fmt: skip
    flat, flat_se = est.reshape(-1), se.reshape(-1)
    normal = LinearBounds(flat - z * flat_se, flat + z * flat_se, 0.95)
    b = hull(rows, normal, low, high)
    return b.lower.reshape(runs, d), b.upper.reshape(runs, d)


def cell(d: int, eps: float, n: int, runs: int, kind: str, seed: int = 5) -> dict[str, float]:
    m = ExponentialMechanism(epsilon=eps, domain_size=d)
    f = population(d, kind)
    rng = np.random.default_rng(seed)
    lam = m.channel.T @ f
    counts = rng.multinomial(n, lam / lam.sum(), size=runs).astype(np.float64)
    z = normal_quantile(0.95)
    lo, hi, wl, wh = (np.empty((runs, d)) for _ in range(4))
    for s in range(0, runs, CHUNK):
        part = counts[s : s + CHUNK]
        fh = fit(m.channel, part)
        # as served: the boundary's threshold for a campaign whose estimate has a 0
        for boundary in (False, True):
            rows = np.flatnonzero(np.any(fh == 0.0, axis=1) == boundary)
            if rows.size:
                zb = profile_z(0.95, 1, boundary)
                ends = profile_bounds(m.channel, part[rows], fh[rows], zb)
                lo[s + rows], hi[s + rows] = ends
        se = np.array([observed_stderr(m.channel, c, e) for c, e in zip(part, fh, strict=True)])
        wl[s : s + CHUNK] = np.clip(fh - z * se, 0.0, 1.0)
        wh[s : s + CHUNK] = np.clip(fh + z * se, 0.0, 1.0)
    sl, sh = served(m, counts, z)
    prof = ((lo <= f) & (f <= hi)).mean(axis=0)
    wald = ((wl <= f) & (f <= wh)).mean(axis=0)
    inv = ((sl <= f) & (f <= sh)).mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(sh - sl > 0, (hi - lo) / (sh - sl), np.nan)
    return {
        "profile": float(prof.min()),
        "profile_f": float(f[np.argmin(prof)]),
        "wald": float(wald.min()),
        "wald_f": float(f[np.argmin(wald)]),
        "served": float(inv.min()),
        "served_f": float(f[np.argmin(inv)]),
        "width": float(np.nanmedian(ratio)),
        "zero": float(prof[1] if kind == "certain" else prof[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--d", type=int, nargs="*", default=[5, 10, 32])
    parser.add_argument("--eps", type=float, nargs="*", default=[1.0, 4.0, 8.0])
    parser.add_argument("--n", type=int, nargs="*", default=[200, 2000, 20000])
    parser.add_argument("--populations", nargs="*", default=["zeros", "certain"])
    parser.add_argument("--seed", type=int, default=5, help="of the campaigns' counts")
    args = parser.parse_args()
    print(
        "| population | d | ε | n | min item: profile (its f) | at f = 0 | min item: Wald (its f) "
        "| min item: served inversion (its f) | width profile/served |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in args.populations:
        for d in args.d:
            for eps in args.eps:
                for n in args.n:
                    c = cell(d, eps, n, args.runs, kind, args.seed)
                    print(
                        f"| {kind} | {d} | {eps:g} | {n} | {c['profile']:.3f} "
                        f"({c['profile_f']:.3f}) | {c['zero']:.3f} | {c['wald']:.3f} "
                        f"({c['wald_f']:.3f}) | {c['served']:.3f} ({c['served_f']:.3f}) "
                        f"| {c['width']:.2f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
