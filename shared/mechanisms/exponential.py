"""The exponential mechanism over a finite domain, calibrated exactly, with its estimates.

A reporter holding item ``x`` in ``0 .. d - 1`` reports output ``o`` in ``0 .. m - 1`` with
probability ``P[x, o]`` proportional to ``exp(s q(x, o))`` for a score ``q``:

- ``"distance"``: ordered categories, ``q(x, o) = -|x - o|`` (m = d): answers land near the
  truth, which a mean rating, a share "4 or more" or a median bracket need;
- ``"band"``: ``q(x, o) = 1`` if ``|x - o| <= b`` else 0 (m = d), the square wave of Li et
  al. on a finite grid: "within b of the truth, or anywhere";
- ``"matrix"``: any finite d x m score matrix.

Exact calibration. The textbook rule (McSherry and Talwar) takes ``s = eps / (2 Δq)`` with
``Δq = max_{o, x, x'} |q(x, o) - q(x', o)|``; that is a bound. The channel is a finite
matrix, so this module sets ``s`` so that its privacy loss,
``L(s) = max_o (max_x log P[x, o] - min_x log P[x, o])``, equals eps. With
``R = max_{x, x'} range_o (q(x, o) - q(x', o))`` one has ``s R / 2 <= L(s) <= s R``
(:func:`privacy_loss`), so the exact scale lies in ``[eps / R, 2 eps / R]``; ``L`` is
continuous and bisection keeps ``L(lo) <= eps < L(hi)``, so the scale returned satisfies
``L(s) <= eps`` whether or not ``L`` is monotone, and equals eps to rounding.
:func:`calibrate` returns both calibrations side by side.

Estimates. Output counts ``c`` from ``n`` reports have mean ``n P^T f``. Channel inversion,
``f_hat = A c / n`` with ``A`` a left inverse of ``P^T``, is unbiased; its covariance is
``A (diag(lam) - lam lam^T) A^T / n`` with ``lam = P^T f``, estimated from the observed
frequencies with ``n - 1`` (which makes the covariance estimate unbiased). The constrained
maximum-likelihood estimate (EM, Dempster-Laird-Rubin; the reconstruction of Li et al.
without smoothing) lies on the simplex and is consistent.

:class:`ExponentialMechanism` is the core (any d up to 1,024, float64 sampler).
:class:`Exponential` is the registered mechanism ``"exponential"`` of categorical metrics
(``ordered = true`` with ``score = "distance"`` or ``"band"``, or a ``scores`` matrix):
its reports are one output index (uint32), drawn by the portable rule of docs/protocol.md
from the served 64-bit cumulative thresholds of each input's row of the channel.

References
----------
F. McSherry, K. Talwar, "Mechanism design via differential privacy", FOCS 2007.
Z. Li, T. Wang, M. Lopuhaä-Zwakenberg, N. Li, B. Škorić, "Estimating numerical
distributions under local differential privacy", SIGMOD 2020 (the square wave, EMS).
A. P. Dempster, N. M. Laird, D. B. Rubin, "Maximum likelihood from incomplete data via the
EM algorithm", JRSS B 1977.
"""

from __future__ import annotations

import bisect
import decimal
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from .._validation import check_domain_size, check_epsilon, shown
from ..errors import ParameterError, ReportError
from ..estimates import (
    ConfidenceInterval,
    FrequencyEstimate,
    MeanRank,
    RobustFrequencies,
    SharesAtLeast,
    at_least_weights,
)
from ..intervals import SCORE, Bounds, normal_quantile
from ..randomness import resolve_rng
from ..screening import check_fraction
from . import _bits
from ._conformance import CATEGORIES, case_name, chi2
from ._linear_intervals import LinearBounds, hull, score_bounds
from ._portable import hex64
from .base import BoolArray, FrequencyOracle, LawTest, PlanCase, Reports, centred_ranks

if TYPE_CHECKING:
    from ..aggregate import Aggregate
    from ._portable import Derived, Words

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Score = Literal["distance", "band", "matrix"]

_BISECTIONS = 200  # far more than the ~60 halvings that exhaust a double's precision
_MAX_CONDITION = 1e12  # beyond this the inversion estimate is noise; use EM
MAX_ITEMS = 1024  # the channel is a dense d x m matrix, calibrated in O(d^2 m)


def _logsumexp_rows(a: FloatArray) -> FloatArray:
    top = a.max(axis=1, keepdims=True)
    return np.asarray(top[:, 0] + np.log(np.exp(a - top).sum(axis=1)))


def log_channel(quality: FloatArray, scale: float) -> FloatArray:
    """``log P[x, o]`` for ``P[x, o]`` proportional to ``exp(scale quality[x, o])``."""
    a = scale * quality
    return np.asarray(a - _logsumexp_rows(a)[:, None])


def privacy_loss(quality: FloatArray, scale: float) -> float:
    """The channel's largest log-ratio ``max_{o, x, x'} log P[x, o] / P[x', o]`` (exact
    epsilon of the mechanism at this scale), in O(d m): per output, column max minus min."""
    lp = log_channel(quality, scale)
    return float(np.max(lp.max(axis=0) - lp.min(axis=0)))


def sensitivity(quality: FloatArray) -> float:
    """``Δq = max_{o, x, x'} |q(x, o) - q(x', o)|``: the textbook rule's sensitivity."""
    return float(np.max(quality.max(axis=0) - quality.min(axis=0)))


def _spread(quality: FloatArray) -> float:
    """``R = max_{x, x'} range_o (q(x, o) - q(x', o))``, so that ``s R / 2 <= L(s) <= s R``."""
    # One input x at a time against all x': O(d m) memory.
    return max(float(np.max(np.ptp(row - quality, axis=1))) for row in quality)


def exact_scale(quality: FloatArray, epsilon: float) -> float:
    """The scale s with ``privacy_loss(quality, s) == epsilon`` (to rounding, never above).

    Raises ParameterError when the score does not depend on the input (the channel would
    be the same for every input: no information, any epsilon)."""
    r = _spread(quality)
    if not r > 0:
        raise ParameterError("the score gives every input the same channel; nothing to learn")
    lo, hi = epsilon / r, 2.0 * epsilon / r
    if privacy_loss(quality, hi) <= epsilon:  # only when L(s) = s R / 2 exactly at the top
        return hi
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if privacy_loss(quality, mid) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


_SCALE_BITS = 44  # significant bits of the served scale (see served_law)
_DECIMAL = decimal.Context(prec=40)


def _decimal_rows(
    quality: FloatArray, scale: float
) -> list[tuple[list[decimal.Decimal], list[decimal.Decimal], decimal.Decimal]]:
    """Per row x: ``s q(x, o)`` and ``exp(s q(x, o))`` for every o, and
    ``Z_x = sum_o exp(s q(x, o))``, in 40-digit
    decimal arithmetic (exp and ln correctly rounded there, so the same on every machine);
    each distinct score's exp computed once."""
    ctx, s = _DECIMAL, decimal.Decimal(scale)
    exps: dict[float, decimal.Decimal] = {}
    rows = []
    for row in quality.tolist():
        a = [ctx.multiply(s, decimal.Decimal(v)) for v in row]
        for v, av in zip(row, a, strict=True):
            if v not in exps:
                exps[v] = ctx.exp(av)
        e = [exps[v] for v in row]
        rows.append((a, e, sum(e, decimal.Decimal(0))))
    return rows


def _decimal_loss(quality: FloatArray, scale: float) -> decimal.Decimal:
    """:func:`privacy_loss` in decimal (see :func:`_decimal_rows`)."""
    log_rows: list[list[decimal.Decimal]] = []
    for a, _, z in _decimal_rows(quality, scale):
        log_z = _DECIMAL.ln(z)
        log_rows.append([av - log_z for av in a])
    spreads: list[decimal.Decimal] = [max(c) - min(c) for c in zip(*log_rows, strict=True)]
    return max(spreads)


def served_law(
    quality: FloatArray, epsilon: float, scale: float
) -> tuple[float, tuple[tuple[int, ...], ...]]:
    """The scale a served definition uses and its 64-bit thresholds (:func:`served_thresholds`).

    ``scale`` (:func:`exact_scale`, computed with the machine's exp and log, which differ in
    the last bit between CPUs) moves to the largest multiple of ``2^(e - 44)`` (``2^e``
    about ``scale``) whose privacy loss, computed in decimal, is at most ``epsilon``: the
    same on every machine, within ``2^-43`` of the exact scale (relative). Then, since the
    device samples the integer thresholds and not the channel (rounding each one down moves
    a cell by up to ``2^-64``, in a small cell past epsilon by up to 1e-15), the scale steps
    down until the thresholds' own law spends at most ``epsilon`` (:func:`threshold_loss`).
    """
    step = math.ldexp(1.0, math.frexp(scale)[1] - _SCALE_BITS)
    k = math.floor(scale / step)
    bound = decimal.Decimal(epsilon)
    while _decimal_loss(quality, (k + 1) * step) <= bound:
        k += 1
    while k > 1 and _decimal_loss(quality, k * step) > bound:
        k -= 1
    rows = served_thresholds(quality, k * step)
    while k > 1 and threshold_loss(rows) > bound:
        k -= 1
        rows = served_thresholds(quality, k * step)
    return k * step, rows


def served_thresholds(quality: FloatArray, scale: float) -> tuple[tuple[int, ...], ...]:
    """Each row's 64-bit cumulative thresholds ``floor(2^64 (P[x, 0] + ... + P[x, o]))``,
    ``o < m - 1``, computed in decimal: the same on every machine."""
    ctx, two64 = _DECIMAL, decimal.Decimal(1 << 64)
    rows = []
    for _, e, z in _decimal_rows(quality, scale):
        total, row = decimal.Decimal(0), []
        for ev in e[:-1]:
            total += ev
            row.append(min(int(ctx.divide(ctx.multiply(total, two64), z)), (1 << 64) - 1))
        rows.append(tuple(row))
    return tuple(rows)


def threshold_loss(thresholds: Sequence[Sequence[int]]) -> decimal.Decimal:
    """The privacy loss of the law the thresholds define (cell widths over ``2^64``): the
    largest ``ln(max / min)`` of an output's widths over the inputs, in 40-digit decimal
    (infinite when an output has width 0 in some row and not in all)."""
    widths = [[b - a for a, b in zip((0, *r), (*r, 1 << 64), strict=True)] for r in thresholds]
    worst = decimal.Decimal(0)
    for column in zip(*widths, strict=True):
        low, high = min(column), max(column)
        if low == 0:
            if high:
                return decimal.Decimal("Infinity")
            continue
        worst = max(
            worst, _DECIMAL.ln(_DECIMAL.divide(decimal.Decimal(high), decimal.Decimal(low)))
        )
    return worst


@dataclass(frozen=True)
class Calibration:
    """The exact calibration of one score beside the textbook rule.

    Attributes
    ----------
    epsilon : the privacy loss asked for, which the exact scale spends exactly.
    scale : the exact scale s (``privacy_loss(q, s) == epsilon``).
    sensitivity : the score's Δq.
    textbook_scale : ``epsilon / (2 Δq)``, the textbook rule's scale for the same epsilon.
    textbook_epsilon : what the textbook rule charges for the exact channel, ``2 Δq s``
        (>= epsilon): the saving of the exact calibration is ``textbook_epsilon - epsilon``.
    textbook_actual : the true privacy loss of the textbook rule's channel (<= epsilon):
        the budget the textbook rule leaves unspent, ``epsilon - textbook_actual``.
    """

    epsilon: float
    scale: float
    sensitivity: float
    textbook_scale: float
    textbook_epsilon: float
    textbook_actual: float

    @property
    def ratio(self) -> float:
        """``textbook_epsilon / epsilon``: how many times the textbook overcharges (1 to 2)."""
        return self.textbook_epsilon / self.epsilon


def calibrate(quality: npt.ArrayLike, epsilon: float) -> Calibration:
    """Calibrate a score matrix exactly and by the textbook rule; see :class:`Calibration`."""
    eps = check_epsilon(epsilon)
    q = _check_quality(quality)
    s = exact_scale(q, eps)
    delta = sensitivity(q)
    tb = eps / (2.0 * delta)
    return Calibration(eps, s, delta, tb, 2.0 * delta * s, privacy_loss(q, tb))


def score_matrix(
    score: Score, domain_size: int, *, band: int | None = None, scores: Any = None
) -> FloatArray:
    """The d x m score matrix of a named score (see the module docstring)."""
    if score == "matrix":
        if scores is None:
            raise ParameterError("score 'matrix' needs scores, a d x m matrix")
        return _check_quality(scores)
    if scores is not None:
        raise ParameterError(f"scores is only for score 'matrix', not {score!r}")
    d = check_domain_size(domain_size)
    if d > MAX_ITEMS:
        raise ParameterError(f"domain_size must be at most {MAX_ITEMS}, got {d}")
    gap = np.abs(np.arange(d)[:, None] - np.arange(d)[None, :]).astype(np.float64)
    if score == "distance":
        if band is not None:
            raise ParameterError("band is only for score 'band'")
        return np.asarray(-gap, dtype=np.float64)
    if score == "band":
        if isinstance(band, bool) or not isinstance(band, int | np.integer):
            raise ParameterError(f"score 'band' needs an integer band, got {band!r}")
        if not 0 <= band < d - 1:
            raise ParameterError(f"band must be in 0 .. {d - 2} for d = {d}, got {band}")
        return np.asarray(gap <= band, dtype=np.float64)
    raise ParameterError(f"score must be 'distance', 'band' or 'matrix', got {score!r}")


def _check_quality(scores: Any) -> FloatArray:
    try:
        q = np.array(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"scores must be a matrix of numbers: {exc}") from None
    if q.ndim != 2 or not 2 <= q.shape[0] <= q.shape[1] <= MAX_ITEMS:
        raise ParameterError(
            f"scores must be a d x m matrix with 2 <= d <= m <= {MAX_ITEMS} (inputs x "
            f"outputs), got shape {q.shape}"
        )
    if not np.all(np.isfinite(q)):
        raise ParameterError("scores must be finite")
    return q


@dataclass(frozen=True)
class ChannelEstimate:
    """Estimated frequencies of the d inputs from n reports.

    Attributes
    ----------
    frequencies : the estimate (inversion: unbiased, may leave [0, 1]; EM: on the simplex).
    covariance : its estimated covariance (inversion), or None (EM).
    n : the number of reports.
    """

    frequencies: FloatArray
    covariance: FloatArray | None
    n: int

    @property
    def stderr(self) -> FloatArray:
        """Standard errors (inversion only)."""
        if self.covariance is None:
            raise ParameterError("the EM estimate has no standard errors here; use inversion")
        return np.sqrt(np.clip(np.diag(self.covariance), 0.0, None))

    def intervals(self, level: float = 0.95) -> tuple[FloatArray, FloatArray]:
        """Normal intervals ``f_hat -/+ z stderr`` of each item at ``level`` (pointwise)."""
        z = normal_quantile(level)
        half = z * self.stderr
        return self.frequencies - half, self.frequencies + half


@dataclass(frozen=True)
class RankMean:
    """The mean rank ``sum_x x f_x`` (ranks 0 .. d - 1, or given values) with its error."""

    mean: float
    stderr: float
    n: int

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        half = normal_quantile(level) * self.stderr
        return self.mean - half, self.mean + half


@dataclass(frozen=True, kw_only=True)
class ExponentialMechanism:
    """The exponential mechanism over a finite domain, exactly epsilon-LDP.

    Parameters
    ----------
    epsilon : float
        The privacy loss the channel spends exactly (its largest log-ratio).
    score : {"distance", "band", "matrix"}
        The score family (module docstring).
    domain_size : int, optional
        d, the number of items (and outputs); from ``scores`` for ``"matrix"``.
    band : int, optional
        b for ``"band"``: outputs within b of the truth score 1, others 0.
    scores : array_like, optional
        The d x m score matrix for ``"matrix"`` (inputs x outputs, m >= d).

    Attributes (derived once)
    -------------------------
    quality : the score matrix; scale : the exact scale; channel : ``P`` (d x m).

    Examples
    --------
    >>> m = ExponentialMechanism(epsilon=1.0, score="distance", domain_size=5)
    >>> abs(m.privacy_loss() - 1.0) < 1e-12
    True
    """

    epsilon: float
    score: Score = "distance"
    domain_size: int | None = None
    band: int | None = None
    scores: Any = None
    quality: FloatArray = field(init=False, repr=False)
    scale: float = field(init=False)
    channel: FloatArray = field(init=False, repr=False)
    _cumulative: FloatArray = field(init=False, repr=False)
    _inverse: FloatArray | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        eps = check_epsilon(self.epsilon)
        q = score_matrix(self.score, self.domain_size or 0, band=self.band, scores=self.scores)
        if self.domain_size is not None and self.domain_size != q.shape[0]:
            raise ParameterError(
                f"domain_size {self.domain_size} does not match the scores' {q.shape[0]} rows"
            )
        s = exact_scale(q, eps)
        p = np.exp(log_channel(q, s))
        cum = np.cumsum(p, axis=1)
        cum[:, -1] = 1.0  # the last output takes any rounding left over
        pt = p.T
        inverse = np.linalg.pinv(pt) if np.linalg.cond(pt) < _MAX_CONDITION else None
        for name, value in (
            ("epsilon", eps),
            ("domain_size", q.shape[0]),
            ("quality", q),
            ("scale", s),
            ("channel", p),
            ("_cumulative", cum),
            ("_inverse", inverse),
        ):
            object.__setattr__(self, name, value)

    @property
    def items(self) -> int:
        """d, the number of items (``domain_size`` once made)."""
        return int(self.channel.shape[0])

    @property
    def outputs(self) -> int:
        """m, the number of possible reports."""
        return int(self.channel.shape[1])

    def privacy_loss(self) -> float:
        """The channel's exact epsilon (equals ``epsilon`` to rounding, never above)."""
        return privacy_loss(self.quality, self.scale)

    def calibration(self) -> Calibration:
        """This score's exact calibration beside the textbook rule."""
        return calibrate(self.quality, self.epsilon)

    # --- the sampler ------------------------------------------------------------------
    def perturb(self, values: npt.ArrayLike, rng: np.random.Generator | None = None) -> Any:
        """Reports (uint32 outputs) of true items ``values``; ``rng`` defaults to a
        generator fed by the OS CSPRNG (:func:`ldpkit.randomness.resolve_rng`)."""
        array = np.asarray(values)
        scalar = array.ndim == 0
        x = self._check_items(array.reshape(-1) if scalar else array, "values")
        u = resolve_rng(rng).random(x.size)
        # One flat search over the rows shifted by their index: row x's cumulative
        # probabilities become x + C[x, o], so x + u falls among row x's entries only.
        m = self.outputs
        flat = (self._cumulative + np.arange(self.items)[:, None]).ravel()
        out = np.searchsorted(flat, x + u, side="right") - x * m
        reports = np.minimum(out, m - 1).astype(np.uint32)
        return reports[0] if scalar else reports

    def _check_items(self, array: npt.NDArray[Any], what: str) -> IntArray:
        if array.ndim != 1:
            raise ReportError(f"{what} must be a scalar or a 1-D array, got shape {array.shape}")
        if (array.size and array.dtype.kind not in "iu") and (
            array.dtype.kind != "f" or not np.all(array == np.floor(array))
        ):
            raise ReportError(f"{what} must be integer indices, got dtype {array.dtype}")
        x = array.astype(np.int64)
        bad = (x < 0) | (x >= self.items)
        if bool(np.any(bad)):
            i = int(np.argmax(bad))
            raise ReportError(f"{what}[{i}] = {array[i]} is outside 0 .. {self.items - 1}")
        return x

    def counts(self, reports: npt.ArrayLike) -> FloatArray:
        """How many reports name each output; ReportError on a malformed report."""
        r = np.asarray(reports).reshape(-1)
        if r.size and r.dtype.kind not in "iu":
            raise ReportError(f"reports must be integer outputs, got dtype {r.dtype}")
        bad = (r < 0) | (r >= self.outputs)
        if bool(np.any(bad)):
            i = int(np.argmax(bad))
            raise ReportError(f"report {i} ({r[i]}) is not an output 0 .. {self.outputs - 1}")
        return np.bincount(r.astype(np.int64), minlength=self.outputs).astype(np.float64)

    # --- estimates --------------------------------------------------------------------
    def _checked_counts(self, counts: npt.ArrayLike) -> tuple[FloatArray, int]:
        c = np.asarray(counts, dtype=np.float64)
        if c.shape != (self.outputs,):
            raise ParameterError(f"counts must have {self.outputs} entries, got {c.shape}")
        if not np.all(np.isfinite(c)) or np.any(c < 0) or not np.all(c == np.floor(c)):
            raise ParameterError("counts must be non-negative whole numbers")
        n = int(c.sum())
        if n < 2:
            raise ParameterError(f"an estimate needs at least 2 reports, got {n}")
        return c, n

    def _left_inverse(self) -> FloatArray:
        if self._inverse is None:
            raise ParameterError(
                "this channel is too close to singular to invert (condition number above "
                f"{_MAX_CONDITION:g}); use estimate_em"
            )
        return self._inverse

    def variance(self, frequencies: npt.ArrayLike, n: int = 1) -> FloatArray:
        """Covariance matrix of the inversion estimate from ``n`` reports when the true
        frequencies are ``frequencies``: ``A (diag(lam) - lam lam^T) A^T / n``, lam = P^T f.
        The inversion estimate's bias is zero: ``A P^T = I``."""
        f = np.asarray(frequencies, dtype=np.float64)
        if f.shape != (self.items,) or np.any(f < 0) or abs(f.sum() - 1.0) > 1e-9:
            raise ParameterError(f"frequencies must be {self.items} fractions summing to 1")
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ParameterError(f"n must be a positive integer, got {n!r}")
        lam = self.channel.T @ f
        return self._propagate(lam, float(n))

    def _propagate(self, lam: FloatArray, denominator: float) -> FloatArray:
        a = self._left_inverse()
        sigma = (np.diag(lam) - np.outer(lam, lam)) / denominator
        return np.asarray(a @ sigma @ a.T)

    def estimate(self, counts: npt.ArrayLike) -> ChannelEstimate:
        """Unbiased frequencies by channel inversion, with their estimated covariance
        (the multinomial covariance of the observed frequencies, over n - 1)."""
        c, n = self._checked_counts(counts)
        lam = c / n
        return ChannelEstimate(self._left_inverse() @ lam, self._propagate(lam, n - 1.0), n)

    def estimate_em(
        self, counts: npt.ArrayLike, *, tol: float = 1e-10, max_iter: int = 20_000
    ) -> ChannelEstimate:
        """Constrained maximum likelihood: non-negative frequencies summing to 1.

        When the inversion estimate is on the simplex it is the maximum (its channel law
        equals the observed frequencies, which no other law beats) and is returned as is.
        Else EM, ``f <- f * (P (lam / (P^T f)))``, each step raising the likelihood,
        from the clipped inversion estimate mixed with 1/sqrt(n) of uniform (EM cannot
        revive an item at zero), until no frequency moves by more than ``tol`` or
        ``max_iter`` steps. EM converges slowly when the channel is ill-conditioned or the
        maximum is on the simplex's boundary (linearly at a rate near 1, or sublinearly)."""
        c, n = self._checked_counts(counts)
        if not (tol > 0 and max_iter >= 1):
            raise ParameterError("tol must be > 0 and max_iter >= 1")
        lam, p, d = c / n, self.channel, self.items
        if self._inverse is not None:
            start = self._inverse @ lam
            if np.all(start >= 0):
                return ChannelEstimate(start / start.sum(), None, n)
            start = np.clip(start, 0.0, None) / max(float(np.clip(start, 0.0, None).sum()), 1e-300)
            f = (1.0 - 1.0 / math.sqrt(n)) * start + 1.0 / (d * math.sqrt(n))
        else:
            f = np.full(d, 1.0 / d)
        seen = lam > 0  # outputs never seen add nothing to the likelihood
        for _ in range(max_iter):
            new = f * (p[:, seen] @ (lam[seen] / (f @ p[:, seen])))
            new /= new.sum()
            done = float(np.max(np.abs(new - f))) < tol
            f = new
            if done:
                break
        return ChannelEstimate(f, None, n)

    def mean_rank(self, counts: npt.ArrayLike, values: npt.ArrayLike | None = None) -> RankMean:
        """Unbiased mean of the items' ranks (0 .. d - 1, or ``values``) by inversion, with
        its standard error ``sqrt(v^T Cov v)``: for ordered categories."""
        v = np.arange(self.items, dtype=np.float64) if values is None else values
        w = np.asarray(v, dtype=np.float64)
        if w.shape != (self.items,) or not np.all(np.isfinite(w)):
            raise ParameterError(f"values must be {self.items} finite numbers")
        est = self.estimate(counts)
        assert est.covariance is not None  # inversion always has one
        var = float(w @ est.covariance @ w)
        return RankMean(float(w @ est.frequencies), math.sqrt(max(var, 0.0)), est.n)


# --- the registered mechanism: categorical metrics with mechanism = "exponential" ---------

MAX_SERVED_ITEMS = 64
"""The most categories (and outputs) of a metric by ``"exponential"``: its served constants
are d x (m - 1) 64-bit thresholds, which every app downloads (64 x 63 x 19 bytes is 75 kB)."""


@dataclass(frozen=True, eq=False)
class ChannelFrequencies(FrequencyEstimate):
    """Frequencies by channel inversion (:meth:`ExponentialMechanism.estimate`), as the
    categorical answer reads them. ``support_counts`` are the output counts; ``p``, ``q``
    the channel's largest and smallest entry (every output's count among n honest reports
    is Bin(n, s) with q <= s <= p). Intervals are score-type (:meth:`LinearEstimate.interval`:
    the variance at the hypothesis, a skewness term, joined with the normal interval):
    every item covers at least 0.935 at 95% down to n = 200, where the normal interval
    gives rare items 0.92 (docs/statistics.md); ``simultaneous=True`` makes each at
    ``1 - (1 - level) / d`` (Bonferroni). The answer's ``interval`` says ``"score"``.

    Attributes (beyond :class:`~ldpkit.estimates.FrequencyEstimate`'s)
    ----------
    covariance : the estimate's estimated covariance (d x d).
    inverse : the channel's left inverse A (d x m): ``frequencies = A counts / n``.
    channel : the channel P (d x m) whose law the score intervals tilt.
    """

    covariance: FloatArray | None = None
    inverse: FloatArray | None = None
    channel: FloatArray | None = None

    def linear(self, weights: npt.ArrayLike) -> LinearEstimate:
        """The functionals ``weights @ f`` (rows of a k x d matrix) of this estimate, with
        their covariance and score intervals (ParameterError without reports)."""
        if self.n < 2 or self.covariance is None or self.inverse is None or self.channel is None:
            raise ParameterError(f"an estimate needs at least 2 reports, got {self.n}")
        w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        return LinearEstimate(
            w @ self.frequencies,
            w @ self.covariance @ w.T,
            self.n,
            w @ self.inverse,
            _law(self.channel, self.frequencies),
            w.min(axis=1),
            w.max(axis=1),
        )

    def difference_variance(self, i: IntArray, j: IntArray) -> FloatArray:
        """The variance of ``f_j - f_i`` from the estimated covariance,
        ``C_ii + C_jj - 2 C_ij`` (the randomized-response formula of the base class, with
        the channel's largest and smallest entry as p and q, is many times too small for
        an inverted smooth channel: the most-common set then missed the mode)."""
        c = self.covariance
        if c is None:
            return np.full(np.broadcast(i, j).shape, np.nan)
        return np.asarray(c[i, i] + c[j, j] - 2.0 * c[i, j])

    def _variance_floor(self) -> float:
        """The least :meth:`difference_variance` over pairs of distinct items."""
        d = self.domain_size
        if self.covariance is None or d < 2:
            return 0.0
        i, j = np.triu_indices(d, 1)
        return max(float(np.min(self.difference_variance(i, j))), 0.0)

    def _bounds(self, level: float, simultaneous: bool) -> Bounds:
        key = (float(level), bool(simultaneous))
        if key not in self._cache:
            d = self.domain_size
            if self.n < 2:
                nan = np.full(d, np.nan)
                self._cache[key] = Bounds(nan, nan.copy(), np.zeros(d, bool))
            else:
                b = self.linear(np.eye(d)).interval(level, comparisons=d if simultaneous else 1)
                self._cache[key] = Bounds(b.lower, b.upper, np.zeros(d, bool))
        return self._cache[key]

    def interval_methods(
        self, level: float = 0.95, *, simultaneous: bool = False
    ) -> npt.NDArray[np.str_]:
        return np.full(self.domain_size, SCORE)

    def interval_method(self, level: float = 0.95, *, simultaneous: bool = False) -> str:
        return SCORE

    def forgery_shift(self, beta: float) -> FloatArray:
        """The largest change a forged fraction ``beta`` of the reports can make to each
        item's expected estimate: the estimate is ``(1 - b) f + b g`` with g = A lam for the
        forged reports' law lam, so ``g_i`` lies in ``[min_o A_io, max_o A_io]`` and
        ``|f_i - g_i| <= max(max_o A_io, 1 - min_o A_io)``."""
        b = check_fraction(beta)
        a = self.inverse
        if a is None:
            return np.full(self.domain_size, np.nan)
        return np.asarray(b * np.maximum(a.max(axis=1), 1.0 - a.min(axis=1)))

    def robust(self, beta: float) -> RobustFrequencies:
        return _ChannelRobust(self, check_fraction(beta))


@dataclass(frozen=True, eq=False)
class _ChannelRobust(RobustFrequencies):
    """Robust frequencies of an inversion estimate: the projection onto the simplex (as
    for every oracle), and the plain intervals widened by the forgery shift (the forged
    reports move an item's expected estimate by at most that; within [0, 1]). The
    widening is of the expectation; the plain interval's own width is that of the
    honest reports' noise, taken as is (not re-derived for n - m honest reports)."""

    def ci(self, level: float = 0.95, *, simultaneous: bool = False) -> ConfidenceInterval:
        low, high = self.estimate.ci(level, simultaneous=simultaneous)
        shift = self.estimate.forgery_shift(self.beta)
        return ConfidenceInterval(
            np.clip(np.asarray(low) - shift, 0.0, 1.0), np.clip(np.asarray(high) + shift, 0.0, 1.0)
        )

    def forgery_shift(self) -> FloatArray:
        """The projection onto the simplex is 1-Lipschitz in the Euclidean norm, so no
        robust fraction moves by more than the norm of the plain shifts (nor beyond 1)."""
        shift = self.estimate.forgery_shift(self.beta)
        return np.full(shift.size, min(1.0, float(np.linalg.norm(shift))))


def _score_options(score: str, band: int | None, scores: Any) -> dict[str, Any]:
    """The core's score arguments of a definition's ``score``, ``band`` and ``scores``."""
    return {"score": score, "band": band, "scores": None if scores is None else np.array(scores)}


@dataclass(frozen=True, kw_only=True)
class Exponential(FrequencyOracle):
    """The exponential mechanism as a categorical metric's mechanism, calibrated exactly.

    A report is one output index (uint32) drawn from the input's row of the channel
    ``P[x, o]`` proportional to ``exp(s q(x, o))`` (:class:`ExponentialMechanism`), by the
    served 64-bit cumulative thresholds. Estimates invert the channel (unbiased) with
    score-type intervals (:class:`ChannelFrequencies`); the mean rank and the shares "this
    category or later" of ordered categories come with them, by the same method
    (:meth:`mean_rank`, :meth:`shares_at_least`).

    Parameters
    ----------
    epsilon, domain_size : as every oracle (d at most :data:`MAX_SERVED_ITEMS`).
    score : {"distance", "band", "matrix"}
        The score (module docstring); ``"matrix"`` takes ``scores``.
    band : int, optional
        b of ``"band"``.
    scores : sequence of sequences of float, optional
        The d x m score matrix of ``"matrix"`` (inputs x outputs, d <= m <= 64).

    A channel that cannot be inverted (a singular band: d = 5, b = 1) is refused here,
    so no metric is defined whose frequencies cannot be estimated.
    """

    name: ClassVar[str] = "exponential"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = (
        PlanCase(
            case_name("exponential-distance", 0.5),
            {"kind": "categorical", "categories": list(CATEGORIES), "epsilon": 0.5,
             "mechanism": "exponential", "ordered": True},
            (CATEGORIES[0], CATEGORIES[2], CATEGORIES[5]),
        ),
        PlanCase(
            case_name("exponential-distance", 2.0),
            {"kind": "categorical", "categories": list(CATEGORIES), "epsilon": 2.0,
             "mechanism": "exponential", "ordered": True},
            (CATEGORIES[0], CATEGORIES[3]),
        ),
        PlanCase(
            case_name("exponential-band", 1.0),
            {"kind": "categorical", "categories": list(CATEGORIES), "epsilon": 1.0,
             "mechanism": "exponential", "ordered": True, "score": "band", "band": 2},
            (CATEGORIES[1], CATEGORIES[4]),
        ),
        PlanCase(
            case_name("exponential-matrix", 1.0),
            {"kind": "categorical", "categories": ["a", "b", "c"], "epsilon": 1.0,
             "mechanism": "exponential", "scores": [[2.0, 0.5, 0.0, 1.0], [0.0, 2.0, 1.0, 0.0],
                                                    [1.0, 0.0, 2.0, 0.0]]},
            ("a", "c"),
        ),
    )  # fmt: skip
    aggregate_cost = 1  # one counter per report: the report names one output
    report_dtype = np.dtype("<u4")
    takes_score: ClassVar[bool] = True

    score: Score = "distance"
    band: int | None = None
    scores: Any = None
    core: ExponentialMechanism = field(init=False, repr=False, compare=False)
    thresholds: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    @classmethod
    def score_fields(cls, ordered: bool, given: Mapping[str, Any]) -> dict[str, Any]:
        """``score`` (``"distance"`` by default when ordered; ``"matrix"`` with ``scores``),
        ``band`` (``"band"`` only) and ``scores`` (as a tuple of rows of floats)."""
        score, band, scores = given.get("score"), given.get("band"), given.get("scores")
        if scores is not None:
            if score not in (None, "matrix") or band is not None:
                raise ParameterError("scores is the whole score: give no score or band with it")
            try:
                rows = tuple(tuple(float(v) for v in row) for row in scores)
            except (TypeError, ValueError):
                raise ParameterError("scores must be a list of rows of numbers") from None
            return {"score": "matrix", "scores": rows}
        if score is None:
            if not ordered:
                raise ParameterError(
                    "mechanism 'exponential' needs ordered = true (the categories listed in "
                    "order, scored by distance) or a scores matrix"
                )
            score = "distance"
        if score not in ("distance", "band"):
            raise ParameterError(
                f"score must be 'distance' or 'band' (or give scores), got {shown(score)}"
            )
        if not ordered:
            raise ParameterError(f"score {score!r} compares positions: it needs ordered = true")
        return {"score": score} | ({} if band is None else {"band": band})

    def _support_probabilities(self) -> tuple[float, float]:
        d = self.domain_size
        if d > MAX_SERVED_ITEMS:
            raise ParameterError(
                f"mechanism 'exponential' takes at most {MAX_SERVED_ITEMS} categories (its "
                f"served thresholds are d x d), got {d}"
            )
        options = _score_options(self.score, self.band, self.scores)
        size = None if self.score == "matrix" else d
        core = ExponentialMechanism(epsilon=self.epsilon, domain_size=size, **options)
        if core.items != d:
            raise ParameterError(f"scores has {core.items} rows, not one per category ({d})")
        if core.outputs > MAX_SERVED_ITEMS:
            raise ParameterError(f"scores may have at most {MAX_SERVED_ITEMS} columns")
        if core._inverse is None:
            raise ParameterError(
                f"the exponential mechanism's channel with score {self.score!r}"
                + (f" and band {self.band}" if self.band is not None else "")
                + f" on {d} categories is singular: its frequencies cannot be estimated; "
                "choose another band or score"
            )
        # Served constants must be the same bits on every machine (docs/protocol.md's
        # vectors): the scale on a coarse grid and the thresholds, both settled in decimal.
        _, rows = served_law(core.quality, core.epsilon, core.scale)
        scores = None if self.scores is None else tuple(map(tuple, core.quality.tolist()))
        self._set(core=core, thresholds=rows, scores=scores)
        law = self.output_law()
        return float(law.max()), float(law.min())

    @property
    def stats_size(self) -> int:
        return self.core.outputs

    @property
    def report_rule(self) -> str:
        return f"an output index in 0..{self.core.outputs - 1}"

    def params(self) -> dict[str, Any]:
        extra = {"score": self.score, "band": self.band, "scores": self.scores}
        return super().params() | {k: v for k, v in extra.items() if v is not None}

    def report_channel(self) -> FloatArray:
        """The channel P (d x m): the output counts are Multinomial(n, P^T f)."""
        return self.core.channel

    def output_law(self) -> FloatArray:
        """The exact law of the reports (d x m): the served thresholds' differences."""
        t = np.array([[0, *row, 1 << 64] for row in self.thresholds], dtype=object)
        return np.asarray(np.diff(t, axis=1).astype(np.float64) / 2.0**64, dtype=np.float64)

    # --- sampling ---------------------------------------------------------------------
    def _perturb(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[np.uint32]:
        u = _bits.uniform_u64(rng, values.size)
        out = np.empty(values.size, dtype=np.uint32)
        table = self._table()
        for x in np.unique(values):
            at = values == x
            out[at] = np.searchsorted(table[int(x)], u[at], side="right")
        return out

    def _table(self) -> npt.NDArray[np.uint64]:
        return np.array(self.thresholds, dtype=np.uint64).reshape(self.domain_size, -1)

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """:meth:`_perturb` of one value: the same word, the same output."""
        u = _bits.OneDraws(rng).u64()
        return bisect.bisect_right(self.thresholds[int(value)], u).to_bytes(4, "little")

    # --- reports and estimates --------------------------------------------------------
    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return np.asarray(reports < self.core.outputs)

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        return np.bincount(reports, minlength=self.core.outputs).astype(np.float64)

    @property
    def distinct_reports(self) -> int:
        return self.core.outputs

    def supports(self, value: Any, reports: npt.ArrayLike) -> BoolArray:
        """A report supports the output it names (the audit's events: the report equal
        to an item; for a distance or band score, the output nearest the truth)."""
        return np.asarray(np.asarray(reports) == value)

    def output_probabilities(self, value: int) -> tuple[npt.NDArray[Any], FloatArray]:
        """Every possible report for ``value`` and its exact probability."""
        return np.arange(self.core.outputs, dtype=np.uint32), self.output_law()[int(value)]

    def variance(self, frequency: float | npt.ArrayLike = 0.0, n: int = 1) -> Any:
        """Variance of an item's inverted fraction from ``n`` reports when its true fraction
        is ``frequency`` and the other items share the rest equally: the largest over the
        items (each value of an array alike), the reporters held fixed. One reporter at
        input x adds ``sum_o A_io^2 P_xo - [x = i]`` to item i's n^2 variance (A P_x = e_x),
        so the variance is linear in the population."""
        f = np.asarray(frequency, dtype=np.float64)
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ParameterError(f"n must be a positive integer, got {n!r}")
        d, per = self.domain_size, self._per_reporter
        own = np.diag(per)  # item i's, from a reporter holding i
        rest = (per.sum(axis=0) - own) / (d - 1)  # from the others, on average
        var = np.max(f[..., None] * own + (1.0 - f[..., None]) * rest, axis=-1) / n
        return float(var) if var.ndim == 0 else var

    @property
    def _per_reporter(self) -> FloatArray:
        """``V[x, i]``: what one reporter holding x adds to item i's variance (n = 1)."""
        a = self.core._left_inverse()
        return np.asarray(self.core.channel @ (a * a).T - np.eye(self.domain_size))

    def auto_variance(self) -> float:
        """The largest item variance, one report, for a uniform population (the
        frequencies' worst item; other oracles' variance at frequency 0 is their worst)."""
        return float(self.variance(1.0 / self.domain_size))

    def planned_half_width(self, n: int, frequency: float, level: float) -> tuple[float, str]:
        """The answer's (score) interval half-width at an item's ``frequency`` (others
        equal), planned as the normal one's: the score interval holds the normal one and
        its median width was 1.00-1.06 times it at n >= 200 (docs/statistics.md)."""
        return normal_quantile(level) * math.sqrt(self.variance(frequency, n)), SCORE

    def covariance(self, frequencies: npt.ArrayLike, n: int = 1) -> FloatArray:
        """Covariance of the inverted fractions from ``n`` reports, the reporters held
        fixed (as every oracle's :meth:`variance`): ``A (diag(lam) - P^T diag(f) P) A^T / n``
        with lam = P^T f (the multinomial's ``lam lam^T`` less the spread of the inputs)."""
        f = np.asarray(frequencies, dtype=np.float64)
        p, a = self.core.channel, self.core._left_inverse()
        lam = p.T @ f
        sigma = np.diag(lam) - p.T @ (f[:, None] * p)
        return np.asarray(a @ sigma @ a.T / n)

    def mean_rank(self, estimate: FrequencyEstimate) -> MeanRank:
        """The mean rank (1 .. d) by inversion, its standard error from the estimate's own
        covariance (the observed frequencies' multinomial one, over n - 1), its interval
        score-type (:class:`ScoreMeanRank`)."""
        d = self.domain_size
        if not isinstance(estimate, ChannelFrequencies) or estimate.n < 2:
            return MeanRank(math.nan, math.nan, estimate.n, d)
        linear = estimate.linear(centred_ranks(d))
        mean = (d + 1) / 2.0 + float(linear.values[0])
        return ScoreMeanRank(mean, float(linear.stderr[0]), estimate.n, d, linear=linear)

    def shares_at_least(
        self, estimate: FrequencyEstimate, level: float = 0.95, *, simultaneous: bool = False
    ) -> SharesAtLeast:
        """The shares "category k or later" (k = 2 .. d) by inversion, with score-type
        intervals (:meth:`LinearEstimate.interval`), Bonferroni over the d - 1 shares when
        ``simultaneous``."""
        d = self.domain_size
        if not isinstance(estimate, ChannelFrequencies) or estimate.n < 2:
            return super().shares_at_least(estimate, level, simultaneous=simultaneous)
        linear = estimate.linear(at_least_weights(d))
        b = linear.interval(level, comparisons=d - 1 if simultaneous else 1)
        return SharesAtLeast(
            np.arange(1, d), linear.values, linear.stderr, b.lower, b.upper, float(level),
            simultaneous, SCORE,
        )  # fmt: skip

    def estimate(self, aggregate: Aggregate) -> FrequencyEstimate:
        """Unbiased fractions by channel inversion, with the estimated covariance."""
        agg = self._checked_aggregate(aggregate)
        d, a = self.domain_size, self.core._left_inverse()
        if agg.n < 2:
            nan = np.full(d, np.nan)
            return ChannelFrequencies(
                self.name, self.epsilon, agg.n, nan, nan.copy(), agg.sums, self.p, self.q,
                covariance=np.full((d, d), np.nan), inverse=a, channel=self.core.channel,
            )  # fmt: skip
        est = self.core.estimate(agg.sums)
        assert est.covariance is not None  # inversion always has one
        return ChannelFrequencies(
            self.name, self.epsilon, agg.n, est.frequencies, est.stderr, agg.sums, self.p,
            self.q, covariance=est.covariance, inverse=a, channel=self.core.channel,
        )  # fmt: skip

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {"cumulative": [[hex64(t) for t in row] for row in self.thresholds]}

    @classmethod
    def portable_item(cls, derived: Derived, d: int, x: int, words: Words) -> bytes:
        """``u = u64()``; the output is how many of row x's thresholds are ``<= u``."""
        row = derived["cumulative"][x]
        u = words.u64()
        return sum(1 for t in row if int(t, 16) <= u).to_bytes(4, "little")

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """Every output's count against its probability."""
        _, probs = self.output_probabilities(int(value))
        counts = np.bincount(reports.astype(np.int64), minlength=self.core.outputs)
        return [("output", *chi2(counts, probs), "")]

    def conformance_support(self, reports: Reports, value: Any) -> tuple[int, float] | None:
        """None: the true output's probability depends on the input (the kit's pooled
        test assumes one), and :meth:`conformance_tests` test every output's already."""
        return None


# --- linear functionals: range shares, the mean rank and items with score intervals -----
# (issue 30: intervals that cover at small n; see ._linear_intervals)


@dataclass(frozen=True)
class LinearEstimate:
    """Unbiased inversion estimates of linear functionals ``t_j = sum_x W[j, x] f_x`` (an
    item's frequency, a range share, the mean rank), with standard errors and intervals.

    Attributes
    ----------
    values : (k,) the estimates ``W f_hat``.
    covariance : (k, k) their estimated covariance ``W Cov W^T``.
    n : the number of reports.
    output_weights : (k, m) ``W A``: each estimate is ``output_weights @ (counts / n)``.
    model_law : (m,) ``P^T f+``, the channel's law of the inversion estimate clipped to the
        simplex: the law the score intervals tilt to each hypothesis.
    low, high : (k,) each functional's range, ``min_x W[j, x]`` and ``max_x W[j, x]``.
    """

    values: FloatArray
    covariance: FloatArray
    n: int
    output_weights: FloatArray
    model_law: FloatArray
    low: FloatArray
    high: FloatArray

    @property
    def stderr(self) -> FloatArray:
        """Standard errors ``sqrt(diag(covariance))``."""
        return np.sqrt(np.clip(np.diag(self.covariance), 0.0, None))

    def normal_interval(self, level: float = 0.95, *, comparisons: int = 1) -> LinearBounds:
        """``value -/+ z stderr``: right for large n, under-covers rare items at small n
        (``comparisons``: Bonferroni, as :meth:`interval`)."""
        half = normal_quantile(level, comparisons=comparisons) * self.stderr
        return LinearBounds(self.values - half, self.values + half, float(level))

    def interval(self, level: float = 0.95, *, comparisons: int = 1) -> LinearBounds:
        """Score-type intervals (variance at the hypothesised value, a skewness term),
        joined with the normal interval and kept within each functional's range: they
        cover at small n and for rare items (:mod:`ldpkit.mechanisms._linear_intervals`).
        ``comparisons = k`` makes each at ``1 - (1 - level) / k`` (Bonferroni): k rows
        then hold together with probability at least ``level``."""
        score = score_bounds(
            self.values,
            self.output_weights,
            self.model_law,
            self.n,
            value_range=(self.low, self.high),
            level=level,
            comparisons=comparisons,
        )
        normal = self.normal_interval(level, comparisons=comparisons)
        return hull(score, normal, self.low, self.high)


@dataclass(frozen=True, kw_only=True)
class ScoreMeanRank(MeanRank):
    """The mean rank of an inversion estimate with a score-type interval: ``linear`` is
    the centred ranks' functional (:meth:`ChannelFrequencies.linear`), shifted by
    ``(d + 1) / 2`` to ranks 1 .. d."""

    method: ClassVar[str] = SCORE
    linear: LinearEstimate

    def ci(self, level: float = 0.95) -> ConfidenceInterval:
        b = self.linear.interval(level)
        shift = (self.ranks + 1) / 2.0
        low = min(max(shift + float(b.lower[0]), 1.0), float(self.ranks))
        return ConfidenceInterval(low, min(max(shift + float(b.upper[0]), 1.0), float(self.ranks)))


def linear_estimate(
    mechanism: ExponentialMechanism, counts: npt.ArrayLike, weights: npt.ArrayLike
) -> LinearEstimate:
    """Inversion estimates of the functionals ``weights @ f`` (rows of a k x d matrix, or one
    d-vector) from output ``counts``, with covariance and score intervals."""
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    if w.ndim != 2 or w.shape[1] != mechanism.items or not np.all(np.isfinite(w)):
        raise ParameterError(f"weights must be rows of {mechanism.items} finite numbers")
    est = mechanism.estimate(counts)
    assert est.covariance is not None  # inversion always has one
    return LinearEstimate(
        w @ est.frequencies,
        w @ est.covariance @ w.T,
        est.n,
        w @ mechanism._left_inverse(),
        model_law(mechanism, est.frequencies),
        w.min(axis=1),
        w.max(axis=1),
    )


def range_share(
    mechanism: ExponentialMechanism, counts: npt.ArrayLike, low: int, high: int
) -> LinearEstimate:
    """The share of items ``low .. high`` (inclusive, 0-based ranks) of ordered
    categories: "3 or 4 stars" is ``range_share(m, c, 2, 3)`` on a 1-5 rating."""
    d = mechanism.items
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 0 <= v < d:
            raise ParameterError(f"{name} must be an item 0 .. {d - 1}, got {v!r}")
    if low > high:
        raise ParameterError(f"low ({low}) must not exceed high ({high})")
    w = np.zeros(d)
    w[low : high + 1] = 1.0
    return linear_estimate(mechanism, counts, w)


def share_at_least(
    mechanism: ExponentialMechanism, counts: npt.ArrayLike, k: int
) -> LinearEstimate:
    """The share of items ranked ``k`` or above: "4 stars or more" on a 1-5 rating is
    ``share_at_least(m, c, 3)`` (ranks are 0-based)."""
    return range_share(mechanism, counts, k, mechanism.items - 1)


def item_intervals(mechanism: ExponentialMechanism, counts: npt.ArrayLike) -> LinearEstimate:
    """Every item's frequency as a linear functional (identity weights): the same estimate
    as :meth:`ExponentialMechanism.estimate`, with score intervals."""
    return linear_estimate(mechanism, counts, np.eye(mechanism.items))


def rank_mean(
    mechanism: ExponentialMechanism, counts: npt.ArrayLike, values: npt.ArrayLike | None = None
) -> LinearEstimate:
    """The mean rank (0 .. d - 1, or ``values``) as a linear functional, with score
    intervals (:meth:`ExponentialMechanism.mean_rank` gives the normal one)."""
    v = np.arange(mechanism.items, dtype=np.float64) if values is None else values
    return linear_estimate(mechanism, counts, v)


def model_law(mechanism: ExponentialMechanism, frequencies: npt.ArrayLike) -> FloatArray:
    """``P^T f+``: the output law of ``frequencies`` clipped at 0 and renormalised (uniform
    if none is positive); rows of frequencies give rows of laws."""
    return _law(mechanism.channel, frequencies)


def _law(channel: FloatArray, frequencies: npt.ArrayLike) -> FloatArray:
    """:func:`model_law` of a channel P (d x m)."""
    f = np.clip(np.asarray(frequencies, dtype=np.float64), 0.0, None)
    total = f.sum(axis=-1, keepdims=True)
    f = np.where(total > 0, f / np.where(total > 0, total, 1.0), 1.0 / channel.shape[0])
    return np.asarray(f @ channel)
