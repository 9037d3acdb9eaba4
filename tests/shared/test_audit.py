"""The privacy audit: its Clopper-Pearson bounds, its verdicts, and that it can fail.

Every audit runs on a fixed seed, so these tests are deterministic. The statistical
claims behind the thresholds:

- a correct mechanism passes unless an event of probability at most 1 - confidence
  happened (the seeds are fixed, so a pass here stays a pass);
- the audit has power: on every mechanism at eps = 1 the lower bound comes within 15%
  of the claimed epsilon (it is typically within 5%);
- a mechanism that perturbs with a larger epsilon than it states is caught: its lower
  bound exceeds the claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
import pytest
from scipy import stats

import ldpkit
from ldpkit.audit import (
    AuditResult,
    audit,
    clopper_pearson_lower,
    clopper_pearson_upper,
)
from ldpkit.errors import ParameterError
from ldpkit.mechanisms import CATEGORICAL, NUMERIC
from ldpkit.mechanisms.laplace import LocalLaplace
from ldpkit.mechanisms.randomized_response import GeneralizedRR
from ldpkit.testing import mislabelled

EPSILON = 1.0
DOMAIN = 4
BOUNDS = (0.0, 1.0)
NAMES = ("rr", *CATEGORICAL, *NUMERIC)


def make(name: str, epsilon: float = EPSILON, d: int = DOMAIN) -> ldpkit.Mechanism:
    if name == "rr":
        return ldpkit.mechanism("rr", epsilon=epsilon)
    if name in CATEGORICAL:
        return ldpkit.mechanism(name, epsilon=epsilon, domain_size=d)
    return ldpkit.mechanism(name, epsilon=epsilon, bounds=BOUNDS)


def seed_of(name: str, salt: int = 0) -> np.random.Generator:
    return np.random.default_rng([sum(map(ord, name)), salt])


# --- Clopper-Pearson --------------------------------------------------------------------
def binomial_tail_at_least(k: int, n: int, p: Fraction) -> Fraction:
    return sum((math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1)), Fraction(0))


@pytest.mark.parametrize("n", [1, 2, 7, 30])
@pytest.mark.parametrize("alpha", [0.3, 0.05, 1e-4])
def test_clopper_pearson_is_conservative_exactly(n: int, alpha: float) -> None:
    """In exact rational arithmetic: the bounds sit on the safe side of their definition."""
    a = Fraction(alpha)
    for k in range(n + 1):
        lower, upper = clopper_pearson_lower(k, n, alpha), clopper_pearson_upper(k, n, alpha)
        assert 0.0 <= lower < upper <= 1.0
        # lower: P(X >= k | lower) <= alpha, i.e. at or below the exact root.
        if k > 0:
            assert binomial_tail_at_least(k, n, Fraction(lower)) <= a
        # upper: P(X <= k | upper) <= alpha, i.e. at or above the exact root.
        if k < n:
            assert 1 - binomial_tail_at_least(k + 1, n, Fraction(upper)) <= a


@pytest.mark.parametrize("n", [10, 1000, 150_000, 3_000_000])
@pytest.mark.parametrize("alpha", [0.05, 1e-3, 1e-7])
def test_clopper_pearson_matches_the_beta_quantiles(n: int, alpha: float) -> None:
    for k in sorted({0, 1, 2, 70, n // 7, n // 2, n - 3, n - 1, n} & set(range(n + 1))):
        lower, upper = clopper_pearson_lower(k, n, alpha), clopper_pearson_upper(k, n, alpha)
        ref_lower = stats.beta.ppf(alpha, k, n - k + 1) if k > 0 else 0.0
        ref_upper = stats.beta.isf(alpha, k + 1, n - k) if k < n else 1.0
        assert lower == pytest.approx(ref_lower, rel=1e-7, abs=0.0)
        assert upper == pytest.approx(ref_upper, rel=1e-7, abs=0.0)


@pytest.mark.parametrize("p", [0.001, 0.1, 0.37, 0.9])
def test_clopper_pearson_coverage_is_at_least_the_confidence(p: float) -> None:
    """Exact coverage over every outcome k of Bin(n, p)."""
    n, alpha = 60, 0.05
    pmf = stats.binom.pmf(np.arange(n + 1), n, p)
    lower = np.array([clopper_pearson_lower(k, n, alpha) for k in range(n + 1)])
    upper = np.array([clopper_pearson_upper(k, n, alpha) for k in range(n + 1)])
    assert pmf[lower <= p].sum() >= 1 - alpha - 1e-12
    assert pmf[upper >= p].sum() >= 1 - alpha - 1e-12


def test_clopper_pearson_rejects_bad_counts() -> None:
    for k, n, alpha in [(-1, 5, 0.1), (6, 5, 0.1), (0, 0, 0.1), (1, 5, 0.0), (1, 5, 1.0)]:
        with pytest.raises(ParameterError):
            clopper_pearson_lower(k, n, alpha)
    with pytest.raises(ParameterError):
        clopper_pearson_upper(1.5, 5, 0.1)  # type: ignore[arg-type]
    assert clopper_pearson_lower(np.int64(3), np.int64(10), 0.1) > 0.0


# --- every mechanism passes, with power ---------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_every_mechanism_passes_its_audit_tightly(name: str) -> None:
    result = audit(make(name), samples=200_000, rng=seed_of(name))
    assert result.passed, str(result)
    assert result.epsilon_lower_bound <= EPSILON
    assert result.epsilon_lower_bound > 0.85 * EPSILON, str(result)
    assert result.claimed_epsilon == EPSILON
    assert result.samples == 200_000
    assert result.witness is not None and result.event
    # The reported bound is the strongest tested event's, and every one is below it.
    assert max(b.epsilon_bound for b in result.bounds) == pytest.approx(result.epsilon_lower_bound)
    assert 1 <= result.events_tested <= 8


@pytest.mark.parametrize("name", ["grr", "sue", "oue", "olh", "ss", "hr"])
def test_large_domains_use_coarse_events(name: str) -> None:
    m = make(name, epsilon=2.0, d=1024)
    result = audit(m, samples=60_000, rng=seed_of(name, 1))
    assert result.passed, str(result)
    assert result.epsilon_lower_bound > 0.75 * 2.0, str(result)
    assert result.inputs == (0, 1, 512, 1023)
    broken = audit(mislabelled(m, 2.0), samples=60_000, rng=seed_of(name, 2))
    assert not broken.passed, str(broken)


def test_grr_at_high_epsilon_and_other_confidences() -> None:
    m = make("grr", epsilon=4.0, d=3)
    for confidence in (0.9, 0.999999):
        result = audit(m, samples=100_000, confidence=confidence, rng=seed_of("grr", 3))
        assert result.passed and result.epsilon_lower_bound > 3.2, str(result)


# --- broken mechanisms are caught --------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class DoubledGRR(GeneralizedRR):
    """GRR whose p and q are those of 2 * epsilon: a bug in the formula, say."""

    name: ClassVar[str] = "grr"

    def _support_probabilities(self) -> tuple[float, float]:
        d, eps = self.domain_size, 2.0 * self.epsilon
        p = 1.0 / (1.0 + (d - 1) * math.exp(-eps))
        return p, (1.0 - p) / (d - 1)


@dataclass(frozen=True, kw_only=True)
class HalfNoiseLaplace(LocalLaplace):
    """Laplace whose noise is drawn for 2 * epsilon (half the scale it should have)."""

    def _derive(self) -> None:
        stated = self.epsilon
        object.__setattr__(self, "epsilon", 2.0 * stated)
        super()._derive()
        object.__setattr__(self, "epsilon", stated)


def test_hand_written_broken_mechanisms_are_caught() -> None:
    grr = DoubledGRR(epsilon=EPSILON, domain_size=DOMAIN)
    assert grr.epsilon == EPSILON
    result = audit(grr, rng=seed_of("doubled"))
    assert not result.passed, str(result)
    assert result.epsilon_lower_bound > 1.8
    laplace = HalfNoiseLaplace(epsilon=EPSILON, bounds=BOUNDS)
    result = audit(laplace, rng=seed_of("half"))
    assert not result.passed, str(result)
    assert result.epsilon_lower_bound > 1.7


@pytest.mark.parametrize("name", NAMES)
def test_every_mislabelled_mechanism_is_caught(name: str) -> None:
    honest = make(name)
    broken = mislabelled(honest, 2.0)
    assert broken.epsilon == EPSILON and type(broken) is type(honest)
    assert broken != honest  # its derived constants are those of 2 * epsilon
    result = audit(broken, samples=100_000, rng=seed_of(name, 4))
    assert not result.passed, str(result)
    assert result.epsilon_lower_bound > 1.5 * EPSILON


def test_a_small_excess_is_caught_too() -> None:
    """GRR perturbing with 1.25 * epsilon: the audit sees the extra 0.25."""
    result = audit(mislabelled(make("grr"), 1.25), samples=400_000, rng=seed_of("small"))
    assert not result.passed, str(result)


# --- the procedure itself --------------------------------------------------------------
def test_false_alarm_rate_stays_below_one_minus_confidence() -> None:
    """Many small audits of tight mechanisms at confidence 0.8: at most ~20% may fail."""
    m = make("rr", epsilon=0.7)
    rng = np.random.default_rng(7)
    failures = sum(
        not audit(m, samples=300, confidence=0.8, max_events=2, rng=rng).passed for _ in range(60)
    )
    # Failing with probability <= 0.2 each, P(Bin(60, 0.2) > 22) < 1e-3.
    assert failures <= 22


def test_custom_events_and_input_pairs() -> None:
    m = make("grr", d=10)

    def is_x(reports: Any, x: Any, x_prime: Any) -> Any:
        return reports == x  # booleans: two cells

    result = audit(m, input_pairs=[(2, 7)], events=is_x, rng=seed_of("custom"))
    assert result.passed and result.epsilon_lower_bound > 0.85, str(result)
    assert result.witness == (2, 7) and result.inputs == (2, 7)

    def as_float(reports: Any, x: Any, x_prime: Any) -> Any:
        return reports.astype(np.float64) + 0.5

    result = audit(m, input_pairs=[(3, 4)], events=as_float, rng=seed_of("float"))
    assert result.passed and result.epsilon_lower_bound > 0.8, str(result)


def test_numeric_inputs_and_descriptions() -> None:
    result = audit(make("duchi"), rng=seed_of("duchi", 5))
    assert result.inputs == (0.0, 1.0, 0.5)
    assert result.event is not None and result.event.startswith("debiased in {")
    text = str(result)
    assert "duchi" in text and "passed" in text


def test_result_is_reproducible_with_a_seed() -> None:
    first = audit(make("oue"), samples=20_000, rng=np.random.default_rng(11))
    second = audit(make("oue"), samples=20_000, rng=np.random.default_rng(11))
    assert first.epsilon_lower_bound == second.epsilon_lower_bound
    assert first.bounds == second.bounds


def test_bad_arguments() -> None:
    m = make("grr")
    with pytest.raises(ParameterError):
        audit(m, samples=10)
    with pytest.raises(ParameterError):
        audit(m, confidence=1.0)
    with pytest.raises(ParameterError):
        audit(m, selection_fraction=0.0)
    with pytest.raises(ParameterError):
        audit(m, input_pairs=[(1, 1)])
    with pytest.raises(ParameterError):
        audit("grr")  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        audit(m, events=lambda r, x, y: r.astype(str), samples=100)


def test_an_always_passing_result_when_nothing_distinguishes_inputs() -> None:
    """A mechanism whose reports ignore the input gives a bound of 0."""
    result = audit(make("grr"), input_pairs=[(0, 1)], events=lambda r, x, y: r * 0, samples=1000)
    assert isinstance(result, AuditResult)
    assert result.passed and result.epsilon_lower_bound == 0.0
