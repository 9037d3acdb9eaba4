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

Method
------
Reports are drawn for every input (``samples`` each) and split in two independent
parts:

1. *Selection* (``selection_fraction`` of the samples): reports are mapped to discrete
   cells (see below). For each ordered pair (x, x') the candidate events are, for
   categorical cells, the level sets of the empirical likelihood ratio (the top 1, 2,
   ... cells by ratio: the Neyman-Pearson optimal events) and, for the bins of a
   numeric output, every interval of adjacent bins (tails included). Each candidate is
   scored by the bound it is predicted to give on the counting part, and the best
   ``max_events`` candidates over all pairs are kept.
2. *Counting* (the rest): each kept event is counted among the reports of x and of x'
   and turned into the bound ``log(L / U)``, where ``L`` and ``U`` are Clopper-Pearson
   bounds at level ``(1 - confidence) / (2 m)`` each, m the number of events kept.

Because the events are fixed before the counting reports are looked at, the
Clopper-Pearson bounds are exact for them, and the union bound over the ``2 m``
one-sided bounds gives the overall confidence.

Cells (how reports become discrete events):

- ``grr``/``rr``: the reported item (``d <= 64``), else whether it is x, x' or another;
- ``hr``: the reported column (``K <= 64``), else whether it lies in ``C_x`` and in
  ``C_x'``;
- ``sue``, ``oue``, ``ss``: the whole bitmap (``d <= 10``), else bits x and x';
- ``olh``: whether the report supports x and whether it supports x';
- ``prefix_sketch``: whether the reported bucket is x's in its (sketch, row), and x''s;
- ``hh`` (hierarchical histogram): the depth reported, and whether the report supports
  the depth's node of x and that of x' (the whole report, every depth at once);
- numeric mechanisms: ``bins`` quantile bins of the debiased output (edges taken from
  the selection part of the pair's pooled reports; values that repeat, such as
  Duchi's two outputs, get a cell of their own).

(epsilon, delta) mechanisms (``gaussian``): ``P(E | x) <= e^eps P(E | x') + delta``, so
each event bounds epsilon from below by ``log((L - delta) / U)``, with delta the
mechanism's own.

Other cells can be given with ``events``.

The Clopper-Pearson bounds are computed here without scipy: the regularized incomplete
beta function by its continued fraction (modified Lentz) with a prefactor free of
``lgamma`` cancellation, or for upper bounds from at most 64 successes the binomial
sum itself, inverted by bisection, then widened by a relative 1e-9 so that rounding
can only make them conservative. The tests compare them with scipy (1e-7 relative) and
check, in exact rational arithmetic, that they lie on the safe side.

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

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Integral
from statistics import NormalDist
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from .errors import ParameterError
from .mechanisms import FrequencyOracle, Mechanism, NumericMechanism
from .randomness import resolve_rng

__all__ = [
    "AuditResult",
    "EventBound",
    "audit",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
]

EventMap = Callable[[npt.NDArray[Any], Any, Any], npt.NDArray[Any]]
"""``events(reports, x, x_prime) -> keys``: one key per report. Integer keys are the
cells themselves; float keys are cut into quantile bins."""

MAX_CELLS = 4096
"""Refuse partitions with more distinct cells than this in the selection sample."""
_IDENTITY_ITEMS = 64  # grr/hr: the report itself is the cell up to this many outputs
_IDENTITY_BITS = 10  # sue/oue/ss: the whole bitmap is the cell up to this many bits
_SMALL_COUNT = 64  # Clopper-Pearson upper bounds sum the binomial terms up to this count
_WIDEN = 1e-9  # relative widening of the bounds, far above their floating-point error


# --- Clopper-Pearson bounds -------------------------------------------------------------
def _betacf(a: float, b: float, x: float, y: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz); ``y = 1 - x``."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    # 1 - (a + b) x / (a + 1), from the small one of x and y (x near 1 would cancel).
    d = 1.0 - qab * x / qap if x <= 0.5 else (1.0 - b + qab * y) / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge ({a}, {b}, {x})")


_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _stirling_correction(x: float) -> float:
    """``lgamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2)``, accurate for large x too."""
    if x >= 10.0:
        x2 = x * x
        return (1.0 / 12.0 - (1.0 / 360.0 - (1.0 / 1260.0 - 1.0 / (1680.0 * x2)) / x2) / x2) / x
    return math.lgamma(x) - ((x - 0.5) * math.log(x) - x + _HALF_LOG_2PI)


def _log_front(a: float, b: float, x: float) -> float:
    """``log(x^a (1 - x)^b / B(a, b))`` without the cancellation of lgamma differences.

    With ``s = a + b`` and ``d = x s - a`` it equals
    ``a log(1 + d / a) + b log(1 - d / b) + log(a b / s) / 2 - log(2 pi) / 2`` plus the
    Stirling corrections; near the mean, where the bounds are, d is small and each term
    keeps its precision (plain lgamma loses ~1e-8 relative at n = 1e7).
    """
    s = a + b
    d = x * s - a
    first = a * math.log1p(d / a) if abs(d) < 0.5 * a else a * math.log(x * s / a)
    second = b * math.log1p(-d / b) if abs(d) < 0.5 * b else b * math.log((1.0 - x) * s / b)
    return (
        first
        + second
        + 0.5 * math.log(a * b / s)
        - _HALF_LOG_2PI
        - _stirling_correction(a)
        - _stirling_correction(b)
        + _stirling_correction(s)
    )


def _betainc(a: float, b: float, x: float) -> tuple[float, float]:
    """``(I_x(a, b), 1 - I_x(a, b))``, each with a small relative error (a, b > 0)."""
    if x <= 0.0:
        return 0.0, 1.0
    if x >= 1.0:
        return 1.0, 0.0
    front = math.exp(_log_front(a, b, x))
    if x < (a + 1.0) / (a + b + 2.0):
        value = front * _betacf(a, b, x, 1.0 - x) / a
        return value, 1.0 - value
    complement = front * _betacf(b, a, 1.0 - x, x) / b
    return 1.0 - complement, complement


def _bisect(decreasing: Callable[[float], float], target: float, lower: bool) -> float:
    """Root of a decreasing function of p in [0, 1], rounded down (``lower``) or up."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if decreasing(mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return lo if lower else hi


def _check_count(k: object, n: object, alpha: float) -> tuple[int, int]:
    if not all(isinstance(v, Integral) and not isinstance(v, bool) for v in (k, n)):
        raise ParameterError(f"k and n must be integers, got k={k!r}, n={n!r}")
    kk, nn = int(k), int(n)  # type: ignore[call-overload]
    if not 0 <= kk <= nn or nn == 0:
        raise ParameterError(f"need 0 <= k <= n and n > 0, got k={kk}, n={nn}")
    if not 0.0 < alpha < 1.0:
        raise ParameterError(f"alpha must be in (0, 1), got {alpha!r}")
    return kk, nn


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound on p from k successes in n trials.

    The smallest p with ``P(Bin(n, p) >= k) >= alpha`` (0 when k = 0): the true p is at
    least this with probability at least ``1 - alpha``. Equal to
    ``scipy.stats.beta.ppf(alpha, k, n - k + 1)``, rounded down.
    """
    k, n = _check_count(k, n, alpha)
    if k == 0:
        return 0.0
    a, b = float(k), float(n - k + 1)
    # P(Bin(n, p) < k) = 1 - I_p(k, n - k + 1) decreases in p; find where it is 1 - alpha,
    # comparing the small side of the pair to keep its relative precision.
    return _bisect(lambda p: -_betainc(a, b, p)[0], -alpha, lower=True) * (1.0 - _WIDEN)


def _binomial_cdf_small(k: int, n: int, p: float) -> float:
    """``P(Bin(n, p) <= k)`` by summing its k + 1 terms in logs (small k, any n)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    step = math.log(p) - math.log1p(-p)
    logs = [n * math.log1p(-p)]
    for j in range(k):
        logs.append(logs[-1] + math.log((n - j) / (j + 1)) + step)
    top = max(logs)
    return math.exp(top) * math.fsum(math.exp(v - top) for v in logs)


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound on p from k successes in n trials.

    The largest p with ``P(Bin(n, p) <= k) >= alpha`` (1 when k = n): the true p is at
    most this with probability at least ``1 - alpha``. Equal to
    ``scipy.stats.beta.isf(alpha, k + 1, n - k)``, rounded up.
    """
    k, n = _check_count(k, n, alpha)
    if k == n:
        return 1.0
    if k <= _SMALL_COUNT:
        # The continued fraction loses digits for a tiny p with a small k: sum directly.
        bound = _bisect(lambda p: _binomial_cdf_small(k, n, p), alpha, lower=False)
    else:
        a, b = float(k + 1), float(n - k)
        # P(Bin(n, p) <= k) = 1 - I_p(k + 1, n - k) decreases in p.
        bound = _bisect(lambda p: _betainc(a, b, p)[1], alpha, lower=False)
    return min(1.0, bound * (1.0 + _WIDEN))


# --- results ---------------------------------------------------------------------------
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

    ``epsilon_lower_bound`` holds with probability at least ``confidence`` (it is the
    largest of the tested bounds, or 0); ``passed`` says whether it is at most the
    claimed epsilon. A failed audit proves a violation at that confidence; a passed one
    proves nothing beyond "no violation seen".
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


# --- partitions: reports -> cells --------------------------------------------------------
@dataclass
class _Partition:
    """How one pair's reports become integer cells, and how to describe a set of cells."""

    keys: Callable[[npt.NDArray[Any]], npt.NDArray[np.int64]]
    describe: Callable[[npt.NDArray[np.int64]], str]
    ordered: bool = False
    """Cells are intervals in increasing order: events are runs of adjacent cells."""


def _list_description(
    cells: npt.NDArray[np.int64], show: Callable[[int], str], noun: str = "report"
) -> str:
    values = sorted(int(c) for c in cells)
    if len(values) == 1:
        return f"{noun} == {show(values[0])}"
    shown = ", ".join(show(v) for v in values[:4])
    more = f", ... ({len(values)} outputs)" if len(values) > 4 else ""
    return f"{noun} in {{{shown}{more}}}"


def _flag_partition(
    flags: Callable[[npt.NDArray[Any]], tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]],
    what: tuple[str, str],
) -> _Partition:
    """Cells from two yes/no properties of a report (one about x, one about x')."""

    def keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        first, second = flags(reports)
        return first.astype(np.int64) + 2 * second.astype(np.int64)

    def describe(cells: npt.NDArray[np.int64]) -> str:
        names = []
        for c in sorted(int(v) for v in cells):
            a = what[0] if c & 1 else f"not {what[0]}"
            b = what[1] if c & 2 else f"not {what[1]}"
            names.append(f"({a} and {b})")
        return " or ".join(names)

    return _Partition(keys, describe)


def _bitmap_keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    weights = np.int64(256) ** np.arange(reports.shape[1], dtype=np.int64)
    keys: npt.NDArray[np.int64] = (reports.astype(np.int64) * weights).sum(axis=1)
    return keys


def _default_partition(mechanism: Mechanism, x: Any, y: Any) -> _Partition | None:
    """The built-in cells for a categorical mechanism's pair (x, y); None if unknown."""
    name = mechanism.name

    def identity(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        return reports.astype(np.int64)

    if name in ("grr", "rr") and isinstance(mechanism, FrequencyOracle):
        if mechanism.domain_size <= _IDENTITY_ITEMS:
            return _Partition(identity, lambda cells: _list_description(cells, str))
        return _flag_partition(lambda r: (r == x, r == y), (f"report == {x}", f"report == {y}"))
    if name == "hr":
        big_k = int(getattr(mechanism, "K"))  # noqa: B009 - HR's column count
        if big_k <= _IDENTITY_ITEMS:
            return _Partition(identity, lambda cells: _list_description(cells, str, "column"))

        def in_c(item: int, c: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
            row = np.uint64(item + 1)
            return np.asarray((np.bitwise_count(c.astype(np.uint64) & row) & 1) == 0)

        return _flag_partition(
            lambda r: (in_c(x, r), in_c(y, r)), (f"column in C_{x}", f"column in C_{y}")
        )
    if name in ("sue", "oue", "ss") and isinstance(mechanism, FrequencyOracle):
        d = mechanism.domain_size
        if d <= _IDENTITY_BITS:

            def show(key: int) -> str:
                return "".join("1" if key >> j & 1 else "0" for j in range(d))

            return _Partition(
                _bitmap_keys, lambda cells: _list_description(cells, show, "bits[0..d)")
            )

        def bit(item: int, r: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
            return np.asarray((r[:, item // 8] >> (item % 8)) & 1 == 1)

        return _flag_partition(lambda r: (bit(x, r), bit(y, r)), (f"bit {x}", f"bit {y}"))
    if name == "olh":
        from .mechanisms.local_hashing import bucket

        g = int(getattr(mechanism, "g"))  # noqa: B009 - OLH's bucket count

        def supports(item: int, r: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
            return np.asarray(bucket(item, r["a"], r["b"], g) == r["y"].astype(np.uint64))

        return _flag_partition(
            lambda r: (supports(x, r), supports(y, r)), (f"supports {x}", f"supports {y}")
        )
    if name == "prefix_sketch":
        from .mechanisms.strings import PrefixSketch

        assert isinstance(mechanism, PrefixSketch)
        return _flag_partition(
            lambda r: (mechanism.supports(x, r), mechanism.supports(y, r)),
            (f"supports {x!r}", f"supports {y!r}"),
        )
    if name == "hh":
        return _hierarchical_partition(mechanism, x, y)
    return None


def _hierarchical_partition(mechanism: Mechanism, x: Any, y: Any) -> _Partition:
    """Cells of the hierarchical histogram: (depth, supports x's node, supports y's node)."""
    from .mechanisms.hierarchical import HierarchicalHistogram
    from .mechanisms.local_hashing import OptimizedLocalHashing, bucket

    assert isinstance(mechanism, HierarchicalHistogram)
    leaves = mechanism.leaves_of([x, y])
    oracles = mechanism.oracles

    def keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        depth = reports["depth"].astype(np.int64)
        out = np.zeros(reports.shape[0], dtype=np.int64)
        for t, oracle in enumerate(oracles, start=1):
            sel = depth == t
            chosen = reports[sel]
            flags = []
            for leaf in leaves:
                node = int(mechanism.tree.node_of_leaf(leaf, t))
                if isinstance(oracle, OptimizedLocalHashing):
                    hit = bucket(node, chosen["a"], chosen["b"], oracle.g) == chosen["y"]
                else:
                    hit = chosen["y"] == node
                flags.append(np.asarray(hit, dtype=np.int64))
            out[sel] = 4 * t + flags[0] + 2 * flags[1]
        return out

    def describe(cells: npt.NDArray[np.int64]) -> str:
        names = []
        for c in sorted(int(v) for v in cells):
            t, a, b = c // 4, c & 1, c & 2
            names.append(
                f"(depth {t}, {'supports' if a else 'not'} {x}'s node, "
                f"{'supports' if b else 'not'} {y}'s node)"
            )
        return " or ".join(names)

    return _Partition(keys, describe)


def _generic_keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """Report identity for any dtype, as small integers (unique rows of the raw bytes)."""
    raw = np.ascontiguousarray(reports)
    rows = raw.reshape(raw.shape[0], -1).view(np.uint8).reshape(raw.shape[0], -1)
    if rows.shape[1] <= 7:
        return _bitmap_keys(rows)
    raise ParameterError(
        "reports wider than 7 bytes need an events= function mapping them to cells"
    )


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _binned_partition(
    values: Callable[[npt.NDArray[Any]], npt.NDArray[np.float64]],
    pooled: npt.NDArray[np.float64],
    bins: int,
    noun: str,
) -> _Partition:
    """Quantile bins of ``values`` fitted on ``pooled``; repeated values get their own cell."""
    quantiles = np.quantile(pooled, np.linspace(0.0, 1.0, bins + 1)[1:-1])
    unique, counts = np.unique(quantiles, return_counts=True)
    atoms = unique[counts > 1]
    edges = np.unique(np.concatenate([unique, np.nextafter(atoms, np.inf)]))
    atom_set = {float(a) for a in atoms}

    def keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        return np.searchsorted(edges, values(reports), side="right").astype(np.int64)

    def describe(cells: npt.NDArray[np.int64]) -> str:
        # Cell i holds edges[i - 1] <= v < edges[i]; merge runs of adjacent cells.
        parts: list[str] = []
        ordered = sorted(int(c) for c in cells)
        start = prev = ordered[0]
        for c in [*ordered[1:], None]:
            if c is not None and c == prev + 1:
                prev = c
                continue
            left = float(edges[start - 1]) if start > 0 else -math.inf
            right = float(edges[prev]) if prev < len(edges) else math.inf
            if start == prev and left in atom_set:
                parts.append(f"{{{_fmt(left)}}}")
            else:
                parts.append(f"[{_fmt(left)}, {_fmt(right)})")
            if c is not None:
                start = prev = c
        more = f" or ... ({len(parts)} pieces)" if len(parts) > 3 else ""
        shown = " or ".join(parts[:3]) + more
        return f"{noun} in {shown}"

    return _Partition(keys, describe, ordered=True)


# --- the audit -------------------------------------------------------------------------
def _default_inputs(mechanism: Mechanism) -> list[Any]:
    if isinstance(mechanism, FrequencyOracle):
        d = mechanism.domain_size
        if d <= 6:
            return list(range(d))
        return sorted({0, 1, d // 2, d - 1})
    if isinstance(mechanism, NumericMechanism) or mechanism.name == "hh":
        lo, hi = getattr(mechanism, "bounds")  # noqa: B009 - numeric and distribution kinds
        return [lo, hi, (lo + hi) / 2.0]
    if mechanism.kind == "strings":
        return ["", "a", "b"]  # every max_length allows these; lengths 0 and 1 differ too
    raise ParameterError(f"give input_pairs for a mechanism of kind {mechanism.kind!r}")


def _candidate_sets(
    num: npt.NDArray[np.int64], den: npt.NDArray[np.int64], ordered: bool
) -> npt.NDArray[np.bool_]:
    """Candidate events as rows of cell masks (the full set and the empty set excluded).

    Unordered cells: the level sets of the smoothed empirical ratio ``num / den`` (its
    top 1, 2, ... cells). Ordered cells (bins of a number): every run of adjacent cells,
    tails and intervals; level sets of many small bins would chase the selection
    sample's noise.
    """
    size = num.size
    if ordered and size > 2:
        start, stop = np.triu_indices(size + 1, k=1)
        proper = (stop - start) < size
        start, stop = start[proper], stop[proper]
        index = np.arange(size)
        runs: npt.NDArray[np.bool_] = (index[None, :] >= start[:, None]) & (
            index[None, :] < stop[:, None]
        )
        return runs
    order = np.argsort(-(num + 0.5) / (den + 0.5), kind="stable")
    rank = np.empty(size, dtype=np.int64)
    rank[order] = np.arange(size)
    levels: npt.NDArray[np.bool_] = rank[None, :] <= np.arange(size - 1)[:, None]
    return levels


@dataclass
class _Candidate:
    score: float
    pair: int
    forward: bool
    cells: npt.NDArray[np.int64]


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
    generator = resolve_rng(rng)
    delta = float(getattr(mechanism, "delta", 0.0) or 0.0)  # (epsilon, delta) mechanisms
    n_select = max(10, int(samples * selection_fraction))
    n_count = samples - n_select

    # Inputs and pairs (unordered; both directions are tested).
    if input_pairs is None:
        inputs = _default_inputs(mechanism)
        pairs = [(i, j) for i in range(len(inputs)) for j in range(i + 1, len(inputs))]
    else:
        inputs = []
        pairs = []
        for x, y in input_pairs:
            ij = []
            for v in (x, y):
                if v not in inputs:
                    inputs.append(v)
                ij.append(inputs.index(v))
            if ij[0] == ij[1]:
                raise ParameterError(f"input pair ({x!r}, {y!r}) compares an input with itself")
            pairs.append((ij[0], ij[1]))
    if not pairs:
        raise ParameterError("need at least one pair of distinct inputs")

    def draw(v: Any, n: int) -> npt.NDArray[Any]:
        reports: npt.NDArray[Any] = mechanism.perturb(np.full(n, v), rng=generator)
        return reports

    selection = [draw(v, n_select) for v in inputs]
    counting = [draw(v, n_count) for v in inputs]

    # Partition per pair, fitted on the selection reports only.
    partitions: list[_Partition] = []
    for i, j in pairs:
        x, y = inputs[i], inputs[j]
        partition: _Partition | None = None
        if events is not None:
            fn = events
            first = np.asarray(fn(selection[i], x, y))
            if first.dtype.kind == "f":
                pooled = np.concatenate([first, np.asarray(fn(selection[j], x, y))])

                def as_float(r: npt.NDArray[Any], fn: EventMap = fn, x: Any = x, y: Any = y) -> Any:
                    return np.asarray(fn(r, x, y), dtype=np.float64)

                partition = _binned_partition(as_float, pooled.astype(np.float64), bins, "key")
            elif first.dtype.kind in "iub":

                def as_int(r: npt.NDArray[Any], fn: EventMap = fn, x: Any = x, y: Any = y) -> Any:
                    return np.asarray(fn(r, x, y)).astype(np.int64)

                partition = _Partition(as_int, lambda c: _list_description(c, str, "key"))
            else:
                raise ParameterError(f"events must return integer or float keys, got {first.dtype}")
        elif isinstance(mechanism, NumericMechanism):
            pooled = np.concatenate(
                [mechanism.debias(selection[i]), mechanism.debias(selection[j])]
            )
            partition = _binned_partition(mechanism.debias, pooled, bins, "debiased")
        else:
            partition = _default_partition(mechanism, x, y)
            if partition is None:
                partition = _Partition(_generic_keys, lambda c: _list_description(c, str, "key"))
        partitions.append(partition)

    # Candidate events: level sets of the empirical likelihood ratio, scored by the
    # bound each is predicted to give on the counting sample.
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / (2 * max_events))
    candidates: list[_Candidate] = []
    for p_index, (i, j) in enumerate(pairs):
        part = partitions[p_index]
        ki, kj = part.keys(selection[i]), part.keys(selection[j])
        cells = np.unique(np.concatenate([ki, kj]))
        if cells.size > MAX_CELLS:
            raise ParameterError(
                f"{cells.size} distinct cells (more than {MAX_CELLS}); give coarser events="
            )
        ci = np.bincount(np.searchsorted(cells, ki), minlength=cells.size)
        cj = np.bincount(np.searchsorted(cells, kj), minlength=cells.size)
        for forward, (num, den) in ((True, (ci, cj)), (False, (cj, ci))):
            sets = _candidate_sets(num, den, part.ordered)
            p_num = (sets @ num) / n_select
            p_den = (sets @ den) / n_select
            lower = p_num - z * np.sqrt(p_num * (1 - p_num) / n_count) - delta
            upper = p_den + z * np.sqrt(p_den * (1 - p_den) / n_count) + 1.0 / n_count
            with np.errstate(divide="ignore", invalid="ignore"):
                scores = np.where(lower > 0, np.log(lower / upper), -np.inf)
            for row in np.argsort(-scores, kind="stable")[:max_events]:
                candidates.append(
                    _Candidate(float(scores[row]), p_index, forward, cells[sets[row]])
                )
    candidates.sort(key=lambda c: -c.score)
    chosen = candidates[:max_events]

    # Count the chosen events on the fresh reports; Bonferroni over 2 bounds per event.
    # (No candidate at all means every report fell in one cell: nothing to test.)
    alpha = (1.0 - confidence) / (2 * max(1, len(chosen)))
    count_keys: dict[tuple[int, int], npt.NDArray[np.int64]] = {}
    results: list[EventBound] = []
    for cand in chosen:
        i, j = pairs[cand.pair]
        if not cand.forward:
            i, j = j, i
        part = partitions[cand.pair]
        hits = []
        for side in (i, j):
            key = (cand.pair, side)
            if key not in count_keys:
                count_keys[key] = part.keys(counting[side])
            hits.append(int(np.count_nonzero(np.isin(count_keys[key], cand.cells))))
        results.append(
            EventBound(
                x=inputs[i],
                x_prime=inputs[j],
                event=part.describe(cand.cells),
                count_x=hits[0],
                count_x_prime=hits[1],
                n=n_count,
                p_lower=clopper_pearson_lower(hits[0], n_count, alpha),
                p_upper=clopper_pearson_upper(hits[1], n_count, alpha),
                delta=delta,
            )
        )
    results.sort(key=lambda b: -b.epsilon_bound)
    best = results[0] if results else None
    bound = max(0.0, best.epsilon_bound) if best is not None else 0.0
    return AuditResult(
        mechanism=mechanism.name,
        claimed_epsilon=float(mechanism.epsilon),
        epsilon_lower_bound=bound,
        witness=(best.x, best.x_prime) if best is not None else None,
        event=best.event if best is not None else None,
        samples=n_select + n_count,
        counting_samples=n_count,
        inputs=tuple(inputs),
        confidence=confidence,
        bounds=tuple(results),
        seconds=time.perf_counter() - started,
        claimed_delta=delta,
    )


# --- a deliberately broken mechanism, for showing that the audit can fail -------------------
M = TypeVar("M", bound=Mechanism)


def _mislabelled(mechanism: M, factor: float) -> M:
    """A copy of ``mechanism`` that perturbs with ``factor * epsilon`` but states ``epsilon``.

    For tests and benchmarks of the audit only: every derived constant (p, q, the noise
    scale, ...) comes from the larger epsilon, while the ``epsilon`` attribute, the
    claim under audit, keeps the original value.
    """
    real = dataclasses.replace(mechanism, epsilon=mechanism.epsilon * factor)
    object.__setattr__(real, "epsilon", mechanism.epsilon)
    return real
