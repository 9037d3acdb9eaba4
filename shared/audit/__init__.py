"""Empirical privacy audit: a statistically sound lower bound on a mechanism's epsilon.

An epsilon-LDP mechanism M satisfies, for every pair of inputs x, x' and every set of
outputs E,

    P(M(x) in E) <= e^eps P(M(x') in E).

So for any event E, ``log(P(E | x) / P(E | x'))`` is a lower bound on the epsilon M
really gives. :func:`audit` samples M's reports for pairs of inputs and estimates that
ratio, replacing the two probabilities by one-sided Clopper-Pearson bounds (a lower
bound on ``P(E | x)``, an upper bound on ``P(E | x')``), so that with probability at
least ``confidence``, over the sampling, *every* bound it reports holds at once
(Bonferroni over all the events and pairs tested). Its result ``epsilon_lower_bound`` is
then below the true epsilon with probability at least ``confidence``.

- If the lower bound exceeds the claimed epsilon, the mechanism violates its claim (at
  the stated confidence): :attr:`AuditResult.passed` is False.
- If it does not, nothing is proved: the audit only sees the events it tries, and a
  finite sample. Passing is evidence that no gross violation exists, not a proof of
  privacy (that is what the exact checks and proofs in the mechanism modules are for).

How (docs/audit.md has the whole method and the measured tightness): reports are drawn
for each input and split in two independent parts. On the *selection* part reports are
mapped to cells (:mod:`ldpkit.audit.cells`, from what each mechanism says about its own
reports: the audit switches on no mechanism's name, and ``events`` gives other cells),
candidate events (unions of cells) are scored, and the best ``max_events`` are kept. On
the *counting* part each kept event gives ``log(L / U)`` (``log((L - delta) / U)`` for an
(epsilon, delta) mechanism), ``L`` and ``U`` Clopper-Pearson bounds at level
``(1 - confidence) / (2 m)``: the events being fixed before the counting reports are
seen, the union bound over the ``2 m`` one-sided bounds gives the overall confidence.

The Clopper-Pearson bounds (:mod:`ldpkit.audit.bounds`) need no scipy. A deliberately
broken mechanism to see the audit fail: :func:`ldpkit.testing.mislabelled`.

References
----------
C. J. Clopper, E. S. Pearson, "The use of confidence or fiducial limits illustrated in
the case of the binomial", Biometrika 26(4), 1934.
M. Jagielski, J. Ullman, A. Oprea, "Auditing differentially private machine learning:
how private is private SGD?", NeurIPS 2020 (Clopper-Pearson epsilon lower bounds).
Z. Ding, Y. Wang, G. Wang, D. Zhang, D. Kifer, "Detecting violations of differential
privacy", ACM CCS 2018 (choosing events on a separate sample).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from ..kinds import kind_or_default
from ..mechanisms import FrequencyOracle, Mechanism, NumericMechanism
from ..randomness import resolve_rng
from .bounds import clopper_pearson_lower, clopper_pearson_upper
from .cells import Partition, binned_partition, default_partition, generic_keys, list_description

__all__ = ["AuditResult", "EventBound", "audit", "clopper_pearson_lower", "clopper_pearson_upper"]

EventMap = Callable[[npt.NDArray[Any], Any, Any], npt.NDArray[Any]]
"""``events(reports, x, x_prime) -> keys``: one key per report. Integer keys are the
cells themselves; float keys are cut into quantile bins."""

MAX_CELLS = 4096
"""Refuse partitions with more distinct cells than this in the selection sample."""


@dataclass(frozen=True)
class EventBound:
    """One tested event: its counts and the bounds they give."""

    x: Any
    x_prime: Any
    event: str
    count_x: int
    count_x_prime: int
    n: int
    """Counting reports per input."""
    p_lower: float
    """Clopper-Pearson lower bound on ``P(event | x)``."""
    p_upper: float
    """Clopper-Pearson upper bound on ``P(event | x')``."""
    delta: float = 0.0
    """The mechanism's delta: ``P(E | x) <= e^eps P(E | x') + delta``."""

    @property
    def epsilon_bound(self) -> float:
        """``log((p_lower - delta) / p_upper)`` (``-inf`` when that is not positive)."""
        if self.p_lower - self.delta <= 0.0:
            return -math.inf
        return math.log((self.p_lower - self.delta) / self.p_upper)


@dataclass(frozen=True)
class AuditResult:
    """What :func:`audit` found.

    ``epsilon_lower_bound`` holds with probability at least ``confidence`` (it is the largest of the
    tested bounds, or 0); ``passed`` says whether it is at most the claimed epsilon. A failed audit
    proves a violation at that confidence; a passed one proves nothing beyond "no violation seen".
    """

    mechanism: str
    claimed_epsilon: float
    epsilon_lower_bound: float
    witness: tuple[Any, Any] | None
    """The ordered pair (x, x') of the strongest event, ``P(E | x) > P(E | x')``."""
    event: str | None
    """The strongest event, described."""
    samples: int
    """Reports drawn per input (selection and counting)."""
    counting_samples: int
    """Of which used for the counts (the rest chose the events)."""
    inputs: tuple[Any, ...]
    confidence: float
    bounds: tuple[EventBound, ...]
    """Every event tested, strongest first."""
    seconds: float
    claimed_delta: float = 0.0
    """The mechanism's delta (0 for pure epsilon-LDP mechanisms)."""

    @property
    def passed(self) -> bool:
        return self.epsilon_lower_bound <= self.claimed_epsilon

    @property
    def events_tested(self) -> int:
        return len(self.bounds)

    def __str__(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        claim = f"eps {self.claimed_epsilon:g}" + (
            f", delta {self.claimed_delta:g}" if self.claimed_delta else ""
        )
        return (
            f"{self.mechanism}: claimed {claim}, epsilon lower bound "
            f"{self.epsilon_lower_bound:.4f} at {self.confidence:g} confidence ({verdict}); "
            f"witness {self.witness}, event {self.event}; {self.samples} samples per input, "
            f"{self.events_tested} events tested"
        )


def _default_inputs(mechanism: Mechanism) -> list[Any]:
    if isinstance(mechanism, FrequencyOracle):
        d = mechanism.domain_size
        return list(range(d)) if d <= 6 else sorted({0, 1, d // 2, d - 1})
    bounds = getattr(mechanism, "bounds", None)  # numeric and distribution mechanisms
    if bounds is not None:
        lo, hi = bounds
        return [lo, hi, (lo + hi) / 2.0]
    if inputs := kind_or_default(mechanism.kind).audit_inputs:  # strings: "", "a", "b"
        return list(inputs)
    raise ParameterError(f"give input_pairs for a mechanism of kind {mechanism.kind!r}")


def _candidate_sets(
    num: npt.NDArray[np.int64], den: npt.NDArray[np.int64], ordered: bool
) -> npt.NDArray[np.bool_]:
    """Candidate events as rows of cell masks (the full set and the empty set excluded).
    Unordered cells: the level sets of the smoothed empirical ratio ``num / den`` (its top 1, 2, ...
    cells). Ordered cells (bins of a number): every run of adjacent cells, tails and intervals;
    level sets of many small bins would chase the selection sample's noise."""
    size = num.size
    if ordered and size > 2:
        start, stop = np.triu_indices(size + 1, k=1)
        proper = (stop - start) < size
        start, stop = start[proper], stop[proper]
        index = np.arange(size)
        return (index[None, :] >= start[:, None]) & (index[None, :] < stop[:, None])
    order = np.argsort(-(num + 0.5) / (den + 0.5), kind="stable")
    rank = np.empty(size, dtype=np.int64)
    rank[order] = np.arange(size)
    return rank[None, :] <= np.arange(size - 1)[:, None]


@dataclass
class _Candidate:
    score: float
    pair: int
    forward: bool
    cells: npt.NDArray[np.int64]


@dataclass(frozen=True)
class _Sample:
    """The inputs, the pairs compared (indices into ``inputs``) and each input's reports:
    ``selection`` chooses the events, ``counting`` (drawn after) counts them."""

    inputs: list[Any]
    pairs: list[tuple[int, int]]
    selection: list[npt.NDArray[Any]]
    counting: list[npt.NDArray[Any]]
    delta: float
    n_select: int
    n_count: int


def audit(
    mechanism: Mechanism,
    *,
    input_pairs: Sequence[tuple[Any, Any]] | None = None,
    samples: int = 200_000,
    confidence: float = 0.99,
    events: EventMap | None = None,
    bins: int = 32,
    selection_fraction: float = 0.25,
    max_events: int = 8,
    rng: np.random.Generator | None = None,
) -> AuditResult:
    """Sample ``mechanism`` and bound from below the epsilon it really gives.

    Parameters
    ----------
    mechanism : Mechanism
        Any ldpkit mechanism (its ``epsilon`` is the claim under test).
    input_pairs : sequence of (x, x'), optional
        Inputs to compare; each pair is tested in both directions. By default every
        pair of items for ``d <= 6`` (else items 0, 1, d // 2, d - 1), and for numeric
        mechanisms every pair of ``lo``, ``hi`` and the midpoint.
    samples : int
        Reports drawn per input.
    confidence : float
        Probability, over the sampling, that every reported bound holds.
    events : callable, optional
        ``events(reports, x, x_prime) -> keys``, one key per report: integer keys are
        cells, float keys are cut into ``bins`` quantile bins. Events are unions of
        cells. Defaults to the cells described in the module docstring.
    bins : int
        Quantile bins for float keys (numeric mechanisms by default).
    selection_fraction : float
        Share of the samples used to choose the events (the rest count them).
    max_events : int
        Events tested on the counting sample; the Bonferroni correction is over these.
    rng : numpy.random.Generator, optional
        Source of the mechanism's randomness; fixed for reproducible audits.

    Returns
    -------
    AuditResult
    """
    started = time.perf_counter()
    _check_arguments(mechanism, samples, confidence, selection_fraction, max_events, bins)
    n_select = max(10, int(samples * selection_fraction))
    sample = _draw(mechanism, input_pairs, n_select, samples - n_select, resolve_rng(rng))
    # Partition per pair, fitted on the selection reports only.
    partitions = [_partition(mechanism, events, sample, i, j, bins) for i, j in sample.pairs]
    # Candidate events: level sets of the empirical likelihood ratio, scored by the
    # bound each is predicted to give on the counting sample.
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / (2 * max_events))
    candidates = [
        candidate
        for index, partition in enumerate(partitions)
        for candidate in _candidates(sample, index, partition, z, max_events)
    ]
    candidates.sort(key=lambda c: -c.score)
    results = _count(sample, partitions, candidates[:max_events], confidence)
    best = results[0] if results else None
    return AuditResult(
        mechanism=mechanism.name,
        claimed_epsilon=float(mechanism.epsilon),
        epsilon_lower_bound=max(0.0, best.epsilon_bound) if best is not None else 0.0,
        witness=(best.x, best.x_prime) if best is not None else None,
        event=best.event if best is not None else None,
        samples=sample.n_select + sample.n_count,
        counting_samples=sample.n_count,
        inputs=tuple(sample.inputs),
        confidence=confidence,
        bounds=tuple(results),
        seconds=time.perf_counter() - started,
        claimed_delta=sample.delta,
    )


def _check_arguments(
    mechanism: Mechanism,
    samples: int,
    confidence: float,
    selection_fraction: float,
    max_events: int,
    bins: int,
) -> None:
    if not isinstance(mechanism, Mechanism):
        raise ParameterError(f"audit needs an ldpkit Mechanism, got {type(mechanism).__name__}")
    if not 0.0 < confidence < 1.0:
        raise ParameterError(f"confidence must be in (0, 1), got {confidence!r}")
    if not 0.0 < selection_fraction < 1.0:
        raise ParameterError(f"selection_fraction must be in (0, 1), got {selection_fraction!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 20:
        raise ParameterError(f"samples must be an integer >= 20, got {samples!r}")
    if max_events < 1 or bins < 2:
        raise ParameterError("max_events must be >= 1 and bins >= 2")


def _draw(
    mechanism: Mechanism,
    input_pairs: Sequence[tuple[Any, Any]] | None,
    n_select: int,
    n_count: int,
    rng: np.random.Generator,
) -> _Sample:
    """The inputs and pairs (unordered; both directions are tested), and their reports."""
    if input_pairs is None:
        inputs = _default_inputs(mechanism)
        pairs = [(i, j) for i in range(len(inputs)) for j in range(i + 1, len(inputs))]
    else:
        inputs, pairs = _given_pairs(input_pairs)
    if not pairs:
        raise ParameterError("need at least one pair of distinct inputs")

    selection = [mechanism.perturb(np.full(n_select, v), rng=rng) for v in inputs]
    counting = [mechanism.perturb(np.full(n_count, v), rng=rng) for v in inputs]
    delta = float(getattr(mechanism, "delta", 0.0) or 0.0)  # (epsilon, delta) mechanisms
    return _Sample(inputs, pairs, selection, counting, delta, n_select, n_count)


def _given_pairs(input_pairs: Sequence[tuple[Any, Any]]) -> tuple[list[Any], list[tuple[int, int]]]:
    inputs: list[Any] = []
    pairs = []
    for x, y in input_pairs:
        for v in (x, y):
            if v not in inputs:
                inputs.append(v)
        i, j = inputs.index(x), inputs.index(y)
        if i == j:
            raise ParameterError(f"input pair ({x!r}, {y!r}) compares an input with itself")
        pairs.append((i, j))
    return inputs, pairs


def _describe_keys(cells: npt.NDArray[Any]) -> str:
    return list_description(cells, str, "key")


def _partition(
    mechanism: Mechanism, events: EventMap | None, sample: _Sample, i: int, j: int, bins: int
) -> Partition:
    """The cells of reports for the pair (inputs i, j), fitted on the selection reports."""
    x, y = sample.inputs[i], sample.inputs[j]
    if events is not None:
        return _event_partition(events, sample, i, j, bins)
    if isinstance(mechanism, NumericMechanism):
        pooled = np.concatenate(
            [mechanism.debias(sample.selection[i]), mechanism.debias(sample.selection[j])]
        )
        return binned_partition(mechanism.debias, pooled, bins, "debiased")
    partition = default_partition(mechanism, x, y)
    return partition if partition is not None else Partition(generic_keys, _describe_keys)


def _event_partition(fn: EventMap, sample: _Sample, i: int, j: int, bins: int) -> Partition:
    """Cells of the keys ``events`` gives: integer keys as they are, float keys binned."""
    x, y = sample.inputs[i], sample.inputs[j]
    first = np.asarray(fn(sample.selection[i], x, y))
    if first.dtype.kind == "f":
        pooled = np.concatenate([first, np.asarray(fn(sample.selection[j], x, y))]).astype(
            np.float64
        )
        return binned_partition(lambda r: np.asarray(fn(r, x, y), np.float64), pooled, bins, "key")
    if first.dtype.kind in "iub":
        return Partition(lambda r: np.asarray(fn(r, x, y)).astype(np.int64), _describe_keys)
    raise ParameterError(f"events must return integer or float keys, got {first.dtype}")


def _candidates(
    sample: _Sample, index: int, part: Partition, z: float, max_events: int
) -> list[_Candidate]:
    """The pair's best ``max_events`` events each way, by the bound they are predicted to
    give (the selection sample's shares, less ``z`` standard errors of the counting's)."""
    i, j = sample.pairs[index]
    ki, kj = part.keys(sample.selection[i]), part.keys(sample.selection[j])
    cells = np.unique(np.concatenate([ki, kj]))
    if cells.size > MAX_CELLS:
        raise ParameterError(
            f"{cells.size} distinct cells (more than {MAX_CELLS}); give coarser events="
        )
    ci = np.bincount(np.searchsorted(cells, ki), minlength=cells.size)
    cj = np.bincount(np.searchsorted(cells, kj), minlength=cells.size)
    n_select, n_count = sample.n_select, sample.n_count
    out = []
    for forward, (num, den) in ((True, (ci, cj)), (False, (cj, ci))):
        sets = _candidate_sets(num, den, part.ordered)
        p_num = (sets @ num) / n_select
        p_den = (sets @ den) / n_select
        lower = p_num - z * np.sqrt(p_num * (1 - p_num) / n_count) - sample.delta
        upper = p_den + z * np.sqrt(p_den * (1 - p_den) / n_count) + 1.0 / n_count
        with np.errstate(divide="ignore", invalid="ignore"):
            scores = np.where(lower > 0, np.log(lower / upper), -np.inf)
        for row in np.argsort(-scores, kind="stable")[:max_events]:
            out.append(_Candidate(float(scores[row]), index, forward, cells[sets[row]]))
    return out


def _count(
    sample: _Sample, partitions: list[Partition], chosen: list[_Candidate], confidence: float
) -> list[EventBound]:
    """The chosen events counted on the fresh reports, strongest first; Bonferroni over 2 bounds per
    event. (No candidate at all means every report fell in one cell: nothing to test.)"""
    alpha = (1.0 - confidence) / (2 * max(1, len(chosen)))
    count_keys: dict[tuple[int, int], npt.NDArray[np.int64]] = {}
    results: list[EventBound] = []
    n_count = sample.n_count
    for cand in chosen:
        i, j = sample.pairs[cand.pair]
        if not cand.forward:
            i, j = j, i
        part = partitions[cand.pair]
        hits = []
        for side in (i, j):
            key = (cand.pair, side)
            if key not in count_keys:
                count_keys[key] = part.keys(sample.counting[side])
            hits.append(int(np.count_nonzero(np.isin(count_keys[key], cand.cells))))
        results.append(
            EventBound(
                x=sample.inputs[i],
                x_prime=sample.inputs[j],
                event=part.describe(cand.cells),
                count_x=hits[0],
                count_x_prime=hits[1],
                n=n_count,
                p_lower=clopper_pearson_lower(hits[0], n_count, alpha),
                p_upper=clopper_pearson_upper(hits[1], n_count, alpha),
                delta=sample.delta,
            )
        )
    results.sort(key=lambda b: -b.epsilon_bound)
    return results
