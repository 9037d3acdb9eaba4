"""Checking a decoded batch, report by report, without a Python loop per report.

Each block is checked as a whole (known metric, known version, bucket) and then its
reports with the mechanism's vectorized ``check_reports``. The valid reports of each
block become an :class:`~ldpkit.collector.store.CheckedReports` for the store; the others
are named by their index in the batch (counting through the blocks in order), with the
error codes of docs/protocol.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import LdpkitError
from ..mechanisms import Mechanism
from ..mechanisms.local_hashing import OptimizedLocalHashing
from ..metrics import MetricDefinition, Period
from ..wire import Block
from .store import ID_DTYPE, Catalog, CheckedReports

UNKNOWN_METRIC = "unknown_metric"
UNKNOWN_VERSION = "unknown_version"
INVALID_REPORT = "invalid_report"
INVALID_BUCKET = "invalid_bucket"
RETIRED_METRIC = "retired_metric"
BATCH_REUSED = "batch_reused"
DAY = 86400


def oldest_bucket(now: float, retention_days: int) -> int:
    """The earliest bucket start accepted at ``now``: ``retention_days`` earlier (the
    acceptance window). Batch ids (and v1 report ids) are kept that long (and a day more),
    so older reports are refused: their ids may be gone, and a retry would count twice."""
    return int(now) - retention_days * DAY


def prune_before(now: float, retention_days: int) -> int:
    """Ids of buckets before this may be deleted: the UTC day :func:`oldest_bucket` falls
    in, less one more day, so a replica whose clock runs up to a day behind still refuses
    every report whose id is gone."""
    return oldest_bucket(now, retention_days) // DAY * DAY - DAY


def aggregation_seconds(mechanism: Mechanism, n: int) -> float:
    """A rough upper estimate of the time to aggregate ``n`` reports (measured on a 2-core
    machine): optimized local hashing evaluates d hashes per report, in passes over
    chunks of 32,768 reports (a fixed cost per pass); bitmaps (unary encodings, subset
    selection) unpack 8 bits per byte; the rest cost well under a microsecond each."""
    if isinstance(mechanism, OptimizedLocalHashing):
        return 2e-9 * mechanism.domain_size * (n + 4096)
    size = mechanism.report_dtype.itemsize
    if mechanism.report_dtype.subdtype is not None:  # a bitmap of ceil(d / 8) bytes
        return 1.2e-9 * 8 * size * n
    return 1e-7 * n


@dataclass(frozen=True)
class RefusedReports:
    """Reports refused for one reason: their indexes in the batch."""

    indexes: npt.NDArray[np.int64]
    error: str
    detail: str


@dataclass
class BatchVerdict:
    """A received batch, checked: what to store (``blocks``), what to refuse and why."""

    blocks: list[CheckedReports] = field(default_factory=list)
    rejected: list[RefusedReports] = field(default_factory=list)
    total: int = 0
    unknown: set[str] = field(default_factory=set)  # fingerprints not in the catalog


def rejections_json(rejected: Sequence[RefusedReports]) -> list[dict[str, Any]]:
    """The ``rejected`` list of an answer, by index."""
    out: list[dict[str, Any]] = []
    for r in rejected:
        out.extend({"index": i, "error": r.error, "detail": r.detail} for i in r.indexes.tolist())
    return out


def refused_again(
    blocks: Sequence[Block], rejected: Sequence[RefusedReports], indexes: Sequence[int]
) -> list[RefusedReports]:
    """A sealed batch seen before, whose blocks ``indexes`` were refused then (a version
    the collector did not know yet, say) and pass now: they were not counted, and are
    refused again (as ``unknown_version``, which the client keeps a while and sends in a
    new batch). The reports of those blocks not refused already."""
    starts = np.cumsum([0] + [b.n for b in blocks])
    taken = np.concatenate([r.indexes for r in rejected]) if rejected else np.zeros(0, np.int64)
    out = []
    for i in sorted(set(indexes)):
        span = np.arange(starts[i], starts[i + 1], dtype=np.int64)
        span = span[~np.isin(span, taken)]
        if span.size:
            detail = (
                "this batch was received before and these reports were refused then; "
                "send them in a new batch"
            )
            out.append(RefusedReports(span, UNKNOWN_VERSION, detail))
    return out


def refused_as_reused(
    blocks: Sequence[Block], rejected: Sequence[RefusedReports], reused: Sequence[tuple[int, int]]
) -> list[RefusedReports]:
    """A sealed batch id counted before with other content: of each block ``i`` in
    ``reused``, its last ``n`` reports not refused already (beyond those the id counted in
    that block the first time, which are its duplicates) are refused as ``batch_reused``."""
    starts = np.cumsum([0] + [b.n for b in blocks])
    taken = np.concatenate([r.indexes for r in rejected]) if rejected else np.zeros(0, np.int64)
    spans = []
    for i, n in reused:
        span = np.arange(starts[i], starts[i + 1], dtype=np.int64)
        spans.append(span[~np.isin(span, taken)][-n:] if n else span[:0])
    indexes = np.concatenate(spans) if spans else np.zeros(0, np.int64)
    if not indexes.size:
        return []
    detail = (
        "this batch id was already used for other content: only the reports it counted "
        "then are duplicates; send new reports in a new batch (a new batch id)"
    )
    return [RefusedReports(indexes, BATCH_REUSED, detail)]


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(eq=False)
class _Refused(Exception):
    """A whole block refused: ``error`` (a code of docs/protocol.md) and ``detail``."""

    error: str
    detail: str


def check_batch(
    blocks: Sequence[Block], catalog: Catalog, now: float, *, oldest: int | None = None
) -> BatchVerdict:
    """Split a batch into what to store and what to refuse (see the module docstring).
    Buckets starting before ``oldest`` (see :func:`oldest_bucket`) are too old."""
    out = BatchVerdict()
    offset = 0
    for index, block in enumerate(blocks):
        start = offset
        offset += block.n
        out.total += block.n
        if block.n == 0:
            continue
        try:
            definition = _definition(block, catalog, out.unknown)
            _check_bucket(block.bucket, definition.bucket, now, oldest)
            mechanism = definition.mechanism_instance
            checked = _check_reports(block, mechanism, start, index, out.rejected)
        except _Refused as refused:
            indexes = np.arange(start, start + block.n, dtype=np.int64)
            out.rejected.append(RefusedReports(indexes, refused.error, refused.detail))
            continue
        if checked is not None:
            out.blocks.append(checked)
    return out


def _definition(block: Block, catalog: Catalog, unknown: set[str]) -> MetricDefinition:
    """The version of a known metric in service that the block names; a version the
    catalog lacks goes in ``unknown`` (it may be defined through another replica)."""
    versions = catalog.versions.get(block.metric)
    if versions is None:
        unknown.add(block.fingerprint)
        raise _Refused(UNKNOWN_METRIC, f"no metric named {_short(block.metric)!r}")
    if block.metric in catalog.retired:
        raise _Refused(
            RETIRED_METRIC,
            f"metric {block.metric!r} is retired: it takes no more reports; stop sending "
            "them (and refresh the definitions)",
        )
    definition = versions.get(block.fingerprint)
    if definition is None:
        unknown.add(block.fingerprint)
        current = catalog.current.get(block.metric)
        hint = f" (current: {current.fingerprint})" if current is not None else ""
        raise _Refused(
            UNKNOWN_VERSION,
            f"metric {block.metric!r} has no version {_short(block.fingerprint, 20)!r}{hint}; "
            "refresh the definitions",
        )
    return definition


def _check_bucket(bucket: int, period: Period, now: float, oldest: int | None) -> None:
    """The start of a ``period``, at most one ahead of ``now``'s, not before ``oldest``."""
    if bucket % period.seconds:
        raise _Refused(
            INVALID_BUCKET,
            f"bucket {bucket} is not the start of a {period.value} "
            f"(a multiple of {period.seconds})",
        )
    latest = period.start(now) + period.seconds
    if bucket > latest:
        raise _Refused(
            INVALID_BUCKET,
            f"bucket {bucket} is more than one {period.value} in the future "
            f"(latest accepted: {latest})",
        )
    if oldest is not None and bucket < oldest:
        first = -(-oldest // period.seconds) * period.seconds
        raise _Refused(
            INVALID_BUCKET,
            f"bucket {bucket} is too old: reports are kept for deduplication "
            f"{(int(now) - oldest) / DAY:g} days after their bucket starts "
            f"(oldest accepted now: {first})",
        )


def _check_reports(
    block: Block, mechanism: Mechanism, start: int, index: int, rejected: list[RefusedReports]
) -> CheckedReports | None:
    """The valid reports of block ``index`` (None: not one); the invalid ones go in
    ``rejected``, by their index in the batch (the block's first is ``start``)."""
    n, dtype = block.n, mechanism.report_dtype
    if len(block.reports) != n * dtype.itemsize:
        raise _Refused(
            INVALID_REPORT,
            f"{mechanism.name} reports of metric {block.metric!r} are {dtype.itemsize} bytes "
            f"each, got {len(block.reports)} bytes for {n} reports",
        )
    reports = np.frombuffer(block.reports, dtype=dtype)
    try:
        valid = np.asarray(mechanism.check_reports(reports), dtype=bool)
    except (LdpkitError, ValueError, TypeError) as exc:
        raise _Refused(INVALID_REPORT, f"reports do not fit {mechanism.name}: {exc}") from None
    ids = np.frombuffer(block.ids, dtype=ID_DTYPE) if block.count is None else None
    if not valid.all():
        bad = np.flatnonzero(~valid).astype(np.int64) + start
        detail = (
            f"not a valid {mechanism.name} report of metric {block.metric!r}: "
            f"expected {mechanism.report_rule}"
        )
        rejected.append(RefusedReports(bad, INVALID_REPORT, detail))
        ids = ids[valid] if ids is not None else None
        reports = reports[valid]
        if reports.shape[0] == 0:
            return None
    return CheckedReports(block.fingerprint, block.bucket, mechanism, ids, reports, index=index)
