"""The store interface: what the collector needs from a database.

A store keeps five things:

- **metric versions**: every definition ever given (keyed by fingerprint, with its JSON),
  and which version is current for each name;
- **batch ids**: one row per sealed (wire v2) batch counted: its 16 random bytes, the
  latest bucket it counted reports in (for pruning), which of its blocks were counted and
  how many reports each (a replay of the id claims no more duplicates), and nothing
  else: no arrival time, no client address. v1 batches (deprecated) carry an id per
  report instead, kept in the same way in ``report_ids``.
  :meth:`Store.prune_report_ids` deletes both kinds of ids of buckets older than the
  retention window (the collector refuses reports that old, so deduplication stays exact);
- **partial aggregates**: appended by each ingest transaction, one row per (fingerprint,
  bucket) it touched, holding the report count ``n`` and the mechanism's sums in a compact
  form (:func:`pack_sums`). No ingest transaction updates a row another one may write;
- **aggregates**: per (fingerprint, bucket), the partial rows folded in by
  :meth:`Store.compact` (in one transaction that deletes them, so each is folded once);
- **held records**: reports screening held apart (:class:`Hold`), one row per block (or
  per bucket of a sender's window moved out of the counted reports,
  :meth:`Store.move_to_held`: a negative partial row and the record, in one transaction),
  with their aggregate, never counted until an admin releases them
  (:meth:`Store.release_held`: a partial row, once) or drops them.

An estimate reads the aggregates plus the partial rows not folded yet, in one snapshot,
so an acknowledged report counts at once and the read stays O(domain) numbers (times the
few partial rows compaction has not reached).

:meth:`Store.ingest` stores a batch atomically: it answers only after the commit that
holds the batch, so an acknowledged report is durable; the same batch id (or v1 report
id) twice is counted once. Implementations run their blocking work off the event loop.
:func:`~ldpkit.collector.backends.open_store` picks the implementation from the database
string.
"""

from __future__ import annotations

import functools
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
from ..errors import LdpkitError
from ..errors import StoreClosed as StoreClosed  # their home is ldpkit.errors
from ..errors import StoreError as StoreError
from ..mechanisms import Mechanism
from ..metrics import MetricDefinition
from ..wire import ID_SIZE

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


@dataclass(frozen=True)
class BucketAggregate:
    bucket: int
    aggregate: Aggregate
    parts: int = 0
    """Partial rows ever added to the bucket (those compaction folded included): one more
    with every change of its data (a batch, a move to held, a release), so ``(n, parts)``
    names the data an estimate was computed from."""


@dataclass(frozen=True)
class Data:
    """What an estimate was computed from: reports, partial rows ever added (see
    :class:`BucketAggregate`) and buckets, summed over its buckets. Any change of the data
    raises ``parts``; a result computed from more ``parts`` is newer."""

    n: int
    parts: int
    buckets: int

    @classmethod
    def of(cls, rows: Iterable[tuple[int, int, int]]) -> Data:
        """The data of (bucket, n, parts) rows."""
        found = list(rows)
        return cls(sum(r[1] for r in found), sum(r[2] for r in found), len(found))


@dataclass(frozen=True)
class StoredEstimate:
    """A maintained estimate as the store keeps it (issue 27): over the buckets whose start
    lies in ``[lo, hi)``, computed from ``data`` at ``computed_at`` (unix seconds) in
    ``seconds`` of CPU; ``result`` the pickled result (None when not read, or when the
    computation failed: ``error`` says why); ``claimed_until``: a process is computing it
    until then (unix seconds), or None."""

    lo: int
    hi: int
    data: Data | None  # None: never computed (claimed only)
    computed_at: float
    seconds: float
    error: str | None
    claimed_until: float | None
    result: bytes | None = None


@dataclass(frozen=True)
class Hold:
    """Why reports are held apart instead of counted: the screening ``test`` that failed
    and its ``reason`` (:class:`ldpkit.screening.Finding`), and its ``origin``: ``"batch"``
    (the block's own reports) or ``"sender"`` (its sender's window of batches)."""

    test: str
    reason: str
    origin: str = "batch"


@dataclass(frozen=True)
class Moved:
    """Counted reports of one version and bucket that a sender's window moves to held."""

    fingerprint: str
    bucket: int
    aggregate: Aggregate
    hold: Hold


@dataclass(frozen=True)
class HeldRecord:
    """A held record as listed (``GET /v1/admin/held``); ``day``: the UTC day it was held
    (no finer time is kept), ``released``: the day it was released, or None."""

    id: int
    day: int
    metric: str
    fingerprint: str
    bucket: int
    n: int
    test: str
    reason: str
    origin: str
    released: int | None

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["version"] = out.pop("fingerprint")
        return out


@dataclass(frozen=True)
class CheckedReports:
    """Checked reports of one metric version and bucket, in batch order (the collector validated
    them: the store does not check them again). ``ids``: their v1 report ids (None in a sealed
    batch). ``aggregate``: their aggregate when it was computed before the store (costly mechanisms,
    see :func:`~ldpkit.collector.ingest.aggregation_seconds`), else None. ``index``: the block's
    position in its wire batch. ``hold``: why screening holds them apart (None: counted)."""

    fingerprint: str
    bucket: int
    mechanism: Mechanism
    ids: npt.NDArray[Any] | None  # ID_DTYPE, one per report (v1), or None
    reports: npt.NDArray[Any]  # the mechanism's report dtype
    aggregate: Aggregate | None = None
    index: int = 0
    hold: Hold | None = None

    @property
    def n(self) -> int:
        return int(self.reports.shape[0])

    def screened(self, aggregate: Aggregate | None, hold: Hold | None) -> CheckedReports:
        """A copy with its aggregate and screening verdict (``dataclasses.replace`` costs
        several times more, once per block of every batch)."""
        return CheckedReports(
            self.fingerprint,
            self.bucket,
            self.mechanism,
            self.ids,
            self.reports,
            aggregate,
            self.index,
            hold,
        )


@dataclass(frozen=True)
class IngestResult:
    """``accepted`` counts the reports held too; ``held``: (fingerprint, test, reports) of
    the blocks held now; ``refused_before``: of a sealed batch seen before, the indexes of
    the blocks given now that were not counted the first time (refused then: they are
    refused again); ``reused``: of a sealed batch id counted before with other content,
    (block index, how many of its last reports) to refuse as ``batch_reused``: each block
    is a duplicate up to the reports counted in it the first time, no more; ``blocks``:
    when every report was new and screened, the blocks as stored (aggregated, held or
    not), for the sender windows."""

    accepted: int
    duplicates: int
    accepted_by_fingerprint: dict[str, int] = field(default_factory=dict)
    refused_before: tuple[int, ...] = ()
    reused: tuple[tuple[int, int], ...] = ()
    held: tuple[tuple[str, str, int], ...] = ()
    blocks: tuple[CheckedReports, ...] = ()

    @property
    def held_reports(self) -> int:
        return sum(n for _, _, n in self.held)


def block_bitmap(indexes: Iterable[int]) -> bytes:
    """The set of block indexes as a little-endian bitmap (bit i of byte i // 8)."""
    found = sorted(set(indexes))
    if not found:
        return b""
    bits = np.zeros(found[-1] + 1, dtype=bool)
    bits[found] = True
    return np.packbits(bits, bitorder="little").tobytes()


def in_bitmap(bitmap: bytes, index: int) -> bool:
    return index // 8 < len(bitmap) and bool(bitmap[index // 8] >> (index % 8) & 1)


COUNTS_DTYPE = np.dtype("<u4")


def block_counts(blocks: Iterable[tuple[int, int]]) -> bytes:
    """(block index, reports counted) as little-endian uint32 per block index, 0 where no
    block was counted: what a repeat of the batch id may claim as duplicates."""
    found = sorted(blocks)
    if not found:
        return b""
    counts = np.zeros(found[-1][0] + 1, dtype=COUNTS_DTYPE)
    for index, n in found:
        counts[index] += n
    return counts.tobytes()


def counted_in(counts: bytes, index: int) -> int:
    """The reports block ``index`` counted, from :func:`block_counts`."""
    size = COUNTS_DTYPE.itemsize
    if (index + 1) * size > len(counts):
        return 0
    return int(np.frombuffer(counts, COUNTS_DTYPE, 1, index * size)[0])


# A partial row holds one transaction's sums for one (fingerprint, bucket): integers in
# most mechanisms (counts), often few of them non-zero. The smallest exact form wins:
# tag byte, then little-endian values.
_F8, _I2, _I4, _SPARSE = 0, 1, 2, 3
_PAIRS = np.dtype([("i", "<u4"), ("v", "<i4")])  # sparse: (index, value)


def pack_sums(sums: npt.NDArray[Any]) -> bytes:
    """``sums`` (float64) in the smallest exact form: dense int16 or int32 when every sum is an
    integer that fits, sparse (uint32 index, int32 value pairs) when fewer than half are non-zero
    (after the vector's size), float64 otherwise (:func:`unpack_sums` reverses it)."""
    values = np.asarray(sums, dtype=SUMS_DTYPE)
    if values.size and np.all(np.abs(values) < 2**31) and np.array_equal(values, np.rint(values)):
        ints = values.astype(np.int64)
        nonzero = np.flatnonzero(ints)
        if 2 * nonzero.size < values.size:
            pairs = np.empty(nonzero.size, dtype=_PAIRS)
            pairs["i"], pairs["v"] = nonzero, ints[nonzero]
            return bytes([_SPARSE]) + values.size.to_bytes(4, "little") + pairs.tobytes()
        if np.all(np.abs(ints) < 2**15):
            return bytes([_I2]) + ints.astype("<i2").tobytes()
        return bytes([_I4]) + ints.astype("<i4").tobytes()
    return bytes([_F8]) + values.tobytes()


_DENSE: dict[int, np.dtype[Any]] = {_F8: SUMS_DTYPE, _I2: np.dtype("<i2"), _I4: np.dtype("<i4")}


def unpack_sums(blob: bytes, size: int | None = None) -> npt.NDArray[np.float64]:
    """The float64 sums vector :func:`pack_sums` packed; StoreError if it is malformed or
    (``size`` given) does not hold ``size`` sums."""
    tag, body = (blob[0], memoryview(blob)[1:]) if blob else (-1, memoryview(b""))
    sums = _unpack_sparse(body, size) if tag == _SPARSE else _unpack_dense(tag, body, size)
    if sums is None:
        raise StoreError(
            "a partial aggregate is malformed" + (f" or does not hold {size} sums" if size else "")
        )
    return sums


def _unpack_sparse(body: memoryview, size: int | None) -> npt.NDArray[np.float64] | None:
    """The sums of a sparse form (held size, then pairs), or None if it is malformed."""
    if len(body) < 4 or (len(body) - 4) % _PAIRS.itemsize:
        return None
    held = int.from_bytes(body[:4], "little")
    pairs = np.frombuffer(body[4:], dtype=_PAIRS)
    if (size is not None and held != size) or (pairs.size and int(pairs["i"].max()) >= held):
        return None
    out = np.zeros(held, dtype=SUMS_DTYPE)
    out[pairs["i"]] = pairs["v"]
    return out


def _unpack_dense(tag: int, body: memoryview, size: int | None) -> npt.NDArray[np.float64] | None:
    """The sums of a dense form, or None if it is malformed (or an unknown ``tag``)."""
    dtype = _DENSE.get(tag)
    if dtype is None or len(body) % dtype.itemsize:
        return None
    if size is not None and len(body) != size * dtype.itemsize:
        return None
    dense: npt.NDArray[np.float64] = np.frombuffer(body, dtype=dtype).astype(SUMS_DTYPE)
    return dense


def fold_rows(
    rows: Iterable[tuple[int, int, int, npt.NDArray[np.float64]]],
) -> list[BucketAggregate]:
    """Sum (bucket, n, parts, sums) rows per bucket, in the order given; by bucket."""
    found: dict[int, tuple[int, int, npt.NDArray[np.float64]]] = {}
    for bucket, n, parts, sums in rows:
        if bucket in found:
            old_n, old_parts, old = found[bucket]
            old += sums
            found[bucket] = (old_n + n, old_parts + parts, old)
        else:
            found[bucket] = (n, parts, np.array(sums, dtype=SUMS_DTYPE))
    return [
        BucketAggregate(b, Aggregate(n, sums), parts)
        for b, (n, parts, sums) in sorted(found.items())
    ]


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


@functools.lru_cache(maxsize=1024)
def definition_from_json(fingerprint: str, name: str, text: str) -> MetricDefinition | None:
    """Rebuild a stored definition; None (with a warning) if this code cannot. Kept (a
    definition is immutable): a catalog reload rebuilds only the versions it has not seen,
    not every large design again."""
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
    versions: Iterable[tuple[str, str, str]], current: Iterable[tuple[str, str, str, object]]
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


Deltas = dict[tuple[str, int], Aggregate]
"""Aggregates by (fingerprint, bucket)."""
HeldBlock = tuple[CheckedReports, Aggregate]
"""A held block and the aggregate of its new reports."""


def aggregate_blocks(
    blocks: Sequence[CheckedReports], new: npt.NDArray[np.bool_] | None
) -> tuple[Deltas, list[HeldBlock]]:
    """Aggregates of the new reports of ``blocks`` (``new`` masks the concatenated ids;
    None means all are new): of the counted blocks keyed by (fingerprint, bucket), and of
    each held block."""
    deltas: Deltas = {}
    held: list[HeldBlock] = []
    offset = 0
    for block in blocks:
        n = block.n
        keep = new[offset : offset + n] if new is not None else None
        offset += n
        agg = _new_reports_aggregate(block, keep)
        if agg is None:
            continue
        if block.hold is not None:
            held.append((block, agg))
            continue
        key = (block.fingerprint, block.bucket)
        deltas[key] = deltas[key] + agg if key in deltas else agg
    return deltas, held


def _new_reports_aggregate(
    block: CheckedReports, keep: npt.NDArray[np.bool_] | None
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
        return whole if whole is not None else block.mechanism.aggregate_checked(block.reports)
    assert keep is not None
    if whole is not None and kept * 2 >= block.n:
        dropped = block.mechanism.aggregate_checked(block.reports[~keep])
        return Aggregate(whole.n - dropped.n, whole.sums - dropped.sums)
    return block.mechanism.aggregate_checked(block.reports[keep])


class Store(ABC):
    """What the collector asks of a database: coroutines that never block the event loop."""

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
    async def ingest(
        self,
        blocks: Sequence[CheckedReports],
        *,
        batch_id: bytes | None = None,
        screen: float = 0.0,
    ) -> IngestResult:
        """Store one batch's checked reports in one transaction; answer after its commit.
        ``batch_id``: a sealed (v2) batch, counted once whatever its retries (a repeat is
        answered as duplicates, whole); None: a v1 batch, whose blocks carry report ids.
        ``screen``: the false-alarm rate the blocks not aggregated yet are screened at as
        they are aggregated (:func:`~ldpkit.collector.holding.screen_block`; 0: none).
        Blocks with a ``hold`` become held records, not counts."""

    @abstractmethod
    async def move_to_held(self, moved: Sequence[Moved]) -> None:
        """Move counted aggregates to held records: per item a negative partial row and a
        held record, in one transaction (a sender's window that failed)."""

    @abstractmethod
    async def batch_stored(self, batch_id: bytes) -> bool:
        """Whether the sealed batch ``batch_id`` was stored (counted) before."""

    @abstractmethod
    async def held_records(self, limit: int, before: int | None = None) -> list[HeldRecord]:
        """Held records, newest first, at most ``limit``, with ids below ``before``."""

    @abstractmethod
    async def release_held(self, record: int) -> bool | None:
        """Count a held record's reports (a partial row, in the transaction that marks it
        released): True if released now, False if it was already, None if there is none."""

    @abstractmethod
    async def drop_held(self, record: int) -> bool | None:
        """Delete a held record that was not released: True if dropped, False if it was
        released (its reports are counted: nothing to drop), None if there is none."""

    @abstractmethod
    async def compact(self, limit: int = 20_000) -> int:
        """Fold up to ``limit`` partial rows into the aggregates (and delete them) in one
        transaction; the number folded. One process folds at a time."""

    @abstractmethod
    async def aggregates(
        self, fingerprint: str, stats_size: int, start: int | None, end: int | None
    ) -> list[BucketAggregate]:
        """Per-bucket aggregates of a version, for buckets in ``[start, end)``, by bucket."""

    @abstractmethod
    async def bucket_counts(self, fingerprint: str) -> list[tuple[int, int, int]]:
        """(bucket, n, parts) of every bucket of a version, by bucket: what its data is
        (:class:`Data`), without reading the sums."""

    @abstractmethod
    async def estimate_states(self, fingerprint: str) -> list[StoredEstimate]:
        """The maintained estimates of a version, without their results."""

    @abstractmethod
    async def estimate_result(self, fingerprint: str, lo: int, hi: int) -> StoredEstimate | None:
        """The maintained estimate of buckets ``[lo, hi)`` of a version, its result read."""

    @abstractmethod
    async def claim_estimate(
        self, fingerprint: str, lo: int, hi: int, data: Data, owner: str, until: float
    ) -> bool:
        """Claim the computation of the estimate of buckets ``[lo, hi)`` from ``data`` for
        ``owner`` until ``until`` (unix seconds): False if it is computed from ``data``
        already, or another claim holds (one computation per data, however many processes
        share the store)."""

    @abstractmethod
    async def save_estimate(self, fingerprint: str, estimate: StoredEstimate, owner: str) -> None:
        """Store a computed estimate (its result, or its error) and release ``owner``'s
        claim; a result from older data than the one stored is not kept."""

    @abstractmethod
    async def report_count(self) -> int:
        """Number of reports counted (aggregates and partial rows), every version."""

    @abstractmethod
    async def prune_report_ids(self, before_bucket: int) -> int:
        """Delete the batch ids (and v1 report ids) whose bucket is ``< before_bucket`` (their
        aggregates stay); the number deleted. Cheap when an earlier call (from any process) already
        pruned up to ``before_bucket``. Runs in short transactions, beside ingest."""

    @abstractmethod
    async def pruned_before(self) -> int | None:
        """The highest ``before_bucket`` ids were pruned to (by any process), or None."""
