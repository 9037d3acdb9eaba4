"""The analyst's Python API: query a collector's estimates as result objects.

>>> from ldpkit.analyst import Analyst
>>> analyst = Analyst("http://127.0.0.1:8787", token="analyst-secret")  # doctest: +SKIP
>>> result = analyst.estimates("theme", level=0.95, consistent=True)      # doctest: +SKIP
>>> result.items[0].category, result.items[0].estimate, result.items[0].low  # doctest: +SKIP
>>> result.to_pandas()                                                      # doctest: +SKIP

The token may come from the environment (``LDPKIT_READ_TOKEN``). Errors say what to do:
:class:`~ldpkit.errors.CollectorUnavailable` when the collector cannot be reached,
:class:`~ldpkit.errors.CollectorRejected` for a bad token or an unknown metric.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, date, datetime
from typing import Any

import numpy as np

from .._json import loads_bounded
from .._validation import check_level, check_seconds
from ..aggregate import Aggregate
from ..distribution import DistributionEstimate, QuantileEstimate, check_estimand
from ..errors import (
    CollectorTimedOut,
    CollectorUnavailable,
    EstimatePending,
    ParameterError,
    ProtocolError,
)
from ..estimates import FrequencyEstimate, MeanEstimate
from ..heavy_hitters import StringEstimate
from ..http import AnswerTimeout, HttpTransport, NetworkError, Timeout, error_of, http_error
from ..kinds import KindSpec, kind_or_default, legacy_kind
from ..kinds.render import nan, text_table
from ..metrics import MetricDefinition, check_forgery_fraction
from ..ranking import describe as describe_most_common
from ..ranking import label
from ..structured_estimates import HierarchyEstimate, TableEstimate

TOKEN_ENV = "LDPKIT_READ_TOKEN"
MAX_WAIT = 120.0
"""The longest ``wait`` one query may ask of the collector (longer waits ask again)."""


@dataclass(frozen=True)
class AsOf:
    """How fresh a maintained estimate is (strings, hierarchy, table, distribution: computed
    off the request path, docs/protocol.md "Freshness"): the reports (``n``) and buckets it
    was computed from, when (``computed_at``, UTC) and how long before the answer
    (``age_seconds``), the reports received since, and whether it is of the data as it was
    when the query arrived (``fresh``)."""

    n: int
    buckets: int
    computed_at: datetime
    age_seconds: float
    reports_since: int
    fresh: bool

    @classmethod
    def from_json(cls, data: Any) -> AsOf | None:
        if not isinstance(data, dict):
            return None
        return cls(
            n=int(data.get("n", 0)),
            buckets=int(data.get("buckets", 0)),
            computed_at=datetime.fromtimestamp(float(data.get("computed_at", 0.0)), tz=UTC),
            age_seconds=float(data.get("age_seconds", 0.0)),
            reports_since=int(data.get("reports_since", 0)),
            fresh=bool(data.get("fresh", True)),
        )

    def describe(self) -> str:
        """One line for people: when, from how much, and what came since."""
        when = self.computed_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        head = f"as of {when} ({_age(self.age_seconds)} ago), computed from {self.n} reports"
        if self.fresh:
            return f"{head}: fresh"
        since = f"{self.reports_since} received since" if self.reports_since else "held since"
        return f"{head}; {since}: a fresh one is being computed (ask with wait=SECONDS)"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class ItemEstimate:
    """One category's estimated fraction with its interval.

    ``category`` names the item in every kind: a category, a node's path (hierarchy), a
    string (strings), ``"type=Van, origin=USA"`` (a table's cell, also in ``cell``) or
    ``"[5, 10)"`` (a distribution's bin, also in ``lower`` and ``upper``).
    """

    category: str
    estimate: float | None
    stderr: float | None
    low: float | None
    high: float | None
    forgery_shift: float | None = None
    """The largest change the answer's ``forgery_fraction`` of forged reports could make
    to ``estimate``, whatever they are (None from a collector that does not say)."""
    consistent: float | None = None
    robust: float | None = None
    """Asked with ``robust=True``: the estimate robust to the answer's forged fraction
    (docs/statistics.md, "Robust estimates"), with its interval for the genuine reporters
    (``robust_low``, ``robust_high``) and how far that fraction could move it."""
    robust_low: float | None = None
    robust_high: float | None = None
    robust_forgery_shift: float | None = None
    interval: str | None = None  # how the interval was made: "score" or "exact"
    lower: float | None = None
    upper: float | None = None
    cell: dict[str, str] | None = None
    hex: str | None = None
    evidence_z: float | None = None
    """A listed string's evidence (strings): its find test's tail probability as a normal z,
    at least the answer's ``find_z``; below ``find_z + 1`` the listing is weak
    (docs/statistics.md, "How strong a listing is"). None for a string only named."""


@dataclass(frozen=True)
class MostCommonAnswer:
    """The served ``most_common``: the ``mode`` (a category, a node's path, a table's cell
    as a dict), the ``set`` of the items that could be the most common at ``level`` (it
    holds the true mode with probability at least ``level``; the mode first), the
    ``method``, and the top items' ``ranks`` (``{category or cell, rank, low, high}``,
    the intervals holding together at ``level``). docs/statistics.md, "Which is the most
    common?"."""

    mode: Any
    set: tuple[Any, ...]
    level: float
    method: str
    ranks: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> MostCommonAnswer | None:
        if not isinstance(data, dict):
            return None
        return cls(
            data.get("mode"),
            tuple(data.get("set") or ()),
            float(data.get("level", 0.95)),
            str(data.get("method", "")),
            tuple(data.get("ranks") or ()),
        )

    def describe(self) -> str:
        """``most common: X (or Y, Z at 95%)``."""
        return describe_most_common(self.mode, self.set[1:], self.level)

    def ranks_line(self) -> str:
        """``ranks (95%, together): dark 1 [1, 2], light 2 [1, 2]``."""
        parts = [
            f"{label(r.get('category', r.get('cell')))} {r['rank']} [{r['low']}, {r['high']}]"
            for r in self.ranks
        ]
        return f"ranks ({self.level:.0%}, together): " + ", ".join(parts)


CoreEstimate = (
    FrequencyEstimate | MeanEstimate | DistributionEstimate | HierarchyEstimate | TableEstimate
)
"""The core's estimate of a metric kind (all but strings: see :meth:`EstimateResult.strings`)."""


@dataclass(frozen=True, kw_only=True)
class ServedEstimate:
    """What a whole answer and each of its time buckets hold alike: categorical ``items``
    or numeric ``mean`` (a distribution's mean with ``stderr``/``low``/``high`` and
    ``forgery_shift``)."""

    n: int
    items: tuple[ItemEstimate, ...] = ()
    mean: float | None = None
    stderr: float | None = None
    low: float | None = None
    high: float | None = None
    forgery_shift: float | None = None
    """How far the answer's ``forgery_fraction`` of forged reports could move the mean."""
    beyond_bounds: str | None = None
    """A numeric mean's interval wholly ``"upper"`` or ``"lower"`` than its bounds."""
    clamped_mean: float | None = None
    robust: dict[str, Any] | None = None
    """Asked with ``robust=True``, the served ``robust`` object: a categorical answer's
    ``forgery_fraction``, ``forged_reports``, ``level``, ``simultaneous`` (each item has its
    robust values); a numeric one's robust mean, also as the four fields below. None for
    a kind without a robust estimate (:attr:`EstimateResult.robust_note` says so)."""
    robust_mean: float | None = None
    robust_low: float | None = None
    robust_high: float | None = None
    robust_forgery_shift: float | None = None
    interval: str | None = None  # "score", "exact", "score+exact", "known-variance", "profile"
    estimator: str | None = None
    """``"ml"`` when the items are the maximum-likelihood estimate (asked with
    ``estimator="ml"``; profile-likelihood intervals), else None (the mechanism's own)."""
    most_common: MostCommonAnswer | None = None
    """Which item is the most common, and which could be (categorical, hierarchy, table)."""
    mean_rank: dict[str, Any] | None = None
    """Ordered categories: the served ``mean_rank`` (``estimate``, ``stderr``, ``low``,
    ``high``, ``interval``; the first category is rank 1)."""
    at_least: tuple[dict[str, Any], ...] = ()
    """Ordered categories: the served shares "this category or later", one per category but
    the first (``category``, ``estimate``, ``stderr``, ``low``, ``high``, ``interval``):
    ``at_least[2]`` of a 1-5 rating is "4 stars or more". :meth:`share_at_least` finds one."""
    as_of: AsOf | None = field(default=None, compare=False)
    """A maintained kind's (strings, hierarchy, table, distribution): how fresh the estimate
    is (None for categorical and numeric metrics: computed for each query, always fresh)."""
    # By kind (each bucket holds them too): a distribution's quantiles, range and bounds,
    # a hierarchy's depth and subtree, a table's marginals and dimensions, strings' threshold
    # and candidates.
    quantiles: tuple[QuantileEstimate, ...] = ()
    range: ItemEstimate | None = None
    bounds: tuple[float, float] | None = None
    estimand: str | None = None
    """A distribution's: whose bins the intervals are about, ``"reporters"`` (the reporting
    users') or ``"population"`` (the population they were drawn from)."""
    depth: int | None = None
    subtree: str | None = None
    marginals: dict[str, tuple[ItemEstimate, ...]] = field(default_factory=dict)
    dimensions: tuple[tuple[str, tuple[str, ...]], ...] = ()
    threshold: float | None = None
    find_z: float | None = None
    """Strings: the least ``evidence_z`` a string needs to be found (see ItemEstimate)."""
    candidates: tuple[ItemEstimate, ...] = ()
    estimate: CoreEstimate | None = field(default=None, compare=False, repr=False)
    """The core's estimate, rebuilt from the served sufficient statistics (``sums``) by the
    same code the collector ran (``estimate.ci(0.9)``, ``.consistent()``, a hierarchy's
    ``.subtree(...)``): the served fields are its serialisation. None for strings, or
    without the version's definition."""

    def share_at_least(self, category: str) -> dict[str, Any]:
        """The served share of reporters at ``category`` or a later one (ordered
        categories): ``result.share_at_least("4")["estimate"]``. The first category's is
        1 (every reporter). ParameterError for another category or unordered ones."""
        for share in self.at_least:
            if share.get("category") == category:
                return share
        if self.items and self.at_least and self.items[0].category == category:
            return {"category": category, "estimate": 1.0, "stderr": 0.0, "low": 1.0,
                    "high": 1.0, "interval": self.at_least[0].get("interval")}  # fmt: skip
        if not self.at_least:
            raise ParameterError("shares 'at least' are answered for ordered categories only")
        names = [str(s.get("category")) for s in self.at_least]
        raise ParameterError(f"{category!r} is not a category here; expected one of {names}")


@dataclass(frozen=True, kw_only=True)
class BucketEstimate(ServedEstimate):
    """The estimate of one time bucket (``start`` is a UTC datetime)."""

    start: datetime


@dataclass(frozen=True, kw_only=True)
class EstimateResult(ServedEstimate):
    """An estimate as the collector served it, with the answer's other fields by kind."""

    metric: str
    kind: str
    version: str
    mechanism: str
    epsilon: float
    level: float
    consistent: bool
    simultaneous: bool = False
    """Whether the intervals cover each group of items together at ``level`` (a
    hierarchy's depth or subtree, a table's cells or one marginal, a categorical metric's
    items), as asked with ``simultaneous=True``."""
    forgery_fraction: float | None = None
    """The fraction of forged reports each ``forgery_shift`` is about."""
    buckets: tuple[BucketEstimate, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    robust_note: str | None = None
    """Asked with ``robust=True`` of a kind without a robust estimate: says so."""

    @classmethod
    def from_json(
        cls, data: dict[str, Any], definition: MetricDefinition | None = None
    ) -> EstimateResult:
        """From the collector's JSON; with the version's ``definition``, ``estimate`` (and
        each bucket's) is the core's estimate rebuilt from the served ``sums``."""
        kind = str(data.get("kind") or legacy_kind("items" in data))
        served = _served(data, definition)
        spec = kind_or_default(kind)
        # A bucket's kind fields read with the answer's level and forgery fraction.
        shared: dict[str, Any] = {k: data[k] for k in ("level", "forgery_fraction") if k in data}
        buckets = tuple(
            BucketEstimate(
                start=datetime.fromtimestamp(int(b["bucket"]), tz=UTC),
                **_served(b, definition),
                **spec.served_fields({**shared, **b}, _item),
            )
            for b in data.get("buckets") or ()
        )
        return cls(
            **served,
            metric=str(data["metric"]),
            kind=kind,
            version=str(data.get("version", "")),
            mechanism=str(data.get("mechanism", "")),
            epsilon=float(data.get("epsilon", float("nan"))),
            level=float(data.get("level", 0.95)),
            consistent=bool(data.get("consistent", False)),
            simultaneous=bool(data.get("simultaneous", False)),
            forgery_fraction=data.get("forgery_fraction"),
            buckets=buckets,
            raw=data,
            robust_note=data.get("robust_note"),
            **spec.served_fields(data, _item),
        )

    def strings(self) -> list[StringEstimate]:
        """A strings metric's items as the core's StringEstimate (exact bytes from hex)."""
        return [
            StringEstimate(
                bytes.fromhex(i.hex) if i.hex is not None else i.category.encode(),
                *nan([i.estimate, i.stderr, i.low, i.high, i.evidence_z]),
            )
            for i in (*self.items, *self.candidates)
        ]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per category (or one for the mean) over the whole range."""
        return self._rows(self)

    def bucket_rows(self) -> list[dict[str, Any]]:
        """One dict per time bucket and category (or per bucket for the mean), each with
        ``bucket`` (ISO 8601, UTC) and ``n``; empty unless queried with ``per_bucket``."""
        out: list[dict[str, Any]] = []
        for b in self.buckets:
            head = {"bucket": b.start.strftime("%Y-%m-%dT%H:%M:%SZ"), "n": b.n}
            out.extend({**head, **row} for row in self._rows(b))
        return out

    @property
    def _kind(self) -> KindSpec:
        return kind_or_default(self.kind)

    @property
    def _dimensions(self) -> list[str]:
        return [name for name, _ in self.dimensions]

    def _rows(self, part: ServedEstimate) -> list[dict[str, Any]]:
        return self._kind.rows(part, self._columns())

    def _per_bucket(self, per_bucket: bool | None) -> bool:
        if per_bucket is None:
            return bool(self.buckets)
        if per_bucket and "buckets" not in self.raw:
            raise ParameterError("this result has no buckets: query it with per_bucket=True")
        return per_bucket

    def _columns(self) -> list[str]:
        return self._kind.columns(self.consistent, self._dimensions, self.robust is not None)

    def to_pandas(self, *, per_bucket: bool | None = None) -> Any:
        """A pandas DataFrame (pandas is an optional dependency).

        The per-bucket estimates (index ``bucket``, a UTC timestamp, and ``category``) when the
        result has them, else the totals (index ``category``); ``per_bucket`` picks one explicitly.
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install 'ldpkit[pandas]'") from None
        # The index: what an item is about (a table's cells by their attributes).
        if self._per_bucket(per_bucket):
            frame = pd.DataFrame(self.bucket_rows(), columns=["bucket", "n", *self._columns()])
            frame["bucket"] = pd.to_datetime(frame["bucket"], utc=True)
            frame = frame.set_index(["bucket", *self._kind.index(self._dimensions)])
        else:
            frame = pd.DataFrame(self.rows(), columns=self._columns())
            frame = self._kind.frame(frame, self._dimensions)
        about = ("metric", "n", "level", "mechanism", "epsilon")
        frame.attrs.update({k: getattr(self, k) for k in about})
        return frame

    def to_csv(self, *, per_bucket: bool | None = None) -> str:
        """CSV of the per-bucket rows (``bucket`` and ``n`` first) when the result has
        them, else of the totals; ``per_bucket`` picks one explicitly."""
        rows = self.bucket_rows() if self._per_bucket(per_bucket) else self.rows()
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else self._columns())
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()

    def to_json(self) -> str:
        return json.dumps(self.raw, indent=2)

    def to_table(self) -> str:
        """A plain-text table for terminals: the totals, then each bucket's estimates."""
        pct = f"{self.level:.0%}"
        head = (
            f"{self.metric}: n={self.n}, mechanism={self.mechanism}, epsilon={self.epsilon:g}, "
            f"{'maximum likelihood, ' if self.estimator == 'ml' else ''}"
            f"{pct} {'simultaneous ' if self.simultaneous else ''}intervals "
            f"({self.interval or 'method not given'})"
        )
        lines = [head, *self._forgery_line(), *self._kind.text(self, self._table(self.rows()))]
        if self.most_common is not None:
            lines.append(self.most_common.describe() + " (docs/statistics.md)")
            if self.most_common.ranks:
                lines.append(self.most_common.ranks_line())
        if self.buckets:
            lines.append("")
            lines.append("per time bucket (bucket start, UTC):")
            lines.extend(self._table(self.bucket_rows()))
        if self.as_of is not None:  # a maintained kind: how fresh, under what it is about
            lines.append(self.as_of.describe())
        return "\n".join(lines)

    def _forgery_line(self) -> list[str]:
        if self.forgery_fraction is None:  # a collector that does not say
            return []
        return [
            f"forgery shift: how far {self.forgery_fraction * 100:g}% forged reports could move "
            "each estimate, whatever they are (docs/statistics.md)",
            *self._robust_line(),
        ]

    def _robust_line(self) -> list[str]:
        if self.robust_note is not None:
            return [f"robust: {self.robust_note}"]
        if self.robust is None:
            return []
        forged = self.robust.get("forged_reports")
        up_to = f"{self.robust['forgery_fraction'] * 100:g}%" + (
            "" if forged is None else f" ({forged} of the {self.n})"
        )
        return [
            "robust: the estimate projected onto what every honest population satisfies, its "
            f"interval for the genuine reporters if up to {up_to} of the reports are forged "
            "(docs/statistics.md)"
        ]

    def _table(self, rows: list[dict[str, Any]]) -> list[str]:
        return text_table(rows, self._kind.hidden, self._dimensions)


@dataclass(frozen=True)
class MetricVersion:
    """One version of a metric (its parameters' fingerprint), with its reports so far."""

    fingerprint: str
    current: bool
    definition: MetricDefinition
    n: int


def _served(part: dict[str, Any], definition: MetricDefinition | None) -> dict[str, Any]:
    """The :class:`ServedEstimate` fields of an answer or one of its buckets."""
    mean_ = "mean_" if "mean_stderr" in part else ""  # a distribution's mean
    estimate = None
    if definition is not None and "sums" in part:
        sums = np.asarray(part["sums"], dtype=np.float64)
        aggregate = Aggregate(int(part["n"]), sums)
        if part.get("estimator") == "ml":
            from ..mechanisms._profile import ml_frequencies

            oracle: Any = definition.mechanism_instance
            estimate = ml_frequencies(oracle, aggregate)
        else:
            estimate = definition.kind_spec.estimate(definition, aggregate)
    return {
        "n": int(part.get("n", 0)),
        "items": tuple(_item(i) for i in part.get("items") or ()),
        "mean": part.get("mean"),
        "stderr": part.get(f"{mean_}stderr"),
        "low": part.get(f"{mean_}low"),
        "high": part.get(f"{mean_}high"),
        "forgery_shift": part.get(f"{mean_}forgery_shift"),
        "beyond_bounds": part.get("beyond_bounds"),
        "clamped_mean": part.get("clamped_mean"),
        "interval": part.get("interval"),
        "estimator": part.get("estimator"),
        "as_of": AsOf.from_json(part.get("as_of")),
        "most_common": MostCommonAnswer.from_json(part.get("most_common")),
        "estimate": estimate,
        **_robust_mean(part.get("robust")),
    }


def _robust_mean(robust: Any) -> dict[str, Any]:
    """The served ``robust`` object, and a robust mean's fields (``robust_mean``, ...)."""
    if not isinstance(robust, dict):
        return {"robust": None}
    keys = ("mean", "low", "high", "forgery_shift") if "mean" in robust else ()
    return {"robust": robust, **{f"robust_{k}": robust.get(k) for k in keys}}


def _item(data: dict[str, Any]) -> ItemEstimate:
    cell = data.get("cell")
    if "category" in data:
        label = str(data["category"])
    elif isinstance(cell, dict):
        label = ", ".join(f"{k}={v}" for k, v in cell.items())
    elif "lower" in data:
        label = f"[{data['lower']:g}, {data['upper']:g})"
    else:
        label = ""
    # Every other field is the answer's field of the same name, if given.
    named = [f.name for f in fields(ItemEstimate) if f.name not in ("category", "cell")]
    served = {name: data.get(name) for name in named}
    return ItemEstimate(
        category=label,
        cell={str(k): str(v) for k, v in cell.items()} if isinstance(cell, dict) else None,
        **served,
    )


def _time_param(value: str | int | float | date | datetime | None, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return str(int(value.timestamp()))
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise ParameterError(
        f"{name} must be a date, datetime, ISO string or unix seconds, got {value!r}"
    )


class Analyst:
    """A read-only client of one collector's query API (``GET /v1/...``).

    ``timeout``: a :class:`~ldpkit.http.Timeout`, or seconds to connect and for each read;
    the sync Reporter's transport (:mod:`ldpkit.http`) also ends every query within
    ``Timeout.total`` and refuses an answer larger than ``MAX_ANSWER_BYTES``. A query that
    asks the collector to ``wait`` gets that much longer. Past it,
    :class:`~ldpkit.errors.CollectorTimedOut` (the collector is there, slow or stalled);
    :class:`~ldpkit.errors.CollectorUnavailable` when it cannot be reached at all."""

    def __init__(
        self, url: str, token: str | None = None, *, timeout: Timeout | float = 10.0
    ) -> None:
        self.timeout = Timeout.coerce(timeout)
        # The sync Reporter's transport: its timeouts, answer bound, TLS and keep-alive.
        self._transport = HttpTransport(url, self.timeout)
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        if not self.token:
            raise ParameterError(f"a read token is needed: pass token=... or set {TOKEN_ENV}")
        self._definitions: dict[tuple[str, str], MetricDefinition] = {}

    def close(self) -> None:
        """Close the kept-alive connection (the next query opens another)."""
        self._transport.close()

    def _get(
        self, path: str, params: dict[str, str | None] | None = None, *, wait: float = 0.0
    ) -> Any:
        """The JSON answer of ``GET path?params``; ``wait``: seconds the collector may take
        on top of the read timeout (a query that asks it to wait)."""
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        timeout = self.timeout
        if wait:
            read, total = timeout.read_seconds + wait, timeout.total_seconds + wait
            timeout = Timeout(timeout.connect, read, total)
        try:
            answer = self._transport.request(
                "GET", path + (f"?{query}" if query else ""), None, headers, timeout
            )
        except AnswerTimeout as exc:
            raise CollectorTimedOut(
                f"the collector at {self.url} did not answer in time ({exc}): it is running "
                "(the connection was made) but slow or stalled; ask again, or allow longer "
                "(Analyst(timeout=...), `ldpkit estimates --timeout`)",
                seconds=exc.seconds,
            ) from None
        except NetworkError as exc:
            raise CollectorUnavailable(
                f"cannot reach the collector at {self.url} ({exc}); is `ldpkit serve` running "
                f"there?"
            ) from None
        if answer.status == 202:
            retry_after = _seconds(answer.headers.get("retry-after"), 5.0)
            detail = error_of(answer.body)[1]
            raise EstimatePending(
                f"the collector at {self.url} is computing this estimate: {detail}",
                retry_after=retry_after,
            )
        if answer.status != 200:
            hint = {
                401: f" (is the token right? it may also come from {TOKEN_ENV})",
                403: " (this token may not read estimates: use a read token)",
                404: " (is the metric name right? `ldpkit metrics` lists them)",
            }.get(answer.status, "")
            raise http_error(answer.status, answer.body, source=self.url, hint=hint)
        try:
            return loads_bounded(answer.body)
        except ProtocolError as exc:
            raise CollectorUnavailable(f"the collector at {self.url} answered {exc}") from None

    def metrics(self) -> list[MetricDefinition]:
        """The collector's current metric definitions."""
        data = self._get("/v1/metrics")
        return [MetricDefinition.from_dict(m["name"], m) for m in data.get("metrics", [])]

    def versions(self, metric: str) -> list[MetricVersion]:
        """Every version of ``metric`` ever defined, oldest first, each with the number of
        reports it holds (a definition change starts a new version: its reports are
        never mixed with the old ones, which stay queryable with ``version=``)."""
        current, definitions = self._versions(metric)
        path = f"/v1/estimates/{_quoted(metric)}"
        return [
            MetricVersion(fp, fp == current, d, int(self._get(path, {"version": fp}).get("n", 0)))
            for fp, d in definitions.items()
        ]

    def _versions(self, metric: str) -> tuple[str | None, dict[str, MetricDefinition]]:
        """The current fingerprint and every version's definition, rebuilt as served (so
        that each reproduces its fingerprint); kept, as a version never changes."""
        data = self._get(f"/v1/metrics/{_quoted(metric)}/versions")
        definitions = {
            str(v["fingerprint"]): MetricDefinition.from_served(metric, v, str(v["fingerprint"]))
            for v in data.get("versions", [])
        }
        self._definitions.update({(metric, fp): d for fp, d in definitions.items()})
        return data.get("current"), definitions

    def estimates(
        self,
        metric: str,
        *,
        start: str | int | float | date | datetime | None = None,
        end: str | int | float | date | datetime | None = None,
        level: float = 0.95,
        consistent: bool = False,
        per_bucket: bool = False,
        version: str | None = None,
        bins: int | None = None,
        edges: Sequence[float] | None = None,
        quantiles: Sequence[float] | None = None,
        range_: tuple[float, float] | None = None,
        depth: int | None = None,
        subtree: str | None = None,
        candidates: Sequence[str] | None = None,
        forgery_fraction: float | None = None,
        robust: bool = False,
        simultaneous: bool = False,
        wait: float | None = None,
        estimand: str | None = None,
        estimator: str | None = None,
    ) -> EstimateResult:
        """The estimate of ``metric`` over buckets starting in ``[start, end)``.

        Each kind's own questions: ``bins``/``edges``, ``quantiles`` and ``range_`` for
        a distribution, and ``estimand``: ``"reporters"`` (the default: intervals for the
        reporting users' own distribution) or ``"population"`` (for the population they
        were drawn from; the answer's :attr:`EstimateResult.estimand` says which);
        ``depth``, ``subtree``: a hierarchy; ``estimator="ml"``: categorical maximum likelihood;
        ``candidates``: strings (docs/protocol.md). ``forgery_fraction``: the fraction
        of forged reports each ``forgery_shift`` is about (default: the metric's, 0.01
        unless its definition says). ``robust``: add the estimates robust to that fraction
        (categorical and numeric metrics; docs/statistics.md, "Robust estimates"): each
        item's ``robust``, ``robust_low``, ``robust_high`` and ``robust_forgery_shift``, a
        mean's ``robust_mean``, ... (other kinds: ``robust_note`` says they have none).
        ``simultaneous``: intervals that cover a whole group together at ``level`` (a
        hierarchy's depth or subtree, a table's cells and each marginal, a categorical
        metric's items; other kinds refuse it: docs/statistics.md, "Simultaneous intervals").

        ``wait``: seconds to wait for an estimate computed from the data as it is when
        asked. The expensive kinds (strings, hierarchy, table, distribution) are computed
        off the request path (docs/protocol.md, "Freshness"): without ``wait`` the answer
        is the latest estimate, at once, and ``as_of`` says how fresh it is; one never
        computed yet raises :class:`~ldpkit.errors.EstimatePending` (its ``retry_after``
        says when to ask again) unless ``wait`` covers it (asked again until then).
        """
        path = f"/v1/estimates/{_quoted(metric)}"
        level = check_level(level)
        fraction = None if forgery_fraction is None else check_forgery_fraction(forgery_fraction)
        if isinstance(candidates, str):
            raise ParameterError("candidates must be a list of strings, not one string")
        if estimand is not None:
            check_estimand(estimand)
        params = {
            "from": _time_param(start, "start"),
            "to": _time_param(end, "end"),
            "level": repr(float(level)),
            "consistent": "true" if consistent else "false",
            "per_bucket": "true" if per_bucket else "false",
            "version": version,
            "bins": None if bins is None else str(int(bins)),
            "edges": _joined(edges, "edges"),
            "quantiles": _joined(quantiles, "quantiles"),
            "range": _joined(range_, "range_"),
            "depth": None if depth is None else str(int(depth)),
            "subtree": subtree,
            "candidates": None if candidates is None else ",".join(candidates),
            "forgery_fraction": None if fraction is None else repr(fraction),
            "robust": "true" if robust else None,  # (a collector before it knows no such key)
            "estimand": estimand,
            "estimator": _estimator(estimator),
            "simultaneous": "true" if simultaneous else None,
        }
        data = self._waiting(
            path, params, 0.0 if wait is None else check_seconds(wait, "wait", zero=True)
        )
        definition = self._definition(metric, str(data["version"])) if "sums" in data else None
        return EstimateResult.from_json(data, definition)

    def _waiting(self, path: str, params: dict[str, str | None], wait: float) -> Any:
        """GET an estimate, waiting up to ``wait`` seconds for one computed from the data
        as it is: the collector waits up to MAX_WAIT a query, and a ``202 computing`` is
        asked again after its Retry-After while the wait lasts."""
        deadline = time.monotonic() + wait
        while True:
            left = max(0.0, deadline - time.monotonic())
            asked = min(left, MAX_WAIT)
            try:
                return self._get(
                    path, {**params, "wait": f"{asked:.3f}" if asked else None}, wait=asked
                )
            except EstimatePending as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(exc.retry_after, left))

    def _definition(self, metric: str, fingerprint: str) -> MetricDefinition | None:
        """The definition of one version of ``metric`` (kept: a version never changes)."""
        if (metric, fingerprint) not in self._definitions:
            self._versions(metric)
        return self._definitions.get((metric, fingerprint))


def _estimator(estimator: str | None) -> str | None:
    """A categorical query's ``estimator``: None (the default), ``inversion`` or ``ml``."""
    if estimator not in (None, "inversion", "ml"):
        raise ParameterError(f"estimator must be 'inversion' or 'ml', got {estimator!r}")
    return estimator


def _seconds(text: str | None, default: float) -> float:
    """A Retry-After header's seconds (``default`` when absent or not a number)."""
    try:
        seconds = float(text) if text is not None else default
    except ValueError:
        return default
    return min(max(seconds, 0.0), 3600.0)


def _quoted(metric: object) -> str:
    """A metric's name as a path segment (ParameterError if it is no name)."""
    if not isinstance(metric, str) or not metric:
        raise ParameterError(f"metric must be a metric name, got {metric!r}")
    return urllib.parse.quote(metric, safe="")


def _joined(values: object, name: str) -> str | None:
    if values is None:
        return None
    try:
        if isinstance(values, str) or not isinstance(values, Iterable):
            raise TypeError
        return ",".join(repr(float(v)) for v in values)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a list of numbers, got {values!r}") from None
