"""The conformance kit: does a client, in any language, sample every mechanism correctly?

A client that samples wrongly fails silently: its reports are well-formed, the collector
accepts them, and the estimates are simply wrong. The kit makes the error visible.

1. :func:`make_plan` (``ldpkit conformance plan --out plan.json``) writes metric
   definitions, one or more per mechanism, and a list of inputs, each to be reported
   ``count`` times.
2. The client under test perturbs them, in the plan's order, and writes its reports as
   one wire batch: for each metric, its reports in the order of the plan's inputs (one
   block per metric, or one per input, in that order).
3. :func:`check` (``ldpkit conformance check plan.json reports.msgpack``) tests, per
   metric and input, that the reports follow the mechanism's exact output law:
   chi-square goodness of fit against the enumerated output probabilities (GRR, HR, the
   OLH bucket relative to the hash, each bit of unary encoding and subset selection and
   the number of bits set), or against the exact law binned at its quantiles (the
   numeric mechanisms), plus the uniformity of OLH's hash keys. A test fails when its
   p-value is below ``alpha / tests`` (Bonferroni: a correct client fails with
   probability at most ``alpha``).

What no statistical test can see, a sampler right in distribution but not exact in its
far tails, is covered by the protocol's test vectors and exactness rules instead
(docs/protocol.md); the verdict says so.

:func:`respond` builds the batch ldpkit's own Python client gives for a plan;
``perturb_override`` replaces a mechanism's sampler, so that a deliberately broken
client can be fed to the kit.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from . import wire
from ._special import regularized_gamma
from .errors import ParameterError, ProtocolError
from .mechanisms import Mechanism
from .mechanisms._bits import unpack_rows
from .metrics import MetricDefinition, MetricKind
from .randomness import KEY_SIZE, KeyedGenerator, os_generator, resolve_rng

PLAN_FORMAT = 1
DEFAULT_REPORTS = 4000
DEFAULT_ALPHA = 1e-4
PLAN_BUCKET = 1763683200  # 2025-11-21T00:00:00Z: the framing needs one; the kit ignores it
EXACTNESS_NOTE = (
    "A statistical test cannot see a sampler that is right in distribution but not exact "
    "in its far tails (a coin threshold off by 2^-40, a geometric sampler losing its tail): "
    "those are covered by the test vectors and the exactness rules of docs/protocol.md, "
    "which a client must also pass."
)

# Categories with non-ASCII characters, a quote and a backslash: the fingerprints of
# the plan's definitions exercise the canonical JSON's escaping.
CATEGORIES = ("light", "dark", "système", "日本", "🙂", 'q"\\')
NUMERIC_BOUNDS = (-3.0, 7.0)

FLAT_MECHANISMS = (
    "grr",
    "rr",
    "sue",
    "oue",
    "olh",
    "ss",
    "hr",
    "duchi",
    "piecewise",
    "hybrid",
    "laplace",
    "gaussian",
)
"""Categorical and numeric mechanisms (the other kinds' come from :func:`_kind_metrics`)."""

Override = Callable[[Mechanism, npt.NDArray[Any], np.random.Generator], npt.NDArray[Any]]


# --- the plan --------------------------------------------------------------------------
def _plan_metrics() -> list[tuple[MetricDefinition, list[Any]]]:
    out: list[tuple[MetricDefinition, list[Any]]] = []
    for mech in FLAT_MECHANISMS:
        if mech in ("grr", "rr", "sue", "oue", "olh", "ss", "hr"):
            cats: tuple[str, ...] = CATEGORIES[:2] if mech == "rr" else CATEGORIES
            for eps in (0.5, 2.0) if mech != "olh" else (0.5, 1.5, 2.0):
                name = f"{mech}-{str(eps).replace('.', '_')}"
                d = MetricDefinition.categorical(name, list(cats), epsilon=eps, mechanism=mech)
                values = [cats[0], cats[-1]] if mech == "rr" else [cats[0], cats[2], cats[4]]
                out.append((d, values))
        else:
            lo, hi = NUMERIC_BOUNDS
            for eps in (0.5, 2.0):
                name = f"{mech}-{str(eps).replace('.', '_')}"
                # The Gaussian needs delta: a strict one at the small epsilon.
                extra = {"delta": 1e-9 if eps < 1 else 1e-3} if mech == "gaussian" else {}
                d = MetricDefinition.numeric(name, (lo, hi), epsilon=eps, mechanism=mech, **extra)
                out.append((d, [lo, 0.123456789, hi, 100.0]))
    return out


def _kind_metrics() -> list[tuple[MetricDefinition, list[Any]]]:
    """The other kinds' mechanisms (distribution, hierarchy, table, strings)."""
    lo, hi = NUMERIC_BOUNDS
    region = [
        "MX/Jalisco/Guadalajara",
        "MX/Jalisco/Zapopan",
        "MX/Sonora/Hermosillo",
        "US/Texas",
        "Perú",
    ]
    dims = {"type": ["Compact", "Van", "Sporty"], "origin": ["USA", "non-USA"]}
    out: list[tuple[MetricDefinition, list[Any]]] = []
    for eps in (1.0, 3.0):
        tag = str(eps).replace(".", "_")
        out.append(
            (
                MetricDefinition.from_dict(
                    f"hh-{tag}",
                    {"kind": "distribution", "bounds": [lo, hi], "resolution": 64, "epsilon": eps},
                ),
                [lo, 0.123456789, hi],
            )
        )
    for mech, oracle in (("rollup", "oue"), ("levels", "auto")):
        spec = {"kind": "hierarchy", "categories": region, "epsilon": 1.5, "mechanism": mech}
        spec["oracle"] = oracle
        out.append((MetricDefinition.from_dict(mech, spec), [region[0], region[3], region[4]]))
    for mech in ("joint", "joint_marginals"):
        spec = {"kind": "table", "dimensions": dims, "epsilon": 1.5, "mechanism": mech}
        cells = [{"type": "Compact", "origin": "USA"}, {"type": "Sporty", "origin": "non-USA"}]
        out.append((MetricDefinition.from_dict(mech.replace("_", "-"), spec), cells))
    # Strings shorter than max_length, so that the prefix levels' cut (ceil(t m / M) bytes)
    # differs from the first rule's (t bytes) at several levels: "été" (5 bytes) at 4 of 8.
    spec = {"kind": "strings", "max_length": 8, "k": 5, "epsilon": 4.0}
    out.append((MetricDefinition.from_dict("prefix-sketch", spec), ["été", "ab", "x"]))
    return out


def make_plan(reports_per_input: int = DEFAULT_REPORTS) -> dict[str, Any]:
    """The plan: definitions as served, and the inputs to report, in order."""
    if isinstance(reports_per_input, bool) or not isinstance(reports_per_input, int):
        raise ParameterError("reports_per_input must be an integer")
    if not 200 <= reports_per_input <= 1_000_000:
        raise ParameterError(f"reports_per_input must be in 200..1000000, got {reports_per_input}")
    metrics = []
    inputs = []
    for definition, values in _plan_metrics() + _kind_metrics():
        metrics.append(definition.to_dict())
        for v in values:
            inputs.append({"metric": definition.name, "value": v, "count": reports_per_input})
    return {
        "ldpkit_conformance": PLAN_FORMAT,
        "bucket": PLAN_BUCKET,
        "how": (
            "For each input in order, make `count` reports of `value` under the metric "
            "(numbers are clipped to the bounds as usual) and write every report as one "
            "wire batch: per metric, its reports in the order of its inputs, in one block "
            "or one block per input, with the metric's fingerprint and `bucket`."
        ),
        "metrics": metrics,
        "inputs": inputs,
    }


def write_plan(path: str | os.PathLike[str], reports_per_input: int = DEFAULT_REPORTS) -> Path:
    out = Path(path)
    out.write_text(json.dumps(make_plan(reports_per_input), indent=1, ensure_ascii=False) + "\n")
    return out


@dataclass(frozen=True)
class _Plan:
    definitions: dict[str, MetricDefinition]
    inputs: list[tuple[str, Any, int]]
    bucket: int


def _load_plan(plan: str | os.PathLike[str] | Mapping[str, Any]) -> _Plan:
    data = plan if isinstance(plan, Mapping) else json.loads(Path(plan).read_text())
    if not isinstance(data, Mapping) or data.get("ldpkit_conformance") != PLAN_FORMAT:
        raise ParameterError("not an ldpkit conformance plan (format 1)")
    definitions = {}
    for raw in data["metrics"]:
        d = MetricDefinition.from_dict(raw["name"], raw)
        if d.fingerprint != raw.get("fingerprint"):
            raise ParameterError(f"plan metric {d.name}: fingerprint does not match")
        definitions[d.name] = d
    inputs = []
    for item in data["inputs"]:
        if item["metric"] not in definitions:
            raise ParameterError(f"plan input for unknown metric {item['metric']!r}")
        inputs.append((item["metric"], item["value"], int(item["count"])))
    return _Plan(definitions, inputs, int(data["bucket"]))


# --- the Python client's answer ----------------------------------------------------------
def respond(
    plan_path: str | os.PathLike[str] | Mapping[str, Any],
    perturb_override: Mapping[str, Override] | None = None,
    *,
    rng: np.random.Generator | None = None,
    one_at_a_time: bool = False,
) -> bytes:
    """The sealed (v2) wire batch ldpkit's Python client gives for a plan (one block per
    metric).

    ``perturb_override`` maps a mechanism name to ``(mechanism, values, rng) -> reports``,
    used instead of the mechanism's own sampler. By default each metric's values are
    perturbed in one vectorised call under ``rng`` (``Reporter.simulate``'s path);
    ``one_at_a_time=True`` makes every report as ``Reporter.report`` does, alone under a
    generator of its own keyed from the OS CSPRNG, or from ``rng``'s bytes when given (the
    samplers' single-report paths; about 100 µs a report).
    """
    plan = _load_plan(plan_path)
    seeded = rng is not None
    generator = resolve_rng(rng)

    def one_key() -> np.random.Generator:  # a report's own generator
        return KeyedGenerator(generator.bytes(KEY_SIZE)) if seeded else os_generator()

    overrides = dict(perturb_override or {})
    blocks = []
    for name, definition in plan.definitions.items():
        values = [
            definition.kind_spec.encode(definition, v)[0]
            for metric, v, count in plan.inputs
            if metric == name
            for _ in range(count)
        ]
        if not values:
            continue
        m = definition.mechanism_instance
        array = np.asarray(values) if not isinstance(values[0], bytes | str) else _objects(values)
        fn = overrides.get(m.name)
        if fn is not None:
            reports = fn(m, array, generator)
        elif one_at_a_time:
            reports = np.concatenate(
                [np.atleast_1d(m.perturb(array[i : i + 1], one_key())) for i in range(len(array))]
            )
        else:
            reports = m.perturb(array, generator)
        reports = np.asarray(reports, dtype=m.report_dtype)
        blocks.append(wire.sealed_block(name, definition.fingerprint, plan.bucket, reports))
    return wire.encode_sealed_batch(os.urandom(wire.ID_SIZE), blocks)


def _objects(values: list[Any]) -> npt.NDArray[Any]:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


# --- statistics ----------------------------------------------------------------------------
def chi2_sf(statistic: float, dof: int) -> float:
    """Upper tail of the chi-square law (regularized upper incomplete gamma Q(dof/2, x/2))."""
    if dof <= 0:
        raise ParameterError("dof must be positive")
    return regularized_gamma(dof / 2.0, statistic / 2.0)[1]


def _chi2(
    counts: npt.ArrayLike, probs: npt.ArrayLike, min_expected: float = 5.0
) -> tuple[float, int]:
    """Chi-square statistic and dof; cells expected below ``min_expected`` are pooled."""
    obs = np.asarray(counts, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    n = obs.sum()
    expected = p / p.sum() * n
    small = expected < min_expected
    if small.any():
        obs = np.append(obs[~small], obs[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
        if expected[-1] == 0:
            if obs[-1] > 0:
                return math.inf, max(1, obs.size - 2)
            obs, expected = obs[:-1], expected[:-1]
    if expected.size < 2:
        return 0.0, 1
    zero = expected == 0
    if (obs[zero] > 0).any():
        return math.inf, max(1, int((~zero).sum()) - 1)
    stat = float((((obs - expected) ** 2)[~zero] / expected[~zero]).sum())
    return stat, int((~zero).sum()) - 1


@dataclass(frozen=True)
class TestResult:
    """One goodness-of-fit test of one metric's reports for one input."""

    metric: str
    mechanism: str
    value: Any
    n: int
    test: str
    statistic: float
    dof: int
    p_value: float
    passed: bool = True
    detail: str = ""


@dataclass(frozen=True)
class Verdict:
    """The kit's answer: every test, and which mechanisms failed."""

    tests: tuple[TestResult, ...]
    alpha: float
    threshold: float
    problems: tuple[str, ...] = field(default=())
    """What is wrong beyond the statistics: framing, counts, malformed reports."""
    broken_mechanisms: tuple[str, ...] = field(default=())
    """Mechanisms with such a problem (their reports were not tested)."""

    @property
    def passed(self) -> bool:
        return not self.problems and all(t.passed for t in self.tests)

    @property
    def failing_mechanisms(self) -> tuple[str, ...]:
        names = {t.mechanism for t in self.tests if not t.passed} | set(self.broken_mechanisms)
        return tuple(sorted(names))

    def render(self, *, verbose: bool = False) -> str:
        lines = []
        by_mech: dict[str, list[TestResult]] = {}
        for t in self.tests:
            by_mech.setdefault(t.mechanism, []).append(t)
        width = max([len("mechanism"), *(len(m) for m in by_mech)])
        lines.append(
            f"{'mechanism':<{width}} {'tests':>5} {'failed':>6} {'smallest p':>11}  verdict"
        )
        for mech, tests in by_mech.items():
            failed = [t for t in tests if not t.passed]
            smallest = min(t.p_value for t in tests)
            lines.append(
                f"{mech:<{width}} {len(tests):>5} {len(failed):>6} {smallest:>11.3g}  "
                + ("FAIL" if failed else "pass")
            )
            for t in tests if verbose else failed:
                lines.append(
                    f"    {t.metric} value={t.value!r} n={t.n} {t.test}: chi2={t.statistic:.4g} "
                    f"dof={t.dof} p={t.p_value:.3g}" + (f" ({t.detail})" if t.detail else "")
                )
        lines.extend(f"problem: {p}" for p in self.problems)
        lines.append(
            f"{len(self.tests)} tests; a test fails below p = {self.threshold:.3g} "
            f"(alpha {self.alpha:g} / {len(self.tests)} tests)"
        )
        if self.passed:
            lines.append("PASS: every mechanism's reports follow its exact output law.")
        else:
            failing = ", ".join(self.failing_mechanisms) or "(framing)"
            lines.append(f"FAIL: {failing}")
        lines.append(textwrap.fill(EXACTNESS_NOTE, 92))
        return "\n".join(lines)


# --- the exact laws ------------------------------------------------------------------------
def _bit_tests(
    m: Any, bits: npt.NDArray[np.bool_], x: int, p: float, q: float
) -> list[tuple[str, float, int, str]]:
    n, d = bits.shape
    expected = np.full(d, q)
    expected[x] = p
    ones = bits.sum(axis=0).astype(np.float64)
    # Each bit's count is binomial: sum of squared z-scores is chi-square with d dof.
    z2 = (ones - n * expected) ** 2 / (n * expected * (1.0 - expected))
    out = [("bits", float(z2.sum()), d, "")]
    if m.name in ("sue", "oue"):
        # Number of bits set: Bernoulli(p) + Binomial(d - 1, q), exactly.
        law = np.array([1.0 - p, p])
        others = np.array([math.comb(d - 1, j) * q**j * (1 - q) ** (d - 1 - j) for j in range(d)])
        law = np.convolve(law, others)
        counts = np.bincount(bits.sum(axis=1), minlength=d + 1)
        stat, dof = _chi2(counts, law)
        out.append(("bits set", stat, dof, ""))
    return out


def _categorical_tests(
    m: Any, reports: npt.NDArray[Any], x: int
) -> list[tuple[str, float, int, str]]:
    name = m.name
    if name in ("grr", "rr"):
        probs = np.full(m.domain_size, m.q)
        probs[x] = m.p
        counts = np.bincount(reports.astype(np.int64), minlength=m.domain_size)
        return [("item", *_chi2(counts, probs), "")]
    if name == "hr":
        _, probs = m.output_probabilities(x)
        counts = np.bincount(reports.astype(np.int64), minlength=m.K)
        return [("column", *_chi2(counts, probs), "")]
    if name == "olh":
        g = m.g
        a = reports["a"].astype(np.uint64)
        b = reports["b"].astype(np.uint64)
        true = ((a * np.uint64(x) + b) >> np.uint64(32)) * np.uint64(g) >> np.uint64(32)
        shift = (reports["y"].astype(np.int64) - true.astype(np.int64)) % g
        probs = np.full(g, (1.0 - m.p) / (g - 1))
        probs[0] = m.p
        out = [("bucket vs hash", *_chi2(np.bincount(shift, minlength=g), probs), "")]
        n = len(reports)
        keys = np.stack([a, b], axis=1).view(np.uint8).reshape(n, 16)
        ones = np.unpackbits(keys, axis=1).sum(axis=0).astype(np.float64)
        z2 = (ones - n / 2.0) ** 2 / (n / 4.0)
        out.append(("hash key bits", float(z2.sum()), 128, "each of the 128 bits of (a, b) fair"))
        return out
    # SUE, OUE and SS alike: bit x set w.p. p, every other w.p. q (SS's exactly-k bits are
    # checked with the reports' validity, by check_reports).
    bits = unpack_rows(reports.reshape(len(reports), -1), m.domain_size)
    return _bit_tests(m, bits, x, m.p, m.q)


def _quantile_bins(
    cdf: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]], lo: int, hi: int, n: int
) -> npt.NDArray[np.int64]:
    """Integer upper edges ``e`` (bins ``(e_prev, e]``) near equal-probability quantiles."""
    bins = int(min(40, max(4, n // 60)))
    targets = np.arange(1, bins) / bins
    edges = []
    for target in targets:
        a, b = lo, hi  # cdf(a) < target <= cdf(b)
        while b - a > 1:
            mid = (a + b) // 2
            if cdf(np.array([mid], dtype=np.float64))[0] >= target:
                b = mid
            else:
                a = mid
        edges.append(b)
    return np.unique(np.array(edges, dtype=np.int64))


def _binned(
    values: npt.NDArray[np.int64],
    cdf: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]],
    lo: int,
    hi: int,
) -> tuple[float, int]:
    edges = _quantile_bins(cdf, lo, hi, len(values))
    probs = np.diff(np.concatenate([[0.0], cdf(edges.astype(np.float64)), [1.0]]))
    counts = np.bincount(np.searchsorted(edges, values, side="left"), minlength=edges.size + 1)
    return _chi2(counts, np.maximum(probs, 0.0))


def _pm_cdf(
    grid: Mapping[str, float], t: float
) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    """``Pr[index <= k]`` of PM on its grid (stochastic rounding of the continuous output)."""
    c, w_in, w_out, step = grid["c"], grid["w_in"], grid["w_out"], grid["step"]
    q = grid["q"]
    lo = min(max((0.5 * grid["c_plus_1"] * t - 0.5 * grid["c_minus_1"]) / step, -c), c - w_in)
    pieces = [
        (-c, lo, q * (lo + c) / w_out),
        (lo, lo + w_in, 1.0 - q),
        (lo + w_in, c, q * (c - lo - w_in) / w_out),
    ]

    def excess(s: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        # E[(s - v)^+], v the continuous output: piecewise quadratic.
        total = np.zeros_like(s)
        for a, b, mass in pieces:
            if mass <= 0 or b <= a:
                continue
            inside = (s - a) ** 2 / (2.0 * (b - a))
            after = s - (a + b) / 2.0
            total += mass * np.where(s <= a, 0.0, np.where(s >= b, after, inside))
        return total

    def cdf(k: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        # floor(v + U) <= k iff v + U < k + 1: Pr = ∫_k^{k+1} F_v(s) ds.
        out = excess(k + 1.0) - excess(k)
        return np.clip(out, 0.0, 1.0)

    return cdf


def _numeric_tests(
    m: Any, reports: npt.NDArray[Any], x: float, derived: Mapping[str, Any]
) -> list[tuple[str, float, int, str]]:
    lo_b, hi_b = m.bounds
    xc = min(max(x, lo_b), hi_b)
    t = min(max((xc - lo_b) / m.half_range - 1.0, -1.0), 1.0)
    values = reports.astype(np.int64)
    name = m.name
    if name == "duchi" or (name == "hybrid" and m.alpha == 0.0):
        flip = int(derived["flip"], 16) / 2.0**64
        upper = (t + 1.0) * 0.5
        plus = upper * (1.0 - flip) + (1.0 - upper) * flip
        atom = 1 if name == "duchi" else m.duchi_index
        counts = [int((values == -atom).sum()), int((values == atom).sum())]
        stat, dof = _chi2(counts, [1.0 - plus, plus])
        if len(values) != sum(counts):
            stat = math.inf
        return [("sign", stat, dof, "")]
    if name == "laplace":
        steps = m.grid_steps
        u = min(max((xc - lo_b) / (hi_b - lo_b) * steps, 0.0), float(steps))
        m0 = math.floor(u)
        f = u - m0
        lam = m.epsilon / steps
        one_plus_a = 1.0 + math.exp(-lam)

        def z_cdf(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            neg = np.exp(np.minimum(z, 0.0) * lam) / one_plus_a
            pos = 1.0 - np.exp(-(np.maximum(z, 0.0) + 1.0) * lam) / one_plus_a
            out: npt.NDArray[np.float64] = np.where(z < 0, neg, pos)
            return out

        def cdf(y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            out: npt.NDArray[np.float64] = (1.0 - f) * z_cdf(y - m0) + f * z_cdf(y - m0 - 1.0)
            return out

        return [("value (binned)", *_binned(values, cdf, -m.noise_cap, steps + m.noise_cap), "")]
    if name == "gaussian":
        return [("value (binned)", *_gaussian_binned(m, values, xc, derived), "")]
    # piecewise, hybrid above 0.61
    grid = {k: derived[k] for k in ("c", "w_in", "w_out", "step", "c_plus_1", "c_minus_1")}
    grid["q"] = int(derived["outside"], 16) / 2.0**64
    pm = _pm_cdf(grid, t)
    bound = int(derived["bound"])
    if name == "piecewise":
        return [("index (binned)", *_binned(values, pm, -bound - 1, bound), "")]
    alpha = int(derived["pm"], 16) / 2.0**64
    flip = int(derived["flip"], 16) / 2.0**64
    upper = (t + 1.0) * 0.5
    plus = upper * (1.0 - flip) + (1.0 - upper) * flip
    atom = m.duchi_index

    def mixture(k: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        duchi = np.where(k >= atom, 1.0, np.where(k >= -atom, 1.0 - plus, 0.0))
        return alpha * pm(k) + (1.0 - alpha) * duchi

    return [("index (binned)", *_binned(values, mixture, -bound - 1, bound), "")]


_EXACT_GAUSSIAN_REACH = 64
"""Below this noise parameter the kit sums the discrete Gaussian's pmf exactly."""


def _gaussian_binned(
    m: Any, values: npt.NDArray[np.int64], xc: float, derived: Mapping[str, Any]
) -> tuple[float, int]:
    """The report law ``M + Z`` binned: M the stochastic rounding of u, Z the discrete
    Gaussian of variance parameter ``sigma2 = t m`` (the served ``derived``)."""
    lo_b, hi_b = m.bounds
    steps = int(derived["grid_steps"])
    sigma2 = int(derived["t"]) * int(derived["m"])
    sigma = math.sqrt(sigma2)
    u = min(max((xc - lo_b) / (hi_b - lo_b) * steps, 0.0), float(steps))
    m0 = math.floor(u)
    f = u - m0
    if sigma < _EXACT_GAUSSIAN_REACH:
        reach = math.ceil(40.0 * sigma) + 2
        support = np.arange(-reach, reach + 1, dtype=np.float64)
        pmf = np.exp(-(support * support) / (2.0 * sigma2))
        cumulative = np.cumsum(pmf / pmf.sum())

        def z_cdf(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            at = np.clip(np.floor(z) + reach, -1, 2 * reach).astype(np.int64)
            out: npt.NDArray[np.float64] = np.where(at < 0, 0.0, cumulative[np.maximum(at, 0)])
            return out
    else:
        # Pr[Z <= k] = Phi((k + 1/2) / sigma) to within 1 / (24 sigma^2) (the midpoint
        # rule's error on the Gaussian), far below what any sample size here can see.
        erfc = np.vectorize(math.erfc, otypes=[np.float64])

        def z_cdf(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            out: npt.NDArray[np.float64] = 0.5 * erfc(
                -(np.floor(z) + 0.5) / (sigma * math.sqrt(2.0))
            )
            return out

    def cdf(y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        out: npt.NDArray[np.float64] = (1.0 - f) * z_cdf(y - m0) + f * z_cdf(y - m0 - 1.0)
        return out

    return _binned(values, cdf, -m.noise_cap, steps + m.noise_cap)


def _nested(oracle: Any, raw: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A nested oracle's reports from raw bytes rows (n, size)."""
    dtype = oracle.report_dtype
    rows = np.ascontiguousarray(raw[:, : dtype.itemsize])
    return rows if dtype.subdtype is not None else rows.view(dtype).reshape(len(rows))


def _sub(name: str, tests: list[tuple[str, float, int, str]]) -> list[tuple[str, float, int, str]]:
    return [(f"{name}: {test}", stat, dof, detail) for test, stat, dof, detail in tests]


def _structured_tests(
    m: Any, reports: npt.NDArray[Any], x: Any
) -> list[tuple[str, float, int, str]]:
    """The law of a composed mechanism: its random choice (depth, view, sketch) and,
    given it, the nested oracle's law for the true item (or the enumerated cells)."""
    out: list[tuple[str, float, int, str]] = []
    if m.name == "hh":
        from .distribution import leaf_index

        leaf = int(leaf_index(np.array([float(x)]), m.bounds, m.resolution)[0])
        depth = reports["depth"].astype(np.int64)
        counts = np.bincount(depth, minlength=m.height + 1)[1:]
        out.append(("depth", *_chi2(counts, np.ones(m.height)), ""))
        for t, oracle in enumerate(m.oracles, start=1):
            rows = reports[depth == t]
            if len(rows) < 20:
                continue
            node = int(m.tree.node_of_leaf(np.array([leaf]), t)[0])
            if oracle.name == "olh":
                sub = np.empty(len(rows), dtype=oracle.report_dtype)
                for key in ("a", "b", "y"):
                    sub[key] = rows[key]
            else:
                sub = rows["y"].astype(oracle.report_dtype)
            out += _sub(f"depth {t}", _categorical_tests(oracle, sub, node))
        return out
    if m.name == "prefix_sketch":
        # cell = G g + y with G the global row (the estimation sketch's R_E rows first,
        # then R per level): the sketch by its weights, the row uniform within it (the
        # estimation sketch's folded onto R by R_E / R, which a client drawing only R of
        # them fails), and y relative to the value's bucket in that row as g-ary RR.
        g, rows, rows_e = m.g, m.rows, m.estimation_rows
        cell = reports.astype(np.int64)
        y, at = cell % g, cell // g
        level = at >= rows_e
        sketch = np.where(level, 1 + (at - rows_e) // rows, 0)
        row = np.where(level, (at - rows_e) % rows, at // max(1, rows_e // rows))
        raw = x.encode() if isinstance(x, str) else bytes(x)
        true = np.asarray(m.true_buckets(raw))[at]
        probs = np.full(g, (1.0 - m.p) / (g - 1))
        probs[0] = m.p
        shift = (y - true) % g
        return [
            ("sketch", *_chi2(np.bincount(sketch, minlength=m.sketches), m.weights), ""),
            ("row", *_chi2(np.bincount(row, minlength=rows), np.ones(rows)), ""),
            ("bucket vs hash", *_chi2(np.bincount(shift, minlength=g), probs), ""),
        ]
    view = reports["view"].astype(np.int64)
    weights = [v.weight for v in m.views]
    out.append(("view", *_chi2(np.bincount(view, minlength=len(weights)), weights), ""))
    for k, v in enumerate(m.views):
        rows = reports["payload"][view == k]
        if len(rows) < 20:
            continue
        sub = _nested(v.oracle, rows)
        out += _sub(f"view {v.name}", _categorical_tests(v.oracle, sub, int(v.labels[int(x)])))
    return out


def _supports_true(m: Any, reports: npt.NDArray[Any], x: int) -> int:
    """How many reports support the true item (the count the estimator debiases)."""
    if m.name in ("grr", "rr"):
        return int((reports.astype(np.int64) == x).sum())
    if m.name == "hr":
        row = np.uint64(x + 1)
        parity = np.bitwise_count(reports.astype(np.uint64) & row) & np.uint8(1)
        return int((parity == 0).sum())
    if m.name == "olh":
        a = reports["a"].astype(np.uint64)
        b = reports["b"].astype(np.uint64)
        true = ((a * np.uint64(x) + b) >> np.uint64(32)) * np.uint64(m.g) >> np.uint64(32)
        return int((reports["y"].astype(np.uint64) == true).sum())
    bits = unpack_rows(reports.reshape(len(reports), -1), m.domain_size)
    return int(bits[:, x].sum())


# --- the check -------------------------------------------------------------------------------
def check(
    plan_path: str | os.PathLike[str] | Mapping[str, Any],
    batch: bytes | str | os.PathLike[str],
    *,
    alpha: float = DEFAULT_ALPHA,
) -> Verdict:
    """Test a client's batch for a plan; see the module docstring."""
    if not 0.0 < alpha < 1.0:
        raise ParameterError(f"alpha must be in (0, 1), got {alpha!r}")
    plan = _load_plan(plan_path)
    data = batch if isinstance(batch, bytes) else Path(batch).read_bytes()
    total = sum(count for _, _, count in plan.inputs)
    problems: list[str] = []
    broken: set[str] = set()  # mechanisms with a framing problem
    try:
        blocks = wire.decode_batch(data, max_reports=total + 1, max_blocks=len(plan.inputs) + 1)
    except ProtocolError as exc:
        return Verdict((), alpha, alpha, (f"the batch does not decode: {exc}",))
    per_metric: dict[str, list[bytes]] = {}
    for i, block in enumerate(blocks):
        d = plan.definitions.get(block.metric)
        if d is None:
            problems.append(f"block {i}: metric {block.metric!r} is not in the plan")
            continue
        if block.fingerprint != d.fingerprint:
            problems.append(
                f"block {i} ({block.metric}): fingerprint {block.fingerprint} is not the "
                f"definition's {d.fingerprint}"
            )
            continue
        per_metric.setdefault(block.metric, []).append(block.reports)
    raw: list[tuple[str, Any, int, Mechanism, npt.NDArray[Any]]] = []
    for name, d in plan.definitions.items():
        m = d.mechanism_instance
        wanted = [(v, c) for metric, v, c in plan.inputs if metric == name]
        need = sum(c for _, c in wanted)
        payload = b"".join(per_metric.get(name, []))
        size = m.report_dtype.itemsize
        if len(payload) != need * size:
            got = len(payload) // size
            problems.append(f"metric {name} ({m.name}): {got} reports, the plan asks for {need}")
            broken.add(m.name)
            continue
        reports = np.frombuffer(payload, dtype=m.report_dtype)
        valid = m.check_reports(reports)
        if not bool(np.all(valid)):
            first = int(np.argmin(valid))
            problems.append(
                f"metric {name} ({m.name}): report {first} is malformed: {m.report_rule}"
            )
            broken.add(m.name)
            continue
        start = 0
        for v, c in wanted:
            raw.append((name, v, c, m, reports[start : start + c]))
            start += c
    found: list[tuple[str, str, Any, int, str, float, int, str]] = []
    pooled: dict[str, list[int]] = {}
    for name, v, c, m, reports in raw:
        d = plan.definitions[name]
        derived = d.to_dict()["derived"]
        if d.kind is MetricKind.CATEGORICAL:
            x = int(d.encode_value(v))
            tests = _categorical_tests(m, reports, x)
            support = pooled.setdefault(name, [0, 0])
            support[0] += _supports_true(m, reports, x)
            support[1] += c
        elif d.kind is MetricKind.NUMERIC:
            tests = _numeric_tests(m, reports, float(v), derived)
        else:
            tests = _structured_tests(m, reports, d.kind_spec.encode(d, v)[0])
        for test, stat, dof, detail in tests:
            found.append((name, m.name, v, c, test, stat, dof, detail))
    for name, (hits, n) in pooled.items():
        # Pooled over the metric's inputs, the rate at which reports support the true
        # item must be p: one degree of freedom, the most power against a wrong p or g.
        m = plan.definitions[name].mechanism_instance
        p = m.p  # type: ignore[attr-defined]
        stat, dof = _chi2([hits, n - hits], [p, 1.0 - p])
        found.append((name, m.name, "(all inputs)", n, "true item supported", stat, dof, ""))
    threshold = alpha / max(1, len(found))
    results = []
    for name, mech, v, c, test, stat, dof, detail in found:
        p = chi2_sf(stat, dof) if math.isfinite(stat) else 0.0
        results.append(TestResult(name, mech, v, c, test, stat, dof, p, p >= threshold, detail))
    return Verdict(tuple(results), alpha, threshold, tuple(problems), tuple(sorted(broken)))


# --- a deliberately broken client, for the kit's own tests -------------------------------------
def textbook_olh(
    m: Mechanism, values: npt.NDArray[Any], rng: np.random.Generator
) -> npt.NDArray[Any]:
    """OLH with the textbook hash ``((a v + b) mod (2^61 - 1)) mod g``: well-formed, wrong."""
    prime = (1 << 61) - 1
    g = m.g  # type: ignore[attr-defined]
    p = m.p  # type: ignore[attr-defined]
    out = np.empty(values.size, dtype=m.report_dtype)
    for i, v in enumerate(values.tolist()):
        a = int(rng.integers(1, prime))
        b = int(rng.integers(0, prime))
        y = ((a * v + b) % prime) % g
        if rng.random() >= p:
            other = int(rng.integers(0, g - 1))
            y = other + (other >= y)
        out[i] = (a, b, y)
    return out


def wrong_step_piecewise(step_factor: float = 0.5) -> Override:
    """Piecewise whose grid step is off by ``step_factor`` (indices scaled by its inverse)."""

    def perturb(
        m: Mechanism, values: npt.NDArray[Any], rng: np.random.Generator
    ) -> npt.NDArray[Any]:
        right = np.asarray(m.perturb(values, rng), dtype=np.float64)
        bound = 2**19
        return np.clip(np.round(right / step_factor), -bound, bound).astype(m.report_dtype)

    return perturb


__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_REPORTS",
    "EXACTNESS_NOTE",
    "TestResult",
    "Verdict",
    "check",
    "chi2_sf",
    "make_plan",
    "respond",
    "textbook_olh",
    "write_plan",
    "wrong_step_piecewise",
]
_ = Sequence
