"""``auto`` picks the smallest report among the lowest-variance mechanisms; the planner's
figures hold in simulation."""

from __future__ import annotations

import importlib
import math

import numpy as np
import numpy.typing as npt
import pytest

import ldpkit
from ldpkit.mechanisms import (
    _REGISTRY,
    AUTO_VARIANCE_TOLERANCE,
    CATEGORICAL,
    NUMERIC,
    FrequencyOracle,
    NumericMechanism,
)
from ldpkit.planner import Plan
from tests.stats import chi2_ratio_bounds, coverage_bounds, run_campaigns

BOUNDS = (0.0, 10.0)


def require_categorical() -> None:
    """Skip when another engineer's categorical module is not written yet."""
    for name in CATEGORICAL:
        module = _REGISTRY[name][0]
        try:
            importlib.import_module(f"ldpkit.mechanisms.{module}")
        except ModuleNotFoundError:
            pytest.skip(f"categorical mechanism module {module!r} is not available yet")


def preferred_minimum(choice: ldpkit.Choice) -> str:
    """The rule, restated: among candidates within the tolerance of the smallest variance,
    the smallest report, then the lowest variance, then preference order."""
    best = min(choice.variances.values())
    near = [k for k, v in choice.variances.items() if v <= best * (1 + AUTO_VARIANCE_TOLERANCE)]
    smallest = min(choice.report_bytes[k] for k in near)
    tied = [k for k in near if choice.report_bytes[k] == smallest]
    lowest = min(choice.variances[k] for k in tied)
    return next(k for k in tied if choice.variances[k] <= lowest * (1 + 1e-9))


# --- auto -------------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.1, 0.5, 0.61, 0.62, 1.0, 2.0, 4.0, 8.0, 20.0])
def test_auto_numeric_picks_the_smallest_variance(epsilon: float) -> None:
    choice = ldpkit.choose(epsilon=epsilon, bounds=BOUNDS)
    assert tuple(choice.variances) == NUMERIC
    for name, var in choice.variances.items():
        m = ldpkit.mechanism(name, epsilon=epsilon, bounds=BOUNDS)
        assert isinstance(m, NumericMechanism)
        assert var == m.worst_case_variance()
    assert choice.name == preferred_minimum(choice)
    m = ldpkit.mechanism("auto", epsilon=epsilon, bounds=BOUNDS)
    assert m.name == choice.name and m.epsilon == epsilon
    assert isinstance(m, NumericMechanism) and m.bounds == BOUNDS
    # Laplace never wins (Duchi beats it at small epsilon, PM/HM at large).
    assert choice.variances["laplace"] > min(choice.variances.values())
    if epsilon <= 0.61:
        # HM is Duchi alone there: a tie, and Duchi's 1-byte report is the smaller.
        assert choice.name == "duchi"
        assert choice.variances["hybrid"] == pytest.approx(choice.variances["duchi"], rel=1e-12)
    elif choice.variances["duchi"] <= choice.variances["hybrid"] * (1 + AUTO_VARIANCE_TOLERANCE):
        assert choice.name == "duchi"  # within the tolerance: the smaller report
    else:
        assert choice.name == "hybrid"
    assert f"{choice.name:<10}" in choice.explain()
    assert "<- chosen" in choice.explain()


def test_auto_numeric_at_epsilon_4() -> None:
    choice = ldpkit.choose(epsilon=4.0, bounds=BOUNDS)
    assert choice.name in {"hybrid", "piecewise"}
    assert choice.variances[choice.name] == min(choice.variances.values())
    assert ldpkit.mechanism("auto", epsilon=4.0, bounds=BOUNDS).name == choice.name


@pytest.mark.parametrize(
    ("domain_size", "epsilon"),
    [(2, 1.0), (4, 4.0), (4, 0.5), (8, 1.0), (64, 1.0), (1024, 1.0), (1024, 4.0), (5000, 0.5)],
)
def test_auto_categorical_picks_the_smallest_variance(domain_size: int, epsilon: float) -> None:
    require_categorical()
    choice = ldpkit.choose(epsilon=epsilon, domain_size=domain_size)
    assert tuple(choice.variances) == CATEGORICAL
    for name, var in choice.variances.items():
        m = ldpkit.mechanism(name, epsilon=epsilon, domain_size=domain_size)
        assert isinstance(m, FrequencyOracle)
        assert var == pytest.approx(float(m.variance(0.0)), rel=1e-12)
    assert choice.name == preferred_minimum(choice)
    m = ldpkit.mechanism("auto", epsilon=epsilon, domain_size=domain_size)
    assert m.name == choice.name
    assert isinstance(m, FrequencyOracle) and m.domain_size == domain_size


def test_auto_categorical_regimes() -> None:
    require_categorical()
    # Small domain, large epsilon: direct randomized response wins. Subset selection
    # then picks k = 1 and is the same mechanism; its packed report is smaller at d = 4
    # (1 byte against 4) and larger at d = 64 (8 against 4).
    small = ldpkit.choose(epsilon=4.0, domain_size=4)
    assert small.name == "ss"
    assert small.variances["ss"] == pytest.approx(small.variances["grr"], rel=1e-9)
    assert ldpkit.choose(epsilon=4.0, domain_size=64).name == "grr"
    # Large domain, small epsilon: GRR's variance grows with d, the others' do not.
    large = ldpkit.choose(epsilon=1.0, domain_size=1024)
    assert large.name != "grr"
    assert large.variances["grr"] > 10 * min(large.variances.values())


def test_choose_needs_exactly_one_kind() -> None:
    with pytest.raises(ldpkit.ParameterError, match="domain_size"):
        ldpkit.choose(epsilon=1.0)
    with pytest.raises(ldpkit.ParameterError, match="bounds"):
        ldpkit.choose(epsilon=1.0, domain_size=4, bounds=BOUNDS)
    with pytest.raises(ldpkit.ParameterError, match="epsilon"):
        ldpkit.choose(epsilon=-1.0, bounds=BOUNDS)
    with pytest.raises(ldpkit.ParameterError, match="bounds"):
        ldpkit.choose(epsilon=1.0, bounds=(1.0, 0.0))


# --- the planner against simulation -----------------------------------------------------
CAMPAIGNS, USERS = 1000, 2000


def check_half_width(errors: npt.NDArray[np.float64], plan: Plan) -> None:
    """Errors over campaigns: spread and 95% band as planned, within sampling tolerance."""
    z = plan.half_width / math.sqrt(plan.per_user_variance / plan.n)
    planned_sd = plan.half_width / z
    lo, hi = chi2_ratio_bounds(errors.size)
    ratio = float(np.mean(errors**2)) / planned_sd**2  # mean is known: no ddof
    assert lo < ratio < hi, ratio
    inside = float(np.mean(np.abs(errors) <= plan.half_width))
    low, high = coverage_bounds()
    assert low <= inside <= high, inside


def frequency_errors(
    m: ldpkit.Mechanism, truth: npt.NDArray[np.float64], item: int, seed: int
) -> npt.NDArray[np.float64]:
    """Per campaign: estimated minus actual fraction of ``item`` among its users.

    A frequency oracle's variance formula (and so the plan) is about the fraction among
    the users who reported, so each campaign is compared with its own users' fraction.
    """
    rng = np.random.default_rng(seed)
    values = rng.choice(truth.size, size=CAMPAIGNS * USERS, p=truth)
    reports = m.perturb(values, rng=rng)
    errors = np.empty(CAMPAIGNS)
    for r in range(CAMPAIGNS):
        chunk = slice(r * USERS, (r + 1) * USERS)
        est = m.estimate(m.aggregate(reports[chunk]))
        assert isinstance(est, ldpkit.FrequencyEstimate)
        errors[r] = est.frequencies[item] - np.mean(values[chunk] == item)
    return errors


def test_plan_frequency_matches_simulation() -> None:
    truth = np.array([0.3, 0.3, 0.2, 0.2])
    plan = ldpkit.plan("grr", n=USERS, epsilon=1.0, domain_size=4, frequency=0.3)
    m = ldpkit.mechanism("grr", epsilon=1.0, domain_size=4)
    check_half_width(frequency_errors(m, truth, 0, seed=41), plan)


def test_plan_auto_frequency_matches_simulation() -> None:
    require_categorical()
    d = 64
    truth = np.full(d, 0.95 / (d - 1))
    truth[0] = 0.05
    plan = ldpkit.plan("auto", n=USERS, epsilon=1.0, domain_size=d, frequency=0.05)
    m = ldpkit.mechanism("auto", epsilon=1.0, domain_size=d)
    assert plan.mechanism == m.name
    check_half_width(frequency_errors(m, truth, 0, seed=43), plan)


@pytest.mark.parametrize("name", ["hybrid", "laplace"])
def test_plan_value_std_matches_simulation(name: str) -> None:
    # Values at 2 and 8, half each: mean 5, std 3. These two mechanisms' noise hardly
    # depends on the value, so the planner's worst-case noise term is the actual one.
    plan = ldpkit.plan(name, n=USERS, epsilon=1.0, bounds=BOUNDS, value_std=3.0)
    m = ldpkit.mechanism(name, epsilon=1.0, bounds=BOUNDS)
    assert isinstance(m, NumericMechanism)
    assert plan.per_user_variance == pytest.approx(m.worst_case_variance() + 9.0)

    def draw(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        return rng.choice([2.0, 8.0], size=n)

    result = run_campaigns(m, draw, campaigns=CAMPAIGNS, users=USERS, seed=47)
    check_half_width(result.estimates - 5.0, plan)


def test_worst_case_plan_is_an_upper_bound() -> None:
    plan = ldpkit.plan("piecewise", n=USERS, epsilon=1.0, bounds=BOUNDS)
    m = ldpkit.mechanism("piecewise", epsilon=1.0, bounds=BOUNDS)
    assert isinstance(m, NumericMechanism)
    assert plan.per_user_variance == pytest.approx(m.worst_case_variance() + 25.0)

    def draw(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        return rng.uniform(0.0, 10.0, size=n)

    result = run_campaigns(m, draw, campaigns=300, users=USERS, seed=53)
    _, hi = chi2_ratio_bounds(300)
    assert float(np.mean((result.estimates - 5.0) ** 2)) < hi * plan.per_user_variance / USERS


def test_plan_defaults_are_worst_cases() -> None:
    m = ldpkit.mechanism("grr", epsilon=1.0, domain_size=4)
    assert isinstance(m, FrequencyOracle)
    plan = ldpkit.plan(m, n=100)
    assert plan.per_user_variance == max(m.variance(0.0), m.variance(1.0))
    assert plan.half_width == pytest.approx(
        1.959963984540054 * math.sqrt(plan.per_user_variance / 100)
    )
    assert ldpkit.plan(m, n=100, level=0.99).half_width > plan.half_width


# --- required_n is plan's inverse -------------------------------------------------------
CASES: list[tuple[str, dict[str, object]]] = [
    ("grr", {"epsilon": 1.0, "domain_size": 4}),
    ("grr", {"epsilon": 0.5, "domain_size": 16, "frequency": 0.1}),
    ("hybrid", {"epsilon": 1.0, "bounds": BOUNDS}),
    ("laplace", {"epsilon": 2.0, "bounds": BOUNDS, "value_std": 1.5, "level": 0.9}),
    ("duchi", {"epsilon": 0.3, "bounds": (-1.0, 1.0), "value_std": 0.0}),
    ("auto", {"epsilon": 4.0, "bounds": BOUNDS}),
]


@pytest.mark.parametrize("target", [5.0, 0.5, 0.05, 0.013])
@pytest.mark.parametrize(("name", "kwargs"), CASES)
def test_required_n_is_the_inverse_of_plan(
    name: str, kwargs: dict[str, object], target: float
) -> None:
    need = ldpkit.required_n(name, half_width=target, **kwargs)  # type: ignore[arg-type]
    at_n = ldpkit.plan(name, n=need.n, **kwargs)  # type: ignore[arg-type]
    assert at_n.half_width <= target
    assert at_n.half_width == pytest.approx(need.half_width, rel=1e-12)
    assert at_n.mechanism == need.mechanism
    if need.n > 1:
        assert ldpkit.plan(name, n=need.n - 1, **kwargs).half_width > target  # type: ignore[arg-type]


def test_required_n_accepts_a_mechanism() -> None:
    m = ldpkit.mechanism("duchi", epsilon=1.0, bounds=BOUNDS)
    need = ldpkit.required_n(m, half_width=0.1, value_std=2.0)
    assert need.mechanism == "duchi" and need.epsilon == 1.0
    assert ldpkit.plan(m, n=need.n, value_std=2.0).half_width <= 0.1


# --- bad inputs -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "param"),
    [
        (lambda: ldpkit.plan("grr", n=0, epsilon=1.0, domain_size=4), "n"),
        (lambda: ldpkit.plan("grr", n=2.5, epsilon=1.0, domain_size=4), "n"),
        (lambda: ldpkit.plan("grr", n=True, epsilon=1.0, domain_size=4), "n"),
        (lambda: ldpkit.plan("grr", n=10, domain_size=4), "epsilon"),
        (lambda: ldpkit.plan("grr", n=10, epsilon=0.0, domain_size=4), "epsilon"),
        (lambda: ldpkit.plan("grr", n=10, epsilon=1.0), "domain_size"),
        (lambda: ldpkit.plan("hybrid", n=10, epsilon=1.0), "bounds"),
        (lambda: ldpkit.plan("grr", n=10, epsilon=1.0, domain_size=4, level=1.5), "level"),
        (lambda: ldpkit.plan("grr", n=10, epsilon=1.0, domain_size=4, level=0.0), "level"),
        (lambda: ldpkit.plan("grr", n=10, epsilon=1.0, domain_size=4, frequency=1.2), "frequency"),
        (lambda: ldpkit.plan("grr", n=10, epsilon=1.0, domain_size=4, frequency=-0.1), "frequency"),
        (
            lambda: ldpkit.plan("laplace", n=10, epsilon=1.0, bounds=BOUNDS, value_std=-1.0),
            "value_std",
        ),
        (
            lambda: ldpkit.plan("laplace", n=10, epsilon=1.0, bounds=BOUNDS, value_std=math.nan),
            "value_std",
        ),
        (lambda: ldpkit.plan("nope", n=10, epsilon=1.0, domain_size=4), "unknown mechanism"),
        (
            lambda: ldpkit.required_n("grr", half_width=0.0, epsilon=1.0, domain_size=4),
            "half_width",
        ),
        (
            lambda: ldpkit.required_n("grr", half_width=-1.0, epsilon=1.0, domain_size=4),
            "half_width",
        ),
        (
            lambda: ldpkit.required_n("grr", half_width=math.inf, epsilon=1.0, domain_size=4),
            "half_width",
        ),
        (
            lambda: ldpkit.required_n("grr", half_width="0.1", epsilon=1.0, domain_size=4),
            "half_width",
        ),
        (lambda: ldpkit.required_n("grr", half_width=0.1, domain_size=4), "epsilon"),
        (
            lambda: ldpkit.required_n("grr", half_width=0.1, epsilon=1.0, domain_size=4, level=2),
            "level",
        ),
    ],
)
def test_bad_planner_inputs_name_the_parameter(call: object, param: str) -> None:
    with pytest.raises(ldpkit.ParameterError, match=param):
        call()  # type: ignore[operator]
