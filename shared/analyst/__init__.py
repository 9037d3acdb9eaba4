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
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from .._validation import check_level
from ..errors import CollectorUnavailable, ParameterError
from ..http_errors import http_error
from ..metrics import MetricDefinition

TOKEN_ENV = "LDPKIT_READ_TOKEN"


@dataclass(frozen=True)
class ItemEstimate:
    """One category's estimated fraction with its interval."""

    category: str
    estimate: float | None
    stderr: float | None
    low: float | None
    high: float | None
    consistent: float | None = None
    interval: str | None = None  # how the interval was made: "score" or "exact"


@dataclass(frozen=True)
class BucketEstimate:
    """The estimate of one time bucket (``start`` is a UTC datetime)."""

    start: datetime
    n: int
    items: tuple[ItemEstimate, ...] = ()
    mean: float | None = None
    stderr: float | None = None
    low: float | None = None
    high: float | None = None
    clamped_mean: float | None = None
    interval: str | None = None


@dataclass(frozen=True)
class EstimateResult:
    """An estimate as the collector served it: categorical ``items`` or numeric ``mean``."""

    metric: str
    kind: str
    version: str
    mechanism: str
    epsilon: float
    n: int
    level: float
    consistent: bool
    items: tuple[ItemEstimate, ...] = ()
    mean: float | None = None
    stderr: float | None = None
    low: float | None = None
    high: float | None = None
    clamped_mean: float | None = None
    interval: str | None = None  # "score", "exact", "score+exact" or "known-variance"
    buckets: tuple[BucketEstimate, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EstimateResult:
        items = tuple(_item(i) for i in data.get("items") or ())
        buckets = tuple(
            BucketEstimate(
                start=datetime.fromtimestamp(int(b["bucket"]), tz=UTC),
                n=int(b.get("n", 0)),
                items=tuple(_item(i) for i in b.get("items") or ()),
                mean=b.get("mean"),
                stderr=b.get("stderr"),
                low=b.get("low"),
                high=b.get("high"),
                clamped_mean=b.get("clamped_mean"),
                interval=b.get("interval"),
            )
            for b in data.get("buckets") or ()
        )
        return cls(
            metric=str(data["metric"]),
            kind="categorical" if "items" in data else "numeric",
            version=str(data.get("version", "")),
            mechanism=str(data.get("mechanism", "")),
            epsilon=float(data.get("epsilon", float("nan"))),
            n=int(data.get("n", 0)),
            level=float(data.get("level", 0.95)),
            consistent=bool(data.get("consistent", False)),
            items=items,
            mean=data.get("mean"),
            stderr=data.get("stderr"),
            low=data.get("low"),
            high=data.get("high"),
            clamped_mean=data.get("clamped_mean"),
            interval=data.get("interval"),
            buckets=buckets,
            raw=data,
        )

    # --- views -------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        """One dict per category (or one for the mean) over the whole range."""
        return self._rows(
            self.items,
            self.mean,
            self.clamped_mean,
            self.stderr,
            self.low,
            self.high,
            self.interval,
        )

    def bucket_rows(self) -> list[dict[str, Any]]:
        """One dict per time bucket and category (or per bucket for the mean), each with
        ``bucket`` (ISO 8601, UTC) and ``n``; empty unless queried with ``per_bucket``."""
        out: list[dict[str, Any]] = []
        for b in self.buckets:
            head = {"bucket": b.start.strftime("%Y-%m-%dT%H:%M:%SZ"), "n": b.n}
            rows = self._rows(b.items, b.mean, b.clamped_mean, b.stderr, b.low, b.high, b.interval)
            out.extend({**head, **row} for row in rows)
        return out

    def _rows(
        self,
        items: tuple[ItemEstimate, ...],
        mean: float | None,
        clamped_mean: float | None,
        stderr: float | None,
        low: float | None,
        high: float | None,
        interval: str | None,
    ) -> list[dict[str, Any]]:
        if self.kind == "categorical":
            rows = []
            for item in items:
                row = asdict(item)
                if not self.consistent:
                    row.pop("consistent")
                rows.append(row)
            return rows
        return [
            {
                "mean": mean,
                "clamped_mean": clamped_mean,
                "stderr": stderr,
                "low": low,
                "high": high,
                "interval": interval,
            }
        ]

    def _per_bucket(self, per_bucket: bool | None) -> bool:
        if per_bucket is None:
            return bool(self.buckets)
        if per_bucket and "buckets" not in self.raw:
            raise ParameterError("this result has no buckets: query it with per_bucket=True")
        return per_bucket

    def _columns(self) -> list[str]:
        if self.kind == "numeric":
            return ["mean", "clamped_mean", "stderr", "low", "high", "interval"]
        return ["category", "estimate", "stderr", "low", "high"] + (
            ["consistent", "interval"] if self.consistent else ["interval"]
        )

    def to_pandas(self, *, per_bucket: bool | None = None) -> Any:
        """A pandas DataFrame (pandas is an optional dependency).

        The per-bucket estimates (index ``bucket``, a UTC timestamp, and ``category``)
        when the result has them, else the totals (index ``category``); ``per_bucket``
        picks one explicitly.
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install 'ldpkit[pandas]'") from None
        if self._per_bucket(per_bucket):
            frame = pd.DataFrame(self.bucket_rows(), columns=["bucket", "n", *self._columns()])
            frame["bucket"] = pd.to_datetime(frame["bucket"], utc=True)
            keys = ["bucket", "category"] if self.kind == "categorical" else ["bucket"]
            frame = frame.set_index(keys)
        else:
            frame = pd.DataFrame(self.rows())
            if self.kind == "categorical":
                frame = frame.set_index("category")
        frame.attrs.update(
            metric=self.metric,
            n=self.n,
            level=self.level,
            mechanism=self.mechanism,
            epsilon=self.epsilon,
        )
        return frame

    def to_csv(self, *, per_bucket: bool | None = None) -> str:
        """CSV of the per-bucket rows (``bucket`` and ``n`` first) when the result has
        them, else of the totals; ``per_bucket`` picks one explicitly."""
        rows = self.bucket_rows() if self._per_bucket(per_bucket) else self.rows()
        out = io.StringIO()
        columns = self._columns()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else columns)
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
            f"{pct} intervals ({self.interval or 'method not given'})"
        )
        lines = [head, *self._table(self.rows())]
        if self.buckets:
            lines.append("")
            lines.append("per time bucket (bucket start, UTC):")
            lines.extend(self._table(self.bucket_rows()))
        return "\n".join(lines)

    def _table(self, rows: list[dict[str, Any]]) -> list[str]:
        if not rows:
            return ["(no buckets in this range)"]
        text = [{k: _cell(k, v) for k, v in r.items()} for r in rows]
        columns = list(rows[0])
        widths = {c: max(len(c), *(len(t[c]) for t in text)) for c in columns}
        left = {"bucket", "category"}

        def line(cells: dict[str, str]) -> str:
            return "  ".join(
                cells[c].ljust(widths[c]) if c in left else cells[c].rjust(widths[c])
                for c in columns
            ).rstrip()

        return [line({c: c for c in columns}), *(line(t) for t in text)]


def _cell(key: str, value: Any) -> str:
    if key == "bucket":  # 2025-11-21T10:00:00Z -> 2025-11-21 10:00
        return str(value).replace("T", " ").removesuffix(":00Z")
    if key in ("category", "n", "interval"):
        return "-" if value is None else str(value)
    return _fmt(value)


@dataclass(frozen=True)
class MetricVersion:
    """One version of a metric (its parameters' fingerprint), with its reports so far."""

    fingerprint: str
    current: bool
    definition: MetricDefinition
    n: int


def _item(data: dict[str, Any]) -> ItemEstimate:
    return ItemEstimate(
        category=str(data["category"]),
        estimate=data.get("estimate"),
        stderr=data.get("stderr"),
        low=data.get("low"),
        high=data.get("high"),
        consistent=data.get("consistent"),
        interval=data.get("interval"),
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


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
    """A read-only client of one collector's query API (``GET /v1/...``)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 10.0) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ParameterError(f"collector URL must be http(s)://host:port, got {url!r}")
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        if not self.token:
            raise ParameterError(f"a read token is needed: pass token=... or set {TOKEN_ENV}")
        if not (isinstance(timeout, int | float) and timeout > 0):
            raise ParameterError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)

    def _get(self, path: str, params: dict[str, str | None] | None = None) -> Any:
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        url = f"{self.url}{path}" + (f"?{query}" if query else "")
        request = urllib.request.Request(
            url, headers={"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            hint = {
                401: f" (is the token right? it may also come from {TOKEN_ENV})",
                403: " (this token may not read estimates: use a read token)",
                404: " (is the metric name right? `ldpkit metrics` lists them)",
            }.get(exc.code, "")
            raise http_error(exc.code, exc.read(), source=self.url, hint=hint) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CollectorUnavailable(
                f"cannot reach the collector at {self.url} ({reason}); is `ldpkit serve` running "
                f"there?"
            ) from None

    def metrics(self) -> list[MetricDefinition]:
        """The collector's current metric definitions."""
        data = self._get("/v1/metrics")
        return [MetricDefinition.from_dict(m["name"], m) for m in data.get("metrics", [])]

    def versions(self, metric: str) -> list[MetricVersion]:
        """Every version of ``metric`` ever defined, oldest first, each with the number of
        reports it holds (a definition change starts a new version: its reports are
        never mixed with the old ones, which stay queryable with ``version=``)."""
        if not isinstance(metric, str) or not metric:
            raise ParameterError(f"metric must be a metric name, got {metric!r}")
        data = self._get(f"/v1/metrics/{urllib.parse.quote(metric, safe='')}/versions")
        out = []
        for v in data.get("versions", []):
            fingerprint = str(v["fingerprint"])
            n = int(
                self._get(
                    f"/v1/estimates/{urllib.parse.quote(metric, safe='')}", {"version": fingerprint}
                ).get("n", 0)
            )
            out.append(
                MetricVersion(
                    fingerprint,
                    fingerprint == data.get("current"),
                    MetricDefinition.from_dict(metric, v),
                    n,
                )
            )
        return out

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
    ) -> EstimateResult:
        """The estimate of ``metric`` over buckets starting in ``[start, end)``."""
        if not isinstance(metric, str) or not metric:
            raise ParameterError(f"metric must be a metric name, got {metric!r}")
        level = check_level(level)
        params = {
            "from": _time_param(start, "start"),
            "to": _time_param(end, "end"),
            "level": repr(float(level)),
            "consistent": "true" if consistent else "false",
            "per_bucket": "true" if per_bucket else "false",
            "version": version,
        }
        data = self._get(f"/v1/estimates/{urllib.parse.quote(metric, safe='')}", params)
        return EstimateResult.from_json(data)
