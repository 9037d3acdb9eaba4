"""View sampling: the machinery shared by the hierarchy and table mechanisms.

A structured mechanism has ``m`` base cells (a tree's leaves, a table's cells) and one
or more *views*, each a partition of the base cells (a depth of the tree, an attribute
of the table, or the base cells themselves). Each user picks one view at random with
fixed probabilities, independently of their value, and reports the group their value
falls in through that view's frequency oracle, spending the whole epsilon. The view is
independent of the value, so sending it costs no privacy: a report is epsilon-LDP.

Wire format
-----------
A report is the packed record ``view: u1, payload: u1[P]`` where ``P`` is the largest
report size of the views' oracles. The payload holds the view's oracle report as its
raw little-endian bytes (``report.tobytes()``: a uint32 index for GRR, a packed bitmap
for unary encoding and subset selection), followed by zero bytes up to ``P``. A record
is well-formed iff ``view`` is a view's number, the padding bytes are zero, and the
payload is a well-formed report of that view's oracle. Every report therefore has the
same size, ``1 + P`` bytes.

Aggregate
---------
For every view in order: the number of its reports ``n_v``, then its oracle's support
counts (one per group). The size is ``sum_v (1 + groups_v)``, independent of n, and
aggregates merge by addition.

Oracles
-------
The views' oracles are the exchangeable pure oracles whose support indicators have a
known joint law: GRR, SUE, OUE and subset selection (``STRUCTURED_ORACLES``). The
estimator of a group of items (a parent, a marginal) needs the covariance between
items of one oracle (:class:`~ldpkit.inference.NoiseModel`). For optimized local hashing
with the protocol's 2-universal hash family the supports of two items are not independent
given the true item x when their offsets from x are in a small integer ratio
(``h(x + 3t) - h(x)`` is nearly ``3 (h(x + t) - h(x))`` modulo 2^32: with eps = 1 and
x = 10, items 20 and 40 are supported together 10% more often than q^2, measured over
2e6 reports), and a roll-up sums runs of items full of such triples; for Hadamard
response the covariance depends on the items' bit patterns. Neither is ever of lower
variance than OUE (OLH's best case equals OUE's; HR's ``(e^eps + 1)^2`` exceeds OUE's
``4 e^eps``), so they are not offered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .. import screening
from ..aggregate import Aggregate
from ..errors import ParameterError, ReportError
from ..inference import LinearViews, NoiseModel, Quadratic
from ..screening import Finding
from ..structured_estimates import OutputArrays, SupportCounts
from . import AUTO_ORACLES as AUTO_ORACLES  # re-exported for ldpkit.structured
from . import STRUCTURED_ORACLES, make_oracle, oracle_class
from ._values import in_range, whole_floats
from .base import BoolArray, Enumerable, FloatArray, FrequencyOracle, IntArray, Mechanism

if TYPE_CHECKING:
    from ._portable import Derived, Words
    from .base import LawTest, Reports


def noise_model(oracle: FrequencyOracle) -> NoiseModel:
    """The per-user covariance structure of ``oracle``'s debiased support vector: its p, q
    and :meth:`~ldpkit.mechanisms.FrequencyOracle.pair_support` (``r1``: a report supports
    two given items one of which is the true item; ``r0``: neither is)."""
    pair = oracle.pair_support()
    if pair is None:
        raise ParameterError(
            f"{oracle.name!r} cannot serve a structured metric (its items' covariance is not "
            f"exchangeable); use one of {', '.join(STRUCTURED_ORACLES)}"
        )
    return NoiseModel(oracle.p, oracle.q, *pair, supports=oracle.support_size)


@dataclass(frozen=True)
class View:
    """One view: its name, the partition of base cells it reports, its oracle, its share."""

    name: str
    labels: IntArray
    oracle: FrequencyOracle
    weight: float

    @property
    def size(self) -> int:
        return self.oracle.domain_size


def population(size: int, fractions: npt.ArrayLike | None) -> FloatArray:
    """The base cells' fractions (default uniform); ParameterError unless they are ``size``
    numbers >= 0 summing to 1."""
    if fractions is None:
        return np.full(size, 1.0 / size)
    pi = np.asarray(fractions, dtype=np.float64)
    if pi.shape != (size,) or np.any(pi < 0) or not np.isclose(pi.sum(), 1.0):
        raise ParameterError(f"fractions must be {size} non-negative numbers summing to 1")
    return pi


def batch_sums(n: npt.ArrayLike, sums: npt.ArrayLike, size: int) -> tuple[FloatArray, FloatArray]:
    """``n`` (R,) and ``sums`` (R, size) of R aggregates, as float arrays."""
    counts_n = np.atleast_1d(np.asarray(n, dtype=np.float64))
    table = np.atleast_2d(np.asarray(sums, dtype=np.float64))
    if table.shape != (counts_n.size, size):
        raise ParameterError(
            f"estimate_arrays needs n (R,) and sums (R, {size}), got "
            f"{counts_n.shape} and {table.shape}"
        )
    return counts_n, table


def as_reports(raw: npt.NDArray[Any], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """Rows of report bytes as reports of ``dtype`` (a packed bitmap stays rows of bytes)."""
    raw = np.ascontiguousarray(raw)
    return raw if dtype.subdtype is not None else raw.view(dtype).reshape(raw.shape[0])


def _check_weights(weights: object, count: int) -> tuple[float, ...]:
    """The views' probabilities: ``weights`` scaled to sum to 1, or uniform for None."""
    if weights is None:
        return (1.0 / count,) * count
    if isinstance(weights, str) or not isinstance(weights, Sequence):
        raise ParameterError(f"weights must be a list of {count} positive numbers, got {weights!r}")
    values = tuple(weights)
    if len(values) != count:
        raise ParameterError(f"weights must hold {count} numbers (one per view), got {len(values)}")
    for w in values:
        _check_weight(w)
    total = float(sum(float(w) for w in values))
    return tuple(float(w) / total for w in values)


def _check_weight(w: object) -> None:
    if isinstance(w, bool) or not isinstance(w, Real) or not np.isfinite(float(w)) or w <= 0:
        raise ParameterError(f"weights must be finite numbers > 0, got {w!r}")


@dataclass(frozen=True, kw_only=True)
class ViewSampling(Mechanism):
    """Base of structured mechanisms: each user reports one view through its oracle.

    Subclasses give the base-cell count, the candidate views (:meth:`_view_specs`) and
    the output partitions (:meth:`_output_partitions`), and wrap the engine's numbers
    into their result type.

    Parameters
    ----------
    epsilon : float
        Privacy parameter of every report.
    oracle : str or sequence of str
        The oracle of every view (``"auto"``: the best per view, see
        :func:`make_oracle`), or one name per view.
    """

    oracle: str | tuple[str, ...] = "auto"
    views: tuple[View, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._check_epsilon()
        self._check_structure()
        specs = self._view_specs()
        names = (
            (self.oracle,) * len(specs)
            if isinstance(self.oracle, str)
            else tuple(self.oracle)
            if isinstance(self.oracle, list | tuple)
            else None
        )
        if names is None or len(names) != len(specs):
            raise ParameterError(
                f"oracle must be a name or a list of {len(specs)} names (one per view), "
                f"got {self.oracle!r}"
            )
        weights = self._weights(len(specs))
        views = []
        for (view_name, labels), oracle_name, w in zip(specs, names, weights, strict=True):
            size = int(labels.max()) + 1
            views.append(View(view_name, labels, make_oracle(oracle_name, self.epsilon, size), w))
        self._set(oracle=self.oracle if isinstance(self.oracle, str) else names, views=tuple(views))
        if len(views) > 255:
            raise ParameterError(f"at most 255 views, got {len(views)}")
        self.engine  # noqa: B018 - build (and validate) the design once, now

    def _check_structure(self) -> None:
        """Validate the domain (tree, table) before anything is derived from it."""

    def _view_specs(self) -> list[tuple[str, IntArray]]:
        raise NotImplementedError

    def _weights(self, count: int) -> tuple[float, ...]:
        return _check_weights(None, count)

    def _output_partitions(self) -> list[IntArray]:
        raise NotImplementedError

    @property
    def base_size(self) -> int:
        raise NotImplementedError

    @cached_property
    def engine(self) -> LinearViews:
        return LinearViews(
            self.base_size,
            [v.labels for v in self.views],
            [v.weight for v in self.views],
            [noise_model(v.oracle) for v in self.views],
            self._output_partitions(),
        )

    def _by_output(self, values: FloatArray) -> list[FloatArray]:
        """``values`` (..., outputs) cut at the output partitions (a tree's depths; a table's
        cells, then each attribute)."""
        off = self.engine.output_offsets
        return [values[..., off[k] : off[k + 1]] for k in range(len(off) - 1)]

    @cached_property
    def _payload_size(self) -> int:
        return max(v.oracle.report_dtype.itemsize for v in self.views)

    @property
    def report_dtype(self) -> np.dtype[Any]:
        return np.dtype([("view", "u1"), ("payload", "u1", (self._payload_size,))])

    @property
    def stats_size(self) -> int:
        return sum(1 + v.size for v in self.views)

    @property
    def report_rule(self) -> str:
        return (
            f"a record (view: u1 in 0..{len(self.views) - 1}, payload: {self._payload_size} "
            "bytes) whose payload is a valid report of that view's oracle, zero-padded"
        )

    def params(self) -> dict[str, Any]:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "views": [
                {"name": v.name, "oracle": v.oracle.name, "size": v.size, "weight": v.weight}
                for v in self.views
            ],
        }

    def _check_values(self, values: npt.NDArray[Any]) -> IntArray:
        if values.dtype.kind not in "iu":
            if not whole_floats(values):
                raise ReportError(
                    f"{self.kind} values must be integer base-cell indices (see "
                    f"encode), got dtype {values.dtype}"
                )
            values = values.astype(np.int64)
        return in_range(values, self.base_size)

    def choose_views(self, count: int, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
        """Each user's view, drawn with the views' weights (independent of the values)."""
        cumulative = np.cumsum([v.weight for v in self.views])
        view = np.searchsorted(cumulative, rng.random(count) * cumulative[-1], side="right")
        return np.asarray(np.minimum(view, len(self.views) - 1).astype(np.uint8))

    def _perturb(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[Any]:
        n = values.size
        out = np.zeros(n, dtype=self.report_dtype)
        view = self.choose_views(n, rng)
        out["view"] = view
        for k, v in enumerate(self.views):
            rows = np.flatnonzero(view == k)
            if rows.size == 0:
                continue
            reports = np.ascontiguousarray(v.oracle.perturb(v.labels[values[rows]], rng=rng))
            size = v.oracle.report_dtype.itemsize
            out["payload"][rows, :size] = reports.view(np.uint8).reshape(rows.size, size)
        return out

    def _payload_reports(self, k: int, payload: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """View k's oracle reports from their payload rows."""
        dtype = self.views[k].oracle.report_dtype
        return as_reports(payload[:, : dtype.itemsize], dtype)

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        view = reports["view"]
        payload = reports["payload"]
        valid = np.zeros(reports.shape[0], dtype=np.bool_)
        for k, v in enumerate(self.views):
            rows = np.flatnonzero(view == k)
            if rows.size == 0:
                continue
            size = v.oracle.report_dtype.itemsize
            sub = payload[rows]
            padding_ok = np.all(sub[:, size:] == 0, axis=1)
            valid[rows] = padding_ok & v.oracle.check_reports(self._payload_reports(k, sub))
        return valid

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        view = reports["view"]
        parts = []
        for k, v in enumerate(self.views):
            rows = np.flatnonzero(view == k)
            counts = (
                v.oracle._sums(self._payload_reports(k, reports["payload"][rows]))
                if rows.size
                else np.zeros(v.size)
            )
            parts.append(np.concatenate([[float(rows.size)], counts]))
        return np.concatenate(parts)

    def screen_reports(self, reports: npt.NDArray[Any], alpha: float) -> Finding | None:
        """The view, drawn by its weight whatever the value; each view's oracle law on the
        payloads of the reports that chose it."""
        view = reports["view"]
        parts = [
            partial(
                v.oracle.screen_reports, self._payload_reports(k, reports["payload"][view == k])
            )
            for k, v in enumerate(self.views)
        ]
        chosen = np.bincount(view, minlength=len(self.views))
        return screening.composed(alpha, self._view_labels, parts, chosen, self.engine.weights)

    def screen_aggregate(self, aggregate: Aggregate, alpha: float) -> Finding | None:
        """The reports per view, by the views' weights whatever the values; each view's
        support counts (:meth:`FrequencyOracle.screen_aggregate`) among its reports."""
        agg = self._checked_aggregate(aggregate)
        sizes, counts = self.engine.split(agg.sums[None, :])
        parts = [
            partial(v.oracle.screen_aggregate, Aggregate(int(n_v), counts[0, lo:hi]))
            for v, n_v, lo, hi in zip(
                self.views,
                sizes[0],
                self.engine.view_offsets[:-1],
                self.engine.view_offsets[1:],
                strict=True,
            )
        ]
        return screening.composed(alpha, self._view_labels, parts, sizes[0], self.engine.weights)

    @property
    def _view_labels(self) -> list[str]:
        return [f"view {v.name}" for v in self.views]

    def output_probabilities(self, value: int) -> tuple[npt.NDArray[Any], FloatArray]:
        """Every possible report for ``value`` with its exact probability.

        A record (view k, payload) has probability ``w_k P_k(payload | group_k(value))``;
        every view's oracle must be able to enumerate its outputs (small domains).
        """
        x = int(self._check_values(np.asarray([value]))[0])
        records, probs = [], []
        for k, v in enumerate(self.views):
            oracle = v.oracle
            assert isinstance(oracle, Enumerable)  # every structured oracle lists its reports
            reports, p = oracle.output_probabilities(int(v.labels[x]))
            reports = np.ascontiguousarray(reports)
            size = v.oracle.report_dtype.itemsize
            rec = np.zeros(len(p), dtype=self.report_dtype)
            rec["view"] = k
            rec["payload"][:, :size] = reports.view(np.uint8).reshape(len(p), size)
            records.append(rec)
            probs.append(v.weight * np.asarray(p))
        return np.concatenate(records), np.concatenate(probs)

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        """The payload size, and each view's name, oracle, size, share (the first view
        whose ``until`` exceeds one u64 is drawn), labels (None: identity) and constants."""
        from ._portable import TWO64, hex64

        views = []
        cumulative = 0.0
        for k, v in enumerate(self.views):
            cumulative += v.weight
            until = (
                TWO64 - 1 if k == len(self.views) - 1 else min(TWO64 - 1, round(cumulative * TWO64))
            )
            labels = np.asarray(v.labels)
            identity = labels.size == v.size and bool(np.all(labels == np.arange(labels.size)))
            views.append(
                {
                    "name": v.name,
                    "oracle": v.oracle.name,
                    "size": v.size,
                    "until": hex64(until),
                    "labels": None if identity else [int(x) for x in labels],
                    **v.oracle.served_constants(),
                }
            )
        return {"payload": int(self._payload_size), "views": views}

    @classmethod
    def portable_report(cls, definition: Mapping[str, Any], value: Any, words: Words) -> bytes:
        """A view by one ``u64()``; the cell's group in it reported by the view's oracle, in
        the record (view, payload) zero-padded."""
        derived = definition["derived"]
        cell = int(value)
        draw = words.u64()
        views = derived["views"]
        k = next((i for i, v in enumerate(views) if draw < int(v["until"], 16)), len(views) - 1)
        view = views[k]
        item = cell if view["labels"] is None else int(view["labels"][cell])
        body = oracle_class(view["oracle"]).portable_item(view, int(view["size"]), item, words)
        return bytes([k]) + body + bytes(int(derived["payload"]) - len(body))

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """The view, by its weight; and given it, the view oracle's law for the cell's group."""
        from ._conformance import chi2, prefixed

        view = reports["view"].astype(np.int64)
        weights = [v.weight for v in self.views]
        out = [("view", *chi2(np.bincount(view, minlength=len(weights)), weights), "")]
        for k, v in enumerate(self.views):
            rows = reports["payload"][view == k]
            if len(rows) < 20:
                continue
            group = int(v.labels[int(value)])
            law = v.oracle.conformance_tests(
                self._payload_reports(k, rows), group, derived["views"][k]
            )
            out += prefixed(f"view {v.name}", law)
        return out

    def _batch(
        self, n: npt.ArrayLike, sums: npt.ArrayLike
    ) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[np.bool_]]:
        """(n, view sizes, debiased y, rows that cannot be estimated) of R aggregates.

        A row cannot be estimated when it holds no report, or none for some view (then
        a view's estimates are undefined and the design does not identify the cells).
        """
        counts_n, table = batch_sums(n, sums, self.stats_size)
        sizes, counts = self.engine.split(table)
        bad = (counts_n <= 0) | (sizes.min(axis=1) <= 0)
        safe = np.where(bad[:, None], 1.0, sizes)
        return counts_n, safe, self.engine.debias(counts, safe), bad

    def _finish(
        self,
        n: FloatArray,
        sizes: FloatArray,
        x: FloatArray,
        consistent: FloatArray,
        base: FloatArray,
        bad: npt.NDArray[np.bool_],
    ) -> OutputArrays:
        """Variances at the consistent base cells, standard errors, NaN for bad rows."""
        uniform = np.full(self.base_size, 1.0 / self.base_size)
        base = np.where(bad[:, None], uniform, base)
        quad = self.engine.variance_quadratic(base, sizes, np.where(bad, 2.0, n))
        stderr = np.sqrt(np.maximum(quad.at(consistent), 0.0))
        if bad.any():
            nan = np.where(bad[:, None], np.nan, 1.0)
            c = None if quad.correction is None else quad.correction * nan
            quad = Quadratic(quad.v0 * nan, quad.v1 * nan, quad.v2 * nan, c)
            x, stderr, consistent = x * nan, stderr * nan, consistent * nan
        skew = self.engine.skew(base, sizes)
        return OutputArrays(n, x, stderr, consistent, quad, self.engine.forgery, skew=skew)

    def _supports(self, n: npt.ArrayLike, sums: npt.ArrayLike) -> SupportCounts | None:
        """With one view that reports each base cell as its own item, every output group
        that is a bijection of the base cells (a table's cells, a rollup's leaves) is one
        support count per output: those counts (the others NaN). None with several views."""
        e = self.engine
        if not e.single:
            return None
        counts_n, table = batch_sums(n, sums, self.stats_size)
        _, counts = e.split(table)
        out = np.full((counts_n.size, e.n_outputs), np.nan)
        parts = zip(e.output_offsets, e.output_labels, e.output_sizes, strict=False)
        for off, labels, size in parts:
            if size == e.m:
                out[:, off + labels] = counts[:, e.view_labels[0]]
        oracle = self.views[0].oracle
        p, q = np.full(e.n_outputs, oracle.p), np.full(e.n_outputs, oracle.q)
        return SupportCounts(out, counts_n, p, q)

    def expected_sizes(self, n: float) -> FloatArray:
        """(1, views): each view's expected number of users out of n."""
        return np.array([[v.weight * n for v in self.views]])
