"""Planning a distribution metric: the bound holds for any data, required_n is minimal."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ldpkit
from benchmarks.distribution_bins import simulate
from ldpkit.distribution_plan import plan_distribution, required_n_distribution
from ldpkit.mechanisms.hierarchical import HierarchicalHistogram

BOUNDS = (0.0, 120.0)


def populations(L: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(L)
    one = np.zeros(L)
    one[L // 3] = 1.0
    ends = np.zeros(L)
    ends[[0, -1]] = 0.5
    spiky = np.full(L, 0.5 / L)
    spiky[7] += 0.5
    random = rng.dirichlet(np.full(L, 0.1))
    return {
        "uniform": np.full(L, 1.0 / L),
        "one leaf": one,
        "ends": ends,
        "spiky": spiky,
        "random": random,
    }


@pytest.mark.parametrize("estimand", ["reporters", "population"])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
@pytest.mark.parametrize(("resolution", "branching"), [(256, 4), (100, 3)])
def test_range_bound_holds_for_any_data(
    epsilon: float, resolution: int, branching: int, estimand: str
) -> None:
    """The served score interval of every whole-leaf range of the grid, for each data, at
    its noise-free estimate, is no wider than the bound, its skewness term included (the
    population's served intervals are wider than the bound without it); uniform data give
    the typical."""
    n = 50_000
    plan = plan_distribution(
        epsilon=epsilon,
        bounds=BOUNDS,
        n=n,
        resolution=resolution,
        branching=branching,
        estimand=estimand,
    )
    m = ldpkit.mechanism(
        "hh", epsilon=epsilon, bounds=BOUNDS, resolution=resolution, branching=branching
    )
    assert isinstance(m, HierarchicalHistogram)
    assert plan.estimand == estimand and plan.skew_widening > 0
    grid = [
        (120 * (1 - w) * k / 15, min(120.0, 120 * (1 - w) * k / 15 + 120 * w))
        for w in (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4)
        for k in range(16)
    ]
    # The bound is for whole-leaf ranges (a range cutting a leaf is served from those).
    # Given as leaf positions: a leaf edge given as a value can land a rounding error
    # inside its leaf (8.4 / 120 * 100 = 7.000000000000001).
    cells = {(math.floor(a / 120 * resolution), math.ceil(b / 120 * resolution)) for a, b in grid}
    at = np.array([[i, j, i, j] for i, j in sorted(cells)], dtype=np.float64)
    for name, leaves in populations(resolution).items():
        est = m.expected(n, leaves)
        low, high = est.range_bounds(at, 0.95, 1, estimand)
        assert float(np.max(high - low)) / 2 <= plan.half_width, name
        if name == "uniform":
            intervals = (r.ci(0.95, estimand=estimand) for r in est.fractions(grid))
            served = [(hi - lo) / 2 for lo, hi in intervals]
            assert max(served) == pytest.approx(plan.typical_half_width, rel=1e-9)


def test_required_n_is_the_smallest() -> None:
    target = 0.02
    plan = required_n_distribution(half_width=target, epsilon=1.0, bounds=BOUNDS, resolution=256)
    assert plan.half_width <= target
    before = plan_distribution(epsilon=1.0, bounds=BOUNDS, n=plan.n - 1, resolution=256)
    assert before.half_width > target
    # Four times the users halve the z sqrt(V / n) part and quarter the 1 / n part (half
    # a user of continuity correction and the skewness term).
    later = plan_distribution(epsilon=1.0, bounds=BOUNDS, n=4 * plan.n, resolution=256)
    by_n = 0.5 / plan.n + plan.skew_widening
    assert later.skew_widening == pytest.approx(plan.skew_widening / 4, rel=1e-9)
    assert later.half_width == pytest.approx(plan.half_width / 2 - by_n / 4, rel=1e-9)


def test_quantile_plan_is_the_noise_free_interval() -> None:
    plan = plan_distribution(epsilon=1.0, bounds=BOUNDS, n=100_000, resolution=256, quantile=0.9)
    m = ldpkit.mechanism("hh", epsilon=1.0, bounds=BOUNDS, resolution=256)
    assert isinstance(m, HierarchicalHistogram)
    q = m.expected(100_000).quantile(0.9)
    assert plan.quantile == 0.9 and plan.quantile_half_width == (q.high - q.low) / 2
    assert q.low <= 108.0 <= q.high
    wider = plan_distribution(epsilon=1.0, bounds=BOUNDS, n=10_000, resolution=256, quantile=0.9)
    assert wider.quantile_half_width > plan.quantile_half_width


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0}, "n must be"),
        ({"n": 10, "range_": (50.0, 40.0)}, "range"),
        ({"n": 10, "range_": (-1.0, 40.0)}, "range"),
        ({"n": 10, "quantile": 1.0}, "q must be"),
        ({"n": 10, "resolution": 1}, "resolution"),
        ({"n": 10, "level": 1.5}, "level"),
    ],
)
def test_bad_plans(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ldpkit.ParameterError, match=message):
        plan_distribution(epsilon=1.0, bounds=BOUNDS, **kwargs)  # type: ignore[arg-type]
    if "n" in kwargs and kwargs["n"] == 10 and "quantile" not in kwargs:
        with pytest.raises(ldpkit.ParameterError):
            required_n_distribution(
                half_width=0.1,
                epsilon=1.0,
                bounds=BOUNDS,
                **{k: v for k, v in kwargs.items() if k != "n"},  # type: ignore[arg-type]
            )
    with pytest.raises(ldpkit.ParameterError, match="half_width"):
        required_n_distribution(half_width=math.nan, epsilon=1.0, bounds=BOUNDS)


@pytest.mark.parametrize(
    ("epsilon", "n", "upper", "estimand"),
    [
        (1.0, 20_000, 60.0, "reporters"),
        (4.0, 3_000, 7.5, "reporters"),
        (0.5, 50_000, 30.0, "reporters"),
        (2.0, 10_000, 90.0, "reporters"),
        (4.0, 3_000, 60.0, "population"),
        (8.0, 2_000, 30.0, "population"),
    ],
)
def test_plan_predicts_the_served_half_width(
    epsilon: float, n: int, upper: float, estimand: str
) -> None:
    """Simulated campaigns of evenly spread values: the served intervals' median
    half-width for the range [0, upper) (fraction upper / 120) is the plan's typical one
    for the estimand, within 4 standard errors of the sample median (from the
    half-widths' spread). (The population's served intervals at eps 4 and 8 are 1.2-1.6x
    the reporters': a plan for the reporters only fails them.)"""
    resolution, campaigns = 64, 200
    plan = plan_distribution(
        epsilon=epsilon,
        bounds=BOUNDS,
        n=n,
        resolution=resolution,
        range_=(0.0, upper),
        estimand=estimand,
    )
    m = ldpkit.mechanism("hh", epsilon=epsilon, bounds=BOUNDS, resolution=resolution)
    assert isinstance(m, HierarchicalHistogram)
    rng = np.random.default_rng(round(epsilon * n))
    _, aggregates = simulate(m, np.full(resolution, 1.0 / resolution), n, campaigns, rng)
    halves = np.array(
        [
            np.subtract(*m.estimate(a).fraction(0.0, upper).ci(0.95, estimand=estimand)[::-1]) / 2
            for a in aggregates
        ]
    )
    # The sample median's standard error, from the interquartile range (normal shape).
    q1, median, q3 = np.quantile(halves, [0.25, 0.5, 0.75])
    se = 1.2533 * (q3 - q1) / 1.349 / math.sqrt(campaigns)
    assert abs(median - plan.typical_half_width) <= 4 * se + 1e-12, (median, se)
    print(
        f"eps={epsilon} n={n} fraction={upper / 120:g} {estimand}: predicted "
        f"{plan.typical_half_width:.5f}, served median {median:.5f} (se {se:.1e})"
    )


@pytest.mark.parametrize("epsilon", [1.0, 8.0])
def test_skewness_term_bounds_the_served_intervals(epsilon: float) -> None:
    """The plan's skewness term is ``span (z^2 - 1) / (6 n)`` with ``|kappa_3| / Var <=
    span / n``: checked on the served intervals' own cumulants (the variance and third
    cumulant at the hypothesised fraction) for every range of the grid, several data, both
    estimands and fractions across [0, 1]."""
    n, resolution = 300, 64
    m = ldpkit.mechanism("hh", epsilon=epsilon, bounds=BOUNDS, resolution=resolution)
    assert isinstance(m, HierarchicalHistogram)
    plan = plan_distribution(epsilon=epsilon, bounds=BOUNDS, n=n, resolution=resolution)
    z = 1.959963984540054
    limit = plan.skew_widening * 6.0 / (z * z - 1.0)  # span / n
    grid = [
        (120 * (1 - w) * k / 15, min(120.0, 120 * (1 - w) * k / 15 + 120 * w))
        for w in (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4)
        for k in range(16)
    ]
    cells = sorted(
        {(math.floor(a / 120 * resolution), math.ceil(b / 120 * resolution)) for a, b in grid}
    )
    theta = np.linspace(0.0, 1.0, 21)
    powers = theta[None, :] ** np.arange(4)[:, None]  # (4, thetas)
    worst = 0.0
    for leaves in populations(resolution).values():
        est = m.expected(n, leaves)
        queries = est._range_queries(
            np.array([c[0] for c in cells], dtype=float), np.array([c[1] for c in cells], float)
        )
        for estimand in ("reporters", "population"):
            variance, third = est.cumulant_polynomials(queries, estimand)
            ratio = np.abs(third @ powers) / np.maximum(variance @ powers[:3], 1e-300)
            worst = max(worst, float(ratio.max()))
    assert 0.0 < worst <= limit, (worst, limit)
