"""The square wave mechanism: exact privacy, the sampler's law against the channel, and the
EM / EMS reconstructions against theory (fixed seeds, tolerances from the Fisher information)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from ldpkit.errors import ParameterError, ReportError
from ldpkit.mechanisms._portable import Words
from ldpkit.mechanisms.square_wave import SquareWave, optimal_band, smoothed, smoothing_matrix

EPSILONS = (0.5, 1.0, 4.0, 8.0)
FloatArray = npt.NDArray[np.float64]


@pytest.mark.parametrize("epsilon", [0.01, 0.3, 0.999, 1.0, 2.0, 4.0, 8.0])
def test_band_is_the_papers_and_the_densities_integrate_to_one(epsilon: float) -> None:
    e = math.exp(epsilon)
    closed = (epsilon * e - e + 1.0) / (2.0 * e * (e - 1.0 - epsilon))
    b = optimal_band(epsilon)
    # The closed form loses digits to cancellation at small eps: about 1e-16 / eps^2.
    assert b == pytest.approx(closed, rel=1e-15 / min(epsilon, 1.0) ** 2 + 1e-15)
    sw = SquareWave(epsilon=epsilon, bounds=(0.0, 1.0), buckets=8)
    assert 2.0 * sw.band * sw.p + sw.q == pytest.approx(1.0, abs=1e-15)
    assert np.allclose(sw.channel.sum(axis=1), 1.0, atol=1e-12)


def test_band_limits() -> None:
    assert optimal_band(1e-6) == pytest.approx(0.5, abs=1e-6)
    assert optimal_band(40.0) < 1e-15


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_largest_density_ratio_is_exactly_e_to_the_epsilon(epsilon: float) -> None:
    sw = SquareWave(epsilon=epsilon, bounds=(-3.0, 5.0), buckets=4)
    values = np.linspace(-3.0, 5.0, 97)
    outputs = np.linspace(-sw.band, 1.0 + sw.band, 1001)
    dens = sw.density(values, outputs)  # inputs x outputs
    assert np.all(dens > 0)
    loss = float(np.max(np.log(dens.max(axis=0)) - np.log(dens.min(axis=0))))
    assert loss == pytest.approx(epsilon, abs=1e-12)
    assert sw.privacy_loss() == pytest.approx(epsilon, abs=1e-12)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_bucketed_reports_spend_epsilon_and_no_more(epsilon: float) -> None:
    """Output buckets narrower than the window: some bucket is inside one input's window and
    outside another's, so the bucket law's largest log-ratio is eps; the integrated channel
    (values spread over a bucket) stays within it."""
    b = optimal_band(epsilon)
    m = min(4096, math.ceil(2.0 * (1.0 + 2.0 * b) / b))
    sw = SquareWave(epsilon=epsilon, bounds=(0.0, 1.0), buckets=16, output_buckets=m)
    rows = np.log(sw.point_channel(np.linspace(0.0, 1.0, 33)))
    assert float(np.max(rows.max(axis=0) - rows.min(axis=0))) == pytest.approx(epsilon, abs=1e-12)
    lc = np.log(sw.channel)
    assert float(np.max(lc.max(axis=0) - lc.min(axis=0))) <= epsilon + 1e-12


def _chi2_pvalue(observed: FloatArray, probs: FloatArray) -> float:
    expected = probs / probs.sum() * observed.sum()
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.parametrize("epsilon", [0.5, 4.0])
@pytest.mark.parametrize("value", [2.0, 3.3, 7.0])
def test_sampler_law_at_a_point_matches_the_channel(epsilon: float, value: float) -> None:
    sw = SquareWave(epsilon=epsilon, bounds=(2.0, 7.0), buckets=4, output_buckets=40)
    rng = np.random.default_rng(int(epsilon * 100 + value * 10))
    counts = sw.counts(sw.perturb(np.full(100_000, value), rng))
    assert _chi2_pvalue(counts, sw.point_channel([value])[0]) > 1e-4


@pytest.mark.parametrize("epsilon", [0.5, 4.0])
def test_sampler_law_over_a_bucket_matches_the_integrated_channel(epsilon: float) -> None:
    sw = SquareWave(epsilon=epsilon, bounds=(0.0, 1.0), buckets=5, output_buckets=24)
    rng = np.random.default_rng(7)
    for i in (0, 2, 4):
        x = (i + rng.random(200_000)) / 5.0
        counts = sw.counts(sw.perturb(x, rng))
        assert _chi2_pvalue(counts, sw.channel[i]) > 1e-4, i


@pytest.mark.parametrize(("epsilon", "value"), [(0.5, 2.0), (1.0, 3.3), (4.0, 7.0)])
def test_portable_rule_law_matches_the_channel(epsilon: float, value: float) -> None:
    """The planned wire report (the output bucket) drawn from 32-bit words."""
    sw = SquareWave(epsilon=epsilon, bounds=(2.0, 7.0), buckets=4, output_buckets=24)
    stream = iter(np.random.default_rng(11).integers(0, 2**32, size=4 * 30_000).tolist())
    words = Words(lambda: next(stream))
    draws = [sw.portable_report(value, words) for _ in range(30_000)]
    assert words.used == 4 * 30_000  # two u64 per report: coin, then uniform
    counts = np.bincount(draws, minlength=sw.outputs).astype(np.float64)
    assert _chi2_pvalue(counts, sw.point_channel([value])[0]) > 1e-4


def _fisher_sd(sw: SquareWave, f: FloatArray, w: FloatArray, n: int) -> float:
    """Asymptotic sd of ``w . f_hat`` for the maximum likelihood over the simplex (interior
    truth): ``grad^T I^-1 grad`` in the coordinates f_1 .. f_{d-1}."""
    lam = f @ sw.channel
    jac = (sw.channel[:-1] - sw.channel[-1]).T  # d' x (d - 1)
    info = n * jac.T @ (jac / lam[:, None])
    grad = w[:-1] - w[-1]
    return math.sqrt(float(grad @ np.linalg.solve(info, grad)))


TRUTH = np.array([0.04, 0.08, 0.14, 0.2, 0.22, 0.17, 0.1, 0.05])


def _functionals(sw: SquareWave) -> list[FloatArray]:
    mids = (np.arange(sw.buckets) + 0.5) / sw.buckets
    below_half = (np.arange(sw.buckets) < sw.buckets // 2).astype(np.float64)
    return [mids, below_half]


@pytest.mark.parametrize("n", [2_000, 20_000, 200_000])
def test_em_recovers_the_distribution_within_the_fisher_tolerance(n: int) -> None:
    sw = SquareWave(epsilon=2.0, bounds=(0.0, 1.0), buckets=8, output_buckets=16)
    counts = np.random.default_rng(n).multinomial(n, TRUTH @ sw.channel).astype(np.float64)
    fit = sw.estimate_em(counts, tolerance=1e-9, max_iterations=200_000)
    assert fit.converged
    for w in _functionals(sw):
        sd = _fisher_sd(sw, TRUTH, w, n)
        assert abs(float(w @ fit.frequencies) - float(w @ TRUTH)) <= 4.0 * sd


@pytest.mark.parametrize("n", [2_000, 20_000, 200_000])
def test_ems_is_a_distribution_whose_noise_shrinks_as_theory_says(n: int) -> None:
    """EMS on the counts against EMS on their mean (its limit as n grows): the difference is
    within 4 sd of the maximum likelihood's (smoothing only lowers it), so -> 0 like 1/sqrt(n)."""
    sw = SquareWave(epsilon=2.0, bounds=(0.0, 1.0), buckets=8, output_buckets=16)
    counts = np.random.default_rng(n + 1).multinomial(n, TRUTH @ sw.channel).astype(np.float64)
    fit = sw.estimate_ems(counts, tolerance=1e-9)
    limit = sw.estimate_ems(sw.expected_counts(TRUTH, n), tolerance=1e-9)
    assert fit.converged and limit.converged and fit.smoothed
    assert np.all(fit.frequencies >= 0) and fit.frequencies.sum() == pytest.approx(1.0, abs=1e-12)
    for w in _functionals(sw):
        sd = _fisher_sd(sw, TRUTH, w, n)
        assert abs(float(w @ (fit.frequencies - limit.frequencies))) <= 4.0 * sd


def test_reconstruction_answers() -> None:
    sw = SquareWave(epsilon=1.0, bounds=(10.0, 20.0), buckets=4)
    counts = sw.expected_counts(np.array([0.1, 0.2, 0.3, 0.4]), 1000)
    fit = sw.estimate_em(counts)
    assert fit.cdf(10.0) == 0.0 and fit.cdf(20.0) == pytest.approx(1.0)
    q = fit.quantile([0.0, 0.25, 0.5, 1.0])
    assert np.all(np.diff(q) >= 0) and q[0] == 10.0 and q[-1] == pytest.approx(20.0)
    assert fit.cdf(q[1]) == pytest.approx(0.25)
    assert fit.fraction(10.0, 20.0) == pytest.approx(1.0)


def test_bootstrap_interval_holds_the_estimate_and_is_ordered() -> None:
    sw = SquareWave(epsilon=2.0, bounds=(0.0, 1.0), buckets=8, output_buckets=16)
    rng = np.random.default_rng(3)
    counts = rng.multinomial(5_000, TRUTH @ sw.channel).astype(np.float64)
    boot = sw.bootstrap(counts, lambda r: [r.mean, r.cdf(0.5)], replicates=40, rng=rng)
    assert boot.replicates.shape == (40, 2)
    assert np.all(boot.low <= boot.estimate) and np.all(boot.estimate <= boot.high)
    low, high = boot.percentile
    assert np.all(low <= high)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ParameterError, match="buckets"):
        SquareWave(epsilon=1.0, bounds=(0.0, 1.0), buckets=1)
    with pytest.raises(ParameterError, match="output_buckets"):
        SquareWave(epsilon=1.0, bounds=(0.0, 1.0), output_buckets=5000)
    with pytest.raises(ParameterError, match="epsilon"):
        SquareWave(epsilon=0.0, bounds=(0.0, 1.0))
    with pytest.raises(ParameterError):
        SquareWave(epsilon=1.0, bounds=(1.0, 1.0))
    sw = SquareWave(epsilon=1.0, bounds=(0.0, 1.0), buckets=4)
    with pytest.raises(ReportError, match="outside"):
        sw.counts([2.0])
    with pytest.raises(ReportError):
        sw.perturb(["a"])
    with pytest.raises(ParameterError, match="entries"):
        sw.estimate_ems(np.ones(3))
    with pytest.raises(ParameterError, match=">= 0"):
        sw.estimate_ems(np.array([1.0, -1.0, 2.0, 3.0]))
    with pytest.raises(ParameterError, match="at least one"):
        sw.estimate_ems(np.full(4, 0.1))


# --- the bias of a linear range estimate from the values' places within buckets --------

SPANS = (
    (2.0 + 5.0 * 0.25, 2.0 + 5.0 * 0.5),  # on the grid's edges (8 buckets)
    (2.0 + 5.0 * 0.2929, 2.0 + 5.0 * 0.5477),  # on none
    (2.0, 2.0 + 5.0 * 0.5),  # the distribution function at 4.5: one step
)


def _range_weights(sw: SquareWave, lower: float, upper: float) -> FloatArray:
    """``g = pinv(P) a``: the inversion estimate of the share in ``[lower, upper)``, ``a``
    each grid bucket's covered share (the values assumed uniform within a bucket)."""
    lo, hi = sw.bounds
    d = sw.buckets
    e = np.arange(d + 1) / d
    u, v = (lower - lo) / (hi - lo), (upper - lo) / (hi - lo)
    a = np.clip(np.minimum(e[1:], v) - np.maximum(e[:-1], u), 0.0, None) * d
    return np.asarray(np.linalg.pinv(sw.channel) @ a)


def _deviations(sw: SquareWave, g: FloatArray, lower: float, upper: float) -> FloatArray:
    """(points, bucket, w - 1_range) on a dense grid of unit values (ends excluded)."""
    lo, hi = sw.bounds
    x = np.linspace(0.0, 1.0, 40_001)[1:-1]
    values = lo + (hi - lo) * x
    inside = (values >= lower) & (values < upper)
    return np.stack(
        [values, np.floor(x * sw.buckets), sw.point_channel(values) @ g - inside], axis=1
    )


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("buckets", [8, 13])
@pytest.mark.parametrize("span", SPANS)
def test_bucket_deviation_bounds_every_placement_and_is_attained(
    epsilon: float, buckets: int, span: tuple[float, float]
) -> None:
    """Every user's bias ``w(x) - 1_range(x)`` is within its bucket's bound (a dense grid:
    any population is a mixture of such points), and the bound is the largest of them (up
    to the grid's step times w's slope)."""
    sw = SquareWave(epsilon=epsilon, bounds=(2.0, 7.0), buckets=buckets, output_buckets=48)
    g = _range_weights(sw, *span)
    bound = sw.bucket_deviation(g, span[0], span[1], buckets)
    dev = _deviations(sw, g, *span)
    k = dev[:, 1].astype(np.int64)
    assert np.all(np.abs(dev[:, 2]) <= bound[k] + 1e-12)
    largest = np.zeros(buckets)
    np.maximum.at(largest, k, np.abs(dev[:, 2]))
    slope = float(np.max(np.abs(np.diff(dev[:, 2])))) + 1e-12  # per grid step, jumps aside
    assert np.all(bound - largest <= max(slope, 1e-3))


@pytest.mark.parametrize("span", SPANS)
def test_bias_bounded_interval_covers_an_adversarial_population(
    span: tuple[float, float],
) -> None:
    """Each bucket's mass (Beta(2,5)'s) sits at the point that pushes the estimate up most:
    the estimate's bias is then more than half the bound ``sum_k m_k e_k`` (the bound takes
    each bucket's largest deviation of either sign) and far beyond its sd.
    ``estimate +- (1.96 sd + bound)`` still covers in at least 95% of campaigns (misses
    within the Bin(C, 0.05) tail at 1e-4), exactly as the construction promises."""
    sw = SquareWave(epsilon=2.0, bounds=(2.0, 7.0), buckets=8, output_buckets=32)
    g = _range_weights(sw, *span)
    dev = _deviations(sw, g, *span)
    k = dev[:, 1].astype(np.int64)
    worst = np.array([np.argmax(np.where(k == j, dev[:, 2], -np.inf)) for j in range(8)])
    places, bias_each = dev[worst, 0], dev[worst, 2]
    edges = np.arange(9) / 8
    mass = np.diff(stats.beta(2.0, 5.0).cdf(edges))
    truth = float(mass @ ((places >= span[0]) & (places < span[1])))
    bias = float(mass @ bias_each)
    bound = float(mass @ sw.bucket_deviation(g, span[0], span[1], 8))
    assert 0.5 * bound < bias <= bound + 1e-12
    n, campaigns = 100_000, 200
    law = mass @ sw.point_channel(places)
    counts = np.random.default_rng(30).multinomial(n, law / law.sum(), size=campaigns)
    lam = counts / n
    est = lam @ g
    sd = np.sqrt(np.maximum(lam @ g**2 - est**2, 0.0) / n)
    assert bias > 3.0 * float(sd.mean())  # the bound is what makes it cover here
    half = 1.96 * sd + bound
    misses = int(np.sum(np.abs(est - truth) > half))
    assert misses <= stats.binom.ppf(1.0 - 1e-4, campaigns, 0.05)


@pytest.mark.parametrize("span", [(math.nan, 4.0), (3.0, math.nan), (5.0, 3.0)])
def test_bucket_deviation_refuses_a_range_that_is_not_one(span: tuple[float, float]) -> None:
    """A NaN end failed as a ReportError about a value at an index the caller never gave,
    and reversed ends gave bounds for a range that does not exist: both refused by name."""
    sw = SquareWave(epsilon=1.0, bounds=(2.0, 7.0), buckets=8, output_buckets=16)
    with pytest.raises(ParameterError, match="range"):
        sw.bucket_deviation(np.ones(16), span[0], span[1], 8)


def _binomial_smoothing(size: int) -> FloatArray:
    """EMS's smoothing by its definition (the module docstring; Silverman et al. 1990),
    written out here and not read from the module: a bucket's new mass is (1, 2, 1) / 4 of
    its neighbours and itself, an end's (2, 1) / 3 of itself and its one neighbour."""
    s = np.zeros((size, size))
    for i in range(size):
        weights = {j: 1.0 for j in (i - 1, i + 1) if 0 <= j < size} | {i: 2.0}
        for j, w in weights.items():
            s[i, j] = w / sum(weights.values())
    return s


def test_the_smoothing_is_the_binomial_one() -> None:
    """The module's smoothing (matrix and banded) is the definition's; the banded smoother
    was compared with the module's matrix only, and EMS with EMS: a planted (1, 1, 1) / 3
    kernel (ends (1, 1) / 2) in both passed every square wave test."""
    inner, end = [1 / 4, 1 / 2, 1 / 4], [2 / 3, 1 / 3]
    expected = [[*end, 0, 0], [*inner, 0], [0, *inner], [0, 0, *end[::-1]]]
    assert np.max(np.abs(_binomial_smoothing(4) - np.array(expected))) <= 1e-15
    for size in (2, 3, 4, 64):
        assert np.max(np.abs(smoothing_matrix(size) - _binomial_smoothing(size))) <= 1e-15
        f = np.random.default_rng(size).random(size)
        assert np.max(np.abs(smoothed(f) - _binomial_smoothing(size) @ f)) <= 1e-15


def _dense_ems(sw: SquareWave, counts: FloatArray, steps: int) -> FloatArray:
    """EMS as it was before the banded smoother: the d x d matrix product each step."""
    s = _binomial_smoothing(sw.buckets)
    f = np.full(sw.buckets, 1.0 / sw.buckets)
    for _ in range(steps):
        f = s @ (f * (sw.channel @ (counts / (f @ sw.channel))))
        f = np.maximum(f, 1e-30)
        f /= f.sum()
    return f


@pytest.mark.parametrize("buckets", [2, 3, 64, 512])
def test_the_banded_smoother_is_the_matrix(buckets: int) -> None:
    """``smoothed`` (three shifted sums) is ``smoothing_matrix @ f`` to rounding, and EMS
    with it is the dense EMS to 1e-12 after as many steps as the dense one took (both
    contract, so rounding does not grow)."""
    rng = np.random.default_rng(buckets)
    f = rng.random(buckets)
    assert np.max(np.abs(smoothed(f) - _binomial_smoothing(buckets) @ f)) <= 1e-15
    sw = SquareWave(epsilon=1.0, bounds=(0.0, 1.0), buckets=buckets)
    truth = np.linspace(1.0, 3.0, buckets) / np.linspace(1.0, 3.0, buckets).sum()
    counts = rng.multinomial(50_000, truth @ sw.channel).astype(np.float64)
    fit = sw.estimate_ems(counts)
    assert fit.converged
    dense = _dense_ems(sw, counts, fit.iterations)
    assert np.max(np.abs(fit.frequencies - dense)) <= 1e-12


def test_convergence_is_reported() -> None:
    """Met before the limit: converged, its last change under the tolerance, no warning;
    stopped at the limit: not converged, the change above it, a warning naming the limit."""
    sw = SquareWave(epsilon=0.5, bounds=(0.0, 1.0), buckets=32)
    counts = np.random.default_rng(2).multinomial(10_000, np.full(32, 1 / 32) @ sw.channel)
    done = sw.estimate_ems(counts.astype(np.float64))
    assert done.converged and done.last_change < 1e-3 and done.warning is None
    # the log-likelihood is the returned estimate's, to rounding (10^4 reports of a few
    # nats each: a sum near 3e4 nats, ~1e-11 of float error; 1e-9 is far below one step)
    law = done.frequencies @ sw.channel
    assert done.log_likelihood == pytest.approx(float(counts @ np.log(law)), abs=1e-9)
    assert done.convergence() == {
        "iterations": done.iterations, "converged": True,
        "last_change": done.last_change, "tolerance": 1e-3,
    }  # fmt: skip
    cut = sw.estimate_ems(counts.astype(np.float64), max_iterations=done.iterations - 1)
    assert not cut.converged and cut.last_change >= 1e-3 and cut.iterations == done.iterations - 1
    assert cut.warning is not None and f"limit of {cut.iterations:,} steps" in cut.warning


@pytest.mark.parametrize("bad", [True, 0, 2.5, "10"])
def test_a_step_limit_that_is_not_a_count_is_refused(bad: object) -> None:
    """``max_iterations=True`` is not one step: refused by name like any non-integer."""
    sw = SquareWave(epsilon=1.0, bounds=(0.0, 1.0), buckets=8)
    with pytest.raises(ParameterError, match="max_iterations"):
        sw.estimate_ems(np.ones(sw.channel.shape[1]), max_iterations=bad)  # type: ignore[arg-type]
