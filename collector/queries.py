"""``GET /v1/estimates/{name}``: query parameters and the answer's JSON.

Aggregates of the chosen version are summed over the buckets whose start lies in
``[from, to)`` and handed to the mechanism's estimator; nothing here looks at a report.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from .._json import finite_or_none
from .._validation import check_level
from ..aggregate import Aggregate
from ..errors import ParameterError
from ..errors import QueryError as QueryError  # its home is ldpkit.errors
from ..estimates import FrequencyEstimate, MeanEstimate
from ..kinds import Question, checked_options, query_params
from ..mechanisms import FrequencyOracle, NumericMechanism
from ..metrics import MetricDefinition, MetricKind
from ..wire import FINGERPRINT_PATTERN
from .store import BucketAggregate

COMMON_PARAMS = ("from", "to", "level", "consistent", "version", "per_bucket")
PARAMS = (*COMMON_PARAMS, *query_params())
"""Every query parameter: the common ones and each kind's own (see ldpkit.kinds)."""
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}
_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")


@dataclass(frozen=True)
class EstimateQuery(Question):
    """An estimates query: what it asks of the metric's kind (``options``, parsed by
    :func:`with_options`, ``level``, ``consistent``) and which aggregates it reads."""

    start: int | None = None  # include buckets with start >= this (unix seconds)
    end: int | None = None  # ... and < this
    version: str | None = None
    per_bucket: bool = False
    raw_options: Mapping[str, str] = field(default_factory=dict)
    """The kind's own parameters as given (checked against the metric's kind later)."""


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
    if version is not None and not FINGERPRINT_PATTERN.fullmatch(version):
        raise QueryError("version", f"expected 16 lowercase hex digits, got {version[:40]!r}")
    return EstimateQuery(
        start=start,
        end=end,
        level=level,
        consistent=_parse_bool(query.get("consistent", "false"), "consistent"),
        version=version,
        per_bucket=_parse_bool(query.get("per_bucket", "false"), "per_bucket"),
        raw_options={k: query[k] for k in query_params() if k in query},
    )


def with_options(definition: MetricDefinition, q: EstimateQuery) -> EstimateQuery:
    """``q`` with the metric kind's own parameters parsed; QueryError names a bad one
    (or one that belongs to another kind)."""
    return replace(q, options=checked_options(definition, q.raw_options))


class RawJSON(str):
    """Text that is already JSON (spliced into the answer as is)."""


def to_json(obj: Any) -> str:
    """JSON text of ``obj``, with :class:`RawJSON` parts spliced in; no NaN or infinity."""
    if isinstance(obj, RawJSON):
        return str(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{to_json(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(map(to_json, obj)) + "]"
    return json.dumps(obj, allow_nan=False)


@functools.lru_cache(maxsize=256)
def _quoted(categories: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(json.dumps(c) for c in categories)


def _numbers(values: npt.NDArray[np.float64]) -> list[str]:
    """Each value as JSON (shortest round-trip form, as ``json`` writes it), null if not finite."""
    out = list(map(float.__repr__, values.tolist()))
    bad = ~np.isfinite(values)
    if bad.any():
        for i in np.flatnonzero(bad).tolist():
            out[i] = "null"
    return out


def _items(
    cats: tuple[str, ...],
    columns: Sequence[npt.NDArray[np.float64]],
    methods: npt.NDArray[np.str_] | None = None,
) -> RawJSON:
    """The ``items`` list, built as text: at d = 1024 this is most of an answer, and
    formatting it directly is several times faster than dicts through ``json.dumps``.

    ``columns`` are estimate, stderr, low, high and optionally consistent; ``methods``
    names each item's interval method."""
    quoted = _quoted(cats)
    cols = [_numbers(c) for c in columns]
    tails = (
        [f',"interval":"{m}"}}' for m in methods.tolist()]
        if methods is not None
        else ["}"] * len(cats)
    )
    consistent = [f',"consistent":{k}' for k in cols[4]] if len(cols) == 5 else [""] * len(cats)
    parts = [
        f'{{"category":{c},"estimate":{e},"stderr":{s},"low":{lo},"high":{hi}{k}{t}'
        for c, e, s, lo, hi, k, t in zip(quoted, *cols[:4], consistent, tails, strict=True)
    ]
    return RawJSON("[" + ",".join(parts) + "]")


def _sums(agg: Aggregate) -> RawJSON:
    return RawJSON("[" + ",".join(_numbers(np.asarray(agg.sums, dtype=np.float64))) + "]")


def _fields(definition: MetricDefinition, agg: Aggregate, q: EstimateQuery) -> dict[str, Any]:
    """``n`` and the estimate fields of one aggregate, with its sufficient statistics
    (``sums``: the analyst rebuilds the core's estimate from them) except a strings
    metric's: its sketches hold 10^5 and more counts, far more than its answer."""
    if definition.kind not in (MetricKind.CATEGORICAL, MetricKind.NUMERIC):
        fields = definition.kind_spec.answer(definition, agg, q)
        for key in ("mechanism", "epsilon", "level"):  # the answer's own fields say these
            fields.pop(key, None)
        if definition.kind is not MetricKind.STRINGS:
            fields["sums"] = _sums(agg)
        return fields
    mechanism = definition.mechanism_instance
    assert isinstance(mechanism, FrequencyOracle | NumericMechanism)
    estimate = mechanism.estimate(agg)
    sums = _sums(agg)
    if isinstance(estimate, MeanEstimate):
        low, high = estimate.ci(q.level)
        return {
            "n": estimate.n,
            "sums": sums,
            "interval": estimate.interval_method(q.level) if estimate.n else None,
            "mean": finite_or_none(estimate.mean),
            "clamped_mean": finite_or_none(estimate.clamped_mean),
            "stderr": finite_or_none(estimate.stderr),
            "low": finite_or_none(float(low)),
            "high": finite_or_none(float(high)),
        }
    assert isinstance(estimate, FrequencyEstimate)
    assert definition.categories is not None
    if estimate.n == 0:
        nan = np.full(len(definition.categories), np.nan)
        return {
            "n": 0,
            "sums": sums,
            "interval": None,
            "items": _items(definition.categories, [nan] * (5 if q.consistent else 4)),
        }
    low, high = estimate.ci(q.level)
    columns = [
        np.asarray(estimate.frequencies, dtype=np.float64),
        np.asarray(estimate.stderr, dtype=np.float64),
        np.asarray(low, dtype=np.float64),
        np.asarray(high, dtype=np.float64),
    ]
    if q.consistent:
        columns.append(np.asarray(estimate.consistent(), dtype=np.float64))
    return {
        "n": estimate.n,
        "sums": sums,
        "interval": estimate.interval_method(q.level),
        "items": _items(definition.categories, columns, estimate.interval_methods(q.level)),
    }


def estimate_answer(
    definition: MetricDefinition,
    fingerprint: str,
    buckets: Sequence[BucketAggregate],
    q: EstimateQuery,
) -> dict[str, Any]:
    """The answer to an estimates query on version ``fingerprint``, ready for
    :func:`to_json` (``items`` are :class:`RawJSON`)."""
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
        "kind": definition.kind.value,
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


def estimate_body(
    definition: MetricDefinition,
    fingerprint: str,
    buckets: Sequence[BucketAggregate],
    q: EstimateQuery,
) -> bytes:
    """The JSON bytes answering an estimates query."""
    return to_json(estimate_answer(definition, fingerprint, buckets, q)).encode()
