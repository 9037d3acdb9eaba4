"""SQLite store: WAL mode, one writer thread with group commit, one reader thread.

**Threads.** The event loop never touches SQLite. Writes (batches of reports, metric
definitions) go through a queue to one writer thread that owns the only write
connection; reads (catalog, aggregates) run on one reader thread with its own
connection, which WAL lets read committed data while the writer writes.

**Group commit.** The writer takes every job waiting in the queue (up to a limit) and runs
them in *one* transaction, then COMMITs once and only then answers every job of the group.
While one group commits, the next one gathers, so under load each fsync carries many
batches. Other jobs (metric definitions, pruning) run first, each in its own SAVEPOINT.

**The batches of a group.** Before BEGIN, each batch is aggregated as if all its reports
were new (numpy; a batch whose reports do not aggregate fails alone; costly batches come
aggregated already) and the ids of the whole group are sorted. The ids then go in with
``INSERT OR IGNORE ... RETURNING id`` statements of 2048 rows (one ``sqlite3_step`` per
row returned, the GIL dropped once per chunk rather than per row; sorted keys keep the
B-tree descents in cache). A chunk that returns all its ids was all new (the common
case); otherwise the ids it returned are exactly those this transaction stored, and the
first occurrence of each in the group (earliest batch first) is the report that counts;
a batch with duplicates is aggregated again over its new reports only. No savepoint is
needed, so SQLite keeps no copy of the pages the group touches (a savepoint's
sub-journal held one per touched page: memory that grew with the group and the table).
The group's aggregates are added to the ``aggregates`` rows just before the COMMIT, so
ids and sums always agree.

**Durability.** ``synchronous=FULL`` (default) fsyncs the WAL at every commit: an
acknowledged batch survives power loss. ``NORMAL`` skips that fsync (a crash of the OS
may lose the last commits, never corrupt the file). See docs/deployment.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ..aggregate import Aggregate
from ..metrics import MetricDefinition
from .store import (
    ID_DTYPE,
    SUMS_DTYPE,
    BucketAggregate,
    Catalog,
    IngestBlock,
    IngestResult,
    Origin,
    PutOutcome,
    Store,
    StoreClosed,
    StoreError,
    aggregate_blocks,
    build_catalog,
    definition_json,
    put_outcome,
)

log = logging.getLogger("ldpkit.collector.store")

T = TypeVar("T")
Deltas = dict[tuple[str, int], Aggregate]
JobFn = Callable[[sqlite3.Connection], tuple[Any, Deltas]]

SCHEMA_VERSION = 3
SCHEMA = """
CREATE TABLE IF NOT EXISTS metric_versions (
    fingerprint TEXT PRIMARY KEY,     -- 16 hex digits of the definition's parameters
    name        TEXT NOT NULL,
    definition  TEXT NOT NULL,        -- MetricDefinition.to_dict() as JSON
    seq         INTEGER NOT NULL      -- order in which versions were first defined
);
CREATE INDEX IF NOT EXISTS metric_versions_by_name ON metric_versions (name, seq);
CREATE TABLE IF NOT EXISTS metrics (  -- the current version of each metric
    name        TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL REFERENCES metric_versions (fingerprint),
    origin      TEXT NOT NULL DEFAULT 'api',  -- who last defined it: 'api' or 'config'
    retired_at  INTEGER                       -- unix seconds it was retired, or NULL
);
CREATE TABLE IF NOT EXISTS report_ids (  -- dedupe only: no time, no address, no payload
    id     BLOB PRIMARY KEY,
    bucket INTEGER NOT NULL           -- the report's own bucket, to prune old ids
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS store_state (  -- small bookkeeping values
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS aggregates (
    fingerprint TEXT NOT NULL,
    bucket      INTEGER NOT NULL,     -- bucket start, unix seconds UTC
    n           INTEGER NOT NULL,     -- reports
    sums        BLOB NOT NULL,        -- the mechanism's sums vector, little-endian float64
    PRIMARY KEY (fingerprint, bucket)
);
"""

# Ids go in ID_CHUNK rows per statement; a short last chunk is padded with copies of its
# last row, which OR IGNORE skips (and does not return).
ID_CHUNK = 2048
INSERT_IDS_CHUNK = (
    "INSERT OR IGNORE INTO report_ids (id, bucket) VALUES "
    + ", ".join(["(?, ?)"] * ID_CHUNK)
    + " RETURNING id"
)
PAGE_SIZE = 16384  # for new files: fewer, larger B-tree pages for the random-keyed ids
# Version 1 kept ids without buckets: they get the day of the migration, which is no
# earlier than their own bucket, so they are pruned no sooner than they may be.
MIGRATE_1_TO_2 = "ALTER TABLE report_ids ADD COLUMN bucket INTEGER NOT NULL DEFAULT {day};"
# Version 3 records who defined each metric and whether it is retired; metrics defined
# before count as defined through the API (never retired for leaving a config file).
MIGRATE_2_TO_3 = (
    "ALTER TABLE metrics ADD COLUMN origin TEXT NOT NULL DEFAULT 'api';"
    "ALTER TABLE metrics ADD COLUMN retired_at INTEGER;"
)
PRUNED_KEY = "report_ids_pruned_before"
PROBE_KEY = "write_probe"  # written by probe_write
PRUNE_RANGES = 256  # one DELETE per first byte of the id, each its own writer job
MIN_BUCKET, MAX_BUCKET = -(2**62), 2**62


@dataclass(eq=False)
class _Job:
    fn: JobFn | None  # None for a batch of reports (``blocks``)
    future: asyncio.Future[Any]
    reports: int = 0
    blocks: list[IngestBlock] | None = None

    @property
    def ingest(self) -> bool:
        return self.blocks is not None


@dataclass
class _Prepared:
    """The batches of one group, ready for SQL: ids in batch order with their buckets, the
    order that sorts them, and each batch's aggregates assuming every report is new."""

    jobs: list[_Job]
    bounds: list[int]  # batch i holds ids[bounds[i]:bounds[i + 1]]
    deltas: list[Deltas]
    ids: npt.NDArray[Any]
    buckets: npt.NDArray[np.int64]
    order: npt.NDArray[np.intp]

    @property
    def total(self) -> int:
        return int(self.ids.shape[0])


@dataclass(eq=False)
class _Stop:
    done: asyncio.Future[None]


class SQLiteStore(Store):
    """A :class:`Store` in one SQLite file (WAL mode)."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        max_group_batches: int = 256,
        max_group_reports: int = 500_000,
        cache_mib: int = 256,
        wal_autocheckpoint: int = 16000,  # pages: a WAL of up to 256 MiB between checkpoints
    ) -> None:
        self.path = Path(path)
        self.synchronous = synchronous.upper()
        if self.synchronous not in ("FULL", "EXTRA", "NORMAL"):
            raise ValueError(f"synchronous must be full, extra or normal, got {synchronous!r}")
        self.max_group_batches = max_group_batches
        self.max_group_reports = max_group_reports
        self.cache_mib = cache_mib
        self.wal_autocheckpoint = wal_autocheckpoint
        self._queue: queue.SimpleQueue[_Job | _Stop] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._reader: ThreadPoolExecutor | None = None
        self._reader_conn: sqlite3.Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = True
        self._pending_batches = 0
        self._pending_reports = 0

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, synchronous={self.synchronous})"

    # --- connections ---------------------------------------------------------------------
    def _connect(self, *, writer: bool) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            if writer:
                conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # no effect on an existing file
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: cannot switch to WAL mode (got {mode!r})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA temp_store = MEMORY")  # (no savepoint around the ids)
            if writer:
                conn.execute(f"PRAGMA cache_size = {-1024 * self.cache_mib}")
                conn.execute(f"PRAGMA wal_autocheckpoint = {self.wal_autocheckpoint}")
            else:
                conn.execute("PRAGMA query_only = 1")
        except BaseException:
            conn.close()
            raise
        return conn

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this ldpkit "
                f"({SCHEMA_VERSION}); upgrade ldpkit"
            )
        migrate = ""
        if version == 1:
            migrate = MIGRATE_1_TO_2.format(day=int(time.time()) // 86400 * 86400)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(metrics)")}
        if version in (1, 2) and columns and "origin" not in columns:
            migrate += MIGRATE_2_TO_3
        try:
            conn.executescript(
                "BEGIN IMMEDIATE;"
                + migrate
                + SCHEMA
                + f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            )
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    # --- lifecycle -----------------------------------------------------------------------
    async def open(self) -> None:
        if self._thread is not None:
            return
        loop = asyncio.get_running_loop()
        self._loop = loop
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the directory of {self.path}: {exc}") from None
        ready: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(
            target=self._writer_main, args=(ready,), name="ldpkit-sqlite-writer", daemon=True
        )
        self._thread.start()
        await ready
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="ldpkit-sqlite-reader")
        self._closing = False
        await self.ping()
        log.info("store open: %s (WAL, synchronous=%s)", self.path, self.synchronous)

    async def close(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._closing = True
        done: asyncio.Future[None] = self._loop.create_future()
        self._queue.put(_Stop(done))
        await done
        self._thread = None
        if self._reader is not None:
            reader = self._reader
            self._reader = None
            with contextlib.suppress(Exception):
                await self._loop.run_in_executor(reader, self._close_reader)
            reader.shutdown(wait=True)
        log.info("store closed: %s", self.path)

    def _close_reader(self) -> None:
        if self._reader_conn is not None:
            self._reader_conn.close()
            self._reader_conn = None

    # --- the writer thread ---------------------------------------------------------------
    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(fn, *args)

    @staticmethod
    def _settle_future(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def _writer_main(self, ready: asyncio.Future[None]) -> None:
        try:
            conn = self._connect(writer=True)
            try:
                self._create_schema(conn)
            except BaseException:
                conn.close()
                raise
        except (sqlite3.Error, StoreError, OSError) as exc:
            error = exc if isinstance(exc, StoreError) else StoreError(f"{self.path}: {exc}")
            self._thread = None
            self._call_soon(self._settle_future, ready, None, error)
            return
        self._call_soon(self._settle_future, ready, None, None)
        stop: _Stop | None = None
        try:
            while stop is None:
                item = self._queue.get()
                if isinstance(item, _Stop):
                    stop = item
                    break
                group = [item]
                reports = item.reports
                while len(group) < self.max_group_batches and reports < self.max_group_reports:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if isinstance(nxt, _Stop):
                        stop = nxt
                        break
                    group.append(nxt)
                    reports += nxt.reports
                self._run_group(conn, group)
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            conn.close()
            if stop is not None:
                self._call_soon(self._settle_future, stop.done, None, None)

    def _run_group(self, conn: sqlite3.Connection, group: list[_Job]) -> None:
        """One transaction for the whole group: calls first (each in a savepoint), then
        every batch's ids in one sorted pass, the aggregates, one COMMIT; then answer."""
        started = time.perf_counter()
        outcomes: list[tuple[_Job, Any, BaseException | None]] = []
        # Aggregating and sorting need no lock: done before BEGIN. A batch whose reports
        # do not aggregate fails alone here.
        prepared, failed = _prepare([job for job in group if job.ingest])
        outcomes.extend(failed)
        done: list[tuple[_Job, Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in group:
                if job.fn is None:
                    continue
                conn.execute("SAVEPOINT job")
                try:
                    result, _ = job.fn(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    if not isinstance(exc, StoreError | ValueError):
                        log.exception("store job failed")
                    done.append((job, None, _as_store_error(exc)))
                    continue
                conn.execute("RELEASE job")
                done.append((job, result, None))
            if prepared.total:
                new = _store_ids(conn, prepared)
                results, deltas = _results(prepared, new)
                self._apply_deltas(conn, deltas)
                done.extend((job, r, None) for job, r in zip(prepared.jobs, results, strict=True))
            conn.execute("COMMIT")
        except Exception as exc:
            log.error("store transaction failed (%d jobs not stored): %s", len(group), exc)
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            error = _as_store_error(exc)
            done = [(job, None, error) for job in group if job not in {f[0] for f in failed}]
        outcomes.extend(done)
        elapsed = time.perf_counter() - started
        listener = self.commit_listener
        if listener is not None:
            with contextlib.suppress(Exception):
                listener(elapsed, sum(j.ingest for j in group), sum(j.reports for j in group))
        self._call_soon(self._settle_group, outcomes)

    def _settle_group(self, outcomes: list[tuple[_Job, Any, BaseException | None]]) -> None:
        for job, result, exc in outcomes:
            if job.ingest:
                self._pending_batches -= 1
                self._pending_reports -= job.reports
            self._settle_future(job.future, result, exc)

    @staticmethod
    def _apply_deltas(conn: sqlite3.Connection, deltas: Deltas) -> None:
        for (fp, bucket), agg in deltas.items():
            row = conn.execute(
                "SELECT n, sums FROM aggregates WHERE fingerprint = ? AND bucket = ?", (fp, bucket)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO aggregates (fingerprint, bucket, n, sums) VALUES (?, ?, ?, ?)",
                    (fp, bucket, agg.n, agg.sums.astype(SUMS_DTYPE).tobytes()),
                )
                continue
            old = np.frombuffer(row[1], dtype=SUMS_DTYPE)
            if old.size != agg.sums.size:
                raise StoreError(
                    f"aggregate of version {fp} bucket {bucket} holds {old.size} sums, "
                    f"the mechanism keeps {agg.sums.size}"
                )
            conn.execute(
                "UPDATE aggregates SET n = ?, sums = ? WHERE fingerprint = ? AND bucket = ?",
                (int(row[0]) + agg.n, (old + agg.sums).astype(SUMS_DTYPE).tobytes(), fp, bucket),
            )

    # --- submitting work -----------------------------------------------------------------
    def _submit(
        self, fn: JobFn | None, *, blocks: list[IngestBlock] | None = None
    ) -> asyncio.Future[Any]:
        if self._closing or self._loop is None:
            raise StoreClosed("the store is closed")
        future: asyncio.Future[Any] = self._loop.create_future()
        reports = 0
        if blocks is not None:
            reports = sum(b.n for b in blocks)
            self._pending_batches += 1
            self._pending_reports += reports
        self._queue.put(_Job(fn, future, reports, blocks))
        return future

    @property
    def pending_batches(self) -> int:
        return self._pending_batches

    @property
    def pending_reports(self) -> int:
        return self._pending_reports

    async def ingest(self, blocks: Sequence[IngestBlock]) -> IngestResult:
        blocks = [b for b in blocks if b.n]
        total = sum(b.n for b in blocks)
        if not total:
            return IngestResult(0, 0)
        result: IngestResult = await self._submit(None, blocks=blocks)
        return result

    async def put_metric(
        self, definition: MetricDefinition, *, origin: Origin = Origin.API
    ) -> PutOutcome:
        outcome: PutOutcome = await self._submit(
            lambda conn: (_put_metric(conn, definition, origin), {})
        )
        return outcome

    async def retire_metric(self, name: str) -> bool | None:
        def retire(conn: sqlite3.Connection) -> tuple[bool | None, Deltas]:
            row = conn.execute("SELECT retired_at FROM metrics WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None, {}
            if row[0] is not None:
                return False, {}
            conn.execute(
                "UPDATE metrics SET retired_at = ? WHERE name = ?", (int(time.time()), name)
            )
            return True, {}

        retired: bool | None = await self._submit(retire)
        return retired

    # --- reads ---------------------------------------------------------------------------
    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._reader is None or self._loop is None or self._closing:
            raise StoreClosed("the store is closed")

        def run() -> T:
            if self._reader_conn is None:
                self._reader_conn = self._connect(writer=False)
            return fn(self._reader_conn)

        try:
            return await self._loop.run_in_executor(self._reader, run)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from None

    async def ping(self) -> None:
        await self._read(lambda conn: conn.execute("SELECT 1").fetchone())

    async def probe_write(self) -> None:
        def probe(conn: sqlite3.Connection) -> tuple[None, Deltas]:
            conn.execute(
                "INSERT INTO store_state (key, value) VALUES (?, ?) ON CONFLICT (key) "
                "DO UPDATE SET value = excluded.value",
                (PROBE_KEY, int(time.time())),
            )
            return None, {}

        await self._submit(probe)

    async def load_catalog(self) -> Catalog:
        def read(conn: sqlite3.Connection) -> Catalog:
            versions = conn.execute(
                "SELECT fingerprint, name, definition FROM metric_versions ORDER BY seq"
            ).fetchall()
            current = conn.execute(
                "SELECT name, fingerprint, origin, retired_at FROM metrics"
            ).fetchall()
            return build_catalog(versions, current)

        return await self._read(read)

    async def find_versions(self, fingerprints: Sequence[str]) -> list[tuple[str, str, str]]:
        wanted = list(fingerprints)
        if not wanted:
            return []

        def read(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
            marks = ",".join("?" * len(wanted))
            rows = conn.execute(
                "SELECT fingerprint, name, definition FROM metric_versions "
                f"WHERE fingerprint IN ({marks})",
                wanted,
            ).fetchall()
            return [(str(fp), str(name), str(text)) for fp, name, text in rows]

        return await self._read(read)

    async def aggregates(
        self, fingerprint: str, stats_size: int, start: int | None, end: int | None
    ) -> list[BucketAggregate]:
        lo = MIN_BUCKET if start is None else start
        hi = MAX_BUCKET if end is None else end

        def read(conn: sqlite3.Connection) -> list[BucketAggregate]:
            rows = conn.execute(
                "SELECT bucket, n, sums FROM aggregates "
                "WHERE fingerprint = ? AND bucket >= ? AND bucket < ? ORDER BY bucket",
                (fingerprint, lo, hi),
            ).fetchall()
            out = []
            for bucket, n, blob in rows:
                sums = np.frombuffer(blob, dtype=SUMS_DTYPE)
                if sums.size != stats_size:
                    raise StoreError(
                        f"aggregate of version {fingerprint} bucket {bucket} holds {sums.size} "
                        f"sums, the mechanism keeps {stats_size}"
                    )
                out.append(BucketAggregate(int(bucket), Aggregate(int(n), sums)))
            return out

        return await self._read(read)

    async def report_count(self) -> int:
        count: int = await self._read(
            lambda conn: conn.execute("SELECT count(*) FROM report_ids").fetchone()[0]
        )
        return count

    async def pruned_before(self) -> int | None:
        row = await self._read(
            lambda conn: conn.execute(
                "SELECT value FROM store_state WHERE key = ?", (PRUNED_KEY,)
            ).fetchone()
        )
        return None if row is None else int(row[0])

    async def prune_report_ids(self, before_bucket: int) -> int:
        """Delete ids of buckets ``< before_bucket``: counted first on the reader, then
        deleted by writer jobs over ranges of ids (by first byte, about 50,000 ids each), so
        batches commit in between; skipped if already done."""

        def count(conn: sqlite3.Connection) -> int | None:
            done = conn.execute(
                "SELECT value FROM store_state WHERE key = ?", (PRUNED_KEY,)
            ).fetchone()
            if done is not None and done[0] >= before_bucket:
                return None
            found: int = conn.execute(
                "SELECT count(*) FROM report_ids WHERE bucket < ?", (before_bucket,)
            ).fetchone()[0]
            return found

        old = await self._read(count)
        if old is None:
            return 0
        deleted = 0
        ranges = max(1, min(PRUNE_RANGES, old // 50_000))
        edges = [round(256 * i / ranges) for i in range(ranges + 1)] if old else []
        for a, b in itertools.pairwise(edges):
            lo, hi = bytes([a]), bytes([b]) if b < 256 else None

            def prune(
                conn: sqlite3.Connection, lo: bytes = lo, hi: bytes | None = hi
            ) -> tuple[int, Deltas]:
                where = "id >= ? AND bucket < ?" + (" AND id < ?" if hi is not None else "")
                params: tuple[object, ...] = (lo, before_bucket) + ((hi,) if hi else ())
                return conn.execute(f"DELETE FROM report_ids WHERE {where}", params).rowcount, {}

            deleted += await self._submit(prune)
        await self._submit(
            lambda conn: (
                conn.execute(
                    "INSERT INTO store_state (key, value) VALUES (?, ?) ON CONFLICT (key) "
                    "DO UPDATE SET value = max(value, excluded.value)",
                    (PRUNED_KEY, before_bucket),
                ),
                {},
            )
        )
        if deleted:
            log.info("pruned %d report ids of buckets before %d", deleted, before_bucket)
        return deleted


def _as_store_error(exc: BaseException) -> BaseException:
    if isinstance(exc, StoreError | ValueError):
        return exc
    return StoreError(f"{type(exc).__name__}: {exc}")


def _prepare(jobs: Sequence[_Job]) -> tuple[_Prepared, list[tuple[_Job, Any, BaseException]]]:
    kept: list[_Job] = []
    failed: list[tuple[_Job, Any, BaseException]] = []
    deltas: list[Deltas] = []
    for job in jobs:
        assert job.blocks is not None
        try:
            deltas.append(aggregate_blocks(job.blocks, None))
        except Exception as exc:  # reports that do not fit their mechanism: this batch fails
            failed.append((job, None, _as_store_error(exc)))
            continue
        kept.append(job)
    blocks = [b for job in kept for b in job.blocks or ()]
    bounds = [0]
    for job in kept:
        bounds.append(bounds[-1] + job.reports)
    if not blocks:
        empty = np.zeros(0, dtype=ID_DTYPE)
        return _Prepared(
            kept, bounds, deltas, empty, np.zeros(0, np.int64), np.zeros(0, np.intp)
        ), failed
    ids = np.concatenate([b.ids for b in blocks]) if len(blocks) > 1 else blocks[0].ids
    buckets = np.repeat(np.array([b.bucket for b in blocks], dtype=np.int64), [b.n for b in blocks])
    # Inserting in key order keeps the B-tree descent in cache; the first 8 bytes of a
    # random id almost always decide the order.
    order = np.argsort(np.ascontiguousarray(ids).view(">u8")[::2], kind="stable")
    return _Prepared(kept, bounds, deltas, ids, buckets, order), failed


def _insert_ids(
    conn: sqlite3.Connection, ids: npt.NDArray[Any], buckets: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_] | None:
    """Insert ``ids`` (in this order) that are not stored yet; which of them this call
    stored: the first occurrence of each new id (None: every one, the common case)."""
    n = int(ids.shape[0])
    inserted: npt.NDArray[np.bool_] | None = None
    rows: list[Any] = [None] * (2 * ID_CHUNK)
    # Python objects for one chunk at a time (not for the whole group: that transient
    # grew with the group's size and stayed in the process's heap).
    for i in range(0, n, ID_CHUNK):
        m = min(ID_CHUNK, n - i)
        if m < ID_CHUNK:
            rows = [None] * (2 * m)
        rows[0::2] = ids[i : i + m].tolist()
        rows[1::2] = buckets[i : i + m].tolist()
        if m < ID_CHUNK:
            rows.extend(rows[-2:] * (ID_CHUNK - m))
        stored = conn.execute(INSERT_IDS_CHUNK, rows).fetchall()
        if len(stored) == m:
            continue
        # Some ids were there (retries, another replica) or repeat: the ones returned are
        # those stored now; of a repeated one, its first occurrence counts.
        if inserted is None:
            inserted = np.ones(n, dtype=bool)
        chunk = ids[i : i + m]
        mask = np.zeros(m, dtype=bool)
        if stored:
            _, first = np.unique(chunk, return_index=True)
            mask[first] = True
            mask &= np.isin(chunk, np.frombuffer(b"".join(r[0] for r in stored), ID_DTYPE))
        inserted[i : i + m] = mask
    return inserted


def _store_ids(conn: sqlite3.Connection, prepared: _Prepared) -> npt.NDArray[np.bool_] | None:
    """Insert the group's new ids; which reports were new (None: all of them)."""
    inserted = _insert_ids(conn, prepared.ids[prepared.order], prepared.buckets[prepared.order])
    if inserted is None:
        return None
    new = np.zeros(prepared.total, dtype=bool)
    new[prepared.order] = inserted
    return new


def _results(
    prepared: _Prepared, new: npt.NDArray[np.bool_] | None
) -> tuple[list[IngestResult], Deltas]:
    """Each batch's answer and the group's aggregates; batches with duplicates are
    aggregated again over their new reports only."""
    results: list[IngestResult] = []
    total: Deltas = {}
    for i, job in enumerate(prepared.jobs):
        lo, hi = prepared.bounds[i], prepared.bounds[i + 1]
        deltas = prepared.deltas[i]
        accepted = hi - lo
        if new is not None:
            keep = new[lo:hi]
            accepted = int(keep.sum())
            if accepted != hi - lo:
                assert job.blocks is not None
                deltas = aggregate_blocks(job.blocks, keep)
        by_fp: dict[str, int] = {}
        for key, agg in deltas.items():
            by_fp[key[0]] = by_fp.get(key[0], 0) + agg.n
            total[key] = total[key] + agg if key in total else agg
        results.append(IngestResult(accepted, hi - lo - accepted, by_fp))
    return results, total


def _put_metric(
    conn: sqlite3.Connection, definition: MetricDefinition, origin: Origin
) -> PutOutcome:
    fp = definition.fingerprint
    name = definition.name
    text = definition_json(definition)
    current = conn.execute(
        "SELECT fingerprint, retired_at FROM metrics WHERE name = ?", (name,)
    ).fetchone()
    retired = current is not None and current[1] is not None
    if retired and origin is Origin.CONFIG:
        return PutOutcome.RETIRED
    version = conn.execute(
        "SELECT definition FROM metric_versions WHERE fingerprint = ?", (fp,)
    ).fetchone()
    if version is None:
        seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM metric_versions").fetchone()[0]
        conn.execute(
            "INSERT INTO metric_versions (fingerprint, name, definition, seq) VALUES (?, ?, ?, ?)",
            (fp, name, text, seq),
        )
    elif version[0] != text:
        conn.execute("UPDATE metric_versions SET definition = ? WHERE fingerprint = ?", (text, fp))
    conn.execute(
        "INSERT INTO metrics (name, fingerprint, origin, retired_at) VALUES (?, ?, ?, NULL) "
        "ON CONFLICT (name) DO UPDATE SET fingerprint = excluded.fingerprint, "
        "origin = excluded.origin, retired_at = NULL",
        (name, fp, origin.value),
    )
    return put_outcome(
        current[0] if current is not None else None,
        fp,
        version[0] if version is not None else None,
        text,
        retired,
    )
