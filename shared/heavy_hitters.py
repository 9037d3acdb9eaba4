"""Heavy hitters over open-domain strings: the answer, its intervals, and planning.

:class:`HeavyHitters` is what :meth:`ldpkit.mechanisms.strings.PrefixSketch.estimate`
returns: the top-k strings found, each with an estimate, a standard error and an
interval; the *threshold* below which nothing can be found at this epsilon and n; and
:meth:`HeavyHitters.query` for strings an analyst names. :func:`plan_strings` and
:func:`required_n_strings` say what a campaign can find before it runs. The find rule
and the walk's null model live here, shared by the plans and by the decoder
(:mod:`ldpkit.mechanisms._string_decoder`), which imports this module and never the reverse.

Estimand: the fraction of the n reporting devices that hold the string.

Intervals ("score" method): the variance of an estimate at true fraction f is
``V(f) = v0 + v1 f - v2 f^2``, with ``v0`` the null variance measured on decoy keys, ``v1``
the pure oracle's extra variance per unit of f plus the sampling term, and
``v2 = 1/n_E - 1/n`` (the estimation sketch's devices are a random subset of the n).
The interval is ``{f in [0, 1] : (f_hat - f)^2 <= z^2 V(f)}``, with ``f_hat`` clipped to
[0, 1] first: Wilson's construction, the variance taken at the hypothesised f rather
than the estimate, so it stays honest at small counts.

Strings are bytes. ``text`` is the UTF-8 decoding when the bytes are valid UTF-8 (control
characters included: JSON escapes them); otherwise each invalid byte is shown as ``\\xNN``
(Python's ``backslashreplace``) and ``utf8`` is False. ``hex`` is always the exact bytes,
so an item is never ambiguous.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ._json import finite_or_none
from ._validation import check_count, check_level
from .errors import ParameterError
from .estimates import ConfidenceInterval, normal_quantile
from .mechanisms import STRINGS, mechanism
from .screening import LinearShift

FloatArray = npt.NDArray[np.float64]

KeyEstimator = Callable[[Sequence[bytes]], tuple[FloatArray, FloatArray]]
"""Strings -> (estimates, extra variances): how an answer estimates named strings."""

# The find rule, shared by the decoder and the plans (not part of the protocol; see
# docs/statistics.md).
Z_KEEP = 1.0
"""A prefix must be this many standard errors above 0 to be extended (and in the beam)."""
Z_PREFILTER = 0.5
"""A complete string must be this many standard errors above 0 to be followed further."""
FALSE_FIND_RATE = 0.1
"""Expected number of strings no one holds in the answer, at most (Bonferroni)."""
WEAK_MARGIN = 1.0
"""A listing whose ``evidence_z`` is less than this above ``find_z`` is *weak*: a string
nobody holds that passes the find test clears ``find_z + 1`` with probability
``P(Z > c + 1) / P(Z > c)``, below 0.01 for the cutoffs here (c >= 4), so a string nobody
holds is expected among the strong listings in fewer than one answer in a thousand."""


@runtime_checkable
class StringSketch(Protocol):
    """What planning and the null model read of a strings mechanism (``PrefixSketch``)."""

    @property
    def name(self) -> str: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def max_length(self) -> int: ...
    @property
    def k(self) -> int: ...
    @property
    def cut(self) -> str: ...
    def variance(self, frequency: float = 0.0, n: int = 1) -> Any: ...
    def level_variance(self, frequency: float = 0.0, n: int = 1) -> Any: ...


def as_text(value: bytes) -> tuple[str, bool]:
    """``(text, utf8)``: the UTF-8 decoding, or ``\\xNN`` escapes for invalid bytes."""
    try:
        return value.decode("utf-8"), True
    except UnicodeDecodeError:
        return value.decode("utf-8", errors="backslashreplace"), False


def to_bytes(value: str | bytes) -> bytes:
    """A candidate as bytes: ``str`` in UTF-8, ``bytes`` as they are."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ParameterError(f"candidate {value!r} cannot be encoded as UTF-8: {exc}") from None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise ParameterError(f"a candidate must be a str or bytes, got {value!r}")


@dataclass(frozen=True)
class StringEstimate:
    """One string's estimated fraction, standard error and interval (at the answer's level),
    and for a listed string the evidence it was found on: ``evidence_z``, the find test's
    tail probability as a normal z (:data:`HeavyHitters.find_z` the least a found string
    has; docs/statistics.md, "How strong a listing is"). NaN for a string only named."""

    value: bytes
    estimate: float
    stderr: float
    low: float
    high: float
    evidence_z: float = math.nan

    @property
    def text(self) -> str:
        return as_text(self.value)[0]

    @property
    def utf8(self) -> bool:
        return as_text(self.value)[1]

    @property
    def hex(self) -> str:
        return self.value.hex()

    def weak(self, find_z: float) -> bool:
        """Whether this listing is weak: its evidence less than :data:`WEAK_MARGIN` above the
        answer's ``find_z`` (False for a named string, which has no evidence)."""
        return bool(self.evidence_z < find_z + WEAK_MARGIN)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``category`` (text), ``hex``, ``utf8``, ``estimate``, ``stderr``, ``low``,
        ``high``, ``evidence_z`` (non-finite numbers become None)."""
        text, utf8 = as_text(self.value)
        return {
            "category": text,
            "hex": self.value.hex(),
            "utf8": utf8,
            "estimate": finite_or_none(self.estimate),
            "stderr": finite_or_none(self.stderr),
            "low": finite_or_none(self.low),
            "high": finite_or_none(self.high),
            "evidence_z": finite_or_none(self.evidence_z),
        }


@dataclass(frozen=True)
class VarianceModel:
    """``V(f) = v0 + extra + v1 f - v2 f^2``: the variance of an estimate at true fraction f.

    ``extra`` is per string: what its collisions with the heavy strings in the fixed hash
    rows add beyond the average the null variance ``v0`` already holds.
    """

    v0: float
    v1: float
    v2: float

    def variance(self, f: npt.ArrayLike, extra: npt.ArrayLike = 0.0) -> FloatArray:
        x = np.clip(np.asarray(f, dtype=np.float64), 0.0, 1.0)
        base = self.v0 + np.asarray(extra, dtype=np.float64)
        return np.maximum(base + self.v1 * x - self.v2 * x * x, 0.0)

    def stderr(self, estimate: npt.ArrayLike, extra: npt.ArrayLike = 0.0) -> FloatArray:
        return np.sqrt(self.variance(estimate, extra))

    def interval(
        self, estimate: npt.ArrayLike, level: float, extra: npt.ArrayLike = 0.0
    ) -> tuple[FloatArray, FloatArray]:
        """Score interval ``{f in [0,1] : (f_hat - f)^2 <= z^2 V(f)}``, f_hat clipped to [0, 1]."""
        z = normal_quantile(level)
        e = np.asarray(estimate, dtype=np.float64)
        f = np.clip(e, 0.0, 1.0)
        v0 = self.v0 + np.asarray(extra, dtype=np.float64)
        z2 = z * z
        a = 1.0 + z2 * self.v2
        b = -(2.0 * f + z2 * self.v1)
        c = f * f - z2 * v0
        disc = np.sqrt(np.maximum(b * b - 4.0 * a * c, 0.0))
        low = np.clip((-b - disc) / (2.0 * a), 0.0, 1.0)
        high = np.clip((-b + disc) / (2.0 * a), 0.0, 1.0)
        # The set contains f_hat (clipped) by construction; rounding must not exclude it.
        low = np.minimum(low, f)
        high = np.maximum(high, f)
        bad = ~np.isfinite(e)
        low = np.where(bad, np.nan, low)
        high = np.where(bad, np.nan, high)
        return low, high


@dataclass(frozen=True, eq=False)
class HeavyHitters:
    """The top-k strings found, with estimates and intervals, and the detection threshold.

    Attributes
    ----------
    mechanism, epsilon, n, k, max_length : what produced the answer.
    items : the strings found and confirmed above ``threshold`` by the estimation sketch
        (Benjamini-Hochberg at 10%; at most k), by decreasing estimate. Their estimates
        come from the estimation sketch, whose devices took no part in the walk.
    threshold : a string less frequent than this is found with probability below 1/2,
        whatever its length (nothing below it can be found at this epsilon and n). An
        empty ``items`` means no string stood out above the noise, not that none is
        popular.
    thresholds : the same per length in bytes (index 0 .. max_length): longer strings
        must survive more levels and need more.
    level : confidence level of the items' ``low``/``high``.
    n_estimation : devices that reported to the estimation sketch.
    variance_model : the variance of an estimate as a function of the true fraction.
    find_z : the evidence (``evidence_z``) a string needs to be found: the normal z of the
        find test's level (Bonferroni over the strings a null walk tests). An item less
        than ``WEAK_MARGIN`` above it is weak (:meth:`StringEstimate.weak`).
    """

    mechanism: str
    epsilon: float
    n: int
    k: int
    max_length: int
    items: tuple[StringEstimate, ...]
    threshold: float
    thresholds: tuple[float, ...]
    level: float
    n_estimation: int
    variance_model: VarianceModel
    interval_method: str = "score"  # the interval construction (see the module docstring)
    find_z: float = math.nan
    _estimate_keys: KeyEstimator | None = field(default=None, repr=False)
    forgery: LinearShift | None = field(default=None, repr=False)
    """How far forged reports can move a string's estimate (:meth:`forgery_shift`)."""

    def forgery_shift(self, beta: float) -> float:
        """The largest change a forged fraction ``beta`` of the n reports (any the mechanism
        accepts) can make to any string's expected estimate, found or named: the same for
        every string (:meth:`ldpkit.mechanisms.strings.PrefixSketch.forgery`)."""
        if self.forgery is None:
            raise ParameterError("this answer was made without its mechanism's forgery bound")
        return float(self.forgery.shift(beta)[0])

    @property
    def strings(self) -> list[bytes]:
        return [item.value for item in self.items]

    @property
    def frequencies(self) -> FloatArray:
        return np.array([item.estimate for item in self.items], dtype=np.float64)

    @property
    def stderr(self) -> FloatArray:
        return np.array([item.stderr for item in self.items], dtype=np.float64)

    def ci(self, level: float = 0.95) -> ConfidenceInterval:
        """Intervals of the items' fractions at ``level`` (arrays, in item order)."""
        again = self._estimates(self.strings, check_level(level))
        low = np.array([e.low for e in again], dtype=np.float64)
        high = np.array([e.high for e in again], dtype=np.float64)
        return ConfidenceInterval(low, high)

    def _estimates(self, values: Sequence[bytes], level: float) -> tuple[StringEstimate, ...]:
        if self._estimate_keys is None or self.n_estimation == 0:
            est, extra = np.full(len(values), np.nan), np.zeros(len(values))
        else:
            est, extra = self._estimate_keys(values)
        se = np.where(np.isfinite(est), self.variance_model.stderr(est, extra), np.nan)
        low, high = self.variance_model.interval(est, level, extra)
        # A listed string keeps its evidence when asked again (by name, at another level).
        evidence = {item.value: item.evidence_z for item in self.items}
        return tuple(
            StringEstimate(v, float(e), float(s), float(lo), float(hi), evidence.get(v, math.nan))
            for v, e, s, lo, hi in zip(values, est, se, low, high, strict=True)
        )

    def query(
        self, candidates: Iterable[str | bytes], level: float | None = None
    ) -> tuple[StringEstimate, ...]:
        """Estimated fractions of named strings, each with a standard error and interval.

        A string that is among the items gets the same estimate as its item. A string
        longer than ``max_length`` could not have been reported: ParameterError.
        """
        if isinstance(candidates, (str, bytes)):
            candidates = [candidates]
        values = [to_bytes(c) for c in candidates]
        for v in values:
            if len(v) > self.max_length:
                raise ParameterError(
                    f"candidate {as_text(v)[0][:40]!r} is {len(v)} bytes long; no device could "
                    f"report it (max_length = {self.max_length})"
                )
        return self._estimates(values, check_level(level if level is not None else self.level))

    def to_dict(
        self, candidates: Iterable[str | bytes] | None = None, level: float | None = None
    ) -> dict[str, Any]:
        """JSON-ready answer: plain numbers, strings as text plus hex; None for non-finite."""
        lvl = check_level(level if level is not None else self.level)
        items = self.items if lvl == self.level else self._estimates(self.strings, lvl)
        data: dict[str, Any] = {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "n": self.n,
            "n_estimation": self.n_estimation,
            "k": self.k,
            "max_length": self.max_length,
            "level": lvl,
            "interval_method": self.interval_method,
            "threshold": finite_or_none(self.threshold),
            "find_z": finite_or_none(self.find_z),
            "thresholds_by_length": [finite_or_none(t) for t in self.thresholds],
            "items": [item.to_dict() for item in items],
        }
        if candidates is not None:
            data["candidates"] = [c.to_dict() for c in self.query(candidates, lvl)]
        return data


def oracle_variance(f: Any, n: float, p: float, q: float) -> Any:
    """The pure-oracle variance ``(f p(1-p) + (1-f) q(1-q)) / (n (p-q)^2)``."""
    return (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)


def normal_upper(alpha: float) -> float:
    """The one-sided upper normal quantile ``z`` with ``P(Z > z) = alpha``."""
    return NormalDist().inv_cdf(1.0 - alpha)


def beam_width(k: int) -> int:
    """Prefixes kept per level."""
    return max(64, 4 * k)


def model_tests(m: StringSketch) -> float:
    """Complete strings a walk tests when only noise fills the beam (Bonferroni count).

    A null beam's prefixes have lengths spread over the levels left, so about
    ``1 / (M - t + 1)`` of its ``K`` prefixes complete at level t, each with 256 children.
    """
    width = beam_width(m.k)
    harmonic = sum(1.0 / i for i in range(1, m.max_length + 1))
    return 256.0 * (1.0 + width * harmonic)


def find_z(m: StringSketch) -> float:
    return normal_upper(FALSE_FIND_RATE / model_tests(m))


def _null_step_z(m: StringSketch) -> list[float]:
    """Per step the z a null candidate needs to stay in the beam (at least ``Z_KEEP``).
    At step 1 the beam competes among all ``(M + 1) 256`` (length, first byte) pairs,
    deeper among 256 children of each of K prefixes: the cutoff is the z the K-th
    largest of that many null candidates reaches."""
    width = beam_width(m.k)
    out = []
    for j in range(1, m.max_length + 1):
        candidates = 256 * m.max_length + 1 if j == 1 else 256 * width
        z = normal_upper(width / candidates) if width < candidates else Z_KEEP
        out.append(max(Z_KEEP, z))
    return out


def scaled_levels(max_length: int, length: int, bytes_known: int) -> list[int]:
    """Prefix levels t that cut a string of ``length`` bytes after ``bytes_known`` bytes
    (``ceil(t length / M) = bytes_known``); the empty string: every level, at step 1."""
    if length == 0:
        return list(range(1, max_length + 1)) if bytes_known == 1 else []
    return [t for t in range(1, max_length + 1) if -(-t * length // max_length) == bytes_known]


def _normal_cdf(x: float) -> float:
    """``NormalDist().cdf(x)``, the same arithmetic without the method call."""
    return 0.5 * (1.0 + math.erf(x / _SQRT2))


_SQRT2 = math.sqrt(2.0)


class _DetectionModel:
    """The probability that a string of a given length and true frequency is found.
    The worst case: each prefix has the string's own frequency (no other string shares
    it). ``sigmas[t - 1]`` and ``cutoffs[t - 1]`` are the null standard error and the
    estimate a prefix needed to stay in the beam at level t (1 .. max_length); a complete
    string must then clear ``prefilter`` standard errors at its own level and ``find_z``
    pooled standard errors over the levels from its own to the last."""

    def __init__(
        self, sigmas: Sequence[float], cutoffs: Sequence[float], prefilter: float, find_z: float
    ) -> None:
        self.sigmas, self.cutoffs = list(sigmas), list(cutoffs)
        self.prefilter, self.find_z = prefilter, find_z
        levels = len(self.sigmas)
        # pooled[own - 1]: the pooled sigma of levels own .. max_length
        self.pooled = [
            1.0 / math.sqrt(sum(1.0 / (s * s) for s in self.sigmas[own - 1 : levels]))
            for own in range(1, levels + 1)
        ]

    def probability(self, f: float, length: int) -> float:
        own = max(length, 1)
        steps = zip(self.cutoffs[: own - 1], self.sigmas[: own - 1], strict=True)
        return _walk_probability(
            f, steps, self.sigmas[own - 1], self.prefilter, self.pooled[own - 1], self.find_z
        )


def _walk_probability(
    f: float,
    steps: Iterable[tuple[float, float]],
    own: float,
    prefilter: float,
    found: float,
    find_z: float,
) -> float:
    """Probability that a string of frequency f passes every step of the walk (each a
    ``(cut, sigma)``: its prefix's estimate above ``cut``), its own level's prefilter
    (``prefilter`` sds of ``own``) and the find test (``find_z`` sds of ``found``), the
    estimates independent and normal."""
    prob = 1.0
    for cut, sigma in steps:
        prob *= _normal_cdf((f - cut) / sigma)
    prob *= _normal_cdf((f - prefilter * own) / own)
    prob *= _normal_cdf((f - find_z * found) / found)
    return prob


def detection_thresholds(
    sigmas: Sequence[float],
    cutoffs: Sequence[float],
    prefilter: float,
    find_z: float,
    probability: float = 0.5,
) -> tuple[float, ...]:
    """For each length 0 .. max_length, the frequency found with ``probability`` (<= 1)."""
    return _solve_thresholds(
        sigmas, lambda: _DetectionModel(sigmas, cutoffs, prefilter, find_z), probability
    )


class _ScaledDetectionModel:
    """:class:`_DetectionModel` for the ``"scaled"`` cut: a prefix of j bytes of a string of
    L bytes is pooled over the levels that cut it there (``level_sigmas[t - 1]``) and needs
    ``step_z[j - 1]`` pooled standard errors to stay in the beam; the complete string is
    pooled over the levels that see it whole, must clear ``prefilter`` there, and ``find_z``
    pooled with the estimation sketch (null standard error ``estimation_sigma``)."""

    def __init__(
        self,
        level_sigmas: Sequence[float],
        step_z: Sequence[float],
        prefilter: float,
        find_z: float,
        estimation_sigma: float = math.inf,
    ) -> None:
        self.step_z, self.prefilter, self.find_z = list(step_z), prefilter, find_z
        big_m = len(level_sigmas)
        self.pooled: list[list[float]] = []  # [length][j - 1]
        for length in range(big_m + 1):
            row = []
            for j in range(1, max(length, 1) + 1):
                ts = scaled_levels(big_m, length, j)
                precision = sum(1.0 / level_sigmas[t - 1] ** 2 for t in ts)
                row.append(1.0 / math.sqrt(precision) if precision > 0 else math.inf)
            self.pooled.append(row)
        with_estimation = 1.0 / estimation_sigma**2
        self.found = [
            1.0 / math.sqrt(1.0 / row[-1] ** 2 + with_estimation)
            if row[-1] < math.inf
            else math.inf
            for row in self.pooled
        ]

    def probability(self, f: float, length: int) -> float:
        row = self.pooled[length]
        steps = ((z * sigma, sigma) for z, sigma in zip(self.step_z, row[:-1], strict=False))
        return _walk_probability(f, steps, row[-1], self.prefilter, self.found[length], self.find_z)


def scaled_detection_thresholds(
    level_sigmas: Sequence[float],
    step_z: Sequence[float],
    prefilter: float,
    find_z: float,
    estimation_sigma: float = math.inf,
    probability: float = 0.5,
) -> tuple[float, ...]:
    """:func:`detection_thresholds` under the ``"scaled"`` cut (:class:`_ScaledDetectionModel`)."""
    return _solve_thresholds(
        level_sigmas,
        lambda: _ScaledDetectionModel(level_sigmas, step_z, prefilter, find_z, estimation_sigma),
        probability,
    )


def _solve_thresholds(
    sigmas: Sequence[float],
    model_of: Callable[[], _DetectionModel | _ScaledDetectionModel],
    probability: float,
) -> tuple[float, ...]:
    """Bisect each length's threshold; all 1 (nothing findable) if a level's sigma is not
    a finite positive number (too few reports to model)."""
    max_length = len(sigmas)
    if not all(math.isfinite(s) and s > 0 for s in sigmas):
        return tuple(1.0 for _ in range(max_length + 1))
    model = model_of()
    out = []
    for length in range(max_length + 1):
        if model.probability(1.0, length) < probability:
            out.append(1.0)
            continue
        lo, hi = 0.0, 1.0
        for _ in range(40):  # 1e-12 of [0, 1]
            mid = (lo + hi) / 2
            if model.probability(mid, length) < probability:
                lo = mid
            else:
                hi = mid
        out.append(hi)
    return tuple(out)


@dataclass(frozen=True)
class StringPlan:
    """What a strings campaign of n devices can find.

    ``threshold`` is the frequency a string is found at with ``probability``, for the
    most favourable length; ``thresholds`` per length 0 .. max_length (a 16-byte string
    needs more than a 5-byte one); ``max_length_threshold`` for strings of max_length.
    """

    mechanism: str
    epsilon: float
    max_length: int
    k: int
    n: int
    probability: float
    threshold: float
    thresholds: tuple[float, ...]

    @property
    def max_length_threshold(self) -> float:
        return self.thresholds[-1]


def _unit_thresholds(m: StringSketch, probability: float) -> tuple[float, ...]:
    """Thresholds at n = 1 under random hashing (the walk's null model), scaling as 1 / sqrt(n)."""
    # Solved on a scaled problem (frequencies may exceed 1 at n = 1): scale to n = 1e12.
    scale = 1e6
    sigma = math.sqrt(m.level_variance(0.0, 1))
    sigmas = [sigma / scale] * m.max_length
    if m.cut == "scaled":
        sigma_e = math.sqrt(m.variance(0.0, 1)) / scale
        found = scaled_detection_thresholds(
            sigmas, _null_step_z(m), Z_PREFILTER, find_z(m), sigma_e, probability
        )
    else:
        cutoffs = [z * sigma / scale for z in _null_step_z(m)]
        found = detection_thresholds(sigmas, cutoffs, Z_PREFILTER, find_z(m), probability)
    return tuple(t * scale if t < 1.0 else math.inf for t in found)


def _check_fraction(value: float, name: str, *, closed: bool = False) -> float:
    """``value`` in (0, 1), or in (0, 1] if ``closed``."""
    where = "(0, 1]" if closed else "(0, 1)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParameterError(f"{name} must be a number in {where}, got {value!r}")
    if not (0.0 < value <= 1.0 if closed else 0.0 < value < 1.0):
        raise ParameterError(f"{name} must be in {where}, got {value!r}")
    return float(value)


def _string_mechanism(epsilon: float, max_length: int, k: int) -> StringSketch:
    """The strings mechanism, from the registry (its module imports this one)."""
    m = mechanism(STRINGS[0], epsilon=epsilon, max_length=max_length, k=k)
    if not isinstance(m, StringSketch):  # the registry's strings mechanism is one
        raise TypeError(f"{m.name!r} is not a strings mechanism")
    return m


def plan_strings(
    *, epsilon: float, max_length: int, n: int, k: int = 20, probability: float = 0.5
) -> StringPlan:
    """The frequency a string must have to be found, with ``probability``, among n devices.

    Computed from the variance formulas under random hashing (the decoder's measured
    null variance is a little larger when heavy strings collide), with the beam and
    false-find cutoffs the decoder uses when no heavy prefix crowds the beam.
    """
    m = _string_mechanism(epsilon, max_length, k)
    n = check_count(n)
    probability = _check_fraction(probability, "probability")
    scaled = tuple(min(1.0, t / math.sqrt(n)) for t in _unit_thresholds(m, probability))
    return StringPlan(m.name, m.epsilon, m.max_length, m.k, n, probability, min(scaled), scaled)


def required_n_strings(
    *,
    epsilon: float,
    max_length: int,
    frequency: float,
    length: int | None = None,
    k: int = 20,
    probability: float = 0.5,
) -> StringPlan:
    """The smallest n at which a string of ``frequency`` is found with ``probability``.

    ``length`` is the string's length in bytes; by default max_length (the hardest).
    """
    m = _string_mechanism(epsilon, max_length, k)
    frequency = _check_fraction(frequency, "frequency", closed=True)
    if length is None:
        length = m.max_length
    if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= max_length:
        raise ParameterError(f"length must be an integer in [0, {max_length}], got {length!r}")
    probability = _check_fraction(probability, "probability")
    n = max(1, math.ceil((_unit_thresholds(m, probability)[length] / frequency) ** 2))
    return plan_strings(epsilon=epsilon, max_length=max_length, n=n, k=k, probability=probability)
