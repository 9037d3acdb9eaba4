"""The contract every mechanism follows.

A mechanism is a small immutable object, validated once when it is made. It offers

- ``perturb(values, rng=None)``: randomize true values on the device, vectorized over a
  numpy array (a scalar gives one report);
- ``check_reports(reports)``: which reports are well-formed for this mechanism (the
  collector turns the others away one by one);
- ``aggregate(reports)``: an :class:`~ldpkit.aggregate.Aggregate` whose sums merge by
  addition;
- ``estimate(aggregate)``: a result object with standard errors and intervals;
- ``variance(...)``: the variance formula the standard errors come from.

Reports are numpy arrays of ``report_dtype`` (one row per report). Their raw bytes,
``reports.tobytes()``, are what travels on the wire, so the dtype is part of protocol v1.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .. import screening
from .._validation import check_bounds, check_domain_size, check_epsilon
from ..aggregate import Aggregate
from ..errors import ParameterError, ReportError
from ..estimates import (
    BinaryCounts,
    FrequencyEstimate,
    MeanEstimate,
    MeanRank,
    SharesAtLeast,
    at_least_weights,
    norm_sub,
)
from ..intervals import normal_quantile
from ..randomness import resolve_rng
from ..screening import Finding
from ._bits import threshold64_floor
from ._dyadic import check_min_epsilon
from ._values import check_numbers, in_range, whole_floats

if TYPE_CHECKING:  # the portable rules load with the mechanisms that use them
    from ._portable import Derived, Words

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Reports = npt.NDArray[Any]
"""Reports of one mechanism, as the collector decodes them (``report_dtype``)."""
LawTest = tuple[str, float, int, str]
"""One conformance test of one input's reports: (test name, chi-square statistic, dof,
detail)."""


class PlanCase(NamedTuple):
    """One metric of the conformance plan: its name, its definition (as
    ``MetricDefinition.from_dict`` takes it) and the inputs to report."""

    metric: str
    spec: dict[str, Any]
    inputs: tuple[Any, ...]


@runtime_checkable
class Enumerable(Protocol):
    """A mechanism that lists every report of an input with its exact probability."""

    def output_probabilities(self, value: int) -> tuple[npt.NDArray[Any], FloatArray]: ...


@dataclass(frozen=True, kw_only=True)
class Mechanism(ABC):
    """Base of all mechanisms: an epsilon-LDP randomizer with its estimator."""

    name: ClassVar[str]
    kind: ClassVar[str]  # "categorical" or "numeric"

    epsilon: float

    @property
    @abstractmethod
    def report_dtype(self) -> np.dtype[Any]:
        """The dtype of one report; its bytes are the wire payload."""

    @property
    @abstractmethod
    def stats_size(self) -> int:
        """Length of the aggregate's sums vector."""

    @property
    def aggregate_cost(self) -> int:
        """Counters the collector updates per report when it aggregates a batch: a model
        of its work per report, at most the size of the sums (unary and subset reports:
        one per bit, d; OLH: one hash check per item, d; a numeric report: a sum and a sum
        of squares; oracles whose report names one item override it with 1).
        ``benchmarks/mechanisms.py`` prints the measured nanoseconds beside it."""
        return self.stats_size

    def preparation_cost(self) -> tuple[float, float, str] | None:
        """(CPU seconds, peak bytes, what) of preparing a maintained kind's estimate at
        worst, when this mechanism's own figures differ from its kind's (None: the kind's)."""
        return None

    @property
    @abstractmethod
    def report_rule(self) -> str:
        """What a well-formed report looks like, for error messages."""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """The parameters that define this mechanism (its fingerprint's input)."""

    @abstractmethod
    def _perturb(self, values: npt.NDArray[Any], rng: np.random.Generator) -> npt.NDArray[Any]:
        """Perturb checked values (1-D) into reports."""

    @abstractmethod
    def _check_values(self, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Validate (and coerce) true values, raising ReportError on bad ones."""

    @abstractmethod
    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        """Which reports of the right dtype are well-formed."""

    @abstractmethod
    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        """The sufficient statistics of valid reports."""

    takes_score: ClassVar[bool] = False
    """Whether this mechanism is made with a categorical definition's score keys
    (:meth:`score_fields`); ``auto`` passes them only to those that are."""
    serves_intervals: ClassVar[bool] = True
    """Whether its answers come with intervals (a plan's half-width needs one); the
    square wave's EMS answers do not."""

    @classmethod
    def score_fields(cls, ordered: bool, given: Mapping[str, Any]) -> dict[str, Any]:
        """A categorical definition's score keys (``score``, ``band``, ``scores``) as this
        mechanism takes them, checked and completed with its defaults: what it is made
        with and what the definition holds. ``given``: the keys the definition gave."""
        if given:
            raise ParameterError(
                f"mechanism {cls.name!r} takes no {', '.join(given)} (a score is for the "
                "exponential mechanism)"
            )
        return {}

    def auto_variance(self) -> float:
        """The variance ``auto`` weighs this mechanism by (see :class:`ldpkit.Choice`)."""
        raise NotImplementedError(f"{self.name} is not a candidate of auto")

    @property
    def distinct_reports(self) -> int | None:
        """How many different reports there are, when few enough to list; else None."""
        return None

    def supports(self, value: Any, reports: npt.ArrayLike) -> BoolArray:
        """Which ``reports`` support ``value``: the evidence for it that the estimator
        counts (:mod:`ldpkit.audit` builds its events from it)."""
        raise NotImplementedError(f"{self.name} reports do not each support single values")

    def report_layer(self, reports: npt.ArrayLike) -> IntArray | None:
        """The layer each report speaks about (a tree's depth), for mechanisms whose
        reports each describe one of several layers; None for the others."""
        return None

    # --- the cross-language contract (ldpkit.portable, ldpkit.conformance) -------------
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = ()
    """The conformance plan's metrics for this mechanism (``ldpkit conformance plan``)."""

    def served_constants(self) -> dict[str, Any] | None:
        """What a client needs beyond the definition to sample the portable rule exactly
        (``derived`` in a served definition). Every 64-bit threshold is an exact integer
        (16 hex digits); floats are the doubles the Python implementation uses (JSON
        numbers round-trip them exactly). A mechanism has a portable rule (a client in any
        language can sample it) iff it overrides this and :meth:`portable_report`."""
        return None

    @classmethod
    def portable_report(cls, definition: Mapping[str, Any], value: Any, words: Words) -> bytes:
        """One report's bytes by the portable rule, from the served ``definition`` (with
        its ``derived``) and the mechanism input ``value`` (an item or cell index, a
        number, a string), drawing from ``words``."""
        raise ParameterError(f"no portable sampling rule for mechanism {cls.name!r}")

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """Goodness-of-fit tests of ``reports``, all made for the mechanism input ``value``,
        against this mechanism's exact output law (``derived``: its served constants)."""
        raise NotImplementedError(f"{self.name} has no conformance law")

    def conformance_support(self, reports: Reports, value: Any) -> tuple[int, float] | None:
        """How many ``reports`` made for ``value`` support it, and the probability each
        should: the kit pools this over a metric's inputs (frequency oracles; else None)."""
        return None

    @classmethod
    def conformance_lies(cls, derived: Derived) -> list[tuple[str, dict[str, Any]]]:
        """Lying ``derived`` constants the kit serves a client to refuse, beyond its 64-bit
        thresholds (which the kit lies about itself): ``(what, lying derived)``, for the
        constants privacy rests on that are not thresholds (none by default)."""
        return []

    # --- what honest reports look like, whatever the inputs (ldpkit.screening) --------
    def screen_reports(self, reports: npt.NDArray[Any], alpha: float) -> Finding | None:
        """Test a batch's well-formed ``reports`` against a law every honest report follows
        whatever its input (a unary report's number of set bits, ...); honest batches fail
        with probability at most ``alpha``. None: nothing found, or no such law."""
        return None

    def screen_aggregate(self, aggregate: Aggregate, alpha: float) -> Finding | None:
        """Test pooled sufficient statistics (a batch's, or one sender's batches') against
        what every honest population's satisfy; honest ones fail with probability at most
        ``alpha``. None: nothing found, or no such law."""
        return None

    def _set(self, **fields: Any) -> None:
        """Set fields of this frozen dataclass (checked parameters, derived constants)."""
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def _check_epsilon(self) -> None:
        """Check epsilon, which must not be below ``MIN_EPSILON`` either: far below it
        exp(epsilon) rounds to 1 (an oracle's p equals its q) and constants overflow."""
        self._set(epsilon=check_epsilon(self.epsilon))
        check_min_epsilon(self.name, self.epsilon)

    def perturb(self, values: npt.ArrayLike, rng: np.random.Generator | None = None) -> Any:
        """Randomize true values; ``rng`` defaults to a generator fed by the OS CSPRNG."""
        generator = resolve_rng(rng)
        array = np.asarray(values)
        if array.dtype.kind in "US" and isinstance(values, (list, tuple)):
            # numpy turned a mixed list into strings; keep the items so checks name the bad one.
            array = np.array(values, dtype=object)
        if array.ndim == 0:
            return self._perturb(self._check_values(array.reshape(1)), generator)[0]
        if array.ndim != 1:
            raise ReportError(f"values must be a scalar or a 1-D array, got shape {array.shape}")
        return self._perturb(self._check_values(array), generator)

    def perturb_checked(self, values: npt.NDArray[Any], rng: np.random.Generator) -> Any:
        """:meth:`perturb` of a 1-D array its caller has checked already (the client's
        codec: int64 indices in the domain, or float64 numbers within the bounds), so
        that a device value is checked once."""
        return self._perturb(values, rng)

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """One checked value's report, as the bytes that travel: the device's path.

        A mechanism with a per-value path overrides this (Python numbers and the bit
        generator's words, no numpy call per report); its bytes equal the vectorised
        path's, :meth:`perturb_checked` of ``[value]``, for the same ``rng``
        (``tests/shared/test_perturb_value.py`` pins it for every mechanism). This
        fallback is that vectorised path.
        """
        reports = self._perturb(np.asarray([value]), rng)  # int64 or float64, as checked
        return bytes(np.ascontiguousarray(reports).tobytes())

    def coerce_reports(self, reports: npt.ArrayLike) -> npt.NDArray[Any]:
        """View ``reports`` as an array of ``report_dtype`` (one row per report)."""
        dtype = self.report_dtype
        array = np.asarray(reports)
        if dtype.subdtype is not None:
            return self._coerce_rows(array, dtype.subdtype)
        if array.ndim == 0:
            array = array.reshape(1)
        if dtype.fields is not None:
            if array.dtype != dtype:
                raise ReportError(f"{self.name} reports must have dtype {dtype}, got {array.dtype}")
            return array
        if array.ndim != 1:
            raise ReportError(f"{self.name} reports must be 1-D, got shape {array.shape}")
        return array if array.dtype == dtype else self._cast_reports(array, dtype)

    def _coerce_rows(
        self, array: npt.NDArray[Any], subdtype: tuple[np.dtype[Any], tuple[int, ...]]
    ) -> npt.NDArray[Any]:
        """Reports that are rows of bytes (a packed bitmap): an (n, size) array."""
        base, shape = subdtype
        if array.ndim == 1 and array.shape == shape:
            array = array.reshape((1, *shape))
        if array.dtype != base or array.shape[1:] != shape or array.ndim != 2:
            raise ReportError(
                f"{self.name} reports must be an array of shape (n, {shape[0]}) "
                f"and dtype {base}, got {array.shape} {array.dtype}"
            )
        return array

    def _cast_reports(self, array: npt.NDArray[Any], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        """Scalar reports of another dtype, as ``dtype`` when they fit it."""
        if array.dtype.kind in "iu" and dtype.kind in "iu":
            # Integers of another width or sign are fine when they fit; astype would
            # wrap around silently (257 -> 1 for int8), so refuse those that don't.
            info = np.iinfo(dtype)
            outside = (array < info.min) | (array > info.max)
            if bool(np.any(outside)):
                i = int(np.argmax(outside))
                raise ReportError(
                    f"report {i} ({array[i]}) does not fit {self.name}'s report dtype {dtype}"
                )
        elif array.size and not np.can_cast(array.dtype, dtype, casting="same_kind"):
            raise ReportError(f"{self.name} reports must have dtype {dtype}, got {array.dtype}")
        return array.astype(dtype)

    def check_reports(self, reports: npt.ArrayLike) -> BoolArray:
        """A boolean mask: which reports are well-formed (see ``report_rule``)."""
        return self._valid_mask(self.coerce_reports(reports))

    def aggregate(self, reports: npt.ArrayLike) -> Aggregate:
        """Sufficient statistics of ``reports``; raises ReportError if any is malformed."""
        array = self.coerce_reports(reports)
        valid = self._valid_mask(array)
        if not bool(np.all(valid)):
            first = int(np.argmin(valid))
            raise ReportError(
                f"report {first} is not a valid {self.name} report: {self.report_rule}"
            )
        return Aggregate(len(array), self._sums(array))

    def aggregate_checked(self, reports: npt.NDArray[Any]) -> Aggregate:
        """Sufficient statistics of reports already checked with :meth:`check_reports`
        (the collector checks each report once, on arrival, and aggregates it without
        checking again). ReportError if the sums come out the wrong size."""
        array = self.coerce_reports(reports)
        sums = np.asarray(self._sums(array), dtype=np.float64)
        if sums.shape != (self.stats_size,):
            raise ReportError(
                f"{self.name} reports aggregate to {sums.size} sums, not {self.stats_size}: "
                "they were not checked"
            )
        return Aggregate(len(array), sums)

    def empty_aggregate(self) -> Aggregate:
        return Aggregate.zeros(self.stats_size)

    def _checked_aggregate(self, aggregate: Aggregate) -> Aggregate:
        if not isinstance(aggregate, Aggregate):
            raise ParameterError(f"estimate needs an Aggregate, got {type(aggregate).__name__}")
        if aggregate.sums.size != self.stats_size:
            raise ParameterError(
                f"aggregate has {aggregate.sums.size} sums but {self.name} keeps {self.stats_size}"
            )
        return aggregate


def centred_ranks(d: int) -> FloatArray:
    """Ranks 1 .. d less their middle, ``(d + 1) / 2``: the mean rank is ``(d + 1) / 2 +
    w . f`` for any fractions summing to 1, and an estimate whose fractions do not sum to
    1 exactly (unary encodings) is less noisy so, still unbiased."""
    return np.arange(1.0, d + 1.0) - (d + 1) / 2.0


@dataclass(frozen=True, kw_only=True)
class FrequencyOracle(Mechanism):
    """A categorical mechanism over items ``0 .. domain_size - 1``.

    Every oracle here is *pure* (Wang et al., USENIX Security 2017): each report
    "supports" a set of items, the true item with probability ``p`` and any other item
    with probability ``q < p``. The unbiased estimate of item v's fraction is
    ``(C_v / n - q) / (p - q)`` where ``C_v`` counts the reports supporting v, and its
    variance is ``(f p (1 - p) + (1 - f) q (1 - q)) / (n (p - q)^2)``.

    Parameters
    ----------
    epsilon : float
        The privacy parameter, > 0.
    domain_size : int
        The number of items d, 2 to 2^31.
    """

    kind: ClassVar[str] = "categorical"

    domain_size: int
    p: float = field(init=False)
    q: float = field(init=False)

    def __post_init__(self) -> None:
        self._check_epsilon()
        self._set(domain_size=check_domain_size(self.domain_size))
        p, q = self._support_probabilities()
        self._set(p=p, q=q)

    @functools.cached_property
    def keep_threshold(self) -> int:
        """``p`` as the 64-bit threshold the samplers compare a word with (a word below it:
        support the true item), exactly as served (``keep``, ``p``, ``in``); once."""
        return threshold64_floor(self.p)

    @abstractmethod
    def _support_probabilities(self) -> tuple[float, float]:
        """(p, q), computed once at construction; may set other derived fields first."""

    @property
    def stats_size(self) -> int:
        return self.domain_size

    def params(self) -> dict[str, Any]:
        return {"mechanism": self.name, "epsilon": self.epsilon, "domain_size": self.domain_size}

    # --- the portable rule and the conformance law -------------------------------------
    @classmethod
    def portable_report(cls, definition: Mapping[str, Any], value: Any, words: Words) -> bytes:
        d = len(definition["categories"])
        x = int(value)
        if not 0 <= x < d:
            raise ParameterError(f"item {x} is outside 0..{d - 1}")
        return cls.portable_item(definition["derived"], d, x, words)

    @abstractmethod
    def served_constants(self) -> dict[str, Any]: ...

    @classmethod
    @abstractmethod
    def portable_item(cls, derived: Derived, d: int, x: int, words: Words) -> bytes:
        """The report of item ``x`` of ``d`` by the portable rule (also a nested oracle's,
        with the constants it serves in ``derived``)."""

    @abstractmethod
    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """The law of the reports of item ``value`` (it needs none of ``derived``)."""

    def conformance_support(self, reports: Reports, value: Any) -> tuple[int, float] | None:
        return int(np.count_nonzero(self.supports(value, reports))), self.p

    def auto_variance(self) -> float:
        """One item's variance at frequency 0 from one report."""
        return float(self.variance(0.0))

    def _check_values(self, values: npt.NDArray[Any]) -> IntArray:
        if values.dtype.kind not in "iu":
            if values.size and not whole_floats(values):
                raise ReportError(
                    f"categorical values must be integer item indices, got dtype {values.dtype}"
                )
            values = values.astype(np.int64)
        return in_range(values, self.domain_size, "the domain ")

    def variance(self, frequency: float | npt.ArrayLike = 0.0, n: int = 1) -> Any:
        """Variance of an item's estimated fraction from ``n`` reports (``n=1``: one
        report) when its true fraction is ``frequency``; every mechanism's ``variance``
        means the variance of its estimate from ``n`` reports."""
        f = np.asarray(frequency, dtype=np.float64)
        p, q = self.p, self.q
        var = (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)
        return float(var) if var.ndim == 0 else var

    def covariance(self, frequencies: npt.ArrayLike, n: int = 1) -> FloatArray | None:
        """Covariance of the d estimated fractions from ``n`` reports of a population with
        ``frequencies`` (the reporters held fixed, as :meth:`variance`), or None when the
        items' joint support is unknown (:meth:`pair_support` None). A report supports
        item i with probability ``a_i`` (p or q) and two items with r1 or r0, so per report
        ``Cov(S_i, S_j) = E_x[r_ij - a_i a_j]`` (i != j), over ``(p - q)^2``."""
        pair = self.pair_support()
        if pair is None:
            return None
        f = np.asarray(frequencies, dtype=np.float64)
        p, q, (r1, r0) = self.p, self.q, pair
        either = f[:, None] + f[None, :]
        cov = either * (r1 - p * q) + (1.0 - either) * (r0 - q * q)
        np.fill_diagonal(cov, f * p * (1 - p) + (1 - f) * q * (1 - q))
        return np.asarray(cov / (n * (p - q) ** 2))

    def planned_half_width(
        self, n: int, frequency: float, level: float
    ) -> tuple[float, str] | None:
        """The expected half-width of an item's interval, and its method, for the planner,
        when this oracle's intervals are not made from support counts (None: they are)."""
        return None

    def report_channel(self) -> FloatArray | None:
        """The law of a report given each item (d x m, rows summing to 1) when the sums
        are the counts of each possible report, a multinomial: what the maximum-likelihood
        estimate needs (grr, rr, exponential); None for the others."""
        return None

    def rank_variance(self) -> float | None:
        """The variance ``auto`` weighs for ordered categories: the mean rank's from one
        report of a uniform population (None when the covariance is unknown)."""
        d = self.domain_size
        cov = self.covariance(np.full(d, 1.0 / d))
        if cov is None:
            return None
        w = centred_ranks(d)
        return float(w @ cov @ w)

    def mean_rank(self, estimate: FrequencyEstimate) -> MeanRank:
        """The reporters' mean rank (categories ranked 1 .. d) from this oracle's estimate,
        its standard error from :meth:`covariance` at the consistent (Norm-Sub) fractions.
        The ranks are centred (:func:`centred_ranks`). ParameterError for an oracle whose
        covariance is unknown."""
        d, n = self.domain_size, estimate.n
        w = centred_ranks(d)
        if n == 0:
            return MeanRank(math.nan, math.nan, 0, d)
        cov = self.covariance(norm_sub(estimate.frequencies), n)
        if cov is None:
            raise ParameterError(f"{self.name} has no mean rank: its items' covariance is unknown")
        var = float(w @ cov @ w)
        mean = (d + 1) / 2.0 + float(w @ estimate.frequencies)
        return MeanRank(mean, math.sqrt(max(var, 0.0)), n, d)

    def shares_at_least(
        self, estimate: FrequencyEstimate, level: float = 0.95, *, simultaneous: bool = False
    ) -> SharesAtLeast:
        """Ordered categories: the share at each category or later (all but the first),
        unbiased, with normal intervals (``estimate -/+ z stderr``, within [0, 1]) from
        :meth:`covariance` at the consistent (Norm-Sub) fractions, as :meth:`mean_rank`;
        ``simultaneous`` Bonferroni over the d - 1 shares."""
        d, n = self.domain_size, estimate.n
        w = at_least_weights(d)
        start = np.arange(1, d)
        values = w @ estimate.frequencies
        cov = None if n == 0 else self.covariance(norm_sub(estimate.frequencies), n)
        if cov is None:
            nan = np.full(d - 1, np.nan)
            return SharesAtLeast(start, nan, nan, nan, nan, level, simultaneous, "normal")
        stderr = np.sqrt(np.clip(np.einsum("ij,jk,ik->i", w, cov, w), 0.0, None))
        half = normal_quantile(level, comparisons=d - 1 if simultaneous else 1) * stderr
        low, high = np.clip(values - half, 0.0, 1.0), np.clip(values + half, 0.0, 1.0)
        return SharesAtLeast(start, values, stderr, low, high, level, simultaneous, "normal")

    @property
    def support_size(self) -> int | None:
        """How many items every report supports, when that is fixed (randomized response:
        one; subset selection: k); None where a report may support any number of them.
        What bounds the worst report a forger can send (:func:`ldpkit.screening.part_gains`)."""
        return None

    def pair_support(self) -> tuple[float, float] | None:
        """``(r1, r0)``: the probability that one report supports two given items, one of
        them the true item (r1) or neither (r0), when it is the same for every pair (what
        a structured metric's estimator needs); None when it depends on the items."""
        return None

    def screen_aggregate(self, aggregate: Aggregate, alpha: float) -> Finding | None:
        """Support counts: each item's, among n honest reports, is Bin(n, s) with
        q <= s <= p whatever the population (:func:`ldpkit.screening.support_counts`)."""
        agg = self._checked_aggregate(aggregate)
        return screening.support_counts(agg.sums, agg.n, self.p, self.q, alpha)

    def estimate(self, aggregate: Aggregate) -> FrequencyEstimate:
        """Unbiased fractions; intervals from each item's support count (see estimates)."""
        agg = self._checked_aggregate(aggregate)
        n = agg.n
        if n == 0:
            nan = np.full(self.domain_size, np.nan)
            return FrequencyEstimate(
                self.name, self.epsilon, 0, nan, nan.copy(), agg.sums, self.p, self.q,
                co_support=self.pair_support(),
            )  # fmt: skip
        freq = (agg.sums / n - self.q) / (self.p - self.q)
        stderr = np.sqrt(self.variance(np.clip(freq, 0.0, 1.0), n))
        return FrequencyEstimate(
            self.name, self.epsilon, n, freq, stderr, agg.sums, self.p, self.q,
            co_support=self.pair_support(),
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class NumericMechanism(Mechanism):
    """A mechanism for a number in declared ``bounds`` (lo, hi).

    Values outside the bounds are clipped to them on the device (documented, and the
    reason the bounds must be declared: they fix the sensitivity). Internally a value x
    maps to ``t = 2 (x - lo) / (hi - lo) - 1`` in [-1, 1]; each report debiases to an
    unbiased estimate of t, and the aggregate keeps the sum and sum of squares of those.
    """

    kind: ClassVar[str] = "numeric"

    bounds: tuple[float, float]

    def __post_init__(self) -> None:
        self._set(epsilon=check_epsilon(self.epsilon), bounds=check_bounds(self.bounds))
        check_min_epsilon(self.name, self.epsilon)  # (after the bounds: their error comes first)
        self._derive()

    def _derive(self) -> None:
        """Compute derived constants once (subclasses)."""

    stats_size = 2  # a sum and a sum of squares

    @property
    def half_range(self) -> float:
        lo, hi = self.bounds
        return (hi - lo) / 2.0

    def params(self) -> dict[str, Any]:
        return {"mechanism": self.name, "epsilon": self.epsilon, "bounds": list(self.bounds)}

    # --- the portable rule and the conformance law -------------------------------------
    @classmethod
    def portable_report(cls, definition: Mapping[str, Any], value: Any, words: Words) -> bytes:
        from ._portable import bounded

        lo, hi, x = bounded(definition, value)
        return cls.portable_number(definition["derived"], lo, hi, x, words)

    @classmethod
    @abstractmethod
    def portable_number(cls, derived: Derived, lo: float, hi: float, x: float, w: Words) -> bytes:
        """The report of the number ``x``, clipped to ``[lo, hi]``, by the portable rule."""

    def auto_variance(self) -> float:
        """The worst case of one report's variance over the bounds."""
        return self.worst_case_variance()

    def clipped(self, value: Any) -> float:
        """A number clipped to the bounds, as the device clips it."""
        lo, hi = self.bounds
        return min(max(float(value), lo), hi)

    def _check_values(self, values: npt.NDArray[Any]) -> FloatArray:
        return check_numbers(values, self.bounds)

    def to_unit(self, x: FloatArray) -> FloatArray:
        lo, _ = self.bounds
        return np.clip((x - lo) / self.half_range - 1.0, -1.0, 1.0)

    def unit_one(self, x: float) -> float:
        """:meth:`to_unit` of one number, in Python floats (the same operations)."""
        return min(max((x - self.bounds[0]) / self.half_range - 1.0, -1.0), 1.0)

    @abstractmethod
    def _debias(self, reports: npt.NDArray[Any]) -> FloatArray:
        """Unbiased estimates of the unit-scale values t from valid reports."""

    @abstractmethod
    def unit_variance(self, t: float | npt.ArrayLike) -> Any:
        """Variance of one debiased report at unit-scale true value t in [-1, 1]."""

    def variance(self, value: float | npt.ArrayLike, n: int = 1) -> Any:
        """Variance of the mean estimated from ``n`` reports (``n=1``: one debiased report), in the
        metric's units, when every reporter holds ``value``; as for frequency oracles, ``variance``
        means the variance of the estimate from ``n`` reports."""
        x = np.clip(np.asarray(value, dtype=np.float64), *self.bounds)
        var = np.asarray(self.unit_variance(self.to_unit(x))) * self.half_range**2 / n
        return float(var) if var.ndim == 0 else var

    def worst_case_variance(self) -> float:
        """Largest per-report noise variance over the bounds, in the metric's units."""
        t = np.linspace(-1.0, 1.0, 2001)
        return float(np.max(self.unit_variance(t))) * self.half_range**2

    def debias(self, reports: npt.ArrayLike) -> FloatArray:
        """Per-report unbiased estimates of the true values, in the metric's units."""
        array = self.coerce_reports(reports)
        lo, _ = self.bounds
        return lo + (self._debias(array) + 1.0) * self.half_range

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        t = self._debias(reports)
        return np.array([t.sum(), np.dot(t, t)], dtype=np.float64)

    @abstractmethod
    def noise_terms(self) -> tuple[float, float, float]:
        """``(A, B, extra)``: one debiased report's variance at unit value t lies in
        ``[A + B t^2, A + B t^2 + extra]`` (the noise given t; ``extra`` bounds what the
        grid rounding adds)."""

    def binary_scale(self) -> float | None:
        """For mechanisms whose reports are ``±scale`` in unit terms, that scale."""
        return None

    def unit_report_bound(self) -> float:
        """The largest ``|y|`` of a debiased report on the unit scale (inf if unbounded)."""
        return math.inf

    def report_range(self) -> tuple[float, float]:
        """The range of one debiased report, in the metric's units."""
        lo, half, bound = self.bounds[0], self.half_range, self.unit_report_bound()
        return lo + (1.0 - bound) * half, lo + (1.0 + bound) * half

    def screen_aggregate(self, aggregate: Aggregate, alpha: float) -> Finding | None:
        """The mean of n honest debiased reports has its expectation in the bounds whatever
        the inputs (t in [-1, 1]): its excess beyond either bound is tested one-sided at
        ``alpha / 2`` by Bernstein's inequality (rigorous), each report's variance at most
        :meth:`worst_case_variance` and each within ``unit_report_bound() + 1`` of its
        expectation (clamping a grid report at its cap, with probability below 1e-20,
        changes neither)."""
        agg = self._checked_aggregate(aggregate)
        if agg.n == 0:
            return None
        mean, half = float(agg.sums[0]) / agg.n, self.half_range
        variance = self.worst_case_variance() / (half * half)
        spread = self.unit_report_bound() + 1.0
        for excess, side in ((mean - 1.0, "above"), (-1.0 - mean, "below")):
            bound = screening.bernstein_excess(excess, agg.n, variance, spread)
            if bound <= alpha / 2.0:
                lo, hi = self.bounds
                return Finding(
                    "mean",
                    f"the mean of {agg.n} reports is {lo + (mean + 1.0) * half:.6g}, "
                    f"{excess * half:.4g} {side} the bounds [{lo:g}, {hi:g}]; an honest "
                    f"population's reports are that far {side} with probability below "
                    f"{bound:.2g} (Bernstein), whatever their values",
                    min(1.0, 2.0 * bound),
                )
        return None

    def estimate(self, aggregate: Aggregate) -> MeanEstimate:
        """The reporters' mean, with a standard error from the known noise variance.

        Given the reporters' unit values t_i, the mean of n debiased reports has variance
        ``sum v(t_i) / n^2`` with ``v(t) = A + B t^2`` (:meth:`noise_terms`). The sum of
        ``t_i^2`` is estimated from the sum of squared reports (``E[y^2] = t^2 + v(t)``)
        and kept within what the bounds allow, so the standard error never falls below
        the mechanism's own smallest noise, however alike the reports look. Binary
        reports (Duchi) get an interval on their proportion instead.
        """
        agg = self._checked_aggregate(aggregate)
        n = agg.n
        if n == 0:
            nan = math.nan
            return MeanEstimate(
                self.name, self.epsilon, 0, nan, nan, self.bounds, report_range=self.report_range()
            )
        s1, s2 = float(agg.sums[0]), float(agg.sums[1])
        a, b, extra = self.noise_terms()
        if abs(b) < 1e-12:  # Hybrid above 0.61: the t^2 terms cancel
            b = 0.0
        mean_t = s1 / n
        if b < 0.0:
            # v = A - t^2 (Duchi): the reports say nothing of sum t^2, which is at least
            # n mean^2; that bound gives the largest variance the mean allows.
            squares = n * min(mean_t * mean_t, 1.0)
        else:
            squares = (s2 - n * (a + extra / 2.0)) / (1.0 + b)
            if b > 0.0:
                # The estimate of sum t^2 is noisy, and clipping it at n (its largest value)
                # biases it low exactly where every value is at a bound; take it one
                # standard deviation high (each y^2 lies in [0, R^2], so its variance is at
                # most R^4 / 4) so the standard error is not understated at small n.
                bound = self.unit_report_bound()
                squares += math.sqrt(n) * bound * bound / (2.0 * (1.0 + b))
            squares = min(max(squares, 0.0), float(n))
        variance_sum = n * (a + extra) + b * squares
        stderr = math.sqrt(max(variance_sum, 0.0)) / n * self.half_range
        scale = self.binary_scale()
        binary = None if scale is None else BinaryCounts(round((s1 / scale + n) / 2.0), scale)
        mean = self.bounds[0] + (mean_t + 1.0) * self.half_range
        return MeanEstimate(
            self.name, self.epsilon, n, mean, stderr, self.bounds, binary, self.report_range()
        )
