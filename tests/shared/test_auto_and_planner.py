"""``auto`` picks the smallest report among the lowest-variance mechanisms; the planner's
figures hold in simulation."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

import ldpkit
from ldpkit.mechanisms import (
    AUTO_VARIANCE_TOLERANCE,
    CATEGORICAL,
    NUMERIC,
    FrequencyOracle,
    NumericMechanism,
)
from ldpkit.planner import Plan
from tests.stats import run_campaigns

BOUNDS = (0.0, 10.0)


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
CAMPAIGNS, USERS = 400, 2000


def half_widths(
    m: ldpkit.Mechanism, draw: object, *, users: int, seed: int, level: float = 0.95
) -> npt.NDArray[np.float64]:
    """Half-widths of the intervals the estimates really give, one per campaign."""
    result = run_campaigns(m, draw, campaigns=CAMPAIGNS, users=users, seed=seed, level=level)
    widths = (np.asarray(result.highs) - np.asarray(result.lows)) / 2.0
    return widths[:, 0] if widths.ndim == 2 else widths


def check_planned(widths: npt.NDArray[np.float64], plan: Plan) -> None:
    """The planned half-width is the mean of the real ones, within 4 standard errors."""
    se = float(widths.std(ddof=1)) / math.sqrt(widths.size)
    assert abs(float(widths.mean()) - plan.half_width) <= 4 * se + 1e-12 * plan.half_width, (
        widths.mean(),
        plan.half_width,
    )


@pytest.mark.parametrize(
    ("name", "epsilon", "d", "frequency", "users"),
    [
        ("grr", 1.0, 4, 0.3, USERS),  # score intervals
        ("auto", 1.0, 64, 0.05, USERS),
        ("grr", 8.0, 256, 0.0, 300),  # exact intervals: about 0.04 expected reports
        ("oue", 8.0, 16, 0.1, 50),
    ],
)
def test_plan_is_the_mean_half_width_of_real_intervals(
    name: str, epsilon: float, d: int, frequency: float, users: int
) -> None:
    plan = ldpkit.plan(name, n=users, epsilon=epsilon, domain_size=d, frequency=frequency)
    m = ldpkit.mechanism(name, epsilon=epsilon, domain_size=d)
    assert plan.mechanism == m.name and plan.frequency == frequency
    holders = round(frequency * users)

    def draw(rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
        # Exactly `holders` users of each campaign hold item 0, the rest spread out.
        per = np.tile(
            np.r_[np.zeros(holders), 1 + np.arange(users - holders) % (d - 1)], n // users
        )
        return per.astype(np.int64)

    check_planned(half_widths(m, draw, users=users, seed=41), plan)
    assert plan.interval in ("score", "exact")


@pytest.mark.parametrize("name", ["hybrid", "laplace", "piecewise"])
def test_numeric_plan_is_the_worst_case_noise(name: str) -> None:
    m = ldpkit.mechanism(name, epsilon=2.0, bounds=BOUNDS)
    assert isinstance(m, NumericMechanism)
    plan = ldpkit.plan(m, n=USERS)
    a, b, extra = m.noise_terms()
    worst = (a + max(b, 0.0) + extra) * m.half_range**2
    assert plan.half_width == pytest.approx(1.959963984540054 * math.sqrt(worst / USERS))
    assert plan.interval == "known-variance" and plan.frequency is None

    # At the worst values (the bounds, for PM) the real intervals are that wide.
    def draw(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        return rng.choice([0.0, 10.0], size=n)

    widths = half_widths(m, draw, users=USERS, seed=47)
    assert float(widths.mean()) <= plan.half_width * (1 + 1e-9)
    if name != "piecewise":  # PM's noise varies with the value; the others' hardly
        check_planned(widths, plan)


def test_duchi_plan_is_the_binary_interval_at_one_half() -> None:
    m = ldpkit.mechanism("duchi", epsilon=1.0, bounds=BOUNDS)
    plan = ldpkit.plan(m, n=USERS)
    assert plan.interval == "score"

    def draw(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        return np.full(n, 5.0)  # t = 0: the +1 reports are Bin(n, 1/2)

    check_planned(half_widths(m, draw, users=USERS, seed=59), plan)


def test_plan_defaults_are_worst_cases() -> None:
    m = ldpkit.mechanism("grr", epsilon=1.0, domain_size=4)
    assert isinstance(m, FrequencyOracle)
    plan = ldpkit.plan(m, n=100)
    assert plan.frequency is not None
    for f in np.linspace(0.0, 1.0, 11):
        assert ldpkit.plan(m, n=100, frequency=float(f)).half_width <= plan.half_width * (1 + 1e-9)
    assert plan.rare_item_half_width == ldpkit.plan(m, n=100, frequency=0.0).half_width
    assert ldpkit.plan(m, n=100, level=0.99).half_width > plan.half_width


def test_rare_items_at_high_epsilon_say_what_they_need() -> None:
    # The worst case (an item near f = 1) needs tens of thousands of users at eps 8 and
    # d 4096; an item nobody holds needs a few hundred (its exact interval is [0, ~7/n]).
    need = ldpkit.required_n(epsilon=8.0, domain_size=4096, half_width=0.01)
    assert need.frequency is not None and need.frequency > 0.5
    assert need.rare_item_n is not None and need.rare_item_n < need.n / 10
    rare = ldpkit.plan(
        need.mechanism, n=need.rare_item_n, epsilon=8.0, domain_size=4096, frequency=0.0
    )
    assert rare.half_width <= 0.01 and rare.interval == "exact"


# --- required_n is plan's inverse -------------------------------------------------------
CASES: list[tuple[str, dict[str, object]]] = [
    ("grr", {"epsilon": 1.0, "domain_size": 4}),
    ("grr", {"epsilon": 0.5, "domain_size": 16, "frequency": 0.1}),
    ("oue", {"epsilon": 8.0, "domain_size": 32, "frequency": 0.0}),
    ("hybrid", {"epsilon": 1.0, "bounds": BOUNDS}),
    ("laplace", {"epsilon": 2.0, "bounds": BOUNDS, "level": 0.9}),
    ("duchi", {"epsilon": 0.3, "bounds": (-1.0, 1.0)}),
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
    need = ldpkit.required_n(m, half_width=0.1)
    assert need.mechanism == "duchi" and need.epsilon == 1.0
    assert ldpkit.plan(m, n=need.n).half_width <= 0.1


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
        (lambda: ldpkit.plan("grr", n=10**13, epsilon=1.0, domain_size=4), "n must be at most"),
        (
            lambda: ldpkit.plan("grr", n=10, epsilon=1.0, domain_size=4, frequency="0.1"),
            "frequency",
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
