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
4. Verification (docs/protocol.md): the plan's ``verify`` holds every plan metric as served
   and, per 64-bit threshold of its ``derived``, the metric with that threshold lying
   (:func:`served_for_verification`). The client answers which it accepted
   (``check --accepted accepted.json``, ``{"accepted": [id, ...]}``); every lie accepted
   fails the mechanism and is named (``grr-0_5: derived.keep``), an honest definition
   refused or no answer is a problem. :func:`python_accepts` is ldpkit's Python client's
   answer.
5. The device script (:func:`device_script`, :mod:`ldpkit.conformance_device`): the
   client's real reporter reports the plan's ``device`` steps on one device and answers
   the steps refused and the batches sent (``check --device device.json``); a missing
   budget ledger or memo fails as ``device ledger`` / ``device memo``, each problem named.
   ``ldpkit.client.conformance.device_answer`` is ldpkit's Python client's answer.

What no statistical test can see, a sampler right in distribution but not exact in its
far tails, is covered by the protocol's test vectors and exactness rules instead
(docs/protocol.md); the verdict says so.

:func:`respond` builds the batch ldpkit's own Python client gives for a plan;
``perturb_override`` replaces a mechanism's sampler, so that a deliberately broken
client can be fed to the kit.
"""

from __future__ import annotations

import copy
import json
import math
import os
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from . import wire
from .conformance_device import device_problems
from .errors import ParameterError, ProtocolError
from .mechanisms import REGISTERED, Mechanism, mechanism_class
from .mechanisms._conformance import chi2, chi2_sf
from .mechanisms.local_hashing import OptimizedLocalHashing
from .metrics import MetricDefinition
from .randomness import KEY_SIZE, KeyedGenerator, os_generator, resolve_rng
from .wire import Block

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

Override = Callable[[Mechanism, npt.NDArray[Any], np.random.Generator], npt.NDArray[Any]]


def make_plan(reports_per_input: int = DEFAULT_REPORTS) -> dict[str, Any]:
    """The plan: definitions as served, and the inputs to report, in order (every registered
    mechanism's :attr:`~ldpkit.mechanisms.Mechanism.conformance_cases`)."""
    if isinstance(reports_per_input, bool) or not isinstance(reports_per_input, int):
        raise ParameterError("reports_per_input must be an integer")
    if not 200 <= reports_per_input <= 1_000_000:
        raise ParameterError(f"reports_per_input must be in 200..1000000, got {reports_per_input}")
    metrics = []
    inputs = []
    for case in (case for name in REGISTERED for case in mechanism_class(name).conformance_cases):
        definition = MetricDefinition.from_dict(case.metric, copy.deepcopy(case.spec))
        metrics.append(definition.to_dict())
        for v in copy.deepcopy(case.inputs):
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
        "verify_how": (
            "Take each of `verify` as GET /v1/metrics would serve it and check it as the "
            "client checks every served definition (docs/protocol.md, Verification); write "
            'the ids of those it accepts as JSON {"accepted": [id, ...]}.'
        ),
        "verify": [{"id": vid, "definition": d} for vid, d, _ in served_for_verification(metrics)],
        "device_how": DEVICE_HOW,
        "device": device_script(),
    }


DEVICE_HOW = (
    "Run the client's real reporter once on a fresh device (empty state, memoization on, "
    "the `device` definition given to it as served, offline, its wall clock reading each "
    "step's `at`): report each step's `value` in order, noting the steps refused for the "
    "budget; then deliver what it queued and keep every batch body it sends. Write "
    '{"refused": [step index, ...], "batches": [hex of each body, ...]}.'
)
DEVICE_SPEC: dict[str, Any] = {
    "categories": ["a", "b", "c", "d", "e", "f"],
    "mechanism": "olh",  # 20-byte reports: two fresh ones are the same with chance 2^-128
    "epsilon": 1.0,
    "budget": 2.0,
    "budget_period": "day",
    "bucket": "hour",
}
DEVICE_STEPS: tuple[tuple[int, str], ...] = (
    # day 0, hour 0: a fresh report of "a", then two repeats (memoized, not queued again)
    (0, "a"),
    (60, "a"),
    (120, "a"),
    # hour 1: "a" again (queued again, the same bytes), "b" fresh (the budget is spent),
    # "c" refused
    (3610, "a"),
    (3620, "b"),
    (3630, "c"),
    # hour 2: "d" refused; "a" and "b" queued again with their own bytes
    (7210, "d"),
    (7220, "a"),
    (7230, "b"),
    # day 1: a new budget and memo window: "c", "d" fresh, "e" and "a" refused
    (86410, "c"),
    (86420, "d"),
    (86430, "e"),
    (86440, "a"),
)


def device_script() -> dict[str, Any]:
    """The plan's ``device`` script: one definition (OLH, epsilon 1, a budget of 2 per day,
    hourly buckets) and the values a device reports under it at given times, so that a
    client's real reporter shows its budget ledger and its memoization
    (docs/protocol.md, "What a client keeps on the device")."""
    definition = MetricDefinition.from_dict("device-olh", copy.deepcopy(DEVICE_SPEC))
    return {
        "definition": definition.to_dict(),
        "steps": [{"at": PLAN_BUCKET + at, "value": v} for at, v in DEVICE_STEPS],
    }


LIE_FREE_KEYS = frozenset({"seed"})
"""Constants the kit does not lie about: the hash seed is in the fingerprint (a lie is a
fingerprint mismatch)."""
CHOSEN_KEYS = frozenset({"t", "m"})
"""Integers the kit lies about only as a whole: the Gaussian's ``t`` and ``m`` are served
choices (docs/protocol.md, Verification: more noise than calibrated is no privacy loss),
whose lie is ``t = m = 1`` (the mechanism's own)."""


def served_for_verification(
    metrics: list[dict[str, Any]],
) -> list[tuple[str, dict[str, Any], str | None]]:
    """The definitions the kit serves a client to verify: ``(id, definition, lie)``, every
    plan metric as served (``lie`` None: it must be accepted) and, for each of its 64-bit
    thresholds (a view's ``until`` included), the metric serving that threshold at the
    extreme further from its own (``ffff...`` for one below one half, else ``0000...``): a
    coin that always or never falls, which spends unbounded epsilon (``lie``: the
    constant's path; it must be refused); for each of its other numbers (OLH's ``g``, a
    view's size and first label, a grid's bound, a cap, a float), the metric serving it
    changed (:func:`_other_number`); and the mechanism's own lies about other constants
    (:meth:`~ldpkit.mechanisms.Mechanism.conformance_lies`). Ids are ``v000``, ``v001``,
    ... in that order, naming nothing."""
    out: list[tuple[dict[str, Any], str | None]] = []
    for metric in metrics:
        out.append((metric, None))
        for path, value in _thresholds(metric.get("derived"), ("derived",)):
            lie = "0" * 16 if int(value, 16) >= 1 << 63 else "f" * 16
            out.append((_replaced(metric, path, lie), _path_name(path)))
        for path, number in _numbers(metric.get("derived"), ("derived",)):
            out.append((_replaced(metric, path, _other_number(number)), _path_name(path)))
        lies = mechanism_class(metric["resolved_mechanism"]).conformance_lies(metric["derived"])
        for what, derived in lies:
            out.append(({**copy.deepcopy(metric), "derived": derived}, what))
    return [(f"v{i:03d}", d, lie) for i, (d, lie) in enumerate(out)]


def _thresholds(value: Any, path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
    """Every 64-bit threshold (16 hex digits) under ``value``, with its path."""
    if isinstance(value, dict):
        return [
            found
            for key, v in value.items()
            if key not in LIE_FREE_KEYS
            for found in _thresholds(v, (*path, key))
        ]
    if isinstance(value, list):
        return [found for i, v in enumerate(value) for found in _thresholds(v, (*path, i))]
    if isinstance(value, str) and len(value) == 16 and all(c in "0123456789abcdef" for c in value):
        return [(path, value)]
    return []


def _numbers(value: Any, path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], int | float]]:
    """Every integer and float under ``value`` (of a list of numbers, such as a view's
    labels or the sketch weights, the first), with its path; not :data:`CHOSEN_KEYS`."""
    if isinstance(value, dict):
        return [
            found
            for key, v in value.items()
            if key not in LIE_FREE_KEYS | CHOSEN_KEYS
            for found in _numbers(v, (*path, key))
        ]
    if isinstance(value, list):
        if value and all(isinstance(v, int | float) for v in value):
            return _numbers(value[0], (*path, 0))
        return [found for i, v in enumerate(value) for found in _numbers(v, (*path, i))]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [(path, value)]
    return []


def _other_number(number: int | float) -> int | float:
    """A lie about a served number: an integer one more (a label, a size, a bound, a
    bucket count), a float a relative 1e-6 off (beyond the 1e-9 tolerance)."""
    return number + 1 if isinstance(number, int) else number * (1.0 + 1e-6)


def _replaced(metric: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(metric)
    target: Any = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


def _path_name(path: tuple[Any, ...]) -> str:
    """``("derived", "views", 0, "keep")`` as ``derived.views[0].keep``."""
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")


def python_accepts(plan_path: str | os.PathLike[str] | Mapping[str, Any]) -> list[str]:
    """The ids of the plan's ``verify`` definitions ldpkit's Python client accepts: those
    whose fingerprint it reproduces and whose served constants are its own
    (:meth:`MetricDefinition.served_differences`)."""
    data = _plan_data(plan_path)
    accepted = []
    for item in data.get("verify", ()):
        served = item["definition"]
        try:
            d = MetricDefinition.from_served(served["name"], served, served["fingerprint"])
        except ParameterError:
            continue
        if d.fingerprint == served["fingerprint"] and not d.served_differences(served):
            accepted.append(item["id"])
    return accepted


def write_plan(path: str | os.PathLike[str], reports_per_input: int = DEFAULT_REPORTS) -> Path:
    out = Path(path)
    out.write_text(json.dumps(make_plan(reports_per_input), indent=1, ensure_ascii=False) + "\n")
    return out


@dataclass(frozen=True)
class _Plan:
    definitions: dict[str, MetricDefinition]
    inputs: list[tuple[str, Any, int]]
    bucket: int

    def wanted(self, metric: str) -> list[tuple[Any, int]]:
        """The metric's inputs and their counts, in order."""
        return [(v, c) for name, v, c in self.inputs if name == metric]


def _plan_data(plan: str | os.PathLike[str] | Mapping[str, Any]) -> Mapping[str, Any]:
    data = plan if isinstance(plan, Mapping) else json.loads(Path(plan).read_text())
    if not isinstance(data, Mapping) or data.get("ldpkit_conformance") != PLAN_FORMAT:
        raise ParameterError("not an ldpkit conformance plan (format 1)")
    return data


def _load_plan(plan: str | os.PathLike[str] | Mapping[str, Any]) -> _Plan:
    data = _plan_data(plan)
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


def respond(
    plan_path: str | os.PathLike[str] | Mapping[str, Any],
    perturb_override: Mapping[str, Override] | None = None,
    *,
    rng: np.random.Generator | None = None,
    one_at_a_time: bool = False,
) -> bytes:
    """The sealed (v2) wire batch ldpkit's Python client gives for a plan (one block per metric).

    ``perturb_override`` maps a mechanism name to ``(mechanism, values, rng) -> reports``, used
    instead of the mechanism's own sampler. By default each metric's values are perturbed in one
    vectorised call under ``rng`` (``Reporter.simulate``'s path); ``one_at_a_time=True`` makes every
    report alone, under a generator of its own keyed from the OS CSPRNG or from ``rng``'s bytes
    when given: ``perturb`` of one value, which is the device's per-value path
    (``perturb_value``, what ``Reporter.report`` runs) for the bitmap mechanisms only; the
    client's own path is judged by tests/shared/test_conformance.py's device-path test.
    """
    plan = _load_plan(plan_path)
    generator = resolve_rng(rng)
    one_key = _key_source(generator, seeded=rng is not None) if one_at_a_time else None
    overrides = dict(perturb_override or {})
    blocks = []
    for name, definition in plan.definitions.items():
        values = [
            definition.encode_value(v) for v, count in plan.wanted(name) for _ in range(count)
        ]
        if not values:
            continue
        m = definition.mechanism_instance
        # (an object array of strings: numpy's own would drop their trailing NULs)
        array = np.array(values, dtype=object if isinstance(values[0], bytes | str) else None)
        fn = overrides.get(m.name)
        made = (
            fn(m, array, generator) if fn is not None else _perturbed(m, array, generator, one_key)
        )
        reports = _as_reports(made, m.report_dtype)
        blocks.append(wire.sealed_block(name, definition.fingerprint, plan.bucket, reports))
    return wire.encode_sealed_batch(os.urandom(wire.ID_SIZE), blocks)


def _as_reports(made: Any, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """``made`` as an array of ``dtype`` reports. A report of several bytes (a bitmap of
    d > 8 bits) comes as an (n, bytes) array of its base: ``asarray`` with the subarray
    dtype would broadcast it to (n, bytes, bytes)."""
    if dtype.subdtype is not None:
        return np.ascontiguousarray(made, dtype=dtype.base)
    return np.asarray(made, dtype=dtype)


def _perturbed(
    m: Mechanism,
    array: npt.NDArray[Any],
    generator: np.random.Generator,
    one_key: Callable[[], np.random.Generator] | None,
) -> Any:
    """The mechanism's reports of ``array``: in one call, or one at a time (``one_key``
    giving each report's generator)."""
    if one_key is None:
        return m.perturb(array, generator)
    return np.concatenate(
        [np.atleast_1d(m.perturb(array[i : i + 1], one_key())) for i in range(len(array))]
    )


def _key_source(
    generator: np.random.Generator, *, seeded: bool
) -> Callable[[], np.random.Generator]:
    """Each report's own generator: keyed from ``generator``'s bytes, or the OS CSPRNG's."""
    return (lambda: KeyedGenerator(generator.bytes(KEY_SIZE))) if seeded else os_generator


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

    def line(self) -> str:
        """The test as one line of :meth:`Verdict.render`."""
        return (
            f"    {self.metric} value={self.value!r} n={self.n} {self.test}: "
            f"chi2={self.statistic:.4g} dof={self.dof} p={self.p_value:.3g}"
            + (f" ({self.detail})" if self.detail else "")
        )


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
    lies_accepted: tuple[str, ...] = field(default=())
    """The lying definitions the client accepted, as ``"<metric>: <constant>"``."""
    device: tuple[str, ...] = field(default=())
    """What the device script showed wrong, each ``"LEDGER: ..."`` or ``"MEMO: ..."``
    (:mod:`ldpkit.conformance_device`)."""

    @property
    def passed(self) -> bool:
        return (
            not self.problems
            and not self.lies_accepted
            and not self.device
            and all(t.passed for t in self.tests)
        )

    @property
    def failing_mechanisms(self) -> tuple[str, ...]:
        names = {t.mechanism for t in self.tests if not t.passed} | set(self.broken_mechanisms)
        return tuple(sorted(names))

    @property
    def failing_device(self) -> tuple[str, ...]:
        """``"ledger"`` and/or ``"memo"``: what the device script found missing, or
        ``"answer"`` when there is no answer to read (``FAIL: device answer``)."""
        named = {p.split(":", 1)[0].lower() for p in self.device}
        return tuple(sorted({n if n in ("ledger", "memo") else "answer" for n in named}))

    def render(self, *, verbose: bool = False) -> str:
        lines = self._table(verbose)
        lines.extend(f"problem: {p}" for p in self.problems)
        lines.extend(
            f"ACCEPTED A LYING DEFINITION: {lie} (docs/protocol.md, Verification)"
            for lie in self.lies_accepted
        )
        lines.extend(f"DEVICE: {p}" for p in self.device)
        lines.append(
            f"{len(self.tests)} tests; a test fails below p = {self.threshold:.3g} "
            f"(alpha {self.alpha:g} / {len(self.tests)} tests)"
        )
        if self.passed:
            lines.append("PASS: every mechanism's reports follow its exact output law.")
        else:
            device = [f"device {what}" for what in self.failing_device]
            failing = ", ".join([*self.failing_mechanisms, *device]) or "(see the problems above)"
            lines.append(f"FAIL: {failing}")
        lines.append(textwrap.fill(EXACTNESS_NOTE, 92))
        return "\n".join(lines)

    def _table(self, verbose: bool) -> list[str]:
        """A line per mechanism, with its failed tests (every test when verbose) below."""
        by_mech: dict[str, list[TestResult]] = {}
        for t in self.tests:
            by_mech.setdefault(t.mechanism, []).append(t)
        width = max([len("mechanism"), *(len(m) for m in by_mech)])
        lines = [f"{'mechanism':<{width}} {'tests':>5} {'failed':>6} {'smallest p':>11}  verdict"]
        for mech, tests in by_mech.items():
            failed = [t for t in tests if not t.passed]
            smallest = min(t.p_value for t in tests)
            lines.append(
                f"{mech:<{width}} {len(tests):>5} {len(failed):>6} {smallest:>11.3g}  "
                + ("FAIL" if failed else "pass")
            )
            lines.extend(t.line() for t in (tests if verbose else failed))
        return lines


@dataclass(frozen=True)
class _Sample:
    """The reports a client made for one input of one metric."""

    metric: str
    value: Any
    mechanism: Mechanism
    reports: npt.NDArray[Any]


_Found = tuple[str, str, Any, int, str, float, int, str]
"""(metric, mechanism, value, n, test, statistic, dof, detail) of one test."""


def check(
    plan_path: str | os.PathLike[str] | Mapping[str, Any],
    batch: bytes | str | os.PathLike[str],
    *,
    alpha: float = DEFAULT_ALPHA,
    accepted: Iterable[str] | str | os.PathLike[str] | None = None,
    device: Mapping[str, Any] | str | os.PathLike[str] | None = None,
) -> Verdict:
    """Test a client's batch for a plan, which of the plan's ``verify`` definitions it
    ``accepted`` (ids, or the path of its ``{"accepted": [...]}``) and its ``device`` answer
    to the plan's device script (``{"refused", "batches"}`` or its path); see the module
    docstring. Without ``accepted`` or ``device`` the kit fails: every client must do both."""
    if not 0.0 < alpha < 1.0:
        raise ParameterError(f"alpha must be in (0, 1), got {alpha!r}")
    plan = _load_plan(plan_path)
    data = _plan_data(plan_path)
    lies, verification = _verification(data, accepted)
    verdict = _check_batch(plan, batch, alpha)
    return Verdict(
        verdict.tests,
        alpha,
        verdict.threshold,
        (*verdict.problems, *verification),
        tuple(sorted({*verdict.broken_mechanisms, *(m for m, _ in lies)})),
        tuple(lie for _, lie in lies),
        tuple(device_problems(data["device"], device)) if "device" in data else (),
    )


def _verification(
    data: Mapping[str, Any], accepted: Iterable[str] | str | os.PathLike[str] | None
) -> tuple[list[tuple[str, str]], list[str]]:
    """The lying definitions accepted, as (mechanism, "metric: constant"), and the problems
    of the answer (none given, an honest definition refused)."""
    served = served_for_verification(list(data["metrics"]))
    if accepted is None:
        return [], ["no answer to the plan's `verify` definitions (check --accepted FILE)"]
    if isinstance(accepted, str | os.PathLike):
        try:
            answer = json.loads(Path(accepted).read_text())
            ids = set(answer["accepted"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return [], [f'the verification answer is not {{"accepted": [id, ...]}}: {exc}']
    else:
        ids = set(accepted)
    lies: list[tuple[str, str]] = []
    problems: list[str] = []
    for vid, definition, lie in served:
        name = definition["name"]
        if lie is not None and vid in ids:
            lies.append((definition["resolved_mechanism"], f"{name}: {lie}"))
        elif lie is None and vid not in ids:
            problems.append(f"refused the honest definition of {name} ({vid})")
    return lies, problems


def _check_batch(plan: _Plan, batch: bytes | str | os.PathLike[str], alpha: float) -> Verdict:
    """The reports' tests (:func:`check` without the verification)."""
    data = batch if isinstance(batch, bytes) else Path(batch).read_bytes()
    total = sum(count for _, _, count in plan.inputs)
    try:
        blocks = wire.decode_batch(data, max_reports=total + 1, max_blocks=len(plan.inputs) + 1)
    except ProtocolError as exc:
        return Verdict((), alpha, alpha, (f"the batch does not decode: {exc}",))
    problems: list[str] = []
    broken: set[str] = set()  # mechanisms with a framing problem
    payloads = _payloads(plan, blocks, problems)
    samples = [
        s for name in plan.definitions for s in _samples(plan, name, payloads, problems, broken)
    ]
    found = _laws(plan, samples)
    threshold = alpha / max(1, len(found))
    results = []
    for name, mech, v, c, test, stat, dof, detail in found:
        p = chi2_sf(stat, dof) if math.isfinite(stat) else 0.0
        results.append(TestResult(name, mech, v, c, test, stat, dof, p, p >= threshold, detail))
    return Verdict(tuple(results), alpha, threshold, tuple(problems), tuple(sorted(broken)))


def _payloads(plan: _Plan, blocks: list[Block], problems: list[str]) -> dict[str, bytes]:
    """Each planned metric's report bytes, its blocks joined; a block of another metric or
    fingerprint is a problem."""
    per_metric: dict[str, list[bytes]] = {}
    for i, block in enumerate(blocks):
        d = plan.definitions.get(block.metric)
        if d is None:
            problems.append(f"block {i}: metric {block.metric!r} is not in the plan")
        elif block.fingerprint != d.fingerprint:
            problems.append(
                f"block {i} ({block.metric}): fingerprint {block.fingerprint} is not the "
                f"definition's {d.fingerprint}"
            )
        else:
            per_metric.setdefault(block.metric, []).append(block.reports)
    return {name: b"".join(parts) for name, parts in per_metric.items()}


def _samples(
    plan: _Plan, name: str, payloads: dict[str, bytes], problems: list[str], broken: set[str]
) -> list[_Sample]:
    """A metric's reports cut by input, if there are as many as planned and all are
    well-formed (else a problem, and the mechanism is broken)."""
    m = plan.definitions[name].mechanism_instance
    wanted = plan.wanted(name)
    need = sum(c for _, c in wanted)
    payload = payloads.get(name, b"")
    size = m.report_dtype.itemsize
    if len(payload) != need * size:
        got = len(payload) // size
        problems.append(f"metric {name} ({m.name}): {got} reports, the plan asks for {need}")
        broken.add(m.name)
        return []
    reports = np.frombuffer(payload, dtype=m.report_dtype)
    valid = m.check_reports(reports)
    if not bool(np.all(valid)):
        first = int(np.argmin(valid))
        problems.append(f"metric {name} ({m.name}): report {first} is malformed: {m.report_rule}")
        broken.add(m.name)
        return []
    ends = np.cumsum([c for _, c in wanted])
    return [
        _Sample(name, v, m, reports[end - c : end])
        for (v, c), end in zip(wanted, ends, strict=True)
    ]


def _laws(plan: _Plan, samples: list[_Sample]) -> list[_Found]:
    """Every sample's tests against its mechanism's law (:meth:`Mechanism.conformance_tests`),
    then, per metric, the rate at which reports support the true item, pooled over its
    inputs: one degree of freedom, the most power against a wrong p or g."""
    found: list[_Found] = []
    pooled: dict[str, tuple[int, int, float]] = {}
    for s in samples:
        d = plan.definitions[s.metric]
        m, x, n = s.mechanism, d.encode_value(s.value), len(s.reports)
        for test, stat, dof, detail in m.conformance_tests(s.reports, x, d.to_dict()["derived"]):
            found.append((s.metric, m.name, s.value, n, test, stat, dof, detail))
        support = m.conformance_support(s.reports, x)
        if support is not None:
            hits, total, _ = pooled.get(s.metric, (0, 0, 0.0))
            pooled[s.metric] = (hits + support[0], total + n, support[1])
    for name, (hits, n, p) in pooled.items():
        stat, dof = chi2([hits, n - hits], [p, 1.0 - p])
        mech = plan.definitions[name].mechanism_instance.name
        found.append((name, mech, "(all inputs)", n, "true item supported", stat, dof, ""))
    return found


def textbook_olh(
    m: Mechanism, values: npt.NDArray[Any], rng: np.random.Generator
) -> npt.NDArray[Any]:
    """OLH with the textbook hash ``((a v + b) mod (2^61 - 1)) mod g``: well-formed, wrong."""
    if not isinstance(m, OptimizedLocalHashing):
        raise ParameterError(f"textbook_olh samples OLH reports, not {m.name}'s")
    prime = (1 << 61) - 1
    out = np.empty(values.size, dtype=m.report_dtype)
    for i, v in enumerate(values.tolist()):
        a = int(rng.integers(1, prime))
        b = int(rng.integers(0, prime))
        y = ((a * v + b) % prime) % m.g
        if rng.random() >= m.p:
            other = int(rng.integers(0, m.g - 1))
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
    "device_problems",
    "device_script",
    "make_plan",
    "respond",
    "textbook_olh",
    "write_plan",
    "wrong_step_piecewise",
]
