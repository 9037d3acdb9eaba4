"""PostgreSQL store: one database shared by any number of collector processes.

Several ``ldpkit serve`` processes behind a load balancer may use one database; none of
them holds state the others need. Every batch is deduplicated and counted by the
database itself, and every estimate is read from it (no process caches aggregates).

**Driver.** psycopg 3 (``psycopg[binary,pool]``) rather than asyncpg: one well-kept
driver with both a sync and an asyncio API over libpq, a connection pool
(``psycopg_pool.AsyncConnectionPool``) from the same project, typed (``py.typed``),
pipelined ``executemany``, LISTEN/NOTIFY as an async iterator, and pluggable binary
dumpers: the ids, buckets and sums vectors of a batch go to the server as binary arrays
built by numpy in one piece, with no Python object per report.

**Schema** (versioned migrations in :data:`MIGRATIONS`, recorded in
``schema_migrations`` and applied at start under ``pg_advisory_xact_lock``, so several
processes starting at once on an empty database are safe; a database migrated by a newer
ldpkit is refused):

- ``metric_versions``, ``metrics``: every definition ever given and the current one per
  name (as in SQLite). :meth:`put_metric` runs under an advisory lock and sends
  ``NOTIFY ldpkit_catalog``; each process LISTENs and reloads its catalog (and the
  collector reloads periodically anyway, in case a notification is missed);
- ``report_ids (id uuid PRIMARY KEY, bucket bigint)``: the 16-byte report id and its
  report's own bucket (no arrival time); :meth:`prune_report_ids` deletes old buckets;
- ``aggregates (fingerprint, bucket, n bigint, sums float8[])``, updated by
  ``INSERT ... ON CONFLICT DO UPDATE`` adding the sums element-wise
  (``ldpkit_add_sums``, from a migration) in the same transaction as the ids.

**One group, one transaction.** Batches waiting in this process are taken together (group
commit, up to ``writers`` groups in flight on separate connections). The group's reports
are aggregated with numpy off the event loop, assuming all are new; the ids, sorted and
unique, are inserted with a plain ``INSERT ... SELECT FROM unnest(...)``. If that raises
a unique violation (a retry, or a replica got the same report), the transaction is
rolled back and redone with ``ON CONFLICT DO NOTHING RETURNING``, which names exactly
the ids this transaction stored: only those reports are counted (the others are
duplicates, whichever process got them first). The plain insert is the common case and
about twice as fast as ``ON CONFLICT`` (speculative insertion) on this table.

**Concurrency.** Under READ COMMITTED, an insert of an id another transaction inserted
and has not committed waits for it; the upsert of an aggregate row locks it until
commit, so concurrent increments from any process serialize and none is lost. Every
transaction locks in one global order: report ids sorted by value, then aggregate rows
sorted by (fingerprint, bucket), and the rows are never revisited, so two transactions
cannot wait on each other in a cycle (a deadlock the server reports anyway is retried).

**Durability.** The answer comes after COMMIT; with the server's default
``synchronous_commit = on`` an acknowledged batch is on disk (a warning is logged at
open when the server has it ``off``). See docs/deployment.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import Dumper
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import Format
from psycopg_pool import AsyncConnectionPool, PoolTimeout

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
    new_report_mask,
    put_outcome,
)

log = logging.getLogger("ldpkit.collector.store")

Deltas = dict[tuple[str, int], Aggregate]

CATALOG_CHANNEL = "ldpkit_catalog"
# Advisory lock keys (one bigint namespace per database): "ldpk" then a small number.
MIGRATION_LOCK = 0x6C64_706B_0000_0001
CATALOG_LOCK = 0x6C64_706B_0000_0002
PRUNE_LOCK = 0x6C64_706B_0000_0003
PRUNED_KEY = "report_ids_pruned_before"
PROBE_KEY = "write_probe"  # written by probe_write
PRUNE_CHUNK_PAGES = 2048  # 16 MiB of report_ids per DELETE
MIN_BUCKET, MAX_BUCKET = -(2**62), 2**62
DEADLOCK_RETRIES = 3

MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "metric catalog, report ids with buckets, aggregates, element-wise sums",
        (
            """CREATE TABLE metric_versions (
                fingerprint text PRIMARY KEY,   -- 16 hex digits of the parameters
                name        text NOT NULL,
                definition  text NOT NULL,      -- MetricDefinition.to_dict() as JSON
                seq         bigint GENERATED ALWAYS AS IDENTITY  -- order of definition
            )""",
            "CREATE INDEX metric_versions_by_name ON metric_versions (name, seq)",
            """CREATE TABLE metrics (            -- the current version of each metric
                name        text PRIMARY KEY,
                fingerprint text NOT NULL REFERENCES metric_versions (fingerprint)
            )""",
            """CREATE TABLE report_ids (         -- dedupe only: no time, no address
                id     uuid PRIMARY KEY,         -- the report id's 16 bytes
                bucket bigint NOT NULL           -- the report's bucket, for pruning
            )""",
            """CREATE TABLE aggregates (
                fingerprint text NOT NULL,
                bucket      bigint NOT NULL,     -- bucket start, unix seconds UTC
                n           bigint NOT NULL,     -- reports
                sums        float8[] NOT NULL,   -- the mechanism's sums vector
                PRIMARY KEY (fingerprint, bucket)
            ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0,
                    autovacuum_vacuum_threshold = 2000,
                    toast.autovacuum_vacuum_scale_factor = 0.0,
                    toast.autovacuum_vacuum_threshold = 2000)""",
            "ALTER TABLE aggregates ALTER COLUMN sums SET STORAGE EXTERNAL",
            """CREATE TABLE store_state (         -- small bookkeeping values
                key   text PRIMARY KEY,
                value bigint NOT NULL
            )""",
            """CREATE FUNCTION ldpkit_add_sums(a float8[], b float8[]) RETURNS float8[]
            LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
            BEGIN
                IF cardinality(a) <> cardinality(b) THEN
                    RAISE EXCEPTION 'aggregate holds % sums, the batch % sums',
                        cardinality(a), cardinality(b) USING ERRCODE = 'data_exception';
                END IF;
                RETURN ARRAY(SELECT x + y FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i)
                             ORDER BY i);
            END $$""",
        ),
    ),
    (
        2,
        "who defined each metric (api or config), and retirement",
        (
            # Metrics defined before count as defined through the API: never retired for
            # leaving a config file.
            "ALTER TABLE metrics ADD COLUMN origin text NOT NULL DEFAULT 'api'",
            "ALTER TABLE metrics ADD COLUMN retired_at bigint",  # unix seconds, or NULL
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

INSERT_IDS = (
    "INSERT INTO report_ids (id, bucket) SELECT id, bucket FROM unnest(%b, %b) AS t(id, bucket)"
)
# Exact, for groups holding ids stored before: the positions (1-based, in the sorted
# unique ids sent) of the ids this statement did NOT insert.
INSERT_IDS_DEDUPE = """
WITH t AS (SELECT id, bucket, pos FROM unnest(%b, %b) WITH ORDINALITY AS t(id, bucket, pos)),
ins AS (INSERT INTO report_ids (id, bucket) SELECT id, bucket FROM t ORDER BY pos
        ON CONFLICT (id) DO NOTHING RETURNING id)
SELECT coalesce(array_agg(pos), '{}') FROM t WHERE id NOT IN (SELECT id FROM ins)
"""
UPSERT_AGGREGATE = """
INSERT INTO aggregates AS a (fingerprint, bucket, n, sums) VALUES (%s, %s, %s, %b)
ON CONFLICT (fingerprint, bucket)
DO UPDATE SET n = a.n + excluded.n, sums = ldpkit_add_sums(a.sums, excluded.sums)
"""


# --- binary arrays built with numpy ------------------------------------------------------
@dataclass(frozen=True)
class _BinaryArray:
    """A PostgreSQL array in binary wire format (built by :func:`_array`)."""

    data: bytes


class _UuidArray(_BinaryArray):
    pass


class _Int8Array(_BinaryArray):
    pass


class _Float8Array(_BinaryArray):
    pass


UUID_OID, UUID_ARRAY_OID = 2950, 2951
INT8_OID, INT8_ARRAY_OID = 20, 1016
FLOAT8_OID, FLOAT8_ARRAY_OID = 701, 1022


def _array(values: npt.NDArray[Any], elem_oid: int, wire_dtype: str, size: int) -> bytes:
    """Binary array (one dimension, no NULLs) of ``values`` as ``wire_dtype`` elements."""
    n = int(values.shape[0])
    if n == 0:
        return struct.pack(">iiI", 0, 0, elem_oid)
    rec = np.empty(n, dtype=[("len", ">i4"), ("value", wire_dtype)])
    rec["len"] = size
    rec["value"] = values
    return struct.pack(">iiIii", 1, 0, elem_oid, n, 1) + rec.tobytes()


def uuid_array(ids: npt.NDArray[Any]) -> _UuidArray:
    return _UuidArray(_array(ids, UUID_OID, "V16", 16))


def int8_array(values: npt.NDArray[Any]) -> _Int8Array:
    return _Int8Array(_array(values, INT8_OID, ">i8", 8))


def float8_array(values: npt.NDArray[Any]) -> _Float8Array:
    return _Float8Array(_array(values, FLOAT8_OID, ">f8", 8))


def parse_float8_array(data: bytes) -> npt.NDArray[np.float64]:
    """The values of a binary float8[] (as ``array_send`` gives it)."""
    ndim, flags, oid = struct.unpack_from(">iiI", data)
    if ndim == 0:
        return np.zeros(0, dtype=SUMS_DTYPE)
    if ndim != 1 or flags or oid != FLOAT8_OID:
        raise StoreError(f"unexpected sums array (ndim {ndim}, flags {flags}, oid {oid})")
    (n,) = struct.unpack_from(">i", data, 12)
    rec = np.frombuffer(data, dtype=[("len", ">i4"), ("value", ">f8")], count=n, offset=20)
    if (rec["len"] != 8).any():
        raise StoreError("sums array holds NULLs")
    return rec["value"].astype(SUMS_DTYPE)


def _dumper(cls_oid: int) -> type[Dumper]:
    class ArrayDumper(Dumper):
        format = Format.BINARY
        oid = cls_oid

        def dump(self, obj: Any) -> bytes:
            data: bytes = obj.data
            return data

    return ArrayDumper


_DUMPERS: tuple[tuple[type[_BinaryArray], type[Dumper]], ...] = (
    (_UuidArray, _dumper(UUID_ARRAY_OID)),
    (_Int8Array, _dumper(INT8_ARRAY_OID)),
    (_Float8Array, _dumper(FLOAT8_ARRAY_OID)),
)


def redacted(url: str) -> str:
    """``url`` without its password, for messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://<unparsable URL>"
    host = params.get("host") or "localhost"
    port = params.get("port") or 5432
    user = f"{params['user']}@" if params.get("user") else ""
    return f"postgresql://{user}{host}:{port}/{params.get('dbname') or ''}"


# --- the group writer --------------------------------------------------------------------
@dataclass(eq=False)
class _Job:
    blocks: list[IngestBlock]
    future: asyncio.Future[IngestResult]
    reports: int
    settled: bool = False


@dataclass
class _Prepared:
    """A group made ready for the database (numpy work, off the event loop)."""

    jobs: list[_Job]  # the jobs whose reports aggregate (the others failed already)
    failed: list[tuple[_Job, BaseException]]
    deltas: list[Deltas]  # per job, assuming every report is new
    ids: npt.NDArray[Any]  # all ids of ``jobs``, in order
    bounds: list[int]  # job i's ids are ids[bounds[i]:bounds[i + 1]]
    unique_pos: npt.NDArray[np.intp]  # first occurrence of each distinct id, sorted by id
    uuids: _UuidArray = field(repr=False, default=_UuidArray(b""))
    buckets: _Int8Array = field(repr=False, default=_Int8Array(b""))

    @property
    def total(self) -> int:
        return int(self.ids.shape[0])


def _prepare(group: Sequence[_Job]) -> _Prepared:
    jobs: list[_Job] = []
    failed: list[tuple[_Job, BaseException]] = []
    deltas: list[Deltas] = []
    for job in group:
        try:
            deltas.append(aggregate_blocks(job.blocks, None))
        except Exception as exc:  # invalid reports: this batch fails alone
            failed.append((job, exc))
            continue
        jobs.append(job)
    blocks = [b for job in jobs for b in job.blocks]
    bounds = [0]
    for job in jobs:
        bounds.append(bounds[-1] + sum(b.n for b in job.blocks))
    if not blocks:
        return _Prepared(jobs, failed, deltas, np.zeros(0, ID_DTYPE), bounds, np.zeros(0, np.intp))
    ids = np.concatenate([b.ids for b in blocks]) if len(blocks) > 1 else blocks[0].ids
    buckets = np.repeat(np.array([b.bucket for b in blocks], dtype=np.int64), [b.n for b in blocks])
    # Sort by id (as PostgreSQL orders uuids: bytewise). The first 8 bytes nearly always
    # decide; equal prefixes (a repeated id) take the exact, slower path.
    hi = ids.view(">u8")[::2].astype(np.uint64)
    order = np.argsort(hi)
    sorted_hi = hi[order]
    if sorted_hi.shape[0] > 1 and (sorted_hi[1:] == sorted_hi[:-1]).any():
        _, order = np.unique(ids, return_index=True)
    prepared = _Prepared(jobs, failed, deltas, ids, bounds, order)
    prepared.uuids = uuid_array(ids[order])
    prepared.buckets = int8_array(buckets[order])
    return prepared


def _results(
    prepared: _Prepared, new: npt.NDArray[np.bool_] | None
) -> tuple[list[IngestResult], Deltas]:
    """Per-job results and the group's summed aggregates, given which reports are new
    (None: all). Re-aggregates only the jobs with some duplicate."""
    results: list[IngestResult] = []
    total: Deltas = {}
    for i, job in enumerate(prepared.jobs):
        n = prepared.bounds[i + 1] - prepared.bounds[i]
        deltas = prepared.deltas[i]
        accepted = n
        if new is not None:
            keep = new[prepared.bounds[i] : prepared.bounds[i + 1]]
            accepted = int(keep.sum())
            if accepted != n:
                deltas = aggregate_blocks(job.blocks, keep)
        by_fp: dict[str, int] = {}
        for (fp, bucket), agg in deltas.items():
            by_fp[fp] = by_fp.get(fp, 0) + agg.n
            key = (fp, bucket)
            total[key] = total[key] + agg if key in total else agg
        results.append(IngestResult(accepted, n - accepted, by_fp))
    return results, total


Outcome = tuple[_Job, IngestResult | None, BaseException | None]


class PostgresStore(Store):
    """A :class:`Store` in a PostgreSQL database, shareable by several processes."""

    def __init__(
        self,
        database_url: str,
        *,
        pool_size: int = 8,
        writers: int | None = None,
        max_group_batches: int = 256,
        max_group_reports: int = 250_000,
        connect_timeout: float = 15.0,
    ) -> None:
        if pool_size < 2:
            raise ValueError(f"pool_size must be at least 2, got {pool_size}")
        self.url = database_url
        self.pool_size = pool_size
        self.writers = writers if writers is not None else max(1, min(4, pool_size - 1))
        self.max_group_batches = max_group_batches
        self.max_group_reports = max_group_reports
        self.connect_timeout = connect_timeout
        self._pool: AsyncConnectionPool | None = None
        self._queue: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._writer_tasks: list[asyncio.Task[None]] = []
        self._listen_task: asyncio.Task[None] | None = None
        self._cpu: ThreadPoolExecutor | None = None
        self._closing = True
        self._pending_batches = 0
        self._pending_reports = 0

    def __repr__(self) -> str:
        return f"PostgresStore({redacted(self.url)!r}, pool_size={self.pool_size})"

    # --- lifecycle -----------------------------------------------------------------------
    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        for cls, dumper in _DUMPERS:
            conn.adapters.register_dumper(cls, dumper)

    async def open(self) -> None:
        if self._pool is not None:
            return
        pool = AsyncConnectionPool(
            self.url,
            min_size=min(2, self.pool_size),
            max_size=self.pool_size,
            kwargs={"autocommit": True, "application_name": "ldpkit-collector"},
            configure=self._configure,
            check=AsyncConnectionPool.check_connection,  # drop connections the server closed
            open=False,
            timeout=self.connect_timeout,
            name="ldpkit",
        )
        try:
            await pool.open(wait=True, timeout=self.connect_timeout)
        except (PoolTimeout, psycopg.Error) as exc:
            with contextlib.suppress(Exception):
                await pool.close()
            raise StoreError(f"cannot connect to {redacted(self.url)}: {exc}") from None
        try:
            async with pool.connection() as conn:
                await self._migrate(conn)
                cur = await conn.execute("SHOW synchronous_commit")
                row = await cur.fetchone()
        except BaseException:
            await pool.close()
            raise
        if row is not None and row[0] == "off":
            log.warning(
                "%s: synchronous_commit is off: a server crash may lose acknowledged batches",
                redacted(self.url),
            )
        self._pool = pool
        self._cpu = ThreadPoolExecutor(1, thread_name_prefix="ldpkit-pg-aggregate")
        self._closing = False
        self._queue = asyncio.Queue()
        self._writer_tasks = [
            asyncio.create_task(self._writer(), name=f"ldpkit-pg-writer-{i}")
            for i in range(self.writers)
        ]
        self._listen_task = asyncio.create_task(self._listen(), name="ldpkit-pg-listen")
        log.info(
            "store open: %s (pool of %d, %d writers)",
            redacted(self.url),
            self.pool_size,
            self.writers,
        )

    async def _migrate(self, conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version integer PRIMARY KEY,"
                    " description text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                )
                cur = await conn.execute("SELECT version FROM schema_migrations")
                applied = {int(r[0]) for r in await cur.fetchall()}
                newest = max(applied, default=0)
                if newest > SCHEMA_VERSION:
                    raise StoreError(
                        f"{redacted(self.url)}: schema version {newest} is newer than this "
                        f"ldpkit ({SCHEMA_VERSION}); upgrade ldpkit"
                    )
                for version, description, statements in MIGRATIONS:
                    if version in applied:
                        continue
                    for statement in statements:
                        await conn.execute(statement)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, description) VALUES (%s, %s)",
                        (version, description),
                    )
                    log.info("schema migration %d applied: %s", version, description)
        except psycopg.Error as exc:
            raise StoreError(f"{redacted(self.url)}: schema migration failed: {exc}") from None

    async def close(self) -> None:
        if self._pool is None:
            return
        self._closing = True
        for _ in self._writer_tasks:
            self._queue.put_nowait(None)  # after every job already queued
        await asyncio.gather(*self._writer_tasks, return_exceptions=True)
        self._writer_tasks = []
        if self._listen_task is not None:
            self._listen_task.cancel()
            with contextlib.suppress(BaseException):
                await self._listen_task
            self._listen_task = None
        pool, self._pool = self._pool, None
        await pool.close()
        if self._cpu is not None:
            self._cpu.shutdown(wait=True)
            self._cpu = None
        log.info("store closed: %s", redacted(self.url))

    # --- catalog notifications -----------------------------------------------------------
    async def _listen(self) -> None:
        """LISTEN for catalog changes made by any process; reconnect with backoff."""
        delay = 1.0
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, application_name="ldpkit-collector-listen"
                )
                async with conn:
                    await conn.execute(f"LISTEN {CATALOG_CHANNEL}")
                    delay = 1.0
                    self._catalog_changed()  # missed while not listening?
                    async for _ in conn.notifies():
                        self._catalog_changed()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("catalog notifications interrupted (%s); retrying in %gs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    def _catalog_changed(self) -> None:
        listener = self.catalog_listener
        if listener is not None:
            try:
                listener()
            except Exception:
                log.exception("catalog listener failed")

    # --- ingest --------------------------------------------------------------------------
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
        if self._closing:
            raise StoreClosed("the store is closed")
        future: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        self._pending_batches += 1
        self._pending_reports += total
        self._queue.put_nowait(_Job(blocks, future, total))
        return await future

    async def _writer(self) -> None:
        queue = self._queue
        while True:
            job = await queue.get()
            if job is None:
                return
            group = [job]
            reports = job.reports
            stop = False
            while len(group) < self.max_group_batches and reports < self.max_group_reports:
                try:
                    nxt = queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                if nxt is None:
                    stop = True
                    break
                group.append(nxt)
                reports += nxt.reports
            try:
                await self._run_group(group)
            except BaseException as exc:  # never leave a batch without an answer
                error = exc if isinstance(exc, StoreError) else StoreError(repr(exc))
                self._settle([(j, None, error) for j in group])
                if isinstance(exc, asyncio.CancelledError):
                    raise
            if stop:
                return

    def _settle(self, outcomes: list[Outcome]) -> None:
        for job, result, exc in outcomes:
            if job.settled:
                continue
            job.settled = True
            self._pending_batches -= 1
            self._pending_reports -= job.reports
            if job.future.done():
                continue
            if exc is not None:
                job.future.set_exception(exc)
            else:
                assert result is not None
                job.future.set_result(result)

    async def _run_group(self, group: list[_Job]) -> None:
        started = time.perf_counter()
        prepared = await asyncio.get_running_loop().run_in_executor(self._cpu, _prepare, group)
        outcomes: list[Outcome] = [
            (job, None, exc if isinstance(exc, StoreError | ValueError) else StoreError(str(exc)))
            for job, exc in prepared.failed
        ]
        if prepared.jobs:
            try:
                results = await self._store_group(prepared)
            except (psycopg.Error, PoolTimeout) as exc:
                log.error("store transaction failed (%d batches not stored): %s", len(group), exc)
                error = StoreError(f"{type(exc).__name__}: {exc}")
                outcomes += [(job, None, error) for job in prepared.jobs]
            else:
                outcomes += list(zip(prepared.jobs, results, [None] * len(results), strict=True))
        elapsed = time.perf_counter() - started
        listener = self.commit_listener
        if listener is not None:
            with contextlib.suppress(Exception):
                listener(elapsed, len(group), sum(j.reports for j in group))
        self._settle(outcomes)

    async def _store_group(self, prepared: _Prepared) -> list[IngestResult]:
        assert self._pool is not None
        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                async with self._pool.connection() as conn:
                    return await self._transaction(conn, prepared)
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure) as exc:
                if attempt == DEADLOCK_RETRIES:
                    raise
                log.warning("group transaction retried after: %s", exc)
        raise AssertionError("unreachable")

    async def _transaction(
        self, conn: psycopg.AsyncConnection[Any], prepared: _Prepared
    ) -> list[IngestResult]:
        unique = int(prepared.unique_pos.shape[0])
        if unique == prepared.total:
            # Common case: no id repeats in the group; try the fast plain insert.
            try:
                async with conn.transaction():
                    await conn.execute(INSERT_IDS, (prepared.uuids, prepared.buckets))
                    results, deltas = _results(prepared, None)
                    await self._upsert(conn, deltas)
                return results
            except pg_errors.UniqueViolation:
                pass  # some id is stored already: the exact path below
        async with conn.transaction():
            cur = await conn.execute(INSERT_IDS_DEDUPE, (prepared.uuids, prepared.buckets))
            row = await cur.fetchone()
            assert row is not None
            positions = np.asarray(row[0], dtype=np.intp) - 1
            existing = prepared.ids[prepared.unique_pos[positions]]
            new = new_report_mask(prepared.ids, existing)
            results, deltas = await asyncio.get_running_loop().run_in_executor(
                self._cpu, _results, prepared, new
            )
            await self._upsert(conn, deltas)
        return results

    @staticmethod
    async def _upsert(conn: psycopg.AsyncConnection[Any], deltas: Deltas) -> None:
        if not deltas:
            return
        rows = [
            (fp, bucket, deltas[fp, bucket].n, float8_array(deltas[fp, bucket].sums))
            for fp, bucket in sorted(deltas)  # one lock order for every transaction
        ]
        async with conn.cursor() as cur:
            await cur.executemany(UPSERT_AGGREGATE, rows)

    # --- catalog -------------------------------------------------------------------------
    def _live_pool(self) -> AsyncConnectionPool:
        if self._pool is None or self._closing:
            raise StoreClosed("the store is closed")
        return self._pool

    async def put_metric(
        self, definition: MetricDefinition, *, origin: Origin = Origin.API
    ) -> PutOutcome:
        fp = definition.fingerprint
        name = definition.name
        text = definition_json(definition)
        try:
            async with self._live_pool().connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (CATALOG_LOCK,))
                cur = await conn.execute(
                    "SELECT fingerprint, origin, retired_at IS NOT NULL FROM metrics "
                    "WHERE name = %s",
                    (name,),
                )
                current = await cur.fetchone()
                retired = current is not None and bool(current[2])
                if retired and origin is Origin.CONFIG:
                    return PutOutcome.RETIRED
                cur = await conn.execute(
                    "SELECT definition FROM metric_versions WHERE fingerprint = %s", (fp,)
                )
                version = await cur.fetchone()
                if version is None:
                    await conn.execute(
                        "INSERT INTO metric_versions (fingerprint, name, definition) "
                        "VALUES (%s, %s, %s)",
                        (fp, name, text),
                    )
                elif version[0] != text:
                    await conn.execute(
                        "UPDATE metric_versions SET definition = %s WHERE fingerprint = %s",
                        (text, fp),
                    )
                outcome = put_outcome(
                    current[0] if current is not None else None,
                    fp,
                    version[0] if version is not None else None,
                    text,
                    retired,
                )
                if outcome is not PutOutcome.UNCHANGED or current is None or current[1] != origin:
                    await conn.execute(
                        "INSERT INTO metrics (name, fingerprint, origin, retired_at) "
                        "VALUES (%s, %s, %s, NULL) ON CONFLICT (name) DO UPDATE SET "
                        "fingerprint = excluded.fingerprint, origin = excluded.origin, "
                        "retired_at = NULL",
                        (name, fp, origin.value),
                    )
                if outcome is not PutOutcome.UNCHANGED:
                    await conn.execute("SELECT pg_notify(%s, %s)", (CATALOG_CHANNEL, name))
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None
        return outcome

    async def retire_metric(self, name: str) -> bool | None:
        try:
            async with self._live_pool().connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (CATALOG_LOCK,))
                cur = await conn.execute(
                    "SELECT retired_at IS NOT NULL FROM metrics WHERE name = %s", (name,)
                )
                row = await cur.fetchone()
                if row is None:
                    return None
                if row[0]:
                    return False
                await conn.execute(
                    "UPDATE metrics SET retired_at = %s WHERE name = %s", (int(time.time()), name)
                )
                await conn.execute("SELECT pg_notify(%s, %s)", (CATALOG_CHANNEL, name))
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None
        return True

    async def load_catalog(self) -> Catalog:
        try:
            async with self._live_pool().connection() as conn, conn.transaction():
                # One snapshot for both tables.
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur = await conn.execute(
                    "SELECT fingerprint, name, definition FROM metric_versions ORDER BY seq"
                )
                versions = await cur.fetchall()
                cur = await conn.execute(
                    "SELECT name, fingerprint, origin, retired_at FROM metrics"
                )
                current = await cur.fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None
        return build_catalog(versions, current)

    async def find_versions(self, fingerprints: Sequence[str]) -> list[tuple[str, str, str]]:
        wanted = list(fingerprints)
        if not wanted:
            return []
        try:
            async with self._live_pool().connection() as conn:
                cur = await conn.execute(
                    "SELECT fingerprint, name, definition FROM metric_versions "
                    "WHERE fingerprint = ANY(%s)",
                    (wanted,),
                )
                rows = await cur.fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None
        return [(str(fp), str(name), str(text)) for fp, name, text in rows]

    # --- reads ---------------------------------------------------------------------------
    async def ping(self) -> None:
        try:
            async with self._live_pool().connection() as conn:
                await conn.execute("SELECT 1")
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None

    async def aggregates(
        self, fingerprint: str, stats_size: int, start: int | None, end: int | None
    ) -> list[BucketAggregate]:
        lo = MIN_BUCKET if start is None else start
        hi = MAX_BUCKET if end is None else end
        try:
            async with self._live_pool().connection() as conn:
                cur = conn.cursor(binary=True)
                await cur.execute(
                    "SELECT bucket, n, array_send(sums) FROM aggregates "
                    "WHERE fingerprint = %s AND bucket >= %s AND bucket < %s ORDER BY bucket",
                    (fingerprint, lo, hi),
                )
                rows = await cur.fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None
        out = []
        for bucket, n, blob in rows:
            sums = parse_float8_array(bytes(blob))
            if sums.size != stats_size:
                raise StoreError(
                    f"aggregate of version {fingerprint} bucket {bucket} holds {sums.size} "
                    f"sums, the mechanism keeps {stats_size}"
                )
            out.append(BucketAggregate(int(bucket), Aggregate(int(n), sums)))
        return out

    async def probe_write(self) -> None:
        try:
            async with self._live_pool().connection() as conn:
                await conn.execute(
                    "INSERT INTO store_state (key, value) VALUES (%s, %s) ON CONFLICT (key) "
                    "DO UPDATE SET value = excluded.value",
                    (PROBE_KEY, int(time.time())),
                )
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None

    async def report_count(self) -> int:
        try:
            async with self._live_pool().connection() as conn:
                cur = await conn.execute("SELECT count(*) FROM report_ids")
                row = await cur.fetchone()
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None
        assert row is not None
        return int(row[0])

    # --- pruning -------------------------------------------------------------------------
    async def pruned_before(self) -> int | None:
        try:
            async with self._live_pool().connection() as conn:
                cur = await conn.execute(
                    "SELECT value FROM store_state WHERE key = %s", (PRUNED_KEY,)
                )
                row = await cur.fetchone()
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None
        return None if row is None else int(row[0])

    async def prune_report_ids(self, before_bucket: int) -> int:
        """Delete ids of buckets ``< before_bucket`` in short transactions, one range of
        ``PRUNE_CHUNK_PAGES`` heap pages (a TID range scan) each. One process prunes at a
        time (``pg_try_advisory_lock``); the others return 0 at once, as do later calls
        once the cutoff they ask for is done (``store_state``)."""
        deleted = 0
        try:
            async with self._live_pool().connection() as conn:
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (PRUNE_LOCK,))
                row = await cur.fetchone()
                if row is None or not row[0]:
                    return 0  # another process is pruning
                try:
                    cur = await conn.execute(
                        "SELECT value FROM store_state WHERE key = %s", (PRUNED_KEY,)
                    )
                    done = await cur.fetchone()
                    if done is not None and int(done[0]) >= before_bucket:
                        return 0
                    cur = await conn.execute(
                        "SELECT pg_relation_size('report_ids') / current_setting('block_size')::int"
                    )
                    row = await cur.fetchone()
                    pages = int(row[0]) if row is not None else 0
                    for first in range(0, pages + 1, PRUNE_CHUNK_PAGES):
                        cur = await conn.execute(
                            "DELETE FROM report_ids WHERE ctid >= %s::tid AND ctid < %s::tid "
                            "AND bucket < %s",
                            (f"({first},0)", f"({first + PRUNE_CHUNK_PAGES},0)", before_bucket),
                        )
                        deleted += max(cur.rowcount, 0)
                    await conn.execute(
                        "INSERT INTO store_state (key, value) VALUES (%s, %s) "
                        "ON CONFLICT (key) DO UPDATE SET value = greatest(store_state.value, "
                        "excluded.value)",
                        (PRUNED_KEY, before_bucket),
                    )
                finally:
                    await conn.execute("SELECT pg_advisory_unlock(%s)", (PRUNE_LOCK,))
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None
        if deleted:
            log.info("pruned %d report ids of buckets before %d", deleted, before_bucket)
        return deleted
