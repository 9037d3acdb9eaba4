"""The Gaussian mechanism: calibration, exact (epsilon, delta) privacy, sampler, estimates.

Fixed seeds; tolerances from theory (the analytic Gaussian curve from scipy, exact sums
over the discrete output distribution, chi-square bounds for variances and fits).
"""

from __future__ import annotations

import math
import random
import zlib
from fractions import Fraction
from typing import ClassVar

import numpy as np
import pytest
from scipy import stats

import ldpkit
from ldpkit import portable
from ldpkit.audit import EventBound, audit
from ldpkit.mechanisms.gaussian import (
    CALIBRATION_SLACK,
    LocalGaussian,
    analytic_gaussian_sigma,
    discrete_gaussian,
    discrete_gaussian_delta,
    exact_noise_parameter,
    gaussian_delta,
)
from ldpkit.testing import mislabelled
from tests.stats import chi2_ratio_bounds, coverage_bounds, run_campaigns

BOUNDS = (0.0, 10.0)


def make(epsilon: float = 1.0, delta: float = 1e-6) -> LocalGaussian:
    m = ldpkit.mechanism("gaussian", epsilon=epsilon, bounds=BOUNDS, delta=delta)
    assert isinstance(m, LocalGaussian)
    return m


# --- calibration -------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 2.0, 4.0, 10.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-6, 1e-3, 0.3])
def test_analytic_calibration_is_tight(epsilon: float, delta: float) -> None:
    sigma = analytic_gaussian_sigma(epsilon, delta)

    def exact(s: float) -> float:  # Balle and Wang's curve, from scipy
        a, b = 1.0 / (2 * s), epsilon * s
        return float(stats.norm.cdf(a - b) - math.exp(epsilon) * stats.norm.cdf(-a - b))

    assert exact(sigma) <= delta * (1 + 1e-9)
    assert exact(sigma * (1 - 1e-6)) > delta  # no smaller sigma would do
    assert gaussian_delta(epsilon, sigma) == pytest.approx(exact(sigma), rel=1e-9)
    if epsilon < 1:  # where the classic formula is valid, the analytic sigma is smaller
        assert sigma < math.sqrt(2 * math.log(1.25 / delta)) / epsilon


# --- exact privacy -----------------------------------------------------------------------
def brute_force_delta(epsilon: float, sigma: float, shift: int) -> float:
    """max over both directions of sum_y max(0, P(y) - e^eps Q(y)), over every integer."""
    reach = math.ceil(40 * sigma) + shift
    y = np.arange(-reach, reach + 1, dtype=np.float64)
    w = np.exp(-(y * y) / (2 * sigma * sigma))
    p = w / w.sum()
    q = np.exp(-((y - shift) ** 2) / (2 * sigma * sigma)) / w.sum()
    forward = np.maximum(p - math.exp(epsilon) * q, 0.0).sum()
    backward = np.maximum(q - math.exp(epsilon) * p, 0.0).sum()
    return float(max(forward, backward))


@pytest.mark.parametrize(
    ("epsilon", "sigma", "shift"), [(1.0, 3.7, 5), (0.3, 20.0, 16), (2.0, 1.1, 2)]
)
def test_discrete_divergence_matches_brute_force(epsilon: float, sigma: float, shift: int) -> None:
    assert discrete_gaussian_delta(epsilon, sigma, shift) == pytest.approx(
        brute_force_delta(epsilon, sigma, shift), rel=1e-12, abs=1e-300
    )


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-6), (4.0, 1e-3), (2.0, 1e-10)])
def test_realized_guarantee_is_within_epsilon_delta(epsilon: float, delta: float) -> None:
    # The worst pair of inputs is lo against hi (grid points 0 and D): the exact
    # hockey-stick divergence of the discrete output laws (the sampler is exact) is at
    # most delta; and the calibration does not waste noise.
    m = make(epsilon, delta)
    realized = m.realized_delta()
    assert realized <= delta
    assert realized >= delta * (1 - 2 * CALIBRATION_SLACK)
    # Nearer inputs leak less: half the range gives a smaller divergence.
    half = discrete_gaussian_delta(epsilon, m.grid_sigma, m.grid_steps // 2)
    assert half < realized


class SmallGridGaussian(LocalGaussian):
    """The same mechanism on a grid of 16 steps: noise of a few steps, enumerable."""

    grid_steps: ClassVar[int] = 16


def test_every_output_is_possible_and_the_pair_of_bounds_is_the_worst() -> None:
    m = SmallGridGaussian(epsilon=1.0, delta=1e-3, bounds=BOUNDS)
    s, d = m.grid_sigma, m.grid_steps
    y = np.arange(-m.noise_cap, d + m.noise_cap + 1, dtype=np.float64)

    reach = math.ceil(14 * s) + 1
    log_norm = float(np.log(np.exp(-(np.arange(-reach, reach + 1.0) ** 2) / (2 * s * s)).sum()))

    def log_law(u: float) -> np.ndarray:
        """Exact log output law at grid position u: stochastic rounding, then the noise."""
        below = math.floor(u)
        parts = [
            math.log(weight) - (y - point) ** 2 / (2 * s * s) - log_norm
            for point, weight in ((below, 1 - (u - below)), (below + 1, u - below))
            if weight > 0
        ]
        return np.logaddexp.reduce(np.array(parts), axis=0)

    logs = [log_law(u) for u in np.linspace(0.0, d, 23)]
    # Every output within the clamp is possible for every input (finite log-probability).
    assert all(bool(np.all(np.isfinite(lp))) for lp in logs)
    laws = [np.exp(lp) for lp in logs]
    worst = max(
        float(np.maximum(p - math.exp(m.epsilon) * q, 0.0).sum()) for p in laws for q in laws
    )
    assert worst == pytest.approx(discrete_gaussian_delta(m.epsilon, s, d), rel=1e-9)
    assert worst <= m.delta


@pytest.mark.parametrize("grid", ["small", "protocol"])
def test_sampler_follows_the_discrete_gaussian(grid: str) -> None:
    m = SmallGridGaussian(epsilon=2.0, delta=1e-3, bounds=BOUNDS) if grid == "small" else make()
    s = m.grid_sigma
    rng = np.random.default_rng(zlib.crc32(grid.encode()))
    n = 400_000
    z = m.noise(rng, n)
    # Bins of about equal probability under the exact law, tails included.
    reach = math.ceil(14 * s) + 1
    support = np.arange(-reach, reach + 1)
    pmf = np.exp(-(support.astype(np.float64) ** 2) / (2 * s * s))
    pmf /= pmf.sum()
    cuts = np.unique(np.searchsorted(np.cumsum(pmf), np.linspace(0, 1, 41)[1:-1]))
    expected = np.add.reduceat(pmf, np.concatenate([[0], cuts])) * n
    observed = np.bincount(np.searchsorted(support[cuts], z, side="right"), minlength=expected.size)
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    var = float((pmf * support.astype(np.float64) ** 2).sum())
    assert m._noise_variance == pytest.approx(var, rel=1e-12)
    lo, hi = chi2_ratio_bounds(n)
    assert lo < z.var() / var < hi


@pytest.mark.parametrize("s", [0.3, 1.0, 7.9, 276882.49, 3.2e9])
def test_exact_noise_parameter_rounds_up_by_less_than_t(s: float) -> None:
    t, m = exact_noise_parameter(s)
    assert t == math.floor(s) + 1
    exact = Fraction(s) ** 2
    assert exact <= t * m < exact + t  # never less noise than calibrated; sigma2 / t = m


def _pmf(sigma2: int, reach: int) -> tuple[np.ndarray, np.ndarray]:
    support = np.arange(-reach, reach + 1)
    pmf = np.exp(-(support.astype(np.float64) ** 2) / (2.0 * sigma2))
    return support, pmf / pmf.sum()


def _chi2_exact(z: np.ndarray, sigma2: int) -> float:
    """p-value of the draws against the exact discrete Gaussian pmf (tails pooled)."""
    reach = math.ceil(14 * math.sqrt(sigma2)) + 1
    support, pmf = _pmf(sigma2, reach)
    expected = pmf * z.size
    keep = expected >= 5  # pool the tails into the outermost kept cells
    first, last = int(np.argmax(keep)), int(keep.size - 1 - np.argmax(keep[::-1]))
    counts = np.bincount(np.clip(z + reach, first, last), minlength=support.size)[first : last + 1]
    exp = expected[first : last + 1].copy()
    exp[0] += expected[:first].sum()
    exp[-1] += expected[last + 1 :].sum()
    return float(stats.chisquare(counts, exp).pvalue)


@pytest.mark.parametrize(("t", "m"), [(1, 1), (2, 1), (3, 2), (6, 5)])
def test_vectorised_sampler_is_the_exact_discrete_gaussian(t: int, m: int) -> None:
    rng = np.random.default_rng(1000 * t + m)
    n = 200_000
    z = discrete_gaussian(rng, t, m, n)
    assert _chi2_exact(z, t * m) > 1e-4
    support, pmf = _pmf(t * m, 200)
    var = float((pmf * support.astype(np.float64) ** 2).sum())
    lo, hi = chi2_ratio_bounds(n)
    assert lo < float((z.astype(np.float64) ** 2).mean()) / var < hi  # E[Z] = 0 exactly


def test_portable_rule_is_the_exact_discrete_gaussian() -> None:
    # The one-report rule of docs/protocol.md, on a seeded word stream.
    rnd = random.Random(7)
    words = portable.Words(lambda: rnd.getrandbits(32))
    t, m = 3, 2
    z = np.array([portable.discrete_gaussian(t, m, words) for _ in range(30_000)])
    assert _chi2_exact(z, t * m) > 1e-4


def test_sampler_beyond_int64_follows_the_law() -> None:
    # 2 sigma2 > 2**64: the acceptance arithmetic runs in Python ints (object arrays).
    t = m = 2**33 + 5
    z = discrete_gaussian(np.random.default_rng(11), t, m, 20_000).astype(np.float64)
    sigma = math.sqrt(t * m)
    # At this scale the discrete law is the normal one binned finely: test the quantiles.
    assert stats.kstest(z / sigma, "norm").pvalue > 1e-4


# --- estimates ---------------------------------------------------------------------------
VALUES = np.array([0.0, 2.5, 7.0, 10.0])
PROBS = np.array([0.3, 0.2, 0.4, 0.1])


def test_unbiased_mean_variance_formula_and_coverage() -> None:
    m = make(1.0, 1e-5)
    campaigns, users = 1000, 500

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(VALUES, size=n, p=PROBS)

    result = run_campaigns(m, draw, campaigns=campaigns, users=users, seed=23)
    mean = float(VALUES @ PROBS)
    spread = float(((VALUES - mean) ** 2) @ PROBS)
    noise = float(np.asarray(m.variance(VALUES)) @ PROBS)
    expected = (noise + spread) / users
    lo, hi = chi2_ratio_bounds(campaigns)
    assert lo < result.estimates.var(ddof=1) / expected < hi
    assert abs(result.estimates.mean() - mean) < 4.5 * math.sqrt(expected / campaigns)
    covered = (result.lows <= mean) & (mean <= result.highs)
    low, high = coverage_bounds()
    assert low <= covered.mean() <= high
    # The noise is sigma in the metric's units: 4.2 times the width at eps = 1, delta = 1e-5,
    # rounded up to the exact integer sigma2 = t m (by less than t grid steps squared).
    calibrated = 10.0 * analytic_gaussian_sigma(1.0, 1e-5 * (1 - CALIBRATION_SLACK))
    s = calibrated / 10.0 * m.grid_steps
    assert calibrated <= m.sigma <= calibrated * (1 + 1 / (2 * s) + 1e-12)
    assert m.variance(5.0) == pytest.approx(m.sigma**2, rel=1e-9)  # per report, in units


def test_one_value_clipping_and_reports() -> None:
    m = make()
    report = m.perturb(3.0, rng=np.random.default_rng(1))
    assert np.ndim(report) == 0 and np.asarray(report).dtype == np.dtype("<i8")
    assert m.estimate(m.aggregate(report)).n == 1
    a = m.perturb(np.full(100, -5.0), rng=np.random.default_rng(2))
    b = m.perturb(np.full(100, 0.0), rng=np.random.default_rng(2))
    np.testing.assert_array_equal(a, b)
    cap = m.noise_cap
    bad = np.array([-cap - 1, m.grid_steps + cap + 1, 0, -cap, m.grid_steps + cap])
    assert m.check_reports(bad).tolist() == [False, False, True, True, True]


# --- parameters and auto ------------------------------------------------------------------
@pytest.mark.parametrize(
    "delta", [0, 0.0, 1.0, -1e-6, 2.0, math.nan, math.inf, True, "1e-6", 1e-40]
)
def test_bad_delta(delta: object) -> None:
    with pytest.raises(ldpkit.ParameterError, match="delta"):
        ldpkit.mechanism("gaussian", epsilon=1.0, bounds=BOUNDS, delta=delta)


def test_delta_is_required_and_in_the_parameters() -> None:
    with pytest.raises(ldpkit.ParameterError, match="needs delta"):
        ldpkit.mechanism("gaussian", epsilon=1.0, bounds=BOUNDS)
    assert make(1.0, 1e-6).params() == {
        "mechanism": "gaussian",
        "epsilon": 1.0,
        "bounds": [0.0, 10.0],
        "delta": 1e-6,
    }


def test_auto_never_picks_gaussian_without_delta() -> None:
    for eps in (0.1, 1.0, 4.0, 20.0):
        plain = ldpkit.choose(epsilon=eps, bounds=BOUNDS)
        assert "gaussian" not in plain.variances
        allowed = ldpkit.choose(epsilon=eps, bounds=BOUNDS, delta=1e-6)
        assert "gaussian" in allowed.variances
        # Weighed, and it loses on variance: pure mechanisms beat it for one number.
        assert allowed.name == plain.name
    m = ldpkit.mechanism("auto", epsilon=1.0, bounds=BOUNDS, delta=1e-6)
    assert m.name != "gaussian"
    with pytest.raises(ldpkit.ParameterError, match="delta"):
        ldpkit.choose(epsilon=1.0, bounds=BOUNDS, delta=1.5)


def test_audit_accounts_for_delta() -> None:
    # P(E | x) <= e^eps P(E | x') + delta: each event bounds epsilon by log((L - delta) / U).
    m = ldpkit.mechanism("gaussian", epsilon=1.0, bounds=(0.0, 1.0), delta=1e-6)
    result = audit(m, samples=100_000, rng=np.random.default_rng(3))
    assert result.passed and result.claimed_delta == 1e-6
    assert "delta 1e-06" in str(result)
    broken = audit(mislabelled(m, 3.0), samples=100_000, rng=np.random.default_rng(4))
    assert not broken.passed
    event = EventBound(0.0, 1.0, "e", 5, 1, 10, p_lower=2e-6, p_upper=1e-6, delta=1e-6)
    assert event.epsilon_bound == pytest.approx(0.0, abs=1e-12)
    assert EventBound(0.0, 1.0, "e", 1, 1, 10, 1e-6, 1e-6, delta=1e-6).epsilon_bound == -math.inf
