"""SQLite store: WAL mode, one writer thread with group commit, one reader thread.

The group-commit writer (:mod:`ldpkit.collector.group_commit`, shared with PostgreSQL)
owns the only write connection; the reader thread's own connection reads committed data
while the writer writes (WAL). This module opens the file, keeps its schema, and supplies
the few statements that differ.

**v1 report ids** go in with ``INSERT OR IGNORE ... RETURNING id`` statements of 2048 rows
(one ``sqlite3_step`` per row returned, the GIL dropped once per chunk rather than per
row; sorted keys keep the B-tree descents in cache): the ids returned are exactly those
this transaction stored, so no savepoint (and no sub-journal of touched pages) is needed.
Sealed (v2) batches store one 16-byte id per batch instead.

**Durability.** ``synchronous=FULL`` (default) fsyncs the WAL at every commit: an
acknowledged batch survives power loss. ``NORMAL`` skips that fsync (a crash of the OS
may lose the last commits, never corrupt the file). See docs/deployment.md.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from .config import Synchronous
from .group_commit import PRUNED_KEY, Folded, GroupCommitStore, PartialRow
from .store import ID_DTYPE, SUMS_DTYPE, StoreClosed, StoreError

log = logging.getLogger("ldpkit.collector.store")

T = TypeVar("T")

SCHEMA_VERSION = 7
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
CREATE TABLE IF NOT EXISTS batches (  -- sealed batches counted: no time, no address
    id     BLOB PRIMARY KEY,          -- the 16-byte batch id
    bucket INTEGER NOT NULL,          -- the latest bucket it counted reports in, to prune
    blocks BLOB NOT NULL,             -- bitmap of the block indexes counted
    counts BLOB                       -- reports counted per block index (uint32 LE)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS report_ids (  -- v1 batches: dedupe only, no time, no address
    id     BLOB PRIMARY KEY,
    bucket INTEGER NOT NULL           -- the report's own bucket, to prune old ids
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS store_state (  -- small bookkeeping values
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS partials (  -- appended by ingest, folded by compaction
    seq         INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    bucket      INTEGER NOT NULL,
    n           INTEGER NOT NULL,
    sums        BLOB NOT NULL         -- store.pack_sums
);
CREATE TABLE IF NOT EXISTS held (     -- reports screening held apart: counted once released
    id          INTEGER PRIMARY KEY,
    day         INTEGER NOT NULL,     -- the UTC day it was held (unix seconds): no finer time
    fingerprint TEXT NOT NULL,
    bucket      INTEGER NOT NULL,
    n           INTEGER NOT NULL,
    sums        BLOB NOT NULL,        -- store.pack_sums
    test        TEXT NOT NULL,        -- the screening test that failed
    reason      TEXT NOT NULL,        -- what it saw against what honest reports allow
    origin      TEXT NOT NULL,        -- 'batch' (its own reports) or 'sender' (its sender's window)
    released    INTEGER               -- the UTC day it was released (counted), or NULL
);
CREATE TABLE IF NOT EXISTS aggregates (
    fingerprint TEXT NOT NULL,
    bucket      INTEGER NOT NULL,     -- bucket start, unix seconds UTC
    n           INTEGER NOT NULL,     -- reports
    sums        BLOB NOT NULL,        -- the mechanism's sums vector, little-endian float64
    parts       INTEGER NOT NULL DEFAULT 0,  -- partial rows folded in (store.BucketAggregate)
    PRIMARY KEY (fingerprint, bucket)
);
CREATE TABLE IF NOT EXISTS estimates (  -- maintained estimates (collector/results.py)
    fingerprint TEXT NOT NULL,
    lo          INTEGER NOT NULL,     -- over the buckets that start in [lo, hi)
    hi          INTEGER NOT NULL,
    n           INTEGER NOT NULL,     -- the data it was computed from (-1: not yet)
    parts       INTEGER NOT NULL,
    buckets     INTEGER NOT NULL,
    computed_at REAL NOT NULL,        -- unix seconds
    seconds     REAL NOT NULL,        -- CPU seconds the computation took
    result      BLOB,                 -- the pickled result (made by ldpkit), or NULL
    error       TEXT,                 -- why the computation failed (over budget), or NULL
    claim_owner TEXT,                 -- the process computing it now, until claim_until
    claim_until REAL,
    PRIMARY KEY (fingerprint, lo, hi)
);
"""

# v1 ids go in ID_CHUNK rows per statement; a short last chunk is padded with copies of
# its last row, which OR IGNORE skips (and does not return).
ID_CHUNK = 2048
INSERT_IDS_CHUNK = (
    "INSERT OR IGNORE INTO report_ids (id, bucket) VALUES "
    + ", ".join(["(?, ?)"] * ID_CHUNK)
    + " RETURNING id"
)
PAGE_SIZE = 16384  # for new files: fewer, larger B-tree pages for random-keyed ids
# Version 1 kept ids without buckets: they get the day of the migration, which is no
# earlier than their own bucket, so they are pruned no sooner than they may be.
MIGRATE_1_TO_2 = "ALTER TABLE report_ids ADD COLUMN bucket INTEGER NOT NULL DEFAULT {day};"
# Version 3 records who defined each metric and whether it is retired; metrics defined
# before count as defined through the API (never retired for leaving a config file).
MIGRATE_2_TO_3 = (
    "ALTER TABLE metrics ADD COLUMN origin TEXT NOT NULL DEFAULT 'api';"
    "ALTER TABLE metrics ADD COLUMN retired_at INTEGER;"
)
# Version 4 adds sealed batches and partial aggregates, version 5 held records, version 6
# maintained estimates: created by SCHEMA (IF NOT EXISTS). Version 6 also counts the
# partial rows folded into each aggregate (its data's mark: store.BucketAggregate.parts).
MIGRATE_5_TO_6 = "ALTER TABLE aggregates ADD COLUMN parts INTEGER NOT NULL DEFAULT 0;"
# Version 7 keeps the reports each sealed batch counted per block, so a replay of its id
# with other content claims no more duplicates than it counted (NULL: stored before).
MIGRATE_6_TO_7 = "ALTER TABLE batches ADD COLUMN counts BLOB;"
PRUNE_RANGES = 256  # one DELETE per first byte of the id, each its own writer job


class SQLiteStore(GroupCommitStore):
    """A :class:`Store` in one SQLite file (WAL mode)."""

    group_begin = "BEGIN IMMEDIATE"

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous | str = Synchronous.FULL,
        max_group_batches: int = 256,
        max_group_reports: int = 500_000,
        cache_mib: int = 256,
        wal_autocheckpoint: int = 16000,  # pages: a WAL of up to 256 MiB between checkpoints
    ) -> None:
        super().__init__(
            max_group_batches=max_group_batches, max_group_reports=max_group_reports, writers=1
        )
        self.path = Path(path)
        self.synchronous = Synchronous(synchronous.lower())  # ValueError for another
        self.cache_mib = cache_mib
        self.wal_autocheckpoint = wal_autocheckpoint
        self._reader_conn: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, synchronous={self.synchronous.upper()})"

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
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            conn.execute("PRAGMA temp_store = MEMORY")
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
        folded = {row[1] for row in conn.execute("PRAGMA table_info(aggregates)")}
        if folded and "parts" not in folded:
            migrate += MIGRATE_5_TO_6
        sealed = {row[1] for row in conn.execute("PRAGMA table_info(batches)")}
        if sealed and "counts" not in sealed:
            migrate += MIGRATE_6_TO_7
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

    def _connect_writer(self) -> sqlite3.Connection:
        try:
            conn = self._connect(writer=True)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from None
        try:
            self._create_schema(conn)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"{self.path}: {exc}") from None
            raise
        return conn

    def _close_writer(self, conn: sqlite3.Connection) -> None:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        conn.close()

    async def open(self) -> None:
        if self._threads:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the directory of {self.path}: {exc}") from None
        await self._start_writers()
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="ldpkit-sqlite-reader")
        await self.ping()
        log.info("store open: %s (WAL, synchronous=%s)", self.path, self.synchronous)

    async def close(self) -> None:
        if not self._threads or self._loop is None:
            return
        await self._stop_writers()
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

    def _x(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
        return conn.execute(sql, params)

    def _claim_batches(
        self, conn: sqlite3.Connection, rows: list[tuple[bytes, int, bytes, bytes]]
    ) -> set[bytes]:
        marks = ", ".join(["(?, ?, ?, ?)"] * len(rows))
        params = [v for row in rows for v in row]
        cur = conn.execute(
            "INSERT OR IGNORE INTO batches (id, bucket, blocks, counts) "
            f"VALUES {marks} RETURNING id",
            params,
        )
        return {bytes(r[0]) for r in cur.fetchall()}

    def _insert_report_ids(
        self, conn: sqlite3.Connection, ids: npt.NDArray[Any], buckets: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_] | None:
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
            if inserted is None:
                inserted = np.ones(n, dtype=bool)
            returned = np.frombuffer(b"".join(r[0] for r in stored), ID_DTYPE)
            inserted[i : i + m] = np.isin(ids[i : i + m], returned)
        return inserted

    def _append_partials(self, conn: sqlite3.Connection, rows: list[PartialRow]) -> None:
        conn.executemany(
            "INSERT INTO partials (fingerprint, bucket, n, sums) VALUES (?, ?, ?, ?)", rows
        )

    def _take_partials(self, conn: sqlite3.Connection, limit: int) -> list[PartialRow]:
        rows = conn.execute(
            "SELECT seq, fingerprint, bucket, n, sums FROM partials ORDER BY seq LIMIT ?", (limit,)
        ).fetchall()
        if rows:
            conn.execute("DELETE FROM partials WHERE seq <= ?", (rows[-1][0],))
        return [(fp, int(bucket), int(n), bytes(blob)) for _, fp, bucket, n, blob in rows]

    def _add_to_aggregates(self, conn: sqlite3.Connection, folded: Folded) -> None:
        for (fp, bucket), (n, sums, parts) in sorted(folded.items()):
            row = conn.execute(
                "SELECT n, sums, parts FROM aggregates WHERE fingerprint = ? AND bucket = ?",
                (fp, bucket),
            ).fetchone()
            if row is not None:
                old = self._parse_compacted(row[1])
                if old.size != sums.size:
                    raise StoreError(
                        f"aggregate of version {fp} bucket {bucket} holds {old.size} sums, "
                        f"its partial rows {sums.size}"
                    )
                sums, n, parts = old + sums, n + int(row[0]), parts + int(row[2])
            conn.execute(
                "INSERT OR REPLACE INTO aggregates (fingerprint, bucket, n, sums, parts) "
                "VALUES (?, ?, ?, ?, ?)",
                (fp, bucket, n, sums.astype(SUMS_DTYPE).tobytes(), parts),
            )

    def _parse_compacted(self, value: Any) -> npt.NDArray[np.float64]:
        return np.frombuffer(value, dtype=SUMS_DTYPE)

    async def prune_report_ids(self, before_bucket: int) -> int:
        """Delete batch ids and v1 report ids of buckets ``< before_bucket``: counted first
        on the reader, then deleted by writer jobs over ranges of ids (by first byte, about
        50,000 ids each), so batches commit in between; skipped if already done."""

        def count(conn: sqlite3.Connection) -> dict[str, int] | None:
            done = self._pruned_mark(conn)
            if done is not None and done >= before_bucket:
                return None
            return {
                table: conn.execute(
                    f"SELECT count(*) FROM {table} WHERE bucket < ?", (before_bucket,)
                ).fetchone()[0]
                for table in ("batches", "report_ids")
            }

        if (old := await self._read(count)) is None:
            return 0
        deleted = 0
        for table, found in old.items():
            ranges = max(1, min(PRUNE_RANGES, found // 50_000))
            edges = [round(256 * i / ranges) for i in range(ranges + 1)] if found else []
            for a, b in itertools.pairwise(edges):
                lo, hi = bytes([a]), bytes([b]) if b < 256 else None

                def prune(
                    conn: sqlite3.Connection, table: str = table, lo: bytes = lo, hi: Any = hi
                ) -> int:
                    where = "id >= ? AND bucket < ?" + (" AND id < ?" if hi is not None else "")
                    params: tuple[object, ...] = (lo, before_bucket) + ((hi,) if hi else ())
                    return int(conn.execute(f"DELETE FROM {table} WHERE {where}", params).rowcount)

                deleted += await self._submit(prune)
        await self._submit(lambda conn: self._raise_state(conn, PRUNED_KEY, before_bucket))
        if deleted:
            log.info("pruned %d batch and report ids of buckets before %d", deleted, before_bucket)
        return deleted
