"""``GET /v1/estimates/{name}``: query parameters and the answer's JSON.

Aggregates of the chosen version are summed over the buckets whose start lies in
``[from, to)`` and handed to the mechanism's estimator; nothing here looks at a report.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import numpy as np

from .._validation import check_level
from ..aggregate import Aggregate
from ..errors import ParameterError
from ..estimates import FrequencyEstimate, MeanEstimate
from ..mechanisms import FrequencyOracle, NumericMechanism
from ..metrics import MetricDefinition
from ..wire import FINGERPRINT_PATTERN
from .store import BucketAggregate

PARAMS = ("from", "to", "level", "consistent", "version", "per_bucket")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}
_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")


class QueryError(ParameterError):
    """A query parameter is invalid; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param


@dataclass(frozen=True)
class EstimateQuery:
    start: int | None = None  # include buckets with start >= this (unix seconds)
    end: int | None = None  # ... and < this
    level: float = 0.95
    consistent: bool = False
    version: str | None = None
    per_bucket: bool = False


def parse_time(value: str, param: str) -> int:
    """Unix seconds from unix seconds, an ISO 8601 date or an ISO 8601 time (UTC unless an
    offset is given), rounded up to a whole second (buckets start on whole seconds)."""
    text = value.strip()
    if _NUMBER.match(text):
        seconds = float(text)
    else:
        try:
            if len(text) == 10 and "T" not in text:
                d = date.fromisoformat(text)
                moment = datetime(d.year, d.month, d.day, tzinfo=UTC)
            else:
                moment = datetime.fromisoformat(text.replace(" ", "T"))
                if moment.tzinfo is None:
                    moment = moment.replace(tzinfo=UTC)
        except ValueError:
            raise QueryError(
                param,
                f"expected unix seconds or an ISO 8601 date/time such as 2025-11-21 or "
                f"2025-11-21T10:00:00Z, got {value[:40]!r}",
            ) from None
        seconds = moment.timestamp()
    if not math.isfinite(seconds) or abs(seconds) > 2**40:
        raise QueryError(param, f"time out of range: {value[:40]!r}")
    return math.ceil(seconds)


def _parse_bool(value: str, param: str) -> bool:
    key = value.strip().lower()
    if key in _TRUE:
        return True
    if key in _FALSE:
        return False
    raise QueryError(param, f"expected true or false, got {value[:40]!r}")


def parse_query(query: Mapping[str, str], keys: Sequence[str]) -> EstimateQuery:
    """Check the query string (``keys``: every key given, to catch repeats and typos)."""
    unknown = sorted({k for k in keys if k not in PARAMS})
    if unknown:
        raise QueryError(unknown[0], f"unknown parameter (known: {', '.join(PARAMS)})")
    for k in PARAMS:
        if list(keys).count(k) > 1:
            raise QueryError(k, "given more than once")
    start = parse_time(query["from"], "from") if query.get("from") else None
    end = parse_time(query["to"], "to") if query.get("to") else None
    if start is not None and end is not None and end < start:
        raise QueryError("to", f"must not be before from ({end} < {start})")
    level = 0.95
    if "level" in query:
        try:
            level = check_level(float(query["level"]))
        except (ValueError, ParameterError):
            raise QueryError(
                "level", f"expected a number in (0, 1) such as 0.95, got {query['level'][:40]!r}"
            ) from None
    version = query.get("version") or None
    if version is not None and not FINGERPRINT_PATTERN.match(version):
        raise QueryError("version", f"expected 16 lowercase hex digits, got {version[:40]!r}")
    return EstimateQuery(
        start=start,
        end=end,
        level=level,
        consistent=_parse_bool(query.get("consistent", "false"), "consistent"),
        version=version,
        per_bucket=_parse_bool(query.get("per_bucket", "false"), "per_bucket"),
    )


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _fields(definition: MetricDefinition, agg: Aggregate, q: EstimateQuery) -> dict[str, Any]:
    """``n`` and the estimate fields of one aggregate."""
    mechanism = definition.mechanism_instance
    assert isinstance(mechanism, FrequencyOracle | NumericMechanism)
    estimate = mechanism.estimate(agg)
    if isinstance(estimate, MeanEstimate):
        low, high = estimate.ci(q.level)
        return {
            "n": estimate.n,
            "mean": _num(estimate.mean),
            "stderr": _num(estimate.stderr),
            "low": _num(float(low)),
            "high": _num(float(high)),
        }
    assert isinstance(estimate, FrequencyEstimate)
    assert definition.categories is not None
    cats = definition.categories
    names = ["estimate", "stderr", "low", "high"] + (["consistent"] if q.consistent else [])
    items: list[dict[str, Any]] = []
    if estimate.n == 0:
        for c in cats:
            empty: dict[str, Any] = {"category": c}
            empty.update(dict.fromkeys(names))
            items.append(empty)
        return {"n": 0, "items": items}
    low, high = estimate.ci(q.level)
    columns = [
        np.asarray(estimate.frequencies),
        np.asarray(estimate.stderr),
        np.asarray(low),
        np.asarray(high),
    ]
    if q.consistent:
        columns.append(np.asarray(estimate.consistent()))
    stacked = np.stack(columns, axis=1)
    if not np.all(np.isfinite(stacked)):
        rows: list[list[float | None]] = [[_num(x) for x in row] for row in stacked.tolist()]
    else:
        rows = stacked.tolist()
    for c, row in zip(cats, rows, strict=True):
        item: dict[str, Any] = {"category": c}
        item.update(zip(names, row, strict=True))
        items.append(item)
    return {"n": estimate.n, "items": items}


def estimate_answer(
    definition: MetricDefinition,
    fingerprint: str,
    buckets: Sequence[BucketAggregate],
    q: EstimateQuery,
) -> dict[str, Any]:
    """The JSON object answering an estimates query on version ``fingerprint``."""
    mechanism = definition.mechanism_instance
    total = mechanism.empty_aggregate()
    if buckets:
        total = Aggregate(
            sum(b.aggregate.n for b in buckets),
            np.sum([b.aggregate.sums for b in buckets], axis=0),
        )
    fields = _fields(definition, total, q)
    answer: dict[str, Any] = {
        "metric": definition.name,
        "version": fingerprint,
        "mechanism": mechanism.name,
        "epsilon": definition.epsilon,
        "n": fields.pop("n"),
        "level": q.level,
        "from": q.start,
        "to": q.end,
        "consistent": q.consistent,
        **fields,
    }
    if q.per_bucket:
        answer["buckets"] = [
            {"bucket": b.bucket, **_fields(definition, b.aggregate, q)} for b in buckets
        ]
    return answer
