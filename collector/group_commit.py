"""The writer both stores share: group commit over blocking database connections.

The event loop never waits on the database. Writes (batches, metric definitions,
compaction, pruning) go through one queue to ``writers`` threads (SQLite: one; PostgreSQL:
several, each with its own connection); reads run on reader threads. A store supplies
connections and a handful of SQL statements in its dialect; everything else is here, once.

**Group commit.** A writer takes every job waiting in the queue (up to a limit) and runs
them in *one* transaction, then COMMITs once and only then answers every job of the
group. While one group commits, the next one gathers, so under load each commit carries
many batches. Other jobs (metric definitions, compaction, pruning) run first, each in its
own SAVEPOINT.

**The batches of a group.** Before BEGIN, each batch is aggregated as if all its reports
were new (numpy, no lock held; a batch whose reports do not aggregate fails alone; costly
batches come aggregated already) and its blocks screened (``screen``, in the same pass:
screening tests the aggregate). In the transaction:

1. sealed (v2) batches claim their batch ids (one row each: id, latest bucket, bitmap of
   the blocks counted, reports counted per block). A batch id stored before, or earlier in
   the group, makes its batch a duplicate, up to what the id counted: a block holding more
   reports than it counted then (the id replayed with other content) is a duplicate for
   that many, and the rest is refused;
2. v1 batches insert their report ids (sorted, unique); the ids that were there already
   are duplicates, and a batch holding any is aggregated again over its new reports;
3. the group appends its partial sums: one row per (fingerprint, bucket) it touched, in
   the compact form of :func:`~ldpkit.collector.store.pack_sums`; blocks screening held
   become held records instead (only in the copy of a batch that counts).

Counted aggregates a sender's window moves to held (:meth:`move_to_held`) become a
negative partial row and a held record each, in one transaction (totals stay exact).

No statement of an ingest transaction updates a row: two writers (threads, or processes
on one PostgreSQL) never wait on each other except on the same batch id (a retry racing
its original). :meth:`compact` folds partial rows into the aggregates in a transaction
that deletes them: each partial row is folded exactly once, whatever crashes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ..metrics import MetricDefinition
from .holding import screen_block
from .store import (
    ID_DTYPE,
    Catalog,
    CheckedReports,
    Data,
    Deltas,
    HeldBlock,
    HeldRecord,
    IngestResult,
    Moved,
    Origin,
    PutOutcome,
    Store,
    StoreClosed,
    StoredEstimate,
    StoreError,
    aggregate_blocks,
    block_bitmap,
    block_counts,
    build_catalog,
    counted_in,
    definition_json,
    fold_rows,
    in_bitmap,
    pack_sums,
    put_outcome,
    unpack_sums,
)

log = logging.getLogger("ldpkit.collector.store")

T = TypeVar("T")
Conn = Any  # sqlite3.Connection or psycopg.Connection: execute(sql, params) -> cursor
PartialRow = tuple[str, int, int, bytes]  # fingerprint, bucket, n, packed sums
Folded = dict[tuple[str, int], tuple[int, npt.NDArray[np.float64], int]]
"""Partial rows summed by (fingerprint, bucket): n, sums (a sum may be negative) and how
many rows were folded (the aggregate's ``parts``)."""
HeldRow = tuple[int, str, int, int, bytes, str, str, str]
"""day, fingerprint, bucket, n, packed sums, test, reason, origin."""
INSERT_HELD = (
    "INSERT INTO held (day, fingerprint, bucket, n, sums, test, reason, origin) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
MIN_BUCKET, MAX_BUCKET = -(2**62), 2**62
PRUNED_KEY = "report_ids_pruned_before"
BUCKET_COUNTS = (
    "SELECT bucket, SUM(n), SUM(parts) FROM (SELECT bucket, n, parts FROM aggregates "
    "WHERE fingerprint = ? UNION ALL SELECT bucket, n, 1 FROM partials WHERE fingerprint = ?) "
    "AS t GROUP BY bucket ORDER BY bucket"
)
ESTIMATE_STATE = "lo, hi, n, parts, buckets, computed_at, seconds, error, claim_until"
# A claim is taken unless a live one holds or the estimate of this data is stored; a new
# row (n = -1) is a claim with no result yet. Either way one statement: concurrent claims
# of several processes serialize on the row, and one wins.
CLAIM_ESTIMATE = """
INSERT INTO estimates (fingerprint, lo, hi, n, parts, buckets, computed_at, seconds,
                       claim_owner, claim_until)
VALUES (?, ?, ?, -1, -1, 0, 0, 0, ?, ?)
ON CONFLICT (fingerprint, lo, hi) DO UPDATE
SET claim_owner = excluded.claim_owner, claim_until = excluded.claim_until
WHERE (estimates.claim_until IS NULL OR estimates.claim_until < ?)
  AND NOT (estimates.n = ? AND estimates.parts = ? AND estimates.buckets = ?)
RETURNING claim_owner
"""
SAVE_ESTIMATE = """
INSERT INTO estimates (fingerprint, lo, hi, n, parts, buckets, computed_at, seconds, result,
                       error, claim_owner, claim_until)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)
ON CONFLICT (fingerprint, lo, hi) DO UPDATE
SET n = excluded.n, parts = excluded.parts, buckets = excluded.buckets,
    computed_at = excluded.computed_at, seconds = excluded.seconds, result = excluded.result,
    error = excluded.error,
    claim_until = CASE WHEN estimates.claim_owner = ? THEN NULL ELSE estimates.claim_until END,
    claim_owner = CASE WHEN estimates.claim_owner = ? THEN NULL ELSE estimates.claim_owner END
WHERE estimates.parts <= excluded.parts
"""
MAX_RANGES = 64
"""Estimates of ranges (neither a bucket nor every bucket) kept per version: the oldest go."""
PRUNE_ESTIMATES = f"""
DELETE FROM estimates WHERE fingerprint = ? AND hi - lo > 1 AND hi < {MAX_BUCKET}
AND computed_at < (SELECT computed_at FROM estimates WHERE fingerprint = ? AND hi - lo > 1
                   AND hi < {MAX_BUCKET} ORDER BY computed_at DESC LIMIT 1 OFFSET {MAX_RANGES})
"""


@dataclass(eq=False)
class _Job:
    fn: Callable[[Conn], Any] | None  # None for a batch of reports (``blocks``)
    future: asyncio.Future[Any]
    reports: int = 0
    blocks: list[CheckedReports] | None = None
    batch_id: bytes | None = None
    screen: float = 0.0


@dataclass(eq=False)
class _Stop:
    done: asyncio.Future[None]


@dataclass
class _Prepared:
    """The batches of a group, ready for SQL (numpy work done before BEGIN)."""

    jobs: list[_Job]  # ingest jobs whose reports aggregate
    deltas: list[Deltas]  # per job, every report counted
    held: list[list[HeldBlock]]  # per job, its held blocks
    legacy_ids: npt.NDArray[Any]  # v1 report ids of ``jobs``, in job order
    legacy_bounds: list[int]  # job i's ids are legacy_ids[bounds[i]:bounds[i + 1]]
    legacy_buckets: npt.NDArray[np.int64]


Outcome = tuple[_Job, Any, BaseException | None]


def _prepare(jobs: Sequence[_Job]) -> tuple[_Prepared, list[Outcome]]:
    kept: list[_Job] = []
    failed: list[Outcome] = []
    deltas: list[Deltas] = []
    held: list[list[HeldBlock]] = []
    for job in jobs:
        assert job.blocks is not None
        try:
            if job.screen:
                job.blocks = [b if b.aggregate else screen_block(b, job.screen) for b in job.blocks]
            counted, held_blocks = aggregate_blocks(job.blocks, None)
        except Exception as exc:  # reports that do not fit their mechanism: this batch fails
            failed.append((job, None, as_store_error(exc)))
            continue
        deltas.append(counted)
        held.append(held_blocks)
        kept.append(job)
    legacy, buckets, bounds = _legacy_ids(kept)
    return _Prepared(kept, deltas, held, legacy, bounds, buckets), failed


def _legacy_ids(jobs: Sequence[_Job]) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], list[int]]:
    """The v1 report ids of ``jobs`` in job order, their buckets, and each job's bounds."""
    ids: list[npt.NDArray[Any]] = []
    buckets: list[npt.NDArray[np.int64]] = []
    bounds = [0]
    for job in jobs:
        for b in job.blocks or ():
            if b.ids is not None:
                ids.append(b.ids)
                buckets.append(np.full(b.n, b.bucket, dtype=np.int64))
        bounds.append(bounds[-1] + (job.reports if job.batch_id is None else 0))
    legacy = np.concatenate(ids) if ids else np.zeros(0, ID_DTYPE)
    legacy_buckets = np.concatenate(buckets) if buckets else np.zeros(0, np.int64)
    return legacy, legacy_buckets, bounds


def as_store_error(exc: BaseException) -> BaseException:
    if isinstance(exc, StoreError | ValueError):
        return exc
    return StoreError(f"{type(exc).__name__}: {exc}")


def _settle_future(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


Sealed = tuple[int, bytes, bytes]  # a batch id's latest bucket, block bitmap, block counts


@dataclass
class _Claims:
    """What the sealed batches of a group found: per batch id, its latest bucket, the
    bitmap of its blocks and their counts; the ids claimed now; the bitmaps and counts
    stored with the others (counts None: stored before counts were)."""

    sealed: dict[bytes, Sealed]
    claimed: set[bytes]
    stored: dict[bytes, tuple[bytes, bytes | None]]

    def repeat(self, batch_id: bytes, blocks: Sequence[CheckedReports]) -> IngestResult | None:
        """None for the copy of ``batch_id`` that counts now, else the answer to a repeat:
        the blocks counted before are duplicates (up to what each counted), the others
        refused."""
        if batch_id in self.claimed:
            self.claimed.discard(batch_id)  # a later copy in the group is a repeat
            return None
        bitmap, counts = self.stored.get(batch_id, self.sealed[batch_id][1:])
        if counts is None:
            counted = [b for b in blocks if in_bitmap(bitmap, b.index)]
            refused = tuple(b.index for b in blocks if not in_bitmap(bitmap, b.index))
            return IngestResult(0, sum(b.n for b in counted), {}, refused)
        first = [(b, counted_in(counts, b.index)) for b in blocks]
        duplicates = sum(min(b.n, had) for b, had in first)
        reused = tuple((b.index, b.n - had) for b, had in first if b.n > had and had)
        refused = tuple(b.index for b, had in first if not had)
        if reused:  # other content: no block of it was refused for a reason of its own
            reused += tuple((i, next(b.n for b in blocks if b.index == i)) for i in refused)
            return IngestResult(0, duplicates, {}, (), reused=tuple(sorted(reused)))
        return IngestResult(0, duplicates, {}, refused)


def _sealed_ids(jobs: Sequence[_Job]) -> dict[bytes, Sealed]:
    """Each sealed batch id of ``jobs``: its first copy's latest bucket, block bitmap and
    block counts."""
    sealed: dict[bytes, Sealed] = {}
    for job in jobs:
        if job.batch_id is not None and job.batch_id not in sealed:
            blocks = job.blocks or []
            bitmap = block_bitmap(b.index for b in blocks)
            counts = block_counts((b.index, b.n) for b in blocks)
            sealed[job.batch_id] = (max(b.bucket for b in blocks), bitmap, counts)
    return sealed


def _legacy_counted(
    job: _Job, prepared: _Prepared, i: int, new: npt.NDArray[np.bool_] | None
) -> tuple[int, Deltas, list[HeldBlock]]:
    """How many reports of v1 batch ``i`` are new, and their sums (again if not all are)."""
    lo, hi = prepared.legacy_bounds[i], prepared.legacy_bounds[i + 1]
    deltas, held = prepared.deltas[i], prepared.held[i]
    if new is None:
        return hi - lo, deltas, held
    keep = new[lo:hi]
    accepted = int(keep.sum())
    if accepted != hi - lo:
        deltas, held = aggregate_blocks(job.blocks or [], keep)
    return accepted, deltas, held


def _utc_day() -> int:
    return int(time.time()) // 86400 * 86400


def _held_rows(held: Sequence[HeldBlock] | Sequence[Moved]) -> list[HeldRow]:
    """The held records of held blocks, or of counted aggregates moved to held."""
    day = _utc_day()
    records = [
        (h.fingerprint, h.bucket, h.aggregate, h.hold)
        if isinstance(h, Moved)
        else (h[0].fingerprint, h[0].bucket, h[1], h[0].hold)
        for h in held
    ]
    return [
        (day, fp, bucket, agg.n, pack_sums(agg.sums), hold.test, hold.reason, hold.origin)
        for fp, bucket, agg, hold in records
        if hold is not None
    ]


def _held_record(
    id_: int, day: int, metric: str, fp: str, bucket: int, n: int, *text: str
) -> HeldRecord:
    """A held record from its row (``text``: test, reason, origin, then released)."""
    test, reason, origin, released = text
    day_released = None if released is None else int(released)
    return HeldRecord(
        int(id_), int(day), metric, fp, int(bucket), int(n), test, reason, origin, day_released
    )


def _add_deltas(total: Deltas, deltas: Deltas) -> dict[str, int]:
    """Add ``deltas`` to ``total``; the reports they count, by fingerprint."""
    by_fp: dict[str, int] = {}
    for key, agg in deltas.items():
        by_fp[key[0]] = by_fp.get(key[0], 0) + agg.n
        total[key] = total[key] + agg if key in total else agg
    return by_fp


class GroupCommitStore(Store):
    """A :class:`Store` over blocking DB-API connections, with the group-commit writer.

    Subclasses implement the connection and dialect hooks (the ``_``-prefixed abstract
    methods); SQL here is written with ``?`` placeholders, which :meth:`_x` adapts."""

    def __init__(self, *, max_group_batches: int, max_group_reports: int, writers: int) -> None:
        self.max_group_batches = max_group_batches
        self.max_group_reports = max_group_reports
        self.writers = writers
        self._queue: queue.SimpleQueue[_Job | _Stop] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._reader: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = True
        self._pending_batches = 0
        self._pending_reports = 0

    @abstractmethod
    def _connect_writer(self) -> Conn:
        """A write connection (in the writer thread that uses it; the schema is ready)."""

    def _writer_usable(self, conn: Conn) -> bool:
        """False when ``conn`` broke and a new one is needed."""
        return True

    def _close_writer(self, conn: Conn) -> None:
        conn.close()

    @abstractmethod
    def _x(self, conn: Conn, sql: str, params: Sequence[Any] = ()) -> Any:
        """Execute ``sql`` (``?`` placeholders) on ``conn``; the cursor."""

    def _retryable(self, exc: BaseException) -> bool:
        """Whether a failed group transaction may simply run again (a deadlock)."""
        return False

    @abstractmethod
    def _claim_batches(self, conn: Conn, rows: list[tuple[bytes, int, bytes, bytes]]) -> set[bytes]:
        """Insert the (id, bucket, bitmap, counts) rows (sorted) whose id is new; the ids
        inserted."""

    @abstractmethod
    def _insert_report_ids(
        self, conn: Conn, ids: npt.NDArray[Any], buckets: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_] | None:
        """Insert the new v1 report ids (unique, sorted); which were (None: every one)."""

    @abstractmethod
    def _append_partials(self, conn: Conn, rows: list[PartialRow]) -> None: ...

    @abstractmethod
    def _take_partials(self, conn: Conn, limit: int) -> list[PartialRow]:
        """Delete the ``limit`` oldest partial rows (or none, if another process is
        compacting) and return them, in the order they were written."""

    @abstractmethod
    def _add_to_aggregates(self, conn: Conn, folded: Folded) -> None:
        """Add ``folded`` (its sums in partial form, unpacked) to the aggregate rows."""

    @abstractmethod
    def _parse_compacted(self, value: Any) -> npt.NDArray[np.float64]:
        """The sums of an aggregate row as the read query returns them."""

    group_begin = "BEGIN"  # starts a group's transaction
    sums_column = "sums"  # how the read query selects an aggregate row's sums
    snapshot_begin = "BEGIN"  # starts a read transaction that sees one snapshot

    def _lock_catalog(self, conn: Conn) -> None:
        """Serialize catalog writes across processes (nothing to do in one process)."""

    def _catalog_written(self, conn: Conn, name: str) -> None:
        """Tell other processes the catalog changed (at commit)."""

    @abstractmethod
    async def _read(self, fn: Callable[[Conn], T]) -> T:
        """Run ``fn(conn)`` on a reader thread with a read connection."""

    async def _start_writers(self) -> None:
        """Start the writer threads; returns when each has its connection."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._queue = queue.SimpleQueue()
        readies = []
        for i in range(self.writers):
            ready: asyncio.Future[None] = loop.create_future()
            thread = threading.Thread(
                target=self._writer_main, args=(ready,), name=f"ldpkit-writer-{i}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
            readies.append(ready)
        results = await asyncio.gather(*readies, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        # A writer that failed to connect has ended: only the others take a stop.
        self._threads = [t for t, r in zip(self._threads, results, strict=True) if r is None]
        if errors:
            await self._stop_writers()
            raise errors[0]
        self._closing = False

    async def _stop_writers(self) -> None:
        """Finish every job already queued, then stop the writer threads."""
        self._closing = True
        if self._loop is None:
            return
        dones = []
        for _ in self._threads:
            done: asyncio.Future[None] = self._loop.create_future()
            self._queue.put(_Stop(done))
            dones.append(done)
        await asyncio.gather(*dones)
        self._threads = []

    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(fn, *args)

    def _writer_main(self, ready: asyncio.Future[None]) -> None:
        conn: Conn | None = self._first_connection(ready)
        if conn is None:
            return
        stop: _Stop | None = None
        try:
            while stop is None:
                item = self._queue.get()
                if isinstance(item, _Stop):
                    stop = item
                    break
                group, stop = self._gather(item)
                conn = self._run_group(conn, group)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    self._close_writer(conn)
            if stop is not None:
                self._call_soon(_settle_future, stop.done, None, None)

    def _first_connection(self, ready: asyncio.Future[None]) -> Conn | None:
        """The writer's connection (None: it failed); ``ready`` is told either way."""
        try:
            conn = self._connect_writer()
        except Exception as exc:
            error = exc if isinstance(exc, StoreError) else StoreError(f"{self!r}: {exc}")
            self._call_soon(_settle_future, ready, None, error)
            return None
        self._call_soon(_settle_future, ready, None, None)
        return conn

    def _gather(self, first: _Job) -> tuple[list[_Job], _Stop | None]:
        """A group: ``first`` and the jobs queued after it, within bounds; a stop met."""
        group = [first]
        reports = first.reports
        while len(group) < self.max_group_batches and reports < self.max_group_reports:
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(nxt, _Stop):
                return group, nxt
            group.append(nxt)
            reports += nxt.reports
        return group, None

    def _reconnect(self, conn: Conn | None) -> Conn:
        if conn is not None:
            with contextlib.suppress(Exception):
                self._close_writer(conn)
        return self._connect_writer()

    def _run_group(self, conn: Conn | None, group: list[_Job]) -> Conn | None:
        """Run one group and answer its jobs; the writer connection to use next."""
        started = time.perf_counter()
        prepared, outcomes = _prepare([job for job in group if job.blocks is not None])
        conn, done = self._attempts(conn, group, prepared)
        if isinstance(done, BaseException):
            log.error("store transaction failed (%d jobs not stored): %s", len(group), done)
            error = as_store_error(done)
            failed = {id(job) for job, _, _ in outcomes}
            done = [(job, None, error) for job in group if id(job) not in failed]
        outcomes.extend(done)
        elapsed = time.perf_counter() - started
        if (listener := self.commit_listener) is not None:
            with contextlib.suppress(Exception):
                batches = sum(j.blocks is not None for j in group)
                listener(elapsed, batches, sum(j.reports for j in group))
        self._call_soon(self._settle_group, outcomes)
        return conn

    def _attempts(
        self, conn: Conn | None, group: list[_Job], prepared: _Prepared
    ) -> tuple[Conn | None, list[Outcome] | Exception]:
        """The group's transaction, run again (3 times at most) after a deadlock or on a
        new connection when the one it ran on broke (a retry is safe, as ids make the group
        count once). The connection to use next, and the outcomes or the last error."""
        attempt = 0
        while True:
            try:
                if conn is None or not self._writer_usable(conn):
                    conn = self._reconnect(conn)
                return conn, self._transaction(conn, group, prepared)
            except Exception as exc:
                retry = self._rolled_back(conn, exc)
                if not retry or attempt == 3:
                    return conn, exc
                attempt += 1
                log.warning("group transaction retried after: %s", exc)

    def _rolled_back(self, conn: Conn | None, exc: Exception) -> bool:
        """Roll back; whether to run again (after a deadlock, or on a new connection)."""
        if conn is not None:
            with contextlib.suppress(Exception):
                self._x(conn, "ROLLBACK")
        broken = conn is not None and not self._writer_usable(conn)
        return self._retryable(exc) or broken

    def _transaction(self, conn: Conn, group: list[_Job], prepared: _Prepared) -> list[Outcome]:
        """The group's transaction: calls (each in a savepoint), then the batches; COMMIT."""
        done: list[Outcome] = []
        self._x(conn, self.group_begin)
        for job in group:
            if job.fn is None:
                continue
            self._x(conn, "SAVEPOINT job")
            try:
                result = job.fn(conn)
            except Exception as exc:
                if self._retryable(exc):
                    raise
                self._x(conn, "ROLLBACK TO SAVEPOINT job")
                self._x(conn, "RELEASE SAVEPOINT job")
                if not isinstance(exc, StoreError | ValueError):
                    log.exception("store job failed")
                done.append((job, None, as_store_error(exc)))
                continue
            self._x(conn, "RELEASE SAVEPOINT job")
            done.append((job, result, None))
        if prepared.jobs:
            results, deltas, held = self._store_batches(conn, prepared)
            rows = [
                (fp, bucket, deltas[fp, bucket].n, pack_sums(deltas[fp, bucket].sums))
                for fp, bucket in sorted(deltas)
            ]
            if rows:
                self._append_partials(conn, rows)
            for row in held:
                self._x(conn, INSERT_HELD, row)
            done.extend(zip(prepared.jobs, results, [None] * len(results), strict=True))
        self._x(conn, "COMMIT")
        return done

    def _store_batches(
        self, conn: Conn, prepared: _Prepared
    ) -> tuple[list[IngestResult], Deltas, list[HeldRow]]:
        """Claim batch ids and insert v1 report ids; each batch's answer, the group's sums
        and held records."""
        claims = self._claim_sealed(conn, prepared.jobs)
        new = self._new_report_ids(conn, prepared)
        results: list[IngestResult] = []
        total: Deltas = {}
        held_rows: list[HeldRow] = []
        for i, job in enumerate(prepared.jobs):
            if job.batch_id is None:
                accepted, deltas, held = _legacy_counted(job, prepared, i, new)
            elif (repeat := claims.repeat(job.batch_id, job.blocks or [])) is not None:
                results.append(repeat)
                continue
            else:
                accepted, deltas, held = job.reports, prepared.deltas[i], prepared.held[i]
            by_fp = _add_deltas(total, deltas)
            held_rows += _held_rows(held)
            tests = tuple((b.fingerprint, b.hold.test, a.n) for b, a in held if b.hold is not None)
            stored = tuple(job.blocks or ()) if job.screen and accepted == job.reports else ()
            results.append(
                IngestResult(accepted, job.reports - accepted, by_fp, held=tests, blocks=stored)
            )
        return results, total, held_rows

    def _claim_sealed(self, conn: Conn, jobs: list[_Job]) -> _Claims:
        """Sealed batches: the first occurrence of an id not stored before counts."""
        sealed = _sealed_ids(jobs)
        if not sealed:
            return _Claims(sealed, set(), {})
        order = sorted(sealed)  # one lock order for every transaction
        claimed = self._claim_batches(conn, [(i, *sealed[i]) for i in order])
        before = [i for i in order if i not in claimed]
        return _Claims(sealed, claimed, self._stored_bitmaps(conn, before) if before else {})

    def _stored_bitmaps(
        self, conn: Conn, ids: list[bytes]
    ) -> dict[bytes, tuple[bytes, bytes | None]]:
        marks = ",".join("?" * len(ids))
        keys = [self._batch_key(i) for i in ids]
        sql = f"SELECT id, blocks, counts FROM batches WHERE id IN ({marks})"
        rows = self._x(conn, sql, keys).fetchall()
        return {
            self._batch_id(r[0]): (bytes(r[1]), None if r[2] is None else bytes(r[2])) for r in rows
        }

    def _new_report_ids(self, conn: Conn, prepared: _Prepared) -> npt.NDArray[np.bool_] | None:
        """Insert the v1 report ids; which of ``prepared.legacy_ids`` are new (None: all)."""
        ids = prepared.legacy_ids
        if not ids.shape[0]:
            return None
        uniq, first = np.unique(ids, return_index=True)
        inserted = self._insert_report_ids(conn, uniq, prepared.legacy_buckets[first])
        if inserted is None and first.shape[0] == ids.shape[0]:
            return None
        new = np.zeros(ids.shape[0], dtype=bool)
        new[first if inserted is None else first[inserted]] = True
        return new

    def _batch_key(self, batch_id: bytes) -> Any:  # as a query parameter
        return batch_id

    @staticmethod
    def _batch_id(value: Any) -> bytes:  # as the database returns it: bytes, or a uuid
        return value.bytes if hasattr(value, "bytes") else bytes(value)

    def _settle_group(self, outcomes: list[Outcome]) -> None:
        for job, result, exc in outcomes:
            if job.blocks is not None:
                self._pending_batches -= 1
                self._pending_reports -= job.reports
            _settle_future(job.future, result, exc)

    def _submit(
        self,
        fn: Callable[[Conn], T] | None,
        *,
        blocks: list[CheckedReports] | None = None,
        batch_id: bytes | None = None,
        screen: float = 0.0,
    ) -> asyncio.Future[T]:
        if self._closing or self._loop is None:
            raise StoreClosed("the store is closed")
        future: asyncio.Future[T] = self._loop.create_future()
        reports = 0
        if blocks is not None:
            reports = sum(b.n for b in blocks)
            self._pending_batches += 1
            self._pending_reports += reports
        self._queue.put(_Job(fn, future, reports, blocks, batch_id, screen))
        return future

    @property
    def pending_batches(self) -> int:
        return self._pending_batches

    @property
    def pending_reports(self) -> int:
        return self._pending_reports

    async def ingest(
        self,
        blocks: Sequence[CheckedReports],
        *,
        batch_id: bytes | None = None,
        screen: float = 0.0,
    ) -> IngestResult:
        blocks = [b for b in blocks if b.n]
        if not blocks:
            return IngestResult(0, 0)
        if batch_id is None and any(b.ids is None for b in blocks):
            raise ValueError("a batch without a batch id needs report ids in every block")
        return await self._submit(None, blocks=blocks, batch_id=batch_id, screen=screen)

    async def move_to_held(self, moved: Sequence[Moved]) -> None:
        def move(conn: Conn) -> None:
            negative = [
                (m.fingerprint, m.bucket, -m.aggregate.n, pack_sums(-m.aggregate.sums))
                for m in moved
            ]
            self._append_partials(conn, negative)
            for row in _held_rows(moved):
                self._x(conn, INSERT_HELD, row)

        await self._submit(move)

    async def compact(self, limit: int = 20_000) -> int:
        def fold(conn: Conn) -> int:
            rows = self._take_partials(conn, limit)
            folded: Folded = {}
            for fp, bucket, n, blob in rows:
                key = (fp, bucket)
                old = folded.get(key)
                sums = unpack_sums(bytes(blob), None if old is None else old[1].size)
                folded[key] = (
                    (n, sums, 1) if old is None else (old[0] + n, old[1] + sums, old[2] + 1)
                )
            if folded:
                self._add_to_aggregates(conn, folded)
            return len(rows)

        return await self._submit(fold)

    async def batch_stored(self, batch_id: bytes) -> bool:
        key = self._batch_key(batch_id)
        sql = "SELECT 1 FROM batches WHERE id = ?"
        return await self._read(lambda conn: self._x(conn, sql, (key,)).fetchone() is not None)

    async def held_records(self, limit: int, before: int | None = None) -> list[HeldRecord]:
        def read(conn: Conn) -> list[HeldRecord]:
            rows = self._x(
                conn,
                "SELECT h.id, h.day, COALESCE(v.name, ''), h.fingerprint, h.bucket, h.n, "
                "h.test, h.reason, h.origin, h.released FROM held h LEFT JOIN metric_versions "
                "v ON v.fingerprint = h.fingerprint WHERE h.id < ? ORDER BY h.id DESC LIMIT ?",
                (MAX_BUCKET if before is None else before, limit),
            ).fetchall()
            return [_held_record(*row) for row in rows]

        return await self._read(read)

    async def release_held(self, record: int) -> bool | None:
        def release(conn: Conn) -> bool | None:
            row = self._x(
                conn,
                "UPDATE held SET released = ? WHERE id = ? AND released IS NULL "
                "RETURNING fingerprint, bucket, n, sums",
                (_utc_day(), record),
            ).fetchone()
            if row is None:
                return self._held_exists(conn, record)
            self._append_partials(conn, [(str(row[0]), int(row[1]), int(row[2]), bytes(row[3]))])
            return True

        return await self._submit(release)

    async def drop_held(self, record: int) -> bool | None:
        def drop(conn: Conn) -> bool | None:
            sql = "DELETE FROM held WHERE id = ? AND released IS NULL RETURNING id"
            if self._x(conn, sql, (record,)).fetchone() is not None:
                return True
            return self._held_exists(conn, record)

        return await self._submit(drop)

    def _held_exists(self, conn: Conn, record: int) -> bool | None:
        """False if held record ``record`` exists (it was released), None if not."""
        found = self._x(conn, "SELECT 1 FROM held WHERE id = ?", (record,)).fetchone()
        return None if found is None else False

    async def put_metric(
        self, definition: MetricDefinition, *, origin: Origin = Origin.API
    ) -> PutOutcome:
        return await self._submit(lambda conn: self._put_metric(conn, definition, origin))

    def _put_metric(self, conn: Conn, definition: MetricDefinition, origin: Origin) -> PutOutcome:
        fp, name, text = definition.fingerprint, definition.name, definition_json(definition)
        self._lock_catalog(conn)
        row = self._x(
            conn, "SELECT fingerprint, origin, retired_at FROM metrics WHERE name = ?", (name,)
        ).fetchone()
        current, was_origin, retired_at = (None, None, None) if row is None else row
        retired = retired_at is not None
        if retired and origin is Origin.CONFIG:
            return PutOutcome.RETIRED
        stored = self._store_version(conn, fp, name, text)
        outcome = put_outcome(current, fp, stored, text, retired)
        if outcome is not PutOutcome.UNCHANGED or was_origin != origin:
            self._x(
                conn,
                "INSERT INTO metrics (name, fingerprint, origin, retired_at) "
                "VALUES (?, ?, ?, NULL) ON CONFLICT (name) DO UPDATE SET "
                "fingerprint = excluded.fingerprint, origin = excluded.origin, retired_at = NULL",
                (name, fp, origin.value),
            )
        if outcome is not PutOutcome.UNCHANGED:
            self._catalog_written(conn, name)
        return outcome

    def _store_version(self, conn: Conn, fp: str, name: str, text: str) -> str | None:
        """Store version ``fp``'s JSON (new, or changed); the JSON stored before (None: new)."""
        row = self._x(
            conn, "SELECT definition FROM metric_versions WHERE fingerprint = ?", (fp,)
        ).fetchone()
        if row is None:
            self._x(
                conn,
                "INSERT INTO metric_versions (fingerprint, name, definition, seq) "
                "SELECT ?, ?, ?, COALESCE(MAX(seq), 0) + 1 FROM metric_versions",
                (fp, name, text),
            )
            return None
        stored: str = row[0]
        if stored != text:
            self._x(
                conn, "UPDATE metric_versions SET definition = ? WHERE fingerprint = ?", (text, fp)
            )
        return stored

    async def retire_metric(self, name: str) -> bool | None:
        def retire(conn: Conn) -> bool | None:
            self._lock_catalog(conn)
            row = self._x(conn, "SELECT retired_at FROM metrics WHERE name = ?", (name,))
            found = row.fetchone()
            if found is None:
                return None
            if found[0] is not None:
                return False
            self._x(
                conn, "UPDATE metrics SET retired_at = ? WHERE name = ?", (int(time.time()), name)
            )
            self._catalog_written(conn, name)
            return True

        return await self._submit(retire)

    async def probe_write(self) -> None:
        await self._submit(lambda conn: self._raise_state(conn, "write_probe", int(time.time())))

    def _raise_state(self, conn: Conn, key: str, value: int) -> None:
        """Set ``key`` of ``store_state`` to ``value``, unless it holds more already."""
        self._x(
            conn,
            "INSERT INTO store_state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
            "SET value = CASE WHEN store_state.value > excluded.value THEN store_state.value "
            "ELSE excluded.value END",
            (key, value),
        )

    async def load_catalog(self) -> Catalog:
        def read(conn: Conn) -> Catalog:
            self._x(conn, self.snapshot_begin)  # one snapshot for both statements
            try:
                versions = self._x(
                    conn, "SELECT fingerprint, name, definition FROM metric_versions ORDER BY seq"
                ).fetchall()
                current = self._x(
                    conn, "SELECT name, fingerprint, origin, retired_at FROM metrics"
                ).fetchall()
            finally:
                self._x(conn, "COMMIT")
            return build_catalog(versions, current)

        return await self._read(read)

    async def find_versions(self, fingerprints: Sequence[str]) -> list[tuple[str, str, str]]:
        wanted = list(fingerprints)
        if not wanted:
            return []

        def read(conn: Conn) -> list[tuple[str, str, str]]:
            marks = ",".join("?" * len(wanted))
            rows = self._x(
                conn,
                "SELECT fingerprint, name, definition FROM metric_versions "
                f"WHERE fingerprint IN ({marks})",
                wanted,
            ).fetchall()
            return [(str(fp), str(name), str(text)) for fp, name, text in rows]

        return await self._read(read)

    async def ping(self) -> None:
        await self._read(lambda conn: self._x(conn, "SELECT 1").fetchone())

    async def aggregates(
        self, fingerprint: str, stats_size: int, start: int | None, end: int | None
    ) -> list[Any]:
        lo = MIN_BUCKET if start is None else start
        hi = MAX_BUCKET if end is None else end

        def read(conn: Conn) -> list[Any]:
            # One statement, one snapshot: a compaction commits wholly before or after it.
            cur = self._x(
                conn,
                f"SELECT bucket, n, {self.sums_column}, 0 AS kind, 0 AS seq, parts "
                "FROM aggregates WHERE fingerprint = ? AND bucket >= ? AND bucket < ? "
                "UNION ALL SELECT bucket, n, sums, 1, seq, 1 FROM partials "
                "WHERE fingerprint = ? AND bucket >= ? AND bucket < ? ORDER BY 4, 5",
                (fingerprint, lo, hi, fingerprint, lo, hi),
            )

            def rows() -> Any:
                for bucket, n, value, kind, _, parts in cur:  # a streaming sum
                    if kind == 0:
                        sums = self._parse_compacted(value)
                        if sums.size != stats_size:
                            raise StoreError(
                                f"aggregate of version {fingerprint} bucket {bucket} holds "
                                f"{sums.size} sums, the mechanism keeps {stats_size}"
                            )
                    else:
                        sums = unpack_sums(bytes(value), stats_size)
                    yield int(bucket), int(n), int(parts), sums

            return fold_rows(rows())

        return await self._read(read)

    async def bucket_counts(self, fingerprint: str) -> list[tuple[int, int, int]]:
        def read(conn: Conn) -> list[tuple[int, int, int]]:
            rows = self._x(conn, BUCKET_COUNTS, (fingerprint, fingerprint)).fetchall()
            return [(int(b), int(n), int(parts)) for b, n, parts in rows]

        return await self._read(read)

    async def estimate_states(self, fingerprint: str) -> list[StoredEstimate]:
        sql = f"SELECT {ESTIMATE_STATE} FROM estimates WHERE fingerprint = ?"
        rows = await self._read(lambda conn: self._x(conn, sql, (fingerprint,)).fetchall())
        return [_stored_estimate(row) for row in rows]

    async def estimate_result(self, fingerprint: str, lo: int, hi: int) -> StoredEstimate | None:
        sql = (
            f"SELECT {ESTIMATE_STATE}, result FROM estimates "
            "WHERE fingerprint = ? AND lo = ? AND hi = ?"
        )
        row = await self._read(lambda conn: self._x(conn, sql, (fingerprint, lo, hi)).fetchone())
        return None if row is None else _stored_estimate(row)

    async def claim_estimate(
        self, fingerprint: str, lo: int, hi: int, data: Data, owner: str, until: float
    ) -> bool:
        now = time.time()
        params = (fingerprint, lo, hi, owner, until, now, data.n, data.parts, data.buckets)
        claimed = await self._submit(lambda conn: self._x(conn, CLAIM_ESTIMATE, params).fetchall())
        return bool(claimed)

    async def save_estimate(self, fingerprint: str, estimate: StoredEstimate, owner: str) -> None:
        e, data = estimate, estimate.data
        assert data is not None
        params = (fingerprint, e.lo, e.hi, data.n, data.parts, data.buckets, e.computed_at)
        params_ = (*params, e.seconds, e.result, e.error, owner, owner)

        def save(conn: Conn) -> None:
            self._x(conn, SAVE_ESTIMATE, params_)
            if e.hi - e.lo > 1 and e.hi < MAX_BUCKET:
                self._x(conn, PRUNE_ESTIMATES, (fingerprint, fingerprint))

        await self._submit(save)

    async def report_count(self) -> int:
        def read(conn: Conn) -> int:
            row = self._x(
                conn,
                "SELECT (SELECT COALESCE(SUM(n), 0) FROM aggregates) "
                "+ (SELECT COALESCE(SUM(n), 0) FROM partials)",
            ).fetchone()
            return int(row[0])

        return await self._read(read)

    async def pruned_before(self) -> int | None:
        return await self._read(self._pruned_mark)

    def _pruned_mark(self, conn: Conn) -> int | None:
        row = self._x(conn, "SELECT value FROM store_state WHERE key = ?", (PRUNED_KEY,))
        found = row.fetchone()
        return None if found is None else int(found[0])


def _stored_estimate(row: Sequence[Any]) -> StoredEstimate:
    """A :class:`StoredEstimate` from a row of ``ESTIMATE_STATE`` (and the result)."""
    lo, hi, n, parts, buckets, computed_at, seconds, error, until = row[:9]
    data = Data(int(n), int(parts), int(buckets)) if int(n) >= 0 else None
    until_ = None if until is None else float(until)
    result = bytes(row[9]) if len(row) > 9 and row[9] is not None else None
    return StoredEstimate(
        int(lo), int(hi), data, float(computed_at), float(seconds), error, until_, result
    )
