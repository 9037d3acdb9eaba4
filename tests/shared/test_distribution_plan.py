"""Planning a distribution metric: the bound holds for any data, required_n is minimal."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ldpkit
from ldpkit.distribution_plan import plan_distribution, required_n_distribution
from ldpkit.estimates import normal_quantile
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


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
@pytest.mark.parametrize(("resolution", "branching"), [(256, 4), (100, 3)])
def test_range_bound_holds_for_any_data(epsilon: float, resolution: int, branching: int) -> None:
    n = 50_000
    plan = plan_distribution(
        epsilon=epsilon, bounds=BOUNDS, n=n, resolution=resolution, branching=branching
    )
    m = ldpkit.mechanism(
        "hh", epsilon=epsilon, bounds=BOUNDS, resolution=resolution, branching=branching
    )
    assert isinstance(m, HierarchicalHistogram)
    z = normal_quantile(0.95)
    ranges = [
        (120 * (1 - w) * k / 15, min(120.0, 120 * (1 - w) * k / 15 + 120 * w))
        for w in (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4)
        for k in range(16)
    ]
    worst = {}
    for name, leaves in populations(resolution).items():
        est = m.expected(n, leaves)
        answers = est.fractions(ranges)
        worst[name] = max(z * max(r.stderr, r.inner[1], r.outer[1]) for r in answers)
        assert worst[name] <= plan.half_width * (1 + 1e-9), name
    assert worst["uniform"] == pytest.approx(plan.typical_half_width, rel=1e-6)


def test_required_n_is_the_smallest() -> None:
    target = 0.02
    plan = required_n_distribution(half_width=target, epsilon=1.0, bounds=BOUNDS, resolution=256)
    assert plan.half_width <= target
    before = plan_distribution(epsilon=1.0, bounds=BOUNDS, n=plan.n - 1, resolution=256)
    assert before.half_width > target
    # Four times the users halve the half-width.
    later = plan_distribution(epsilon=1.0, bounds=BOUNDS, n=4 * plan.n, resolution=256)
    assert later.half_width == pytest.approx(plan.half_width / 2, rel=1e-9)


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
