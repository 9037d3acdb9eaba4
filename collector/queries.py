"""``GET /v1/estimates/{name}``: query parameters and the answer's JSON.

Aggregates of the chosen version are summed over the buckets whose start lies in
``[from, to)`` and handed to the mechanism's estimator; nothing here looks at a report.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from typing import Any

import numpy as np

from .. import kinds
from .._validation import check_level
from ..aggregate import Aggregate
from ..errors import ParameterError, QueryError
from ..kinds import Question, checked_options, query_params
from ..kinds.base import Fraction, Level, RawJSON
from ..metrics import MetricDefinition, check_forgery_fraction
from ..wire import FINGERPRINT_PATTERN
from .store import BucketAggregate

COMMON_PARAMS = (
    "from",
    "to",
    "level",
    "consistent",
    "version",
    "per_bucket",
    "forgery_fraction",
    "robust",
    "simultaneous",
    "wait",
)
KIND_PARAMS = query_params()
PARAMS = (*COMMON_PARAMS, *KIND_PARAMS)
"""Every query parameter: the common ones and each kind's own (see ldpkit.kinds)."""
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}
_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")
MAX_WAIT = 120.0
"""Longest ``wait`` a query may ask (seconds) for an estimate computed from its data."""


@dataclass(frozen=True)
class EstimateQuery(Question):
    """An estimates query: what it asks of the metric's kind (``options`` and
    ``forgery_fraction``, set by :func:`with_options`, ``level``, ``consistent``,
    ``robust``) and which aggregates it reads."""

    start: int | None = None  # include buckets with start >= this (unix seconds)
    end: int | None = None  # ... and < this
    version: str | None = None
    per_bucket: bool = False
    raw_options: Mapping[str, str] = field(default_factory=dict)
    """The kind's own parameters as given (checked against the metric's kind later)."""
    asked_fraction: Fraction | None = None
    """The query's ``forgery_fraction``; None: the metric's own."""
    wait: float = 0.0
    """Seconds to wait for a maintained estimate computed from the data as it is now."""


@dataclass(frozen=True)
class Part:
    """A part of an answer (the total, or a bucket's): its aggregate, the kind's prepared
    estimate of it (None: computed for this answer) and, for a maintained estimate, how
    fresh it is (``as_of``)."""

    aggregate: Aggregate
    estimate: Any = None
    as_of: Mapping[str, Any] | None = None


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
    """Check the query string (``keys``: every key given, to catch repeats and typos): the
    collector's one check of each value; the kinds and the estimators are given them checked."""
    _check_keys(keys)
    start = parse_time(query["from"], "from") if query.get("from") else None
    end = parse_time(query["to"], "to") if query.get("to") else None
    if start is not None and end is not None and end < start:
        raise QueryError("to", f"must not be before from ({end} < {start})")
    return EstimateQuery(
        start=start,
        end=end,
        level=_level(query["level"]) if "level" in query else Level(0.95),
        version=_version(query.get("version") or None),
        consistent=_parse_bool(query.get("consistent", "false"), "consistent"),
        per_bucket=_parse_bool(query.get("per_bucket", "false"), "per_bucket"),
        robust=_parse_bool(query.get("robust", "false"), "robust"),
        simultaneous=_parse_bool(query.get("simultaneous", "false"), "simultaneous"),
        raw_options={k: query[k] for k in KIND_PARAMS if k in query},
        asked_fraction=_fraction(query.get("forgery_fraction")),
        wait=_wait(query["wait"]) if "wait" in query else 0.0,
    )


def _check_keys(keys: Sequence[str]) -> None:
    unknown = sorted({k for k in keys if k not in PARAMS})
    if unknown:
        raise QueryError(unknown[0], f"unknown parameter (known: {', '.join(PARAMS)})")
    for k in PARAMS:
        if list(keys).count(k) > 1:
            raise QueryError(k, "given more than once")


def _level(text: str) -> Level:
    try:
        return Level(check_level(float(text)))
    except (ValueError, ParameterError):
        raise QueryError(
            "level", f"expected a number in (0, 1) such as 0.95, got {text[:40]!r}"
        ) from None


def _fraction(text: str | None) -> Fraction | None:
    if text is None:  # not asked: the metric's own
        return None
    try:
        return check_forgery_fraction(float(text))
    except (ValueError, ParameterError):
        raise QueryError(
            "forgery_fraction", f"expected a number in (0, 0.5] such as 0.01, got {text[:40]!r}"
        ) from None


def _wait(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_WAIT:  # NaN too
        raise QueryError("wait", f"expected seconds in 0..{MAX_WAIT:g}, got {text[:40]!r}")
    return seconds


def _version(version: str | None) -> str | None:
    if version is not None and not FINGERPRINT_PATTERN.fullmatch(version):
        raise QueryError("version", f"expected 16 lowercase hex digits, got {version[:40]!r}")
    return version


def with_options(definition: MetricDefinition, q: EstimateQuery) -> EstimateQuery:
    """``q`` with the metric kind's own parameters parsed (QueryError names a bad one, or
    one that belongs to another kind) and the forged fraction its answer discloses the
    shift for: the query's, else the metric's."""
    fraction = q.asked_fraction or definition.effective_forgery_fraction
    if q.simultaneous and not definition.kind_spec.simultaneous_intervals:
        offered = ", ".join(k for k, spec in kinds.KINDS.items() if spec.simultaneous_intervals)
        raise QueryError(
            "simultaneous",
            f"a {definition.kind} metric has no simultaneous intervals (offered for: {offered})",
        )
    return replace(q, options=checked_options(definition, q.raw_options), forgery_fraction=fraction)


def to_json(obj: Any) -> str:
    """JSON text of ``obj``, with :class:`RawJSON` parts spliced in; no NaN or infinity."""
    if isinstance(obj, RawJSON):
        return str(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{to_json(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(map(to_json, obj)) + "]"
    return json.dumps(obj, allow_nan=False)


def summed(buckets: Sequence[BucketAggregate], mechanism: Any) -> Aggregate:
    """The aggregate of ``buckets`` (the mechanism's empty one if there are none)."""
    if not buckets:
        empty: Aggregate = mechanism.empty_aggregate()
        return empty
    return Aggregate(
        sum(b.aggregate.n for b in buckets), np.sum([b.aggregate.sums for b in buckets], axis=0)
    )


def estimate_answer(
    definition: MetricDefinition,
    fingerprint: str,
    total: Part,
    buckets: Sequence[tuple[int, Part]],
    q: EstimateQuery,
) -> dict[str, Any]:
    """The answer to an estimates query on version ``fingerprint``, ready for
    :func:`to_json` (``items`` are :class:`RawJSON`): of ``total`` and, with ``per_bucket``,
    of each of ``buckets``."""
    spec = definition.kind_spec

    def part(p: Part) -> dict[str, Any]:
        if p.estimate is None:
            found = spec.answer(definition, p.aggregate, q)
        else:
            found = spec.answer_with(definition, p.aggregate, p.estimate, q)
        return found if p.as_of is None else {**found, "as_of": p.as_of}

    fields = part(total)
    answer: dict[str, Any] = {
        "metric": definition.name,
        "kind": definition.kind.value,
        "version": fingerprint,
        "mechanism": definition.mechanism_instance.name,
        "epsilon": definition.epsilon,
        "n": fields.pop("n"),
        "level": q.level,
        "forgery_fraction": q.forgery_fraction,
        "from": q.start,
        "to": q.end,
        "consistent": q.consistent,
        "simultaneous": q.simultaneous,
        **fields,
    }
    if q.per_bucket:
        answer["buckets"] = [{"bucket": b, **part(p)} for b, p in buckets]
    return answer


def answer_body(
    definition: MetricDefinition,
    fingerprint: str,
    total: Part,
    buckets: Sequence[tuple[int, Part]],
    q: EstimateQuery,
) -> bytes:
    """The JSON bytes of :func:`estimate_answer`."""
    return to_json(estimate_answer(definition, fingerprint, total, buckets, q)).encode()


def estimate_body(
    definition: MetricDefinition,
    fingerprint: str,
    buckets: Sequence[BucketAggregate],
    q: EstimateQuery,
    as_of: Mapping[str, Any] | None = None,
) -> bytes:
    """The JSON bytes answering an estimates query from the aggregates (computed here)."""
    total = Part(summed(buckets, definition.mechanism_instance), None, as_of)
    parts = [(b.bucket, Part(b.aggregate)) for b in buckets]
    return answer_body(definition, fingerprint, total, parts, q)
