"""The store interface: what the collector needs from a database.

A store keeps three things:

- **metric versions**: every definition ever given (keyed by fingerprint, with its JSON),
  and which version is current for each name;
- **report ids**: one row per stored report id (16 random bytes) with the report's own
  coarse bucket, for deduplication, and nothing else: no arrival time, no client address.
  :meth:`Store.prune_report_ids` deletes the ids of buckets older than the retention
  window (the collector refuses reports that old, so deduplication stays exact);
- **aggregates**: per (fingerprint, bucket), the report count ``n`` and the mechanism's
  sums vector, updated in the same transaction as the ids, so an estimate reads
  O(domain) numbers whatever the number of reports.

:meth:`Store.ingest` stores a batch atomically: it answers only after the commit that
holds the batch, so an acknowledged report is durable; the same id twice (in one batch
or across batches) is stored and counted once. Implementations run their blocking work
off the event loop. :func:`open_store` picks the implementation from the database string
(a path: SQLite; ``postgresql://...``: PostgreSQL, when that module exists).
"""

from __future__ import annotations

import importlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from ..aggregate import Aggregate
from ..errors import ConfigError, LdpkitError
from ..errors import StoreClosed as StoreClosed  # their home is ldpkit.errors
from ..errors import StoreError as StoreError
from ..mechanisms import Mechanism
from ..metrics import MetricDefinition
from ..wire import ID_SIZE
from .config import POSTGRES_PREFIXES

log = logging.getLogger("ldpkit.collector.store")

ID_DTYPE = np.dtype(f"V{ID_SIZE}")
SUMS_DTYPE = np.dtype("<f8")

CommitListener = Callable[[float, int, int], None]
"""Called after each commit with (seconds, batches, reports) — from the store's thread."""


class PutOutcome(StrEnum):
    CREATED = "created"  # a new metric
    NEW_VERSION = "new_version"  # parameters changed: a new fingerprint became current
    REVERTED = "reverted"  # parameters changed back to an older version, now current again
    UPDATED = "updated"  # same parameters; description/budget changed
    RESTORED = "restored"  # a retired metric taken back into service, same parameters
    UNCHANGED = "unchanged"
    RETIRED = "retired"  # from a config file: the metric is retired; nothing was changed


class Origin(StrEnum):
    """Who last defined a metric: an admin through the API, or a config file at start (a
    metric whose origin is the config and that the config no longer lists is retired)."""

    API = "api"
    CONFIG = "config"


@dataclass(frozen=True)
class Catalog:
    """A snapshot of the metric definitions: the current one per name, every version, the
    names of retired metrics (still in ``current``: their data stays queryable, but they
    take no reports and are not listed to apps) and who last defined each metric."""

    current: dict[str, MetricDefinition] = field(default_factory=dict)
    versions: dict[str, dict[str, MetricDefinition]] = field(default_factory=dict)
    retired: frozenset[str] = frozenset()
    origins: dict[str, Origin] = field(default_factory=dict)

    def version(self, name: str, fingerprint: str) -> MetricDefinition | None:
        return self.versions.get(name, {}).get(fingerprint)


@dataclass(frozen=True)
class IngestBlock:
    """Valid reports of one metric version and bucket, in batch order. ``aggregate``: their
    aggregate when it was computed before the store (costly mechanisms, see
    :func:`~ldpkit.collector.ingest.aggregation_seconds`), else None."""

    fingerprint: str
    bucket: int
    mechanism: Mechanism
    ids: npt.NDArray[Any]  # ID_DTYPE, one per report
    reports: npt.NDArray[Any]  # the mechanism's report dtype
    aggregate: Aggregate | None = None

    @property
    def n(self) -> int:
        return int(self.ids.shape[0])


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    duplicates: int
    accepted_by_fingerprint: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BucketAggregate:
    bucket: int
    aggregate: Aggregate


def put_outcome(
    current: str | None, fingerprint: str, stored: str | None, text: str, retired: bool
) -> PutOutcome:
    """What storing a definition did: ``current`` the metric's current fingerprint before
    (None: a new metric), ``stored`` the JSON stored before under ``fingerprint`` (None: a
    new version), ``text`` the new JSON, ``retired`` whether the metric was retired."""
    if current is None:
        return PutOutcome.CREATED
    if current != fingerprint:
        return PutOutcome.NEW_VERSION if stored is None else PutOutcome.REVERTED
    if retired:
        return PutOutcome.RESTORED
    return PutOutcome.UPDATED if stored is not None and stored != text else PutOutcome.UNCHANGED


def definition_json(definition: MetricDefinition) -> str:
    """The stored form of a definition: its ``to_dict()`` as canonical JSON."""
    return json.dumps(definition.to_dict(), sort_keys=True, separators=(",", ":"))


def definition_from_json(fingerprint: str, name: str, text: str) -> MetricDefinition | None:
    """Rebuild a stored definition; None (with a warning) if this code cannot."""
    try:
        definition = MetricDefinition.from_served(name, json.loads(text), fingerprint)
    except (LdpkitError, ValueError, TypeError, ImportError) as exc:
        log.warning("metric %s version %s cannot be loaded: %s", name, fingerprint, exc)
        return None
    if definition.fingerprint != fingerprint:
        log.warning(
            "metric %s version %s: stored definition now fingerprints as %s; kept under %s",
            name,
            fingerprint,
            definition.fingerprint,
            fingerprint,
        )
    return definition


def build_catalog(
    versions: Iterable[tuple[str, str, str]],
    current: Iterable[tuple[str, str, str, object]],
) -> Catalog:
    """A catalog from (fingerprint, name, definition JSON) rows and (name, fingerprint,
    origin, retired) rows (retired: a retirement time or None)."""
    found: dict[str, dict[str, MetricDefinition]] = {}
    for fp, name, text in versions:
        definition = definition_from_json(fp, name, text)
        if definition is not None:
            found.setdefault(name, {})[fp] = definition
    now: dict[str, MetricDefinition] = {}
    retired: set[str] = set()
    origins: dict[str, Origin] = {}
    for name, fp, origin, retired_at in current:
        definition = found.get(name, {}).get(fp)
        if definition is None:
            continue
        now[name] = definition
        origins[name] = Origin.CONFIG if origin == Origin.CONFIG else Origin.API
        if retired_at is not None:
            retired.add(name)
    return Catalog(now, found, frozenset(retired), origins)


def new_report_mask(ids: npt.NDArray[Any], existing: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Which of ``ids`` to store: first occurrences within ``ids`` that are not in ``existing``."""
    mask = np.zeros(ids.shape[0], dtype=bool)
    if ids.shape[0]:
        _, first = np.unique(ids, return_index=True)
        mask[first] = True
    if existing.shape[0]:
        mask &= ~np.isin(ids, existing)
    return mask


def aggregate_blocks(
    blocks: Sequence[IngestBlock], new: npt.NDArray[np.bool_] | None
) -> dict[tuple[str, int], Aggregate]:
    """Aggregates of the new reports of ``blocks`` (``new`` masks the concatenated ids;
    None means all are new), keyed by (fingerprint, bucket)."""
    deltas: dict[tuple[str, int], Aggregate] = {}
    offset = 0
    for block in blocks:
        n = block.n
        keep = new[offset : offset + n] if new is not None else None
        offset += n
        agg = _new_reports_aggregate(block, keep)
        if agg is None:
            continue
        key = (block.fingerprint, block.bucket)
        deltas[key] = deltas[key] + agg if key in deltas else agg
    return deltas


def _new_reports_aggregate(
    block: IngestBlock, keep: npt.NDArray[np.bool_] | None
) -> Aggregate | None:
    """The aggregate of the reports of ``block`` that ``keep`` marks (None: all), or None if
    there are none. A precomputed aggregate is reused: all of it, or (fewer duplicates than
    new reports) less the aggregate of the duplicates, so a retried costly batch does not
    cost its full aggregation again inside the store."""
    kept = block.n if keep is None else int(keep.sum())
    if kept == 0:
        return None
    whole = block.aggregate
    if kept == block.n:
        return whole if whole is not None else block.mechanism.aggregate(block.reports)
    assert keep is not None
    if whole is not None and kept * 2 >= block.n:
        dropped = block.mechanism.aggregate(block.reports[~keep])
        return Aggregate(whole.n - dropped.n, whole.sums - dropped.sums)
    return block.mechanism.aggregate(block.reports[keep])


class Store(ABC):
    """What the collector asks of a database. All methods are coroutines that never block
    the event loop."""

    commit_listener: CommitListener | None = None
    catalog_listener: Callable[[], None] | None = None
    """Called (on the event loop) when another process may have changed the metric catalog;
    stores that cannot tell (SQLite) never call it, the collector also reloads periodically."""

    @abstractmethod
    async def open(self) -> None:
        """Connect and create or migrate the schema."""

    @abstractmethod
    async def close(self) -> None:
        """Finish (commit) every batch already submitted, then release the database."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise StoreError unless the database answers."""

    @abstractmethod
    async def probe_write(self) -> None:
        """Raise StoreError unless a small write transaction commits (after batches failed,
        to tell when the store takes writes again: a disk no longer full, say)."""

    @property
    @abstractmethod
    def pending_batches(self) -> int:
        """Batches submitted to :meth:`ingest` and not yet committed (for backpressure)."""

    @property
    @abstractmethod
    def pending_reports(self) -> int:
        """Reports in those batches."""

    @abstractmethod
    async def load_catalog(self) -> Catalog:
        """Every stored metric version and the current one per name."""

    @abstractmethod
    async def find_versions(self, fingerprints: Sequence[str]) -> list[tuple[str, str, str]]:
        """The stored versions among ``fingerprints``: (fingerprint, name, definition JSON)
        rows (an indexed lookup, whatever the size of the catalog)."""

    @abstractmethod
    async def put_metric(
        self, definition: MetricDefinition, *, origin: Origin = Origin.API
    ) -> PutOutcome:
        """Store ``definition`` (a new version if its fingerprint is new) and make it
        current, in service (a retired metric is restored) and last defined by ``origin``.
        A config file does not restore a retired metric: with ``origin=CONFIG`` a retired
        metric is left as it is (``PutOutcome.RETIRED``)."""

    @abstractmethod
    async def retire_metric(self, name: str) -> bool | None:
        """Retire a metric: it keeps its versions and data, takes no more reports. True if
        it was retired now, False if it already was, None if there is no such metric."""

    @abstractmethod
    async def ingest(self, blocks: Sequence[IngestBlock]) -> IngestResult:
        """Store one batch's valid reports in one transaction; answer after its commit."""

    @abstractmethod
    async def aggregates(
        self, fingerprint: str, stats_size: int, start: int | None, end: int | None
    ) -> list[BucketAggregate]:
        """Per-bucket aggregates of a version, for buckets in ``[start, end)``, by bucket."""

    @abstractmethod
    async def report_count(self) -> int:
        """Number of distinct report ids stored."""

    @abstractmethod
    async def prune_report_ids(self, before_bucket: int) -> int:
        """Delete the stored ids of reports whose bucket is ``< before_bucket`` (their
        aggregates stay); the number deleted. Cheap when an earlier call (from any process)
        already pruned up to ``before_bucket``. Runs in short transactions, beside ingest."""

    @abstractmethod
    async def pruned_before(self) -> int | None:
        """The highest ``before_bucket`` ids were pruned to (by any process), or None."""


def open_store(
    database: str, *, synchronous: str = "full", pool_size: int = 8, sqlite_cache_mib: int = 256
) -> Store:
    """The store for ``database``: a SQLite file path, or a PostgreSQL URL (``pool_size``:
    that store's connections per process)."""
    if database.startswith(POSTGRES_PREFIXES):
        try:
            module = importlib.import_module(f"{__package__}.postgres_store")
        except ImportError as exc:
            raise ConfigError(f"the PostgreSQL store is not available: {exc}") from None
        store: Store = module.PostgresStore(database, pool_size=pool_size)
        return store
    from .sqlite_store import SQLiteStore

    return SQLiteStore(database, synchronous=synchronous, cache_mib=sqlite_cache_mib)
