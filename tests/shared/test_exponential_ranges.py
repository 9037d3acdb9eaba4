"""Range shares, the mean rank and items of the exponential mechanism as linear functionals
with score-type intervals (issue 30): unbiased, with the formula's variance, covering at
small n where the normal interval does not (docs/statistics.md, "The exponential mechanism")."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from ldpkit.errors import ParameterError
from ldpkit.mechanisms._linear_intervals import LinearBounds, hull, score_bounds
from ldpkit.mechanisms.exponential import (
    ExponentialMechanism,
    item_intervals,
    model_law,
    range_share,
    rank_mean,
    share_at_least,
)
from tests.stats import chi2_ratio_bounds

Z95 = 1.959963984540054
RATING = np.array([0.05, 0.07, 0.13, 0.35, 0.40])  # a 1-5 rating skewed toward 4-5


def binomial_tolerance(runs: int, sds: float = 4.0) -> float:
    return float(sds * np.sqrt(0.95 * 0.05 / runs))


@pytest.mark.parametrize(
    ("kw", "epsilon", "n"),
    [({"domain_size": 5}, 1.0, 500), ({"score": "band", "band": 2, "domain_size": 5}, 4.0, 300)],
)
def test_the_share_of_4_stars_or_more_is_unbiased_with_its_variance_and_covers(
    kw: dict[str, Any], epsilon: float, n: int
) -> None:
    m = ExponentialMechanism(epsilon=epsilon, **kw)
    runs = 300
    rng = np.random.default_rng(7)
    reports = m.perturb(rng.choice(5, size=runs * n, p=RATING), rng=rng).reshape(runs, n)
    shares = [share_at_least(m, m.counts(r.astype(np.int64)), 3) for r in reports]
    values = np.array([s.values[0] for s in shares])
    w = np.array([0.0, 0, 0, 1, 1])
    truth, sd = float(w @ RATING), float(np.sqrt(w @ m.variance(RATING, n) @ w))
    # Unbiased: the average within 4 standard errors of the truth.
    assert abs(values.mean() - truth) < 4.0 * sd / np.sqrt(runs)
    # The spread is the formula's, and the estimated standard errors match it on average.
    lo, hi = chi2_ratio_bounds(runs)
    assert lo <= values.var(ddof=1) / sd**2 <= hi
    se2 = np.array([s.stderr[0] ** 2 for s in shares])
    assert abs(se2.mean() / sd**2 - 1.0) < 4.0 * se2.std() / sd**2 / np.sqrt(runs)
    # The score intervals cover 95% within a binomial tolerance, inside [0, 1].
    bounds = [s.interval(0.95) for s in shares]
    lower = np.array([b.lower[0] for b in bounds])
    upper = np.array([b.upper[0] for b in bounds])
    assert np.all((lower >= 0) & (lower <= values + 1e-12) & (upper <= 1))
    covered = np.mean((lower <= truth) & (truth <= upper))
    assert abs(covered - 0.95) < binomial_tolerance(runs), covered


def small_n_coverage(
    m: ExponentialMechanism, f: npt.NDArray[np.float64], n: int, runs: int
) -> tuple[Any, Any]:
    """Per item and for the mean rank: the coverage of the score and normal intervals over
    ``runs`` campaigns (counts drawn as Multinomial(n, P^T f), the law of n reports)."""
    d = m.items
    lam = m.channel.T @ f
    counts = np.random.default_rng(5).multinomial(n, lam / lam.sum(), size=runs)
    w = np.vstack([np.eye(d), np.arange(d, dtype=np.float64)])
    g = w @ m._left_inverse()
    obs = counts / n
    est = obs @ g.T
    k = w.shape[0]
    low, high = np.tile(w.min(axis=1), runs), np.tile(w.max(axis=1), runs)
    scored = score_bounds(
        est.reshape(-1),
        np.tile(g, (runs, 1)),
        np.repeat(model_law(m, obs @ m._left_inverse().T), k, axis=0),
        n,
        value_range=(low, high),
    )
    se = np.sqrt(np.clip(np.einsum("km,rm,km->rk", g, obs, g) - est**2, 0, None) / (n - 1))
    flat, flat_se = est.reshape(-1), se.reshape(-1)
    normal = LinearBounds(flat - Z95 * flat_se, flat + Z95 * flat_se, 0.95)
    b = hull(scored, normal, low, high)  # what LinearEstimate.interval returns
    t = np.tile(w @ f, runs)
    score = ((b.lower <= t) & (t <= b.upper)).reshape(runs, k).mean(axis=0)
    return score, np.mean(np.abs(est - w @ f) <= Z95 * se, axis=0)


@pytest.mark.parametrize(("d", "epsilon"), [(5, 8.0), (10, 1.0)])
def test_the_score_intervals_cover_rare_items_at_n_200(d: int, epsilon: float) -> None:
    # The normal interval's worst items here: 0.921 (d = 5, f = 0.025) and 0.925
    # (d = 10, f = 0.016) in benchmarks/exponential_coverage.py.
    m = ExponentialMechanism(epsilon=epsilon, domain_size=d)
    f = np.random.default_rng(3).dirichlet(np.ones(d))
    runs = 2000
    score, normal = small_n_coverage(m, f, 200, runs)
    tol = binomial_tolerance(runs, 3.0)  # 3 sd: 0.015
    assert np.all(score > 0.95 - tol), score
    assert np.all(score < 0.95 + 2 * tol), score  # honest, not everything
    assert normal.min() < score.min()  # the normal interval is the one that under-covers


def test_the_one_campaign_helpers_agree_with_inversion_and_the_batched_bounds() -> None:
    m = ExponentialMechanism(epsilon=2.0, domain_size=5)
    counts = m.counts(m.perturb(np.arange(300) % 5, rng=np.random.default_rng(2)))
    est = m.estimate(counts)
    items = item_intervals(m, counts)
    assert np.allclose(items.values, est.frequencies)
    assert np.allclose(items.stderr, est.stderr)
    b = items.interval(0.9)
    assert b.level == 0.9 and np.all((b.lower >= 0) & (b.lower < b.upper) & (b.upper <= 1))
    normal = items.normal_interval(0.9)
    assert np.allclose(normal.upper - normal.lower, 2 * 1.6448536269514722 * est.stderr)
    mean = rank_mean(m, counts, values=np.arange(1, 6))
    r = m.mean_rank(counts)
    assert mean.values[0] == pytest.approx(r.mean + 1)
    assert mean.stderr[0] == pytest.approx(r.stderr)
    mb = mean.interval()
    # The hull of the score and the normal interval: it holds the normal one.
    mn = mean.normal_interval()
    assert mb.lower[0] <= mn.lower[0] and mb.upper[0] >= mn.upper[0]
    assert 1 <= mb.lower[0] < mean.values[0] < mb.upper[0] <= 5
    share = range_share(m, counts, 1, 3)
    assert share.values[0] == pytest.approx(est.frequencies[1:4].sum())
    assert share_at_least(m, counts, 3).values[0] == pytest.approx(est.frequencies[3:].sum())
    # Wider at a higher level; the score interval is near the normal one at this n.
    assert np.all(items.interval(0.99).upper >= b.upper)


@pytest.mark.parametrize(
    ("low", "high", "message"),
    [(-1, 2, "low must be"), (0, 5, "high must be"), (3, 2, "must not exceed"), (1.0, 2, "low")],
)
def test_bad_ranges_are_refused(low: Any, high: Any, message: str) -> None:
    m = ExponentialMechanism(epsilon=1.0, domain_size=5)
    counts = np.array([10.0, 10, 10, 10, 10])
    with pytest.raises(ParameterError, match=message):
        range_share(m, counts, low, high)


def test_bad_weights_are_refused() -> None:
    m = ExponentialMechanism(epsilon=1.0, domain_size=5)
    with pytest.raises(ParameterError, match="weights must be rows of 5"):
        rank_mean(m, np.full(5, 10.0), values=np.arange(4))
