"""The square wave as a registered mechanism (``mechanism = "square_wave"``): its wire
reports' law, the portable rule the clients implement, the honest range of each bucket
count the screening uses, the estimate served without intervals, and ``auto``."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ldpkit.aggregate import Aggregate
from ldpkit.mechanisms import choose, mechanism
from ldpkit.mechanisms._conformance import chi2, chi2_sf
from ldpkit.mechanisms._portable import Words
from ldpkit.mechanisms.base import FloatArray
from ldpkit.mechanisms.square_wave import NO_INTERVAL_NOTE, SquareWaveMechanism
from ldpkit.metrics import MetricDefinition

BOUNDS = (-3.0, 7.0)
FALSE_ALARM = 1e-6  # each chi-square test fails an honest sampler this rarely


def make(epsilon: float = 1.0, resolution: int = 32) -> SquareWaveMechanism:
    m = mechanism("square_wave", epsilon=epsilon, bounds=BOUNDS, resolution=resolution)
    assert isinstance(m, SquareWaveMechanism)
    return m


def words(seed: int) -> Words:
    rnd = random.Random(seed)
    return Words(lambda: rnd.getrandbits(32))


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 6.0])
def test_the_registered_rule_is_the_cores(epsilon: float) -> None:
    """The served rule (what the clients implement) is the core's ``portable_report``."""
    m = make(epsilon, 48)
    served = {"bounds": list(BOUNDS), "derived": m.served_constants()}
    for seed in range(300):
        x = -4.0 + 12.0 * seed / 299  # both ends clipped
        got = int.from_bytes(SquareWaveMechanism.portable_report(served, x, words(seed)), "little")
        assert got == m.core.portable_report(min(max(x, -3.0), 7.0), words(seed)), seed


@pytest.mark.parametrize(("epsilon", "value"), [(0.5, -3.0), (1.0, 0.4), (4.0, 7.0)])
def test_wire_reports_follow_the_point_channel(epsilon: float, value: float) -> None:
    """20,000 reports of one value against the exact law of its bucket (chi-square)."""
    m = make(epsilon)
    reports = m.perturb(np.full(20_000, value), np.random.default_rng(7))
    assert reports.dtype == np.dtype("<u2") and bool(np.all(m.check_reports(reports)))
    [(_, stat, dof, _)] = m.conformance_tests(reports, value, m.served_constants())
    assert chi2_sf(stat, dof) > FALSE_ALARM
    # The same reports are not those of a value a bucket's width away (the test can fail).
    other = m.core.point_channel([value + (4.0 if value < 2.0 else -4.0)])[0]
    counts = np.bincount(reports.astype(np.int64), minlength=m.outputs)
    assert chi2_sf(*chi2(counts, other)) < FALSE_ALARM


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_bucket_ranges_are_each_buckets_extremes_over_the_values(epsilon: float) -> None:
    """The corners give the exact min and max: a fine grid of values stays within them
    and comes within its step's change of both."""
    m = make(epsilon, 16)
    low, high = m.bucket_ranges()
    grid = np.linspace(*BOUNDS, 20_001)
    law = m.core.point_channel(grid)
    ulps = 1e-12  # rounding of the grid's values and of the overlaps
    assert np.all(law.min(axis=0) >= low * (1 - ulps))
    assert np.all(law.max(axis=0) <= high * (1 + ulps))
    step = (m.core.p - m.core.q) * (1.0 / 20_000)  # the law moves this much per grid step
    assert np.all(law.min(axis=0) <= low + step) and np.all(law.max(axis=0) >= high - step)


def test_screening_passes_honest_extremes_and_flags_a_forged_bucket() -> None:
    m = make(1.0)
    rng = np.random.default_rng(3)
    for value in (BOUNDS[0], 2.0, BOUNDS[1]):  # every report from one value: the extremes
        honest = m.aggregate(m.perturb(np.full(20_000, value), rng))
        assert m.screen_aggregate(honest, 1e-3) is None, value
    sums = m.aggregate(m.perturb(rng.uniform(*BOUNDS, 20_000), rng)).sums.copy()
    sums[5] += 1500  # 7% of the reports forged into one bucket (its honest max: 5.4%)
    found = m.screen_aggregate(Aggregate(int(sums.sum()), sums), 1e-3)
    assert found is not None and "output bucket 5" in found.reason


def test_the_estimate_has_point_answers_and_no_interval() -> None:
    m = make(2.0)
    rng = np.random.default_rng(11)
    e = m.estimate(m.aggregate(m.perturb(rng.uniform(*BOUNDS, 5000), rng)))
    data = e.to_dict(bins=4, quantiles=[0.5], range_=(-3.0, 2.0))
    assert data["note"] == NO_INTERVAL_NOTE and data["methods"]["items"] == "none"
    assert all(i["low"] is i["high"] is i["stderr"] is None for i in data["items"])
    assert data["mean_low"] is None and data["quantiles"][0]["low"] is None
    assert sum(i["estimate"] for i in data["items"]) == pytest.approx(1.0)
    empty = m.estimate(m.empty_aggregate()).to_dict(bins=4)
    assert empty["mean"] is None and all(i["estimate"] is None for i in empty["items"])


def test_the_estimate_is_ems_of_the_counts_of_a_skewed_population() -> None:
    """Values piled toward the upper bound (density rising linearly): the estimate is EMS of
    the counts of the wire reports, and its fraction below the middle (a quarter) is within
    4 Fisher sd of EMS's limit for the population (smoothing only lowers the spread: see
    test_square_wave.py). The estimate was otherwise checked on uniform values only, which
    are symmetric: a planted mirror (the counts reversed before EMS) passed every square
    wave test and test_kinds_api."""
    from tests.shared.test_square_wave import _fisher_sd

    m, n = make(2.0, 16), 40_000
    rng = np.random.default_rng(12)
    lo, hi = BOUNDS
    reports = m.perturb(lo + (hi - lo) * np.sqrt(rng.random(n)), rng)
    estimate = m.estimate(m.aggregate(reports))
    counts = np.bincount(reports.astype(np.int64), minlength=m.outputs).astype(np.float64)
    assert estimate.reconstruction is not None
    direct = m.core.estimate_ems(counts).frequencies
    assert np.array_equal(estimate.reconstruction.frequencies, direct)
    truth = np.diff(np.linspace(0.0, 1.0, m.resolution + 1) ** 2)  # the CDF is u^2
    below = (np.arange(m.resolution) < m.resolution // 2).astype(np.float64)
    limit = m.core.estimate_ems(m.core.expected_counts(truth, n)).frequencies
    sd = _fisher_sd(m.core, truth, below, n)
    assert abs(estimate.fraction(lo, (lo + hi) / 2) - float(below @ limit)) <= 4.0 * sd


def test_auto_keeps_the_hierarchical_histogram_and_says_why() -> None:
    c = choose(epsilon=1.0, bounds=BOUNDS, resolution=64)
    assert c.name == "hh" and "square_wave" not in c.variances
    assert "not weighed: square_wave" in c.explain() and "no interval" in c.explain()


def test_a_definition_takes_square_wave_and_its_fingerprint_says_so() -> None:
    spec = {"kind": "distribution", "bounds": list(BOUNDS), "resolution": 32, "epsilon": 1.0}
    hh = MetricDefinition.from_dict("m", spec)
    sw = MetricDefinition.from_dict("m", {**spec, "mechanism": "square_wave"})
    assert hh.resolved_mechanism == "hh" and sw.resolved_mechanism == "square_wave"
    assert sw.fingerprint != hh.fingerprint
    assert sw.to_dict()["derived"] == make(1.0).served_constants()


def test_a_square_wave_metric_is_not_planned_as_if_it_had_intervals() -> None:
    from ldpkit.errors import ParameterError
    from ldpkit.kinds.base import PlanTarget

    spec = {"kind": "distribution", "bounds": list(BOUNDS), "resolution": 32, "epsilon": 1.0}
    hh = MetricDefinition.from_dict("m", spec)
    assert hh.kind_spec.plan(hh, PlanTarget(n=10_000)).lines  # hh is planned
    sw = MetricDefinition.from_dict("m", {**spec, "mechanism": "square_wave"})
    with pytest.raises(ParameterError, match="no interval"):
        sw.kind_spec.plan(sw, PlanTarget(n=10_000))


# The costliest preparations measured (CPU s), by buckets: benchmarks/square_wave_cost.py
# (docs/deployment.md, "Sizing the worker"); the figures were 0.01, 0.03 and 1.46 s
# at 64, 256 and 1,024 buckets (epsilon 1, uniform, n 10^5).
MEASURED_WORST = {64: 0.033, 256: 0.271, 1024: 10.7, 2048: 60.4, 4096: 284.4}


def test_the_cost_model_is_the_square_waves_own() -> None:
    """The collector's cost model (what it refuses over its budget) for a square wave: above
    every preparation measured, so a 1,024-bucket square wave is costlier than a 64-bucket
    one and than a 1,024-leaf hierarchical histogram (whose figures are 48 times less)."""
    from ldpkit.collector.config import check_cost
    from ldpkit.errors import ParameterError

    def definition(resolution: int, mechanism: str = "square_wave") -> MetricDefinition:
        spec = {"kind": "distribution", "bounds": [0.0, 100.0], "resolution": resolution,
                "epsilon": 1.0, "mechanism": mechanism}  # fmt: skip
        return MetricDefinition.from_dict("m", spec)

    def seconds(d: MetricDefinition) -> float:
        return d.kind_spec.cost(d).cpu_seconds

    for resolution, measured in MEASURED_WORST.items():
        assert seconds(definition(resolution)) >= measured, resolution
    assert seconds(definition(1024)) > 10 * seconds(definition(64))
    assert seconds(definition(1024)) > 10 * seconds(definition(1024, "hh"))
    # the default budget (30 CPU s, 1,024 MiB) takes a 4,096-leaf histogram, not a square
    # wave of 4,096 buckets, and says why
    check_cost(definition(4096, "hh"), 30.0, 1024)
    with pytest.raises(ParameterError, match="square wave distribution of 4096 buckets"):
        check_cost(definition(4096), 30.0, 1024)


def test_the_memory_model_is_above_the_traced_peak_of_building_and_preparing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tracemalloc sees numpy's arrays: building a 1,024-bucket definition (its channel)
    and preparing its estimate (EMS, the warm quantile and range) peak at 16.2 MiB above
    the start (the channel held and EMS's copy of its seen columns, 2 x 8 MiB; the build
    alone, once five 8 MiB temporaries whole, now 11.6). The model's part that grows with
    d (its figure less a 2-bucket one's: the fixed 40 MiB is the process's own) must be
    above it: 20 MiB. Five EMS steps: each step allocates the same vectors, so more steps
    reach no higher. EMS copies the seen columns unless all are seen (then it uses the
    channel itself): every bucket but one seen is its largest copy, and all seen none."""
    import tracemalloc

    from ldpkit.mechanisms import square_wave

    monkeypatch.setattr(square_wave, "DEFAULT_MAX_ITERATIONS", 5)
    spec = {"kind": "distribution", "bounds": [0.0, 100.0], "resolution": 1024,
            "epsilon": 1.0, "mechanism": "square_wave"}  # fmt: skip
    values = np.random.default_rng(0).uniform(0.0, 100.0, 100_000)
    # which buckets are seen, not how many in each, sizes EMS's copy
    buckets = np.floor(values / 100.0 * 1024).astype(np.int64)
    every = np.bincount(buckets, minlength=1024).astype(np.float64)
    assert np.all(every > 0)
    one_unseen = every.copy()
    one_unseen[500] = 0.0

    def traced_peak(sums: FloatArray) -> tuple[MetricDefinition, int]:
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            d = MetricDefinition.from_dict("m", spec)
            d.kind_spec.prepare(d, Aggregate(int(sums.sum()), sums))
            return d, tracemalloc.get_traced_memory()[1] - start
        finally:
            tracemalloc.stop()

    d, peak = traced_peak(one_unseen)
    small = MetricDefinition.from_dict("m", {**spec, "resolution": 2})
    model = d.kind_spec.cost(d).memory_bytes - small.kind_spec.cost(small).memory_bytes
    channel = 8 * 1024**2
    assert peak > channel * (1 + 1023 / 1024)  # the channel and EMS's copy, at least
    assert model >= peak, (model / 2**20, peak / 2**20)
    _, usual = traced_peak(every)
    assert channel < usual < 1.75 * channel  # the channel (and the build's 11.6), no copy


def test_the_channel_is_built_by_the_estimate_not_by_the_definition() -> None:
    """The d x d' channel (128 MiB at 4,096 buckets) is the estimate's: a device loading a
    square wave definition and reporting, or a collector checking and counting reports,
    never builds it (tracemalloc sees numpy's arrays: under 4 MiB, once 128)."""
    import tracemalloc

    spec = {"kind": "distribution", "bounds": [0.0, 100.0], "resolution": 4096,
            "epsilon": 1.0, "mechanism": "square_wave"}  # fmt: skip
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        d = MetricDefinition.from_dict("m", spec)
        m = d.mechanism_instance
        reports = m.perturb(np.array([0.0, 37.5, 100.0]), np.random.default_rng(1))
        aggregate = m.aggregate(reports)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert aggregate.n == 3 and peak < 4 * 2**20, peak / 2**20
    small = make(2.0, resolution=32)  # the estimate builds it, once
    small.estimate(small.aggregate(small.perturb(np.full(50, 1.0), np.random.default_rng(2))))
    assert small.core.channel.shape == (32, 32)
    assert small.core.channel is small.core.channel


def test_a_square_wave_over_the_memory_budget_is_refused_and_says_memory() -> None:
    """At 4,096 buckets the model's memory is 360 MiB (measured peak 269 MiB): within the
    default 1,024 MiB, over a 256 MiB budget, which the refusal names (and not the CPU
    budget, which it is within)."""
    from ldpkit.collector.config import check_cost
    from ldpkit.errors import ParameterError

    spec = {"kind": "distribution", "bounds": [0.0, 100.0], "resolution": 4096,
            "epsilon": 1.0, "mechanism": "square_wave"}  # fmt: skip
    d = MetricDefinition.from_dict("m", spec)
    check_cost(d, 1e6, 1024)
    with pytest.raises(ParameterError, match="square wave distribution of 4096 buckets") as e:
        check_cost(d, 1e6, 256)
    assert "memory budget of 256 MiB (estimate_memory_mib)" in str(e.value)
    assert "360 MiB" in str(e.value) and "CPU budget" not in str(e.value)


@pytest.mark.parametrize(("epsilon", "warned"), [(4.0, False), (0.5, True)])
def test_an_ems_stopped_at_its_step_limit_is_flagged_through_the_answer_and_the_cli(
    monkeypatch: pytest.MonkeyPatch, epsilon: float, warned: bool
) -> None:
    """With the limit lowered to 50 steps (the real 10,000 costs seconds to meet): 10,000
    uniform values at 32 buckets take 12 steps at eps 4 (converged, no warning) and 140 at
    eps 0.5 (stopped at 50: ``converged`` false, the change above the tolerance, a warning
    in the answer and first in the CLI's text)."""
    from ldpkit.analyst import EstimateResult
    from ldpkit.kinds import Question
    from ldpkit.mechanisms import square_wave

    monkeypatch.setattr(square_wave, "DEFAULT_MAX_ITERATIONS", 50)
    spec = {"kind": "distribution", "bounds": list(BOUNDS), "resolution": 32,
            "epsilon": epsilon, "mechanism": "square_wave"}  # fmt: skip
    d = MetricDefinition.from_dict("latency", spec)
    m = d.mechanism_instance
    law = np.full(32, 1 / 32) @ m.core.channel  # type: ignore[attr-defined]
    sums = np.random.default_rng(0).multinomial(10_000, law).astype(np.float64)
    answer = d.kind_spec.answer(d, Aggregate(10_000, sums), Question(options={"bins": 4}))
    conv = answer["convergence"]
    assert conv["converged"] is not warned and conv["tolerance"] == 1e-3
    assert (conv["iterations"] == 50) is warned and (conv["last_change"] >= 1e-3) is warned
    assert ("warning" in answer) is warned
    body = {**answer, "metric": "latency", "kind": "distribution", "level": 0.95}
    text = EstimateResult.from_json(body).to_table()
    assert ("WARNING: EMS did not converge: stopped at its limit of 50 steps" in text) is warned
