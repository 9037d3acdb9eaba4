"""Screening (issue 26): the laws every honest population's reports follow, whatever the inputs.

Two claims per law. Honest batches fail it at most at the false-alarm rate it is given
(measured over hundreds of batches at a large rate, 0.05, so that the measurement can see it,
for every mechanism, two batch sizes and populations at one value, at a bound and spread);
and forged reports that move an estimate far do fail it (the attacks of Cao et al. 2021, and
the ones of the issue: every bit set, Hadamard's column 0, a Laplace report at the noise cap).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from ldpkit import screening
from ldpkit.domains import Table, Tree
from ldpkit.errors import ParameterError
from ldpkit.mechanisms import Mechanism, mechanism
from ldpkit.mechanisms._grid import EXCESS_TAILS
from ldpkit.mechanisms.local_hashing import bucket
from ldpkit.mechanisms.piecewise import HALF_CELLS

Draw = Callable[[np.random.Generator, int], Any]

ALPHA = 0.05
"""The false-alarm rate the honest batches are screened at: large enough to measure."""
BATCHES = 150
SIZES = (30, 400)
LEAVES = ("MX/J/G", "MX/J/Z", "MX/S/H", "MX/S/O", "US/T", "PE")
CARS = {"type": ["Compact", "Large", "Van"], "origin": ["USA", "non-USA"]}
BOUNDS = (0.0, 10.0)
STRINGS = np.array(["ab", "hello", "x", "été", "hello!!!"], dtype=object)


def _cells(size: int) -> dict[str, Draw]:
    return {
        "first": lambda rng, n: np.zeros(n, dtype=np.int64),
        "last": lambda rng, n: np.full(n, size - 1, dtype=np.int64),
        "spread": lambda rng, n: rng.integers(0, size, n),
    }


NUMBERS: dict[str, Draw] = {
    "at lo": lambda rng, n: np.full(n, BOUNDS[0]),
    "at hi": lambda rng, n: np.full(n, BOUNDS[1]),
    "spread": lambda rng, n: rng.uniform(*BOUNDS, n),
}
TEXT: dict[str, Draw] = {
    "one": lambda rng, n: np.full(n, "hello", dtype=object),
    "empty": lambda rng, n: np.full(n, "", dtype=object),
    "spread": lambda rng, n: STRINGS[rng.integers(0, STRINGS.size, n)],
}


def _case(name: str, populations: dict[str, Draw], **options: Any) -> tuple[Any, ...]:
    return (name, options, populations)


CASES = [
    *(_case(n, _cells(8), domain_size=8) for n in ("grr", "sue", "oue", "olh", "ss", "hr")),
    _case("rr", _cells(2), domain_size=2),
    _case("grr", _cells(8), domain_size=8, epsilon=4.0),
    *(_case(n, NUMBERS, bounds=BOUNDS) for n in ("duchi", "piecewise", "hybrid", "laplace")),
    _case("hybrid", NUMBERS, bounds=BOUNDS, epsilon=0.5),
    _case("gaussian", NUMBERS, bounds=BOUNDS, delta=1e-6),
    _case("hh", NUMBERS, bounds=BOUNDS, resolution=16, branching=2),
    _case("hh", NUMBERS, bounds=BOUNDS, resolution=64, epsilon=3.0),
    _case("rollup", _cells(6), tree=Tree(LEAVES), oracle="oue"),
    _case("levels", _cells(6), tree=Tree(LEAVES)),
    _case("joint", _cells(6), table=Table(CARS), oracle="sue"),
    _case("joint_marginals", _cells(6), table=Table(CARS)),
    _case("split", _cells(6), table=Table(CARS), oracle="oue"),
    _case("prefix_sketch", TEXT, max_length=8),
]


def _make(name: str, options: dict[str, Any]) -> Mechanism:
    return mechanism(name, **{"epsilon": 1.0, **options})


def _ids(case: tuple[Any, ...]) -> str:
    name, options, _ = case
    extra = [f"{k}={v}" for k, v in options.items() if k in ("epsilon", "resolution", "oracle")]
    return "-".join([name, *extra])


def _alarm_limit(batches: int, alpha: float) -> int:
    """The most findings ``batches`` honest batches make at rate ``alpha``, but for 1e-6."""
    return int(stats.binom.ppf(1.0 - 1e-6, batches, alpha))


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_honest_batches_fail_at_most_at_the_false_alarm_rate(case: tuple[Any, ...]) -> None:
    name, options, populations = case
    m = _make(name, options)
    rng = np.random.default_rng(2026)
    found = {"reports": 0, "aggregate": 0}
    for draw, size in itertools.product(populations.values(), SIZES):
        reports = m.perturb(draw(rng, BATCHES * size), rng=rng)
        for b in range(BATCHES):
            batch = reports[b * size : (b + 1) * size]
            found["reports"] += m.screen_reports(batch, ALPHA) is not None
            found["aggregate"] += m.screen_aggregate(m.aggregate(batch), ALPHA) is not None
    limit = _alarm_limit(BATCHES * len(SIZES) * len(populations), ALPHA)
    assert found["reports"] <= limit and found["aggregate"] <= limit, (found, limit)


@pytest.mark.parametrize(
    ("n", "p", "alpha"),
    [(10, 0.5, 1e-3), (1000, 0.01, 1e-6), (40, 0.9, 1e-4), (12345, 0.27, 1e-8), (3, 0.2, 0.05)],
)
def test_critical_counts_are_the_exact_binomial_tails(n: int, p: float, alpha: float) -> None:
    high, low = screening.upper_critical(n, p, alpha), screening.lower_critical(n, p, alpha)
    if high <= n:
        assert stats.binom.sf(high - 1, n, p) <= alpha * (1 + 1e-9)
    assert stats.binom.sf(high - 2, n, p) > alpha  # one less is not rare enough
    if low >= 0:
        assert stats.binom.cdf(low, n, p) <= alpha * (1 + 1e-9)
    assert stats.binom.cdf(low + 1, n, p) > alpha


def test_unary_bits_law_is_bernoulli_plus_binomial() -> None:
    m = mechanism("oue", epsilon=1.0, domain_size=64)
    start, upper, lower = m._bits_law
    k = start + np.arange(upper.size)
    law = np.convolve([1 - m.p, m.p], stats.binom.pmf(np.arange(64), 63, m.q))
    assert np.allclose(upper, law[::-1].cumsum()[::-1][k], rtol=1e-9, atol=1e-300)
    assert np.allclose(lower, law.cumsum()[k], rtol=1e-9, atol=1e-300)


@pytest.mark.parametrize("d", [3, 7, 8, 100])
def test_hadamard_column_zero_has_probability_two_p_over_k_for_every_input(d: int) -> None:
    m = mechanism("hr", epsilon=1.3, domain_size=d)
    for x in range(d):
        columns, probs = m.output_probabilities(x)
        assert probs[columns == 0][0] == pytest.approx(2 * m.p / m.K, rel=1e-12)
    rng = np.random.default_rng(5)  # and the sampler: 2 p / K, whatever the value
    n = 400_000
    sent = np.count_nonzero(m.perturb(rng.integers(0, d, n), rng=rng) == 0)
    mean = n * 2 * m.p / m.K
    assert abs(sent - mean) <= 5 * math.sqrt(mean)


def test_flat_olh_keys_put_every_item_in_two_buckets_and_are_exactly_that_rare() -> None:
    m = mechanism("olh", epsilon=2.0, domain_size=300)
    limit = 2**64 // (m.g * m.domain_size)
    rng = np.random.default_rng(6)
    edge = np.array([0, 1, limit - 1, 2**64 - limit + 1, 2**64 - 1], dtype=np.uint64)
    for a in edge:
        for b in rng.integers(0, 2**64, 50, dtype=np.uint64, endpoint=False):
            assert np.unique(bucket(np.arange(m.domain_size), a, b, m.g)).size <= 2
    reports = m.perturb(np.zeros(1000, dtype=np.int64), rng=rng)
    assert m.screen_reports(reports, 1e-4) is None
    reports["a"][:10] = np.tile(edge, 2)
    found = m.screen_reports(reports, 1e-4)
    assert found is not None and found.test == "hash key"


GRID = [("laplace", 0.3, {}), ("laplace", 2.0, {}), ("gaussian", 1.0, {"delta": 1e-6})]


@pytest.mark.parametrize(("name", "epsilon", "options"), GRID)
def test_grid_excess_levels_bound_the_noise_tail(
    name: str, epsilon: float, options: dict[str, Any]
) -> None:
    m = mechanism(name, epsilon=epsilon, bounds=BOUNDS, **options)
    assert len(m.excess_levels) == len(EXCESS_TAILS)  # every level within the cap
    for t, bound in m.excess_levels:
        exact = _exact_noise_tail(m, t) + _exact_noise_tail(m, t + m.grid_steps)
        assert exact <= bound <= exact * 1.01 + 1e-300
        before = _exact_noise_tail(m, t - 1) + _exact_noise_tail(m, t - 1 + m.grid_steps)
        assert before > bound / 1.01  # the smallest such t


def _exact_noise_tail(m: Any, t: int) -> float:
    """``P[Z >= t]`` of the grid noise: Laplace's closed form; the discrete Gaussian's
    terms summed over 12 standard deviations (the rest is below e^-72 of the first), over
    its normalizing sum ``s sqrt(2 pi)`` (Poisson summation: exact in doubles for s > 3)."""
    if m.name == "laplace":
        return float(m.decay**t / (1 + m.decay))
    s = m.grid_sigma
    z = np.arange(t, t + math.ceil(12 * s), dtype=np.float64)
    return float(np.exp(-z * z / (2 * s * s)).sum() / (s * math.sqrt(2 * math.pi)))


# --- the attacks are found ---------------------------------------------------------------

D = 1024
TARGETS = np.arange(10) * 97 + 5  # ten target items


def _honest(m: Any, n: int, seed: int = 1) -> Any:
    rng = np.random.default_rng(seed)
    return m.perturb(rng.integers(0, m.domain_size, n), rng=rng)


def _bitmap(m: Any, rows: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint8]:
    return np.packbits(rows, axis=1, bitorder="little")


@pytest.mark.parametrize("name", ["sue", "oue"])
def test_one_report_with_every_bit_set_is_found(name: str) -> None:
    m = mechanism(name, epsilon=1.0, domain_size=D)
    reports = _honest(m, 2000)
    assert m.screen_reports(reports, 1e-4) is None
    reports[1234] = 255
    found = m.screen_reports(reports, 1e-4)
    assert found is not None and found.test == "bits set" and "1024 of its 1024" in found.reason


@pytest.mark.parametrize("bits", [0, 5, 1024])
@pytest.mark.parametrize("name", ["sue", "oue"])
def test_a_lone_report_with_counts_outside_the_laws_window_is_found(name: str, bits: int) -> None:
    """A one-report batch (the device cap) setting no bit, a forger's few targets, or every
    bit: counts far outside the honest law's window still read its tails right."""
    m = mechanism(name, epsilon=1.0, domain_size=D)
    rows = np.zeros((1, D), dtype=np.bool_)
    rows[0, :bits] = True
    found = m.screen_reports(_bitmap(m, rows), 1e-4)
    assert found is not None and f"sets {bits} of its {D} bits" in found.reason
    typical = np.zeros((1, D), dtype=np.bool_)
    typical[0, : round(m.p + (D - 1) * m.q)] = True
    assert m.screen_reports(_bitmap(m, typical), 1e-4) is None


def test_hadamard_column_zero_pooled_is_found() -> None:
    m = mechanism("hr", epsilon=1.0, domain_size=D)
    reports = _honest(m, 5000)
    reports[:25] = 0  # 0.5% forged: each supports every item
    found = m.screen_reports(reports, 1e-4)
    assert found is not None and found.test == "column 0"


def _mga(name: str, m: Any, count: int, rng: np.random.Generator) -> npt.NDArray[Any]:
    """Cao et al.'s maximal gain attack: each forged report supports as many targets as the
    mechanism lets it (GRR: one target at random; unary: the targets' bits alone; SS: the
    targets and random others; OLH: a key putting every target in the reported bucket;
    HR: a column supporting every target, other than 0)."""
    if name == "grr":
        return TARGETS[rng.integers(0, TARGETS.size, count)].astype(np.uint32)
    if name in ("sue", "oue", "ss"):
        rows = np.zeros((count, D), dtype=bool)
        rows[:, TARGETS] = True
        if name == "ss":
            for row in rows:
                others = np.setdiff1d(np.arange(D), TARGETS)
                row[rng.choice(others, m.k - TARGETS.size, replace=False)] = True
        return _bitmap(m, rows)
    if name == "hr":
        columns = np.arange(1, m.K, dtype=np.uint32)
        hits = np.all([m.supports(int(t), columns) for t in TARGETS], axis=0)
        return np.full(count, columns[hits][0], dtype=np.uint32)
    a = rng.integers(0, 2**64, 1 << 21, dtype=np.uint64, endpoint=False)
    b = rng.integers(0, 2**64, a.size, dtype=np.uint64, endpoint=False)
    buckets = bucket(TARGETS[:, None], a[None, :], b[None, :], m.g)
    same = np.flatnonzero(np.all(buckets == buckets[0], axis=0))
    out = np.empty(count, dtype=m.report_dtype)
    pick = same[np.arange(count) % same.size]
    out["a"], out["b"], out["y"] = a[pick], b[pick], buckets[0, pick]
    return out


@pytest.mark.parametrize("name", ["grr", "sue", "oue", "olh", "ss", "hr"])
def test_maximal_gain_attack_is_found_pooled_over_64_reports(name: str) -> None:
    """A sender's window of 64 forged reports (what one public token sends in a minute)."""
    m = mechanism(name, epsilon=1.0, domain_size=D)
    forged = _mga(name, m, 64, np.random.default_rng(7))
    assert bool(np.all(m.check_reports(forged)))
    found = m.screen_aggregate(m.aggregate(forged), 1e-4)
    assert found is not None and found.test == "support count"  # the targets, or the rest
    honest = m.screen_aggregate(m.aggregate(_honest(m, 64)), 1e-4)
    assert honest is None


@pytest.mark.parametrize("name", ["laplace", "gaussian"])
def test_a_report_at_the_noise_cap_is_found(name: str) -> None:
    m = mechanism(
        name, epsilon=1.0, bounds=BOUNDS, **({"delta": 1e-6} if name == "gaussian" else {})
    )
    rng = np.random.default_rng(8)
    reports = m.perturb(rng.uniform(*BOUNDS, 3000), rng=rng)
    assert m.screen_reports(reports, 1e-4) is None
    reports[17] = m.grid_steps + m.noise_cap
    found = m.screen_reports(reports, 1e-4)
    assert found is not None and found.test == "beyond the bounds"


def _extremes(m: Any) -> tuple[int, int]:
    """The smallest and largest report a numeric mechanism accepts."""
    if m.name == "duchi":
        top = 1
    elif m.name == "piecewise":
        top = HALF_CELLS
    elif m.name == "hybrid":
        top = m.bound if m.alpha > 0 else m.duchi_index
    else:
        return -m.noise_cap, m.grid_steps + m.noise_cap
    return -top, top


NUMERIC = [
    ("duchi", {}),
    ("piecewise", {}),
    ("hybrid", {}),
    ("hybrid", {"epsilon": 0.5}),
    ("laplace", {}),
    ("gaussian", {"delta": 1e-6}),
]


@pytest.mark.parametrize(("name", "options"), NUMERIC, ids=[f"{n}{o}" for n, o in NUMERIC])
def test_numeric_reports_all_at_an_end_are_found_pooled(name: str, options: dict[str, Any]) -> None:
    m = mechanism(name, **{"epsilon": 1.0, "bounds": BOUNDS, **options})
    for end, side in zip(_extremes(m), ("below", "above"), strict=True):
        forged = np.full(300, end, dtype=m.report_dtype)
        assert bool(np.all(m.check_reports(forged)))
        found = m.screen_aggregate(m.aggregate(forged), 1e-4)
        assert found is not None and found.test == "mean" and f"{side} the bounds" in found.reason
    rng = np.random.default_rng(11)
    honest = m.perturb(np.full(300, BOUNDS[1]), rng=rng)
    assert m.screen_aggregate(m.aggregate(honest), 1e-4) is None


def test_composed_choices_are_screened() -> None:
    """A forger who sends every report to one view, depth or sketch row."""
    rng = np.random.default_rng(9)
    hh = mechanism("hh", epsilon=1.0, bounds=BOUNDS, resolution=64)
    reports = hh.perturb(rng.uniform(*BOUNDS, 3000), rng=rng)
    reports["depth"][:300] = 1
    assert _test_of(hh.screen_reports(reports, 1e-4)) == "choice"
    views = mechanism("joint_marginals", epsilon=1.0, table=Table(CARS))
    reports = views.perturb(rng.integers(0, 6, 3000), rng=rng)
    reports[:400] = reports[reports["view"] == 1][0]
    assert _test_of(views.screen_aggregate(views.aggregate(reports), 1e-4)) == "choice"
    sketch = mechanism("prefix_sketch", epsilon=1.0, max_length=8)
    reports = sketch.perturb(STRINGS[rng.integers(0, 5, 3000)], rng=rng)
    reports[:60] = reports[0]  # one cell, 60 times
    assert _test_of(sketch.screen_reports(reports, 1e-4)) == "choice"
    assert _test_of(sketch.screen_aggregate(sketch.aggregate(reports), 1e-4)) is not None


def test_composed_parts_apply_their_oracles_laws() -> None:
    """Each view's (attribute's) oracle law on its share: every bit set in a batch's reports
    (per report); one target's bit alone in 30% of them (the other items' support, pooled)."""
    rng = np.random.default_rng(10)
    rollup = mechanism("rollup", epsilon=1.0, tree=Tree(LEAVES), oracle="oue")
    split = mechanism("split", epsilon=1.0, table=Table(CARS), oracle="oue")
    for m, label in ((rollup, "view depth 3: "), (split, "type: ")):
        reports = m.perturb(rng.integers(0, 6, 2000), rng=rng)
        assert m.screen_reports(reports, 1e-4) is None
        assert m.screen_aggregate(m.aggregate(reports), 1e-4) is None
        every, alone = reports.copy(), reports.copy()
        every["payload"][:300, 0] = 0b111111 if m is rollup else 0b111
        found = m.screen_reports(every, 1e-4)
        assert found is not None and found.reason.startswith(label) and found.test == "bits set"
        alone["payload"][:600, 0] = 1
        found = m.screen_aggregate(m.aggregate(alone), 1e-4)
        assert found is not None and found.reason.startswith(label + "item")


def _test_of(found: screening.Finding | None) -> str | None:
    return None if found is None else found.test


def test_findings_say_what_was_seen() -> None:
    found = screening.support_counts(np.array([40.0, 3.0]), 40, 0.5, 0.25, 1e-4)
    assert found is not None and found.to_dict()["test"] == "support count"
    assert "item 0 is supported by 40 of 40 reports" in found.reason
    assert 0 < found.p_value <= 2 * 2 * 0.5**40
    assert screening.support_counts(np.array([0.0, 0.0]), 0, 0.5, 0.25, 1e-4) is None


# --- the residual's water-filling --------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_waterfill_is_the_best_way_to_spread_forgeries(seed: int) -> None:
    rng = np.random.default_rng(seed)
    parts = int(rng.integers(1, 4))
    gains, shares = rng.uniform(-1, 3, parts), rng.dirichlet(np.ones(parts))
    beta = float(rng.choice([0.001, 0.01, 0.1, 0.4]))
    honest = shares * (1 - beta)
    best = 0.0  # brute force over a grid of allocations of beta
    for split in itertools.product(np.linspace(0, 1, 201), repeat=parts - 1):
        if sum(split) > 1:
            continue
        x = beta * np.array([*split, 1 - sum(split)])
        best = max(best, float(np.sum(gains * x / (honest + x))))
    value = float(screening.waterfill(gains[None, :], shares, beta)[0])
    assert best <= value + 1e-12
    assert value <= best * 1.01 + 1e-12
    if parts == 1:
        assert value == pytest.approx(max(gains[0], 0) * beta, rel=1e-12)


def test_the_forged_fraction_is_checked() -> None:
    for bad in (-0.1, 1.0, float("nan"), "0.1", True):
        with pytest.raises(ParameterError):
            screening.check_fraction(bad)
