"""PostgreSQL store: one database shared by any number of collector processes.

Several ``ldpkit serve`` processes behind a load balancer may use one database; none of
them holds state the others need. Every batch is deduplicated and counted by the
database itself, and every estimate is read from it (no process caches aggregates).

**Driver.** psycopg 3 (``psycopg[binary,pool]``): one well-kept driver over libpq with a
sync API (used by the shared group-commit writer threads of
:mod:`ldpkit.collector.group_commit` and the reader threads, through
``psycopg_pool.ConnectionPool``) and an async one (LISTEN/NOTIFY), typed, pipelined
``executemany``, and pluggable binary dumpers: v1 report ids and aggregate sums go to the
server as binary arrays built by numpy in one piece, with no Python object per report.

**Schema** (versioned migrations in :data:`MIGRATIONS`, recorded in
``schema_migrations`` and applied at start under ``pg_advisory_xact_lock``, so several
processes starting at once on an empty database are safe; a database migrated by a newer
ldpkit is refused):

- ``metric_versions``, ``metrics``: every definition ever given and the current one per
  name (as in SQLite). Catalog writes take an advisory lock and send
  ``NOTIFY ldpkit_catalog``; each process LISTENs and reloads its catalog (and the
  collector reloads periodically anyway, in case a notification is missed);
- ``batches (id uuid PRIMARY KEY, bucket bigint, blocks bytea, counts bytea)``: one row
  per sealed batch counted (the bitmap of its blocks counted and their reports);
  ``report_ids (id uuid PRIMARY KEY, bucket bigint)`` for v1 batches;
- ``partials``: appended by every ingest transaction (an identity key, no row shared);
- ``aggregates (fingerprint, bucket, n bigint, sums float8[])``, written only by
  compaction, which holds ``pg_try_advisory_xact_lock`` (one process folds at a time) and
  deletes the partial rows it folds in the same transaction;
- ``held``: reports screening held apart (an identity key; their day, version, bucket,
  n, packed sums, test, reason, origin, and the day they were released), never counted
  until released (a partial row, in the transaction that marks the record).

**Concurrency.** Ingest transactions of any process insert rows and update none, so they
never wait on each other, except for the same batch id (a retry racing its original:
``ON CONFLICT DO NOTHING`` waits for the other transaction, then skips the row, which
makes the batch a duplicate). Batch ids, then v1 report ids, are inserted sorted by value,
so two transactions cannot wait on each other in a cycle (a deadlock the server reports
anyway is retried).

**Durability.** The answer comes after COMMIT; with the server's default
``synchronous_commit = on`` an acknowledged batch is on disk (a warning is logged at
open when the server has it ``off``). See docs/deployment.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import errors as pg_errors
from psycopg.abc import AdaptContext
from psycopg.adapt import Dumper
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import Format
from psycopg_pool import ConnectionPool, PoolTimeout

from .group_commit import PRUNED_KEY, Folded, GroupCommitStore, PartialRow
from .store import SUMS_DTYPE, StoreClosed, StoreError

log = logging.getLogger("ldpkit.collector.store")

T = TypeVar("T")

CATALOG_CHANNEL = "ldpkit_catalog"
# Advisory lock keys (one bigint namespace per database): "ldpk" then a small number.
MIGRATION_LOCK = 0x6C64_706B_0000_0001
CATALOG_LOCK = 0x6C64_706B_0000_0002
PRUNE_LOCK = 0x6C64_706B_0000_0003
COMPACT_LOCK = 0x6C64_706B_0000_0004
PRUNE_CHUNK_PAGES = 2048  # 16 MiB of ids per DELETE

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
    (
        3,
        "sealed batch ids, append-only partial aggregates",
        (
            """CREATE TABLE batches (            -- sealed batches counted: no time, no address
                id     uuid PRIMARY KEY,         -- the 16-byte batch id
                bucket bigint NOT NULL,          -- latest bucket it counted, for pruning
                blocks bytea NOT NULL            -- bitmap of the block indexes counted
            )""",
            """CREATE TABLE partials (           -- appended by ingest, folded by compaction
                seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                fingerprint text NOT NULL,
                bucket      bigint NOT NULL,
                n           bigint NOT NULL,
                sums        bytea NOT NULL       -- store.pack_sums
            ) WITH (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 5000,
                    toast.autovacuum_vacuum_scale_factor = 0.0,
                    toast.autovacuum_vacuum_threshold = 5000)""",
            # The shared catalog code numbers versions itself (under the catalog lock).
            "ALTER TABLE metric_versions ALTER COLUMN seq DROP IDENTITY IF EXISTS",
        ),
    ),
    (
        4,
        "held records: reports screening held apart, counted once released",
        (
            """CREATE TABLE held (                -- no finer time than the day, no address
                id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                day         bigint NOT NULL,     -- the UTC day it was held (unix seconds)
                fingerprint text NOT NULL,
                bucket      bigint NOT NULL,
                n           bigint NOT NULL,
                sums        bytea NOT NULL,      -- store.pack_sums
                test        text NOT NULL,       -- the screening test that failed
                reason      text NOT NULL,
                origin      text NOT NULL,       -- 'batch' or 'sender'
                released    bigint               -- the UTC day it was released, or NULL
            )""",
        ),
    ),
    (
        5,
        "maintained estimates, and the partial rows folded into each aggregate",
        (
            # The data's mark of a bucket: every change adds a partial row (BucketAggregate).
            "ALTER TABLE aggregates ADD COLUMN parts bigint NOT NULL DEFAULT 0",
            """CREATE TABLE estimates (           -- maintained estimates (collector/results.py)
                fingerprint text NOT NULL,
                lo          bigint NOT NULL,     -- over the buckets that start in [lo, hi)
                hi          bigint NOT NULL,
                n           bigint NOT NULL,     -- the data it was computed from (-1: not yet)
                parts       bigint NOT NULL,
                buckets     bigint NOT NULL,
                computed_at float8 NOT NULL,     -- unix seconds
                seconds     float8 NOT NULL,     -- CPU seconds the computation took
                result      bytea,               -- the pickled result (made by ldpkit)
                error       text,                -- why the computation failed, or NULL
                claim_owner text,                -- the process computing it, until claim_until
                claim_until float8,
                PRIMARY KEY (fingerprint, lo, hi)
            )""",
            "ALTER TABLE estimates ALTER COLUMN result SET STORAGE EXTERNAL",
        ),
    ),
    (
        6,
        "the reports each sealed batch counted per block (a replay claims no more)",
        # uint32 LE per block index; NULL for the batches stored before.
        ("ALTER TABLE batches ADD COLUMN counts bytea",),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

# v1 report ids: the positions (1-based, in the sorted unique ids sent) of the ids this
# statement did NOT insert (stored before).
INSERT_IDS_DEDUPE = """
WITH t AS (SELECT id, bucket, pos FROM unnest(%b, %b) WITH ORDINALITY AS t(id, bucket, pos)),
ins AS (INSERT INTO report_ids (id, bucket) SELECT id, bucket FROM t ORDER BY pos
        ON CONFLICT (id) DO NOTHING RETURNING id)
SELECT coalesce(array_agg(pos), '{}') FROM t WHERE id NOT IN (SELECT id FROM ins)
"""
CLAIM_BATCHES = """
INSERT INTO batches (id, bucket, blocks, counts)
SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::bytea[], %s::bytea[])
    AS t(id, bucket, blocks, counts) ORDER BY id
ON CONFLICT (id) DO NOTHING RETURNING id
"""
TAKE_PARTIALS = """
DELETE FROM partials WHERE seq IN (SELECT seq FROM partials ORDER BY seq LIMIT %s)
RETURNING seq, fingerprint, bucket, n, sums
"""
UPSERT_AGGREGATE = """
INSERT INTO aggregates AS a (fingerprint, bucket, n, sums, parts) VALUES (%s, %s, %s, %b, %s)
ON CONFLICT (fingerprint, bucket)
DO UPDATE SET n = a.n + excluded.n, sums = ldpkit_add_sums(a.sums, excluded.sums),
    parts = a.parts + excluded.parts
"""


FLOAT8_OID = 701


@dataclass(frozen=True)
class _BinaryArray:
    """A PostgreSQL array (one dimension, no NULLs) in binary wire format, built by numpy
    in one piece; a subclass names its array type's oid and its element's oid and dtype."""

    data: bytes
    oid: ClassVar[int]
    element: ClassVar[tuple[int, str]]

    @classmethod
    def of(cls, values: npt.NDArray[Any]) -> Self:
        elem_oid, wire_dtype = cls.element
        n = int(values.shape[0])
        if n == 0:
            return cls(struct.pack(">iiI", 0, 0, elem_oid))
        rec = np.empty(n, dtype=[("len", ">i4"), ("value", wire_dtype)])
        rec["len"] = np.dtype(wire_dtype).itemsize
        rec["value"] = values
        return cls(struct.pack(">iiIii", 1, 0, elem_oid, n, 1) + rec.tobytes())


class _UuidArray(_BinaryArray):
    oid, element = 2951, (2950, "V16")  # uuid[], uuid


class _Int8Array(_BinaryArray):
    oid, element = 1016, (20, ">i8")  # int8[], int8


class _Float8Array(_BinaryArray):
    oid, element = 1022, (FLOAT8_OID, ">f8")  # float8[], float8


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


class _ArrayDumper(Dumper):
    format = Format.BINARY

    def __init__(self, cls: type, context: AdaptContext | None = None) -> None:
        super().__init__(cls, context)
        if issubclass(cls, _BinaryArray):
            self.oid = cls.oid

    def dump(self, obj: Any) -> bytes:
        return bytes(obj.data)


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


class PostgresStore(GroupCommitStore):
    """A :class:`Store` in a PostgreSQL database, shareable by several processes."""

    sums_column = "array_send(sums)"
    snapshot_begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

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
        super().__init__(
            max_group_batches=max_group_batches,
            max_group_reports=max_group_reports,
            writers=writers if writers is not None else max(1, min(4, pool_size - 1)),
        )
        self.url = database_url
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self._pool: ConnectionPool | None = None
        self._listen_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"PostgresStore({redacted(self.url)!r}, pool_size={self.pool_size})"

    @staticmethod
    def _configure(conn: psycopg.Connection[Any]) -> None:
        for cls in (_UuidArray, _Int8Array, _Float8Array):
            conn.adapters.register_dumper(cls, _ArrayDumper)

    def _connect_writer(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(
                self.url,
                autocommit=True,
                application_name="ldpkit-collector",
                connect_timeout=max(1, round(self.connect_timeout)),
            )
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {redacted(self.url)}: {exc}") from None
        self._configure(conn)
        return conn

    def _writer_usable(self, conn: psycopg.Connection[Any]) -> bool:
        return not conn.closed and not conn.broken

    async def open(self) -> None:
        if self._pool is not None:
            return
        readers = max(1, self.pool_size - self.writers)
        pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=readers,
            kwargs={"autocommit": True, "application_name": "ldpkit-collector"},
            configure=self._configure,
            check=ConnectionPool.check_connection,  # drop connections the server closed
            open=False,
            timeout=self.connect_timeout,
            name="ldpkit",
        )
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._open_pool, pool)
        except BaseException:
            await loop.run_in_executor(None, pool.close)
            raise
        self._pool = pool
        self._reader = ThreadPoolExecutor(readers, thread_name_prefix="ldpkit-pg-reader")
        try:
            await self._start_writers()
        except BaseException:
            await self.close()
            raise
        self._listen_task = asyncio.create_task(self._listen(), name="ldpkit-pg-listen")
        log.info(
            "store open: %s (pool of %d, %d writers)",
            redacted(self.url),
            self.pool_size,
            self.writers,
        )

    def _open_pool(self, pool: ConnectionPool) -> None:
        try:
            pool.open(wait=True, timeout=self.connect_timeout)
        except (PoolTimeout, psycopg.Error) as exc:
            raise StoreError(f"cannot connect to {redacted(self.url)}: {exc}") from None
        with pool.connection() as conn:
            self._migrate(conn)
            row = conn.execute("SHOW synchronous_commit").fetchone()
        if row is not None and row[0] == "off":
            log.warning(
                "%s: synchronous_commit is off: a server crash may lose acknowledged batches",
                redacted(self.url),
            )

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version integer PRIMARY KEY,"
                    " description text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                )
                rows = conn.execute("SELECT version FROM schema_migrations").fetchall()
                applied = {int(r[0]) for r in rows}
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
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, description) VALUES (%s, %s)",
                        (version, description),
                    )
                    log.info("schema migration %d applied: %s", version, description)
        except psycopg.Error as exc:
            raise StoreError(f"{redacted(self.url)}: schema migration failed: {exc}") from None

    async def close(self) -> None:
        if self._pool is None:
            return
        await self._stop_writers()
        if self._listen_task is not None:
            self._listen_task.cancel()
            with contextlib.suppress(BaseException):
                await self._listen_task
            self._listen_task = None
        pool, self._pool = self._pool, None
        reader, self._reader = self._reader, None
        loop = asyncio.get_running_loop()
        if reader is not None:
            await loop.run_in_executor(None, lambda: reader.shutdown(wait=True))
        await loop.run_in_executor(None, pool.close)
        log.info("store closed: %s", redacted(self.url))

    async def _read(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        pool, reader = self._pool, self._reader
        if pool is None or reader is None or self._closing:
            raise StoreClosed("the store is closed")

        def run() -> T:
            with pool.connection() as conn:
                return fn(conn)

        try:
            return await asyncio.get_running_loop().run_in_executor(reader, run)
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from None

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
            except Exception as exc:  # not a CancelledError (a BaseException)
                log.warning("catalog notifications interrupted (%s); retrying in %gs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    def _catalog_changed(self) -> None:
        if (listener := self.catalog_listener) is not None:
            try:
                listener()
            except Exception:
                log.exception("catalog listener failed")

    def _x(self, conn: psycopg.Connection[Any], sql: str, params: Sequence[Any] = ()) -> Any:
        return conn.execute(sql.replace("?", "%s"), params)

    def _retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, pg_errors.DeadlockDetected | pg_errors.SerializationFailure)

    def _batch_key(self, batch_id: bytes) -> Any:
        return uuid.UUID(bytes=batch_id)

    def _claim_batches(
        self, conn: psycopg.Connection[Any], rows: list[tuple[bytes, int, bytes, bytes]]
    ) -> set[bytes]:
        ids = [uuid.UUID(bytes=r[0]) for r in rows]
        columns = ([r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
        cur = conn.execute(CLAIM_BATCHES, (ids, *columns))
        return {r[0].bytes for r in cur.fetchall()}

    def _insert_report_ids(
        self, conn: psycopg.Connection[Any], ids: npt.NDArray[Any], buckets: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_] | None:
        row = conn.execute(
            INSERT_IDS_DEDUPE, (_UuidArray.of(ids), _Int8Array.of(buckets))
        ).fetchone()
        positions = np.asarray(row[0] if row is not None else [], dtype=np.intp) - 1
        if not positions.size:
            return None
        inserted = np.ones(ids.shape[0], dtype=bool)
        inserted[positions] = False
        return inserted

    def _append_partials(self, conn: psycopg.Connection[Any], rows: list[PartialRow]) -> None:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO partials (fingerprint, bucket, n, sums) VALUES (%s, %s, %s, %s)", rows
            )

    def _take_partials(self, conn: psycopg.Connection[Any], limit: int) -> list[PartialRow]:
        row = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (COMPACT_LOCK,)).fetchone()
        if row is None or not row[0]:
            return []  # another process is compacting
        taken = sorted(conn.execute(TAKE_PARTIALS, (limit,)).fetchall())
        return [(fp, int(bucket), int(n), bytes(blob)) for _, fp, bucket, n, blob in taken]

    def _add_to_aggregates(self, conn: psycopg.Connection[Any], folded: Folded) -> None:
        rows = [
            (fp, bucket, n, _Float8Array.of(sums), parts)
            for (fp, bucket), (n, sums, parts) in sorted(folded.items())
        ]
        with conn.cursor() as cur:
            cur.executemany(UPSERT_AGGREGATE, rows)

    def _parse_compacted(self, value: Any) -> npt.NDArray[np.float64]:
        return parse_float8_array(bytes(value))

    def _lock_catalog(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (CATALOG_LOCK,))

    def _catalog_written(self, conn: psycopg.Connection[Any], name: str) -> None:
        conn.execute("SELECT pg_notify(%s, %s)", (CATALOG_CHANNEL, name))

    async def prune_report_ids(self, before_bucket: int) -> int:
        """Delete batch ids and v1 report ids of buckets ``< before_bucket`` in short
        transactions, one range of ``PRUNE_CHUNK_PAGES`` heap pages (a TID range scan)
        each. One process prunes at a time (``pg_try_advisory_lock``); the others return 0
        at once, as do later calls once the cutoff they ask for is done (``store_state``)."""

        def prune(conn: psycopg.Connection[Any]) -> int | None:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (PRUNE_LOCK,)).fetchone()
            if row is None or not row[0]:
                return None  # another process is pruning
            deleted = 0
            try:
                done = self._pruned_mark(conn)
                if done is not None and done >= before_bucket:
                    return None
                for table in ("batches", "report_ids"):
                    row = conn.execute(
                        f"SELECT pg_relation_size('{table}') / current_setting('block_size')::int"
                    ).fetchone()
                    pages = int(row[0]) if row is not None else 0
                    for first in range(0, pages + 1, PRUNE_CHUNK_PAGES):
                        cur = conn.execute(
                            f"DELETE FROM {table} WHERE ctid >= %s::tid AND ctid < %s::tid "
                            "AND bucket < %s",
                            (f"({first},0)", f"({first + PRUNE_CHUNK_PAGES},0)", before_bucket),
                        )
                        deleted += max(cur.rowcount, 0)
                # Marked here, under the pruning lock, in its own short transaction: not
                # in a writer's group, where two processes would wait on this one row.
                self._raise_state(conn, PRUNED_KEY, before_bucket)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (PRUNE_LOCK,))
            return deleted

        if (deleted := await self._read(prune)) is None:
            return 0
        if deleted:
            log.info("pruned %d batch and report ids of buckets before %d", deleted, before_bucket)
        return deleted
