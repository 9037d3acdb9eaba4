"""Helpers for statistical tests: campaigns and tolerances derived from theory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

import ldpkit


def chi2_ratio_bounds(replications: int, alpha: float = 1e-4) -> tuple[float, float]:
    """Bounds on (empirical variance / true variance) from R normal replications.

    (R - 1) s^2 / sigma^2 ~ chi2(R - 1); the bounds hold with probability 1 - alpha.
    """
    dof = replications - 1
    return (
        float(stats.chi2.ppf(alpha / 2, dof) / dof),
        float(stats.chi2.ppf(1 - alpha / 2, dof) / dof),
    )


@dataclass
class Campaigns:
    """R simulated campaigns of n users each, every one estimated on its own."""

    estimates: npt.NDArray[np.float64]  # (R, d) fractions, or (R,) means
    stderrs: npt.NDArray[np.float64]
    lows: npt.NDArray[np.float64]
    highs: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]  # (R, n) the true values of each campaign's users

    def fractions(self, domain_size: int) -> npt.NDArray[np.float64]:
        """(R, d): each campaign's own users' true fractions (the estimand)."""
        values = self.values.astype(np.int64)
        offsets = np.arange(len(values))[:, None] * domain_size
        counts = np.bincount((values + offsets).ravel(), minlength=len(values) * domain_size)
        return counts.reshape(len(values), domain_size) / values.shape[1]


def run_campaigns(
    mechanism: ldpkit.Mechanism,
    draw_values: object,
    *,
    campaigns: int,
    users: int,
    seed: int,
    level: float = 0.95,
) -> Campaigns:
    """Perturb campaigns * users values in one vectorized call, estimate each campaign."""
    rng = np.random.default_rng(seed)
    values = draw_values(rng, campaigns * users)  # type: ignore[operator]
    reports = mechanism.perturb(values, rng=rng)
    est, se, lo, hi = [], [], [], []
    for r in range(campaigns):
        chunk = reports[r * users : (r + 1) * users]
        e = mechanism.estimate(mechanism.aggregate(chunk))
        ci = e.ci(level)
        if isinstance(e, ldpkit.FrequencyEstimate):
            est.append(e.frequencies)
        else:
            est.append(e.mean)
        se.append(e.stderr)
        lo.append(ci.low)
        hi.append(ci.high)
    return Campaigns(
        np.array(est), np.array(se), np.array(lo), np.array(hi), values.reshape(campaigns, users)
    )


def coverage_bounds() -> tuple[float, float]:
    """The issue's acceptance band for the coverage of 95% intervals."""
    return 0.93, 0.97
