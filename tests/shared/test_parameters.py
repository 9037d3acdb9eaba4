"""Every bad parameter is rejected with a message that names it."""

from __future__ import annotations

import math

import pytest

import ldpkit
from ldpkit.mechanisms import CATEGORICAL, NUMERIC


@pytest.mark.parametrize("name", CATEGORICAL)
@pytest.mark.parametrize("epsilon", [0, -1.0, math.inf, math.nan, "1", None, True, 1e6])
def test_bad_epsilon_categorical(name: str, epsilon: object) -> None:
    with pytest.raises(ldpkit.ParameterError, match="epsilon"):
        ldpkit.mechanism(name, epsilon=epsilon, domain_size=8)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("epsilon", [0, -1.0, math.inf, math.nan])
def test_bad_epsilon_numeric(name: str, epsilon: float) -> None:
    with pytest.raises(ldpkit.ParameterError, match="epsilon"):
        ldpkit.mechanism(name, epsilon=epsilon, bounds=(0.0, 1.0))


@pytest.mark.parametrize("name", CATEGORICAL)
@pytest.mark.parametrize("d", [1, 0, -3, 2.5, "8", None])
def test_bad_domain_size(name: str, d: object) -> None:
    with pytest.raises(ldpkit.ParameterError, match="domain_size"):
        ldpkit.mechanism(name, epsilon=1.0, domain_size=d)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize(
    "bounds", [(1.0, 1.0), (2.0, 1.0), (0.0, math.inf), (math.nan, 1.0), (0.0,), "ab", None, 3]
)
def test_bad_bounds(name: str, bounds: object) -> None:
    with pytest.raises(ldpkit.ParameterError, match="bounds"):
        ldpkit.mechanism(name, epsilon=1.0, bounds=bounds)  # type: ignore[arg-type]


def test_unknown_mechanism_lists_choices() -> None:
    with pytest.raises(ldpkit.ParameterError, match=r"unknown mechanism 'nope'.*grr"):
        ldpkit.mechanism("nope", epsilon=1.0, domain_size=4)


def test_kind_mismatch() -> None:
    with pytest.raises(ldpkit.ParameterError, match="bounds"):
        ldpkit.mechanism("grr", epsilon=1.0, bounds=(0.0, 1.0))
    with pytest.raises(ldpkit.ParameterError, match="domain_size"):
        ldpkit.mechanism("piecewise", epsilon=1.0, domain_size=4)


def test_rr_is_binary() -> None:
    assert ldpkit.mechanism("rr", epsilon=1.0).domain_size == 2  # type: ignore[attr-defined]
    with pytest.raises(ldpkit.ParameterError, match="domain_size must be 2"):
        ldpkit.mechanism("rr", epsilon=1.0, domain_size=3)


@pytest.mark.parametrize("level", [0, 1, -0.5, 1.5, math.nan, "0.95"])
def test_bad_level(level: object) -> None:
    m = ldpkit.mechanism("grr", epsilon=1.0, domain_size=4)
    est = m.estimate(m.aggregate(m.perturb([0, 1, 2])))
    with pytest.raises(ldpkit.ParameterError, match="level"):
        est.ci(level)  # type: ignore[arg-type]


def test_estimate_rejects_wrong_aggregate() -> None:
    m = ldpkit.mechanism("grr", epsilon=1.0, domain_size=4)
    other = ldpkit.mechanism("grr", epsilon=1.0, domain_size=5)
    with pytest.raises(ldpkit.ParameterError, match="aggregate"):
        m.estimate(other.aggregate(other.perturb([0])))
