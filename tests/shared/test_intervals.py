"""Intervals are honest in every regime: exact coverage, computed from the distribution of
what is counted, not simulated.

An item's support count is Bin(m, p) + Bin(n - m, q) given that m of the n reporters hold
it, and each item's interval is a function of its count alone, so its coverage is a sum
over that exact distribution (``intervals.support_coverage``). Duchi's count of +1
reports is binomial when every reporter has the same value. Numeric mechanisms whose
reports are not binary are simulated with fixed seeds.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

import ldpkit
from ldpkit import intervals
from ldpkit.mechanisms import CATEGORICAL, FrequencyOracle

LEVELS = (0.90, 0.95, 0.99)


def oracle(name: str, epsilon: float, d: int) -> FrequencyOracle:
    m = ldpkit.mechanism(name, epsilon=epsilon, domain_size=d)
    assert isinstance(m, FrequencyOracle)
    return m


def zipf_holders(n: int, d: int, exponent: float = 1.1) -> npt.NDArray[np.int64]:
    """How many of n users hold each of d items under Zipf weights (largest remainders)."""
    w = 1.0 / np.arange(1, d + 1) ** exponent
    share = n * w / w.sum()
    holders = np.floor(share).astype(np.int64)
    holders[np.argsort(share - holders)[::-1][: n - holders.sum()]] += 1
    return holders


def worst_item_coverage(m: FrequencyOracle, holders: npt.NDArray[np.int64], level: float) -> float:
    n = int(holders.sum())
    return min(
        intervals.support_coverage(n, int(k), m.p, m.q, level=level) for k in np.unique(holders)
    )


# --- the rows, each at three levels ------------------------------------------------
@pytest.mark.parametrize("level", LEVELS)
def test_grr_large_domain_small_n_middling_item(level: float) -> None:
    # Was 37% at 95%: the normal interval around a count of about 0.5.
    m = oracle("grr", 4.0, 4096)
    assert intervals.support_coverage(200, 32, m.p, m.q, level=level) >= level - 0.02


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", ["oue", "olh"])
def test_high_epsilon_tiny_n_every_item(name: str, level: float) -> None:
    # Was 48-51% for the worst item at 95%.
    assert worst_item_coverage(oracle(name, 8.0, 16), zipf_holders(50, 16), level) >= level - 0.02


@pytest.mark.parametrize("level", LEVELS)
def test_auto_high_epsilon_every_item(level: float) -> None:
    m = ldpkit.mechanism("auto", epsilon=8.0, domain_size=256)
    assert isinstance(m, FrequencyOracle) and m.name == "grr"
    assert worst_item_coverage(m, zipf_holders(1000, 256), level) >= level - 0.02


def bonferroni_miss(m: FrequencyOracle, holders: npt.NDArray[np.int64], level: float) -> float:
    """Sum over items of the exact probability that an item's simultaneous interval misses.

    The joint coverage is at least 1 minus this, whatever the dependence between items."""
    n, d = int(holders.sum()), holders.size
    values, multiplicity = np.unique(holders, return_counts=True)
    misses = [
        1.0 - intervals.support_coverage(n, int(k), m.p, m.q, level=level, comparisons=d)
        for k in values
    ]
    return float(np.dot(misses, multiplicity))


@pytest.mark.parametrize(
    ("name", "epsilon", "d", "n"), [("grr", 1.0, 4096, 200), ("oue", 8.0, 256, 20000)]
)
def test_simultaneous_intervals_hold_jointly(name: str, epsilon: float, d: int, n: int) -> None:
    # Were 0.7% and 86% joint coverage at 95%.
    miss = bonferroni_miss(oracle(name, epsilon, d), zipf_holders(n, d), 0.95)
    assert miss <= 0.05, miss


# --- a representative grid at 95% -----------------------------------------------------------
@pytest.mark.parametrize("n", [50, 1000])
@pytest.mark.parametrize("d", [2, 256])
@pytest.mark.parametrize("epsilon", [0.5, 2.0, 8.0])
@pytest.mark.parametrize("name", CATEGORICAL)
def test_coverage_grid(name: str, epsilon: float, d: int, n: int) -> None:
    m = oracle(name, epsilon, d)
    for k in sorted({0, 1, 2, n // 10, n // 2, n - 1, n}):
        coverage = intervals.support_coverage(n, k, m.p, m.q, level=0.95)
        assert coverage >= 0.93, (k, coverage)


@pytest.mark.parametrize(
    ("name", "epsilon", "d", "n", "k"),
    [
        ("grr", 1.0, 16, 20000, 2000),
        ("oue", 1.0, 1024, 20000, 0),
        ("olh", 2.0, 1024, 20000, 200),
        ("ss", 1.0, 64, 5000, 500),
        ("hr", 0.5, 256, 20000, 10),
        ("sue", 4.0, 16, 2000, 1000),
    ],
)
def test_not_wider_than_the_normal_interval_where_it_was_right(
    name: str, epsilon: float, d: int, n: int, k: int
) -> None:
    # Large expected counts: the old Wald interval was right; the new one costs < 10%.
    m = oracle(name, epsilon, d)
    start, pmf = intervals.support_distribution(n, k, m.p, m.q)
    keep = pmf > 1e-12
    counts = start + np.flatnonzero(keep).astype(np.float64)
    weights = pmf[keep] / pmf[keep].sum()
    b = intervals.support_interval(counts, n, m.p, m.q, level=0.95)
    f_hat = (counts / n - m.q) / (m.p - m.q)
    half = NormalDist().inv_cdf(0.975) * np.sqrt(m.variance(np.clip(f_hat, 0, 1), n))
    wald = np.minimum(f_hat + half, 1.0) - np.maximum(f_hat - half, 0.0)  # within [0, 1] too
    ratio = float(weights @ (b.high - b.low)) / float(weights @ wald)
    assert 0.9 < ratio <= 1.10, ratio
    assert not b.exact.any()
    # Nor over-covers beyond its continuity correction: half a count at each end, so the
    # counts kept reach 1 / sd further in z units, at most phi(z) / sd more per tail that
    # can miss (one at k = 0 or n, where the interval's end sits on the bound). Coverage is
    # the exact sum over the count's law; the width ratio above lets 10% through.
    tails = 1 if k in (0, n) else 2
    sd = math.sqrt(k * m.p * (1 - m.p) + (n - k) * m.q * (1 - m.q))
    z = NormalDist().inv_cdf(0.975)
    most = 1 - tails * (0.05 / 2 - NormalDist().pdf(z) / sd)
    coverage = intervals.support_coverage(n, k, m.p, m.q, level=0.95)
    assert 0.95 - 0.02 <= coverage <= most, (coverage, most)


# --- the pieces, against independent computations --------------------------------------------
def test_log_factorial_matches_lgamma() -> None:
    k = np.array([0, 1, 2, 10, 1000, 65535, 65536, 10**6, 10**9, 10**12], dtype=np.float64)
    expected = [math.lgamma(x + 1) for x in k]
    np.testing.assert_allclose(intervals.log_factorial(k), expected, rtol=1e-14)


@pytest.mark.parametrize(("n", "m", "p", "q"), [(50, 7, 0.5, 0.01), (2000, 40, 0.9, 0.003)])
def test_support_distribution_is_the_convolution(n: int, m: int, p: float, q: float) -> None:
    start, pmf = intervals.support_distribution(n, m, p, q)
    full = np.convolve(
        stats.binom.pmf(np.arange(m + 1), m, p), stats.binom.pmf(np.arange(n - m + 1), n - m, q)
    )
    np.testing.assert_allclose(pmf, full[start : start + pmf.size], atol=1e-15)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("count", [0, 1, 3, 17, 50])
def test_binomial_interval_is_clopper_pearson_where_exact(count: int) -> None:
    n, level = 50, 0.95
    b = intervals.binomial_interval(np.array([float(count)]), n, level=level)
    assert bool(b.exact[0]) or count not in (0, 1, 50)
    if b.exact[0]:
        alpha = 1 - level
        low = 0.0 if count == 0 else stats.beta.ppf(alpha / 2, count, n - count + 1)
        high = 1.0 if count == n else stats.beta.ppf(1 - alpha / 2, count + 1, n - count)
        assert b.low[0] == pytest.approx(low, abs=1e-9)
        assert b.high[0] == pytest.approx(high, abs=1e-9)


def test_exact_support_bounds_are_the_test_inversion() -> None:
    # The upper bound m_hi / n is the largest m whose lower tail at the count exceeds
    # alpha/2; m_hi + 1 fails it. The lower bound m_lo / n is the smallest m whose upper
    # tail at the count exceeds alpha/2; m_lo - 1 fails it (the coverage tests bound
    # coverage from beneath only, so a lower end too low passed them all). Checked with
    # scipy's binomials.
    n, p, q, level = 200, 0.3, 0.004, 0.95
    for count in [0, 1, 4, 9]:
        b = intervals.support_interval(np.array([float(count)]), n, p, q, level=level)
        assert b.exact[0]
        m_hi, m_lo = round(b.high[0] * n), round(b.low[0] * n)

        def pmf(m: int) -> npt.NDArray[np.float64]:
            return np.convolve(
                stats.binom.pmf(np.arange(m + 1), m, p),
                stats.binom.pmf(np.arange(n - m + 1), n - m, q),
            )

        assert pmf(m_hi)[: count + 1].sum() > 0.025 >= pmf(m_hi + 1)[: count + 1].sum()
        assert pmf(m_lo)[count:].sum() > 0.025
        assert m_lo == 0 or pmf(m_lo - 1)[count:].sum() <= 0.025, (count, m_lo)
    assert count == 9 and m_lo > 0  # the lower end is tested away from 0 too


def test_degenerate_and_extreme_inputs() -> None:
    m = oracle("grr", 50.0, 2)  # p rounds to 1.0 in floating point
    b = intervals.support_interval(np.array([0.0, 1.0]), 1, m.p, m.q, level=0.95)
    assert np.all((b.low >= 0) & (b.high <= 1) & (b.low <= b.high))
    assert b.low[1] == 1.0 and b.high[0] == 0.0
    # A level a few ulps below 1 is refused by name; one just short of that, or a tiny
    # Bonferroni share, gives finite, full-width intervals.
    with pytest.raises(ldpkit.ParameterError, match="level"):
        intervals.normal_quantile(0.9999999999999999)
    z = intervals.normal_quantile(1 - 1e-12, comparisons=2**31)
    assert math.isfinite(z) and z > 8
    m = oracle("oue", 1.0, 8)
    b = intervals.support_interval(np.array([3.0]), 10, m.p, m.q, level=1 - 1e-12)
    assert b.low[0] == 0.0 and b.high[0] == 1.0


def test_estimate_says_which_method() -> None:
    m = oracle("grr", 8.0, 256)
    rng = np.random.default_rng(3)
    est = m.estimate(m.aggregate(m.perturb(rng.integers(0, 4, 1000), rng=rng)))
    methods = est.interval_methods(0.95)
    assert set(methods.tolist()) <= {"score", "exact"} and "exact" in methods.tolist()
    assert est.interval_method(0.95) in ("exact", "score+exact")
    low, _high = est.count_ci(0.95)
    np.testing.assert_allclose(low, np.asarray(est.ci(0.95).low) * 1000)
    big = oracle("oue", 1.0, 16)
    est = big.estimate(big.aggregate(big.perturb(rng.integers(0, 16, 20000), rng=rng)))
    assert est.interval_method(0.95) == "score"


# --- means --------------------------------------------------------------------------------
BOUNDS = (0.0, 10.0)


@pytest.mark.parametrize("level", LEVELS)
def test_duchi_everyone_at_a_bound_exact(level: float) -> None:
    # Was 28.5% (often a zero-width interval): now the binomial interval on the +1 reports.
    m = ldpkit.mechanism("duchi", epsilon=8.0, bounds=BOUNDS)
    n = 1000
    theta = 0.5 + 0.5 / m.C  # everyone at the upper bound: t = 1
    k = np.arange(n + 1)
    pmf = stats.binom.pmf(k, n, theta)
    covered = 0.0
    for positives in np.flatnonzero(pmf > 1e-15):
        s1 = m.C * (2 * positives - n)
        est = m.estimate(ldpkit.Aggregate(n, np.array([s1, n * m.C**2])))
        low, high = est.ci(level)
        covered += pmf[positives] * (low <= 10.0 <= high)
    assert covered >= level - 0.02, covered


def simulated_coverage(
    name: str, epsilon: float, values: npt.NDArray[np.float64], level: float, seed: int
) -> tuple[float, int]:
    m = ldpkit.mechanism(name, epsilon=epsilon, bounds=BOUNDS)
    campaigns, n = 2000, values.size
    rng = np.random.default_rng(seed)
    t = (m.debias(m.perturb(np.tile(values, campaigns), rng=rng)) - BOUNDS[0]) / 5.0 - 1.0
    t = t.reshape(campaigns, n)
    truth = float(values.mean())
    hits = 0
    for row in t:
        est = m.estimate(ldpkit.Aggregate(n, np.array([row.sum(), row @ row])))
        low, high = est.ci(level)
        hits += low <= truth <= high
    return hits / campaigns, campaigns


@pytest.mark.parametrize(
    ("name", "epsilon", "n"),
    [("hybrid", 8.0, 200), ("piecewise", 8.0, 50), ("laplace", 8.0, 50), ("hybrid", 0.5, 50)],
)
def test_known_variance_everyone_at_a_bound(name: str, epsilon: float, n: int) -> None:
    # hybrid at eps 8, n 200 was 85%: the sample SD collapses when reports look alike.
    coverage, campaigns = simulated_coverage(name, epsilon, np.full(n, 10.0), 0.95, seed=n)
    assert coverage >= 0.93 - 3 * math.sqrt(0.95 * 0.05 / campaigns), coverage


@pytest.mark.parametrize("name", ["laplace", "piecewise", "hybrid"])
def test_known_variance_matches_the_spread_of_estimates(name: str) -> None:
    # Fixed values (the estimand is their mean): across campaigns the estimates vary as
    # the reported standard error says.
    m = ldpkit.mechanism(name, epsilon=4.0, bounds=BOUNDS)
    values = np.where(np.arange(500) % 2 == 0, 0.0, 10.0)
    rng = np.random.default_rng(99)
    campaigns = 1000
    y = m.debias(m.perturb(np.tile(values, campaigns), rng=rng)).reshape(campaigns, -1)
    t = y / 5.0 - 1.0
    means = y.mean(axis=1)
    stderrs = np.array(
        [m.estimate(ldpkit.Aggregate(500, np.array([r.sum(), r @ r]))).stderr for r in t]
    )
    ratio = float(np.mean((means - 5.0) ** 2) / np.mean(stderrs**2))
    dof = campaigns
    assert stats.chi2.ppf(1e-4, dof) / dof < ratio < stats.chi2.ppf(1 - 1e-4, dof) / dof, ratio
