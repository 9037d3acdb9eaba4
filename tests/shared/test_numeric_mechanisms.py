"""Statistical and privacy contract of every numeric mechanism, against theory.

Fixed seeds; every tolerance is derived from the mechanisms' variance formulas or from
exact binomial (Clopper-Pearson) / chi-square bounds.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

import ldpkit
from ldpkit.mechanisms import NUMERIC, NumericMechanism
from ldpkit.mechanisms.duchi import Duchi
from ldpkit.mechanisms.laplace import LocalLaplace
from ldpkit.mechanisms.piecewise import HALF_CELLS, Hybrid, Piecewise
from tests.stats import chi2_ratio_bounds, coverage_bounds, run_campaigns

BOUNDS = (0.0, 10.0)
FloatArray = npt.NDArray[np.float64]
Draw = Callable[[np.random.Generator, int], FloatArray]


def make(name: str, epsilon: float = 1.0) -> NumericMechanism:
    m = ldpkit.mechanism(name, epsilon=epsilon, bounds=BOUNDS)
    assert isinstance(m, NumericMechanism)
    return m


DISTRIBUTIONS: dict[str, Draw] = {
    "uniform": lambda rng, n: rng.uniform(0.0, 10.0, n),
    "all_at_lo": lambda rng, n: np.zeros(n),
    "all_at_hi": lambda rng, n: np.full(n, 10.0),
    "half_at_each_bound": lambda rng, n: rng.choice([0.0, 10.0], n),
    "skewed": lambda rng, n: 10.0 * rng.beta(0.5, 3.0, n),
}


# --- accuracy ---------------------------------------------------------------------------
@pytest.mark.parametrize("dist", list(DISTRIBUTIONS))
@pytest.mark.parametrize("epsilon", [0.5, 4.0])
@pytest.mark.parametrize("name", NUMERIC)
def test_unbiased_within_standard_errors(name: str, epsilon: float, dist: str) -> None:
    m = make(name, epsilon)
    n = 200_000
    rng = np.random.default_rng(zlib.crc32(f"{name}/{epsilon}/{dist}".encode()))
    x = DISTRIBUTIONS[dist](rng, n)
    est = m.estimate(m.aggregate(m.perturb(x, rng=rng)))
    # Given the values, the estimate's variance is the mean of the per-report variances / n.
    noise = np.asarray(m.variance(x))
    theory_se = math.sqrt(float(noise.sum())) / n
    assert abs(est.mean - x.mean()) <= 4.5 * theory_se
    # The standard error describes that estimand (the reporters' mean): the noise only.
    scale = m.binary_scale()
    if scale is not None:  # Duchi, and Hybrid at eps <= 0.61
        # Binary reports say nothing of each value's square: the bound from the mean alone.
        t_bar = float(np.mean(m.to_unit(x)))
        bound = math.sqrt((scale**2 - t_bar**2) / n) * m.half_range
        assert theory_se <= est.stderr * 1.01 and est.stderr == pytest.approx(bound, rel=0.02)
    else:
        np.testing.assert_allclose(est.stderr, theory_se, rtol=0.02)


VALUES = np.array([0.0, 2.5, 7.0, 10.0])
PROBS = np.array([0.3, 0.2, 0.4, 0.1])


def draw_discrete(rng: np.random.Generator, n: int) -> FloatArray:
    return rng.choice(VALUES, size=n, p=PROBS)


@pytest.mark.parametrize("name", NUMERIC)
def test_variance_and_coverage_over_campaigns(name: str) -> None:
    m = make(name, 1.0)
    campaigns, users = 1000, 2000
    result = run_campaigns(m, draw_discrete, campaigns=campaigns, users=users, seed=17)
    mean = float(VALUES @ PROBS)
    spread = float(((VALUES - mean) ** 2) @ PROBS)
    noise = float(np.asarray(m.variance(VALUES)) @ PROBS)
    expected = (noise + spread) / users
    ratio = result.estimates.var(ddof=1) / expected
    lo, hi = chi2_ratio_bounds(campaigns)
    assert lo < ratio < hi, ratio
    assert abs(result.estimates.mean() - mean) < 4.5 * math.sqrt(expected / campaigns)
    # The intervals are about each campaign's own reporters' mean.
    own = result.values.mean(axis=1)
    covered = (result.lows <= own) & (own <= result.highs)
    low, high = coverage_bounds()
    assert low <= covered.mean() <= high, covered.mean()
    # ... and so is the standard error: the noise given the values, without their spread.
    own_noise = np.asarray(m.variance(result.values)).mean(axis=1) / users
    np.testing.assert_allclose(result.stderrs**2, own_noise, rtol=0.15 if name == "duchi" else 0.1)


# --- public surface ---------------------------------------------------------------------
def test_public_surface() -> None:
    m2 = ldpkit.mechanism("piecewise", epsilon=1.0, bounds=(0.0, 10.0))
    est2 = m2.estimate(m2.aggregate(m2.perturb(np.array([1.5, 2.0]), rng=np.random.default_rng(0))))
    assert isinstance(est2, ldpkit.MeanEstimate)
    assert est2.n == 2 and est2.mechanism == "piecewise" and est2.epsilon == 1.0
    assert math.isfinite(est2.mean) and est2.stderr > 0
    ci = est2.ci(0.95)
    # Within the bounds, around the clamped mean (the unbiased one may lie outside).
    assert 0.0 <= ci.low <= est2.clamped_mean <= ci.high <= 10.0 and ci.low < ci.high
    assert est2.clamped_mean == min(max(est2.mean, 0.0), 10.0)
    assert est2.interval_method(0.95) == "known-variance"
    assert m2.worst_case_variance() >= max(m2.variance(np.linspace(0.0, 10.0, 101)))


@pytest.mark.parametrize("name", NUMERIC)
def test_one_value(name: str) -> None:
    m = make(name)
    report = m.perturb(3.0, rng=np.random.default_rng(1))
    assert np.ndim(report) == 0 and np.asarray(report).dtype == m.report_dtype
    assert m.check_reports(report).tolist() == [True]
    agg = m.aggregate(report)
    assert agg.n == 1
    est = m.estimate(agg)
    # One report: the standard error is the mechanism's own noise, never zero or infinite.
    assert math.isfinite(est.mean) and 0.0 < est.stderr < math.inf
    assert est.stderr <= math.sqrt(m.worst_case_variance()) * (1 + 1e-9)
    a, b, _ = m.noise_terms()
    assert est.stderr >= math.sqrt(a + min(b, 0.0)) * m.half_range * (1 - 1e-9)
    assert m.perturb(3, rng=np.random.default_rng(1)) == report  # an int is a number too
    assert m.estimate(m.empty_aggregate()).n == 0


@pytest.mark.parametrize("name", NUMERIC)
def test_out_of_bounds_values_are_clipped(name: str) -> None:
    m = make(name)
    for outside, edge in [(-5.0, 0.0), (1e300, 10.0)]:
        a = m.perturb(np.full(1000, outside), rng=np.random.default_rng(2))
        b = m.perturb(np.full(1000, edge), rng=np.random.default_rng(2))
        np.testing.assert_array_equal(a, b)
        assert m.variance(outside) == m.variance(edge)


@pytest.mark.parametrize(
    ("values", "index"),
    [
        ([1.0, math.nan], 1),
        ([math.inf], 0),
        ([1.0, 2.0, -math.inf], 2),
        (["a"], 0),
        ([1.0, "x"], 1),
        ([1.0, None], 1),
        (np.array([True, False]), 0),
        ("3.0", 0),
    ],
)
@pytest.mark.parametrize("name", NUMERIC)
def test_bad_values_rejected_naming_the_index(name: str, values: object, index: int) -> None:
    m = make(name)
    with pytest.raises(ldpkit.ReportError, match=f"index {index}"):
        m.perturb(values)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NUMERIC)
def test_values_must_be_one_dimensional(name: str) -> None:
    with pytest.raises(ldpkit.ReportError, match="1-D"):
        make(name).perturb(np.zeros((2, 2)))


def bad_reports(m: NumericMechanism) -> list[int]:
    if isinstance(m, LocalLaplace):
        return [-m.noise_cap - 1, m.grid_steps + m.noise_cap + 1, -(2**62)]
    if isinstance(m, Duchi):
        return [0, 2, -2, 127]
    if isinstance(m, Piecewise):
        return [HALF_CELLS + 1, -HALF_CELLS - 1, -(2**31)]
    assert isinstance(m, Hybrid)
    return [m.bound + 1, -m.bound - 1, 2**31 - 1]


@pytest.mark.parametrize("name", NUMERIC)
def test_malformed_reports_flagged_and_refused(name: str) -> None:
    m = make(name)
    good = m.perturb(np.linspace(0.0, 10.0, 20), rng=np.random.default_rng(3))
    assert m.check_reports(good).all()
    bad = bad_reports(m)
    positions = [3, 7, 11, 19][: len(bad)]
    reports = good.copy()
    reports[positions] = bad
    mask = m.check_reports(reports)
    assert sorted(np.flatnonzero(~mask).tolist()) == positions
    with pytest.raises(ldpkit.ReportError, match=f"report {positions[0]} is not a valid {name}"):
        m.aggregate(reports)
    # Wrong dtype, and integers that would wrap around in the report dtype.
    with pytest.raises(ldpkit.ReportError, match="dtype"):
        m.aggregate(good.astype(np.float64))
    wides = [[1, 2**40], [1, 2**64 - 1]] + ([[1, 257]] if name == "duchi" else [])
    for wide in wides:
        with pytest.raises(ldpkit.ReportError, match="report 1 "):
            m.aggregate(np.array(wide, dtype=np.uint64))


# --- privacy, empirical -----------------------------------------------------------------
def report_bins(m: NumericMechanism) -> FloatArray:
    """Fixed (data-independent) histogram edges over the report scale."""
    if isinstance(m, Duchi):
        return np.array([-1.5, 0.0, 1.5])
    if isinstance(m, LocalLaplace):
        d = m.grid_steps
        spread = 6.0 * d / m.epsilon
        inner = np.arange(-spread, d + spread + 1, d / 4.0)
        return np.concatenate([[-np.inf], inner, [np.inf]])
    bound = HALF_CELLS if isinstance(m, Piecewise) else m.bound  # type: ignore[attr-defined]
    return np.linspace(-bound - 0.5, bound + 0.5, 65)


def largest_ratio_lower_bound(m: NumericMechanism, n: int, alpha: float, seed: int) -> float:
    """A lower confidence bound (level 1 - alpha overall) on max_bin p_x(bin) / p_x'(bin)."""
    rng = np.random.default_rng(seed)
    edges = report_bins(m)
    lo, hi = m.bounds
    inputs = [lo, (lo + hi) / 2, hi]
    counts = [np.histogram(m.perturb(np.full(n, x), rng=rng), bins=edges)[0] for x in inputs]
    tests = len(inputs) * (len(inputs) - 1) * (len(edges) - 1)
    a = alpha / tests  # Bonferroni; each ratio bound splits a between its two ends
    best = 0.0
    for i, ci in enumerate(counts):
        for j, cj in enumerate(counts):
            if i == j:
                continue
            p_low = np.where(ci > 0, stats.beta.ppf(a / 2, ci, n - ci + 1), 0.0)
            q_high = np.where(cj < n, stats.beta.ppf(1 - a / 2, cj + 1, n - cj), 1.0)
            best = max(best, float(np.max(p_low / q_high)))
    return best


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
@pytest.mark.parametrize("name", NUMERIC)
def test_privacy_ratio_empirical(name: str, epsilon: float) -> None:
    m = make(name, epsilon)
    assert largest_ratio_lower_bound(m, 300_000, 1e-6, seed=23) <= math.exp(epsilon)


@pytest.mark.parametrize("name", NUMERIC)
def test_privacy_check_has_power(name: str) -> None:
    # The same check must catch a mechanism that spends twice the stated budget.
    loose = make(name, 2.0)
    assert largest_ratio_lower_bound(loose, 300_000, 1e-6, seed=29) > math.exp(1.0)


# --- privacy and moments, exact ---------------------------------------------------------
def laplace_log_pmf(m: LocalLaplace, x: float, y: npt.NDArray[np.int64]) -> FloatArray:
    """log Pr[Y = y | x]: stochastic rounding convolved with the discrete Laplace."""
    d = m.grid_steps
    lam = m.epsilon / d
    u = (x - m.bounds[0]) / (m.bounds[1] - m.bounds[0]) * d
    m0 = math.floor(u)
    f = u - m0
    log_norm = math.log(-math.expm1(-lam)) - math.log1p(math.exp(-lam))
    below = log_norm - lam * np.abs(y - m0)
    above = log_norm - lam * np.abs(y - m0 - 1)
    if f == 0.0:
        return below
    return np.logaddexp(math.log1p(-f) + below, math.log(f) + above)


LAPLACE_XS = [0.0, 10.0, 5.0, 10.0 * (0.5 + 0.5 / 2**16), 3.14159]


@pytest.mark.parametrize("epsilon", [2.0, 20.0])
def test_laplace_exact_moments(epsilon: float) -> None:
    m = make("laplace", epsilon)
    assert isinstance(m, LocalLaplace)
    d = m.grid_steps
    window = math.ceil(40.0 * d / epsilon)  # the mass beyond is below e^-40
    y = np.arange(-window, d + window + 1)
    t_hat = y * (2.0 / d) - 1.0
    for x in LAPLACE_XS:
        p = np.exp(laplace_log_pmf(m, x, y))
        assert abs(p.sum() - 1.0) < 1e-12
        mean = float(p @ t_hat)
        t = 2.0 * x / 10.0 - 1.0
        assert abs(mean - t) < 1e-9
        np.testing.assert_allclose(float(p @ (t_hat - mean) ** 2), m.unit_variance(t), rtol=1e-9)


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 20.0])
def test_laplace_exact_privacy(epsilon: float) -> None:
    m = make("laplace", epsilon)
    assert isinstance(m, LocalLaplace)
    d = m.grid_steps
    # Beyond [-1, D + 1] every log-ratio is constant in y, so two steps either side do.
    y = np.arange(-2 * d, 3 * d + 1)
    logs = [laplace_log_pmf(m, x, y) for x in LAPLACE_XS]
    worst = max(float(np.max(a - b)) for a in logs for b in logs)
    assert worst <= epsilon + 1e-9
    assert worst >= epsilon - 1e-9  # the extremes reach e^eps: the stated epsilon is tight


@pytest.mark.parametrize("epsilon", [0.01, 1.0, 50.0])
def test_laplace_geometric_sampler_goodness_of_fit(epsilon: float) -> None:
    m = make("laplace", epsilon)
    assert isinstance(m, LocalLaplace)
    n = 400_000
    g = m._geometric(np.random.default_rng(31), n)
    a = m.decay
    # 40 bins of equal probability under Pr[G >= k] = a^k, plus the far tail.
    cuts = np.unique(np.ceil(np.log(np.linspace(1.0, 0.0, 41)[1:-1]) / math.log(a)))
    big = np.iinfo(np.int64).max
    edges = np.concatenate([[0], cuts.astype(np.int64), [big]])
    bins = np.searchsorted(edges, g, side="right") - 1
    observed = np.bincount(bins, minlength=edges.size - 1)
    survival = np.exp(edges[:-1] * math.log(a)) - np.append(np.exp(edges[1:-1] * math.log(a)), 0.0)
    expected = survival * n
    assert observed.sum() == n
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    assert abs(g.mean() - a / (1 - a)) < 5 * math.sqrt(a) / (1 - a) / math.sqrt(n)


@pytest.mark.parametrize("epsilon", [0.01, 1.0, 50.0])
def test_laplace_geometric_draws_its_digits_jointly_or_in_turn_alike(
    epsilon: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small draws (a device's report) read every digit's words in one call; large ones,
    one call per digit: the same words in the same order, so the same draws."""
    from ldpkit.mechanisms import laplace

    m = make("laplace", epsilon)
    assert isinstance(m, LocalLaplace)
    for n in (1, 7, 1000):
        joint = m._geometric(np.random.default_rng(n), n)
        monkeypatch.setattr(laplace, "_JOINT_DIGIT_WORDS", 0)
        in_turn = m._geometric(np.random.default_rng(n), n)
        monkeypatch.undo()
        np.testing.assert_array_equal(joint, in_turn)


def test_laplace_outputs_do_not_leak_through_floating_point() -> None:
    m = make("laplace", 1.0)
    assert isinstance(m, LocalLaplace)
    rng = np.random.default_rng(5)
    low = m.perturb(np.full(50_000, 0.0), rng=rng)
    high = m.perturb(np.full(50_000, 7.31234567), rng=rng)
    for reports in (low, high):
        assert reports.dtype == np.dtype("<i8")
        # Every debiased value sits on the same lattice (2k / D - 1), whatever the input.
        grid = (m.debias(reports) - m.bounds[0]) / (m.bounds[1] - m.bounds[0]) * m.grid_steps
        np.testing.assert_array_equal(grid, np.round(grid))
    # Both inputs produce values throughout a common range: no value rules an input out.
    common = np.intersect1d(low, high)
    assert common.size > 1000


def test_duchi_exact() -> None:
    for epsilon in [0.1, 1.0, 4.0, 50.0]:
        m = make("duchi", epsilon)
        assert isinstance(m, Duchi)
        e = math.exp(epsilon)
        np.testing.assert_allclose(m.C, (e + 1) / (e - 1), rtol=1e-12)
        phi = m.flip_probability
        assert phi >= 1.0 / (1.0 + e) and phi * 2**53 == math.floor(phi * 2**53)
        for t in [-1.0, -0.3, 0.0, 1.0]:
            w = (1 + t) / 2
            p_plus = w * (1 - phi) + (1 - w) * phi
            assert abs(m.C * (2 * p_plus - 1) - t) < 1e-12  # unbiased
            var = m.C**2 - (m.C * (2 * p_plus - 1)) ** 2
            assert abs(var - m.unit_variance(t)) <= 1e-12 * m.C**2
        # Exact ratio of the realized probabilities, extremes included.
        assert math.log((1 - phi) / phi) <= epsilon + 1e-12


def pm_index_pmf(epsilon: float, step: float, bound: int, t: float) -> FloatArray:
    """Exact Pr[index = k], k = -bound..bound: PM's density against the rounding's tents."""
    e = math.exp(epsilon / 2)
    big_c = (e + 1) / (e - 1)
    left = (big_c + 1) / 2 * t - (big_c - 1) / 2
    right = left + big_c - 1
    dens_in = e / (e + 1) / (big_c - 1)
    dens_out = 1 / (e + 1) / (big_c + 1)
    k = np.arange(-bound, bound + 1, dtype=np.float64)

    def tent_integral(a: float, b: float) -> FloatArray:
        # ∫_a^b max(0, 1 - |v / step - k|) dv, via the tent's antiderivative.
        def cdf(z: FloatArray) -> FloatArray:
            # (z + 1)^2 / 2 on [-1, 0], 1 - (1 - z)^2 / 2 on [0, 1]
            z = np.clip(z, -1.0, 1.0)
            result: FloatArray = 0.5 + z * (1.0 - 0.5 * np.abs(z))
            return result

        return step * (cdf(b / step - k) - cdf(a / step - k))

    return dens_in * tent_integral(left, right) + dens_out * (
        tent_integral(-big_c, left) + tent_integral(right, big_c)
    )


def hybrid_index_pmf(m: Hybrid, t: float) -> FloatArray:
    pmf = m.alpha * pm_index_pmf(m.epsilon, m.step, m.bound, t)
    e = math.exp(m.epsilon)
    p_plus = 0.5 + t * (e - 1) / (2 * (e + 1))
    pmf[m.bound + m.duchi_index] += (1 - m.alpha) * p_plus
    pmf[m.bound - m.duchi_index] += (1 - m.alpha) * (1 - p_plus)
    return pmf


def exact_pmf(m: NumericMechanism, t: float) -> FloatArray:
    if isinstance(m, Piecewise):
        return pm_index_pmf(m.epsilon, m.step, HALF_CELLS, t)
    assert isinstance(m, Hybrid)
    return hybrid_index_pmf(m, t)


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0, 12.0])
@pytest.mark.parametrize("name", ["piecewise", "hybrid"])
def test_piecewise_and_hybrid_exact(name: str, epsilon: float) -> None:
    m = make(name, epsilon)
    bound = HALF_CELLS if isinstance(m, Piecewise) else m.bound  # type: ignore[attr-defined]
    k = np.arange(-bound, bound + 1, dtype=np.float64)
    ts = [-1.0, -0.37, 0.0, 1.0]
    pmfs = [exact_pmf(m, t) for t in ts]
    for t, pmf in zip(ts, pmfs, strict=True):
        assert np.all(pmf > 0) or (name == "hybrid" and epsilon <= 0.61)
        assert abs(pmf.sum() - 1) < 1e-9
        values = k * m.step  # type: ignore[attr-defined]
        mean = float(pmf @ values)
        assert abs(mean - t) < 1e-8  # the snapped report stays unbiased
        var = float(pmf @ (values - mean) ** 2)
        np.testing.assert_allclose(var, m.unit_variance(t), rtol=1e-6)
    support = pmfs[0] > 0
    worst = max(float(np.max(a[support] / b[support])) for a in pmfs for b in pmfs)
    assert worst <= math.exp(epsilon) * (1 + 1e-9)


@pytest.mark.parametrize(
    ("name", "epsilon", "t"),
    [
        ("piecewise", 1.0, 0.4),
        ("piecewise", 30.0, -0.2),
        ("hybrid", 2.0, 0.7),
        ("hybrid", 0.4, -0.5),
    ],
)
def test_piecewise_and_hybrid_samplers_match_exact_law(name: str, epsilon: float, t: float) -> None:
    m = make(name, epsilon)
    bound = HALF_CELLS if isinstance(m, Piecewise) else m.bound  # type: ignore[attr-defined]
    pmf = exact_pmf(m, t)
    n = 400_000
    x = (t + 1) / 2 * 10.0
    reports = m.perturb(np.full(n, x), rng=np.random.default_rng(37))
    counts = np.bincount(reports.astype(np.int64) + bound, minlength=2 * bound + 1)
    # Merge consecutive indices into bins expected to hold at least 50 reports.
    cum = np.cumsum(pmf * n)
    bin_id = np.minimum(np.floor(cum / 50.0).astype(np.int64), int(cum[-1] // 50.0) - 1)
    bin_id = np.unique(bin_id, return_inverse=True)[1]
    observed = np.bincount(bin_id, weights=counts)
    expected = np.bincount(bin_id, weights=pmf * n)
    possible = expected > 0
    assert observed[~possible].sum() == 0
    observed, expected = observed[possible], expected[possible]
    expected *= observed.sum() / expected.sum()
    assert stats.chisquare(observed, expected).pvalue > 1e-4


# --- variance formulas ------------------------------------------------------------------
@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("epsilon", [0.2, 0.61, 0.62, 1.0, 4.0, 10.0])
def test_worst_case_variance(name: str, epsilon: float) -> None:
    m = make(name, epsilon)
    grid = np.asarray(m.variance(np.linspace(0.0, 10.0, 100_001)))
    assert m.worst_case_variance() >= grid.max()
    np.testing.assert_allclose(m.worst_case_variance(), grid.max(), rtol=1e-8)


@pytest.mark.parametrize("epsilon", [0.62, 1.0, 3.0, 8.0])
def test_hybrid_variance_is_flat_and_below_its_parts(epsilon: float) -> None:
    hm, pm, duchi = make("hybrid", epsilon), make("piecewise", epsilon), make("duchi", epsilon)
    v = np.asarray(hm.unit_variance(np.linspace(-1, 1, 201)))
    np.testing.assert_allclose(v, v[0], rtol=1e-9)
    e = math.exp(epsilon / 2)
    paper = (e + 3) / (3 * e * (e - 1)) + (math.exp(epsilon) + 1) ** 2 / (
        e * (math.exp(epsilon) - 1) ** 2
    )
    np.testing.assert_allclose(v[0], paper, rtol=1e-9)
    assert hm.worst_case_variance() < min(pm.worst_case_variance(), duchi.worst_case_variance())


def test_hybrid_is_duchi_at_small_epsilon() -> None:
    hm, duchi = make("hybrid", 0.5), make("duchi", 0.5)
    assert isinstance(hm, Hybrid) and hm.alpha == 0.0
    reports = hm.perturb(np.linspace(0, 10, 1000), rng=np.random.default_rng(8))
    assert set(np.unique(reports).tolist()) <= {-hm.duchi_index, hm.duchi_index}
    np.testing.assert_allclose(hm.debias(reports), duchi.debias(np.sign(reports).astype(np.int8)))
    assert hm.worst_case_variance() == pytest.approx(duchi.worst_case_variance(), rel=1e-12)


def test_piecewise_variance_formula() -> None:
    m = make("piecewise", 2.0)
    e = math.exp(1.0)
    for t in [-1.0, 0.0, 0.5]:
        paper = t**2 / (e - 1) + (e + 3) / (3 * (e - 1) ** 2)
        snap = m.unit_variance(t) - paper
        assert 0 <= snap <= m.step**2 / 4  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", NUMERIC)
def test_tiny_epsilon_rejected(name: str) -> None:
    with pytest.raises(ldpkit.ParameterError, match="epsilon"):
        make(name, 1e-12)


def test_variance_means_the_estimate_from_n_reports() -> None:
    """One meaning for every mechanism: the variance of the estimate from n reports."""
    numeric = ldpkit.mechanism("duchi", epsilon=1.0, bounds=(0.0, 10.0))
    categorical = ldpkit.mechanism("grr", epsilon=1.0, domain_size=4)
    for m, x in ((numeric, 3.0), (categorical, 0.25)):
        one = m.variance(x)
        assert one > 0
        assert m.variance(x, 400) == pytest.approx(one / 400, rel=1e-12)
