"""The client's state on the device: one SQLite database and one secret, in ``state_dir``.

::

    state_dir/            mode 0700
      device.key          32 random bytes (os.urandom), mode 0600: the memo secret
      client.sqlite3      mode 0600, WAL journal
        outbox            perturbed reports waiting for the collector (never a raw value)
        ledger            epsilon spent per (metric | "*" for the total, period, window)
        memo              HMAC tags of values reported in the current memo windows
        definitions       the last GET /v1/metrics body and its ETag
        meta              counters (outbox rows, kept by triggers)

Durability. Every write is one transaction in the WAL. Reports are committed with
``synchronous=NORMAL``: the commit is written to the WAL (in the OS page cache) before
``report()`` returns, so it survives a crash of the app, but not necessarily a power
loss or kernel crash. Before any batch leaves the device, :meth:`Store.make_durable`
commits with ``synchronous=FULL``, which fsyncs the WAL and with it every earlier
transaction: a report that was sent, its budget spend and its memo tag are on stable
storage first. A power loss can therefore only lose reports that never left the device
(whose privacy cost was never paid). ``durable_reports=True`` fsyncs every report instead.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ..errors import LdpkitError
from .core import OutboxRow

SECRET_FILE = "device.key"
DATABASE_FILE = "client.sqlite3"
SECRET_SIZE = 32
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (key, value) VALUES ('outbox_rows', 0);
INSERT OR IGNORE INTO meta (key, value) VALUES ('syncs', 0);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    report_id BLOB NOT NULL,
    metric TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    report BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS outbox_count_insert AFTER INSERT ON outbox BEGIN
    UPDATE meta SET value = value + 1 WHERE key = 'outbox_rows';
END;
CREATE TRIGGER IF NOT EXISTS outbox_count_delete AFTER DELETE ON outbox BEGIN
    UPDATE meta SET value = value - 1 WHERE key = 'outbox_rows';
END;
CREATE TABLE IF NOT EXISTS ledger (
    scope TEXT NOT NULL,
    period TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    window_end INTEGER NOT NULL,
    spent REAL NOT NULL,
    PRIMARY KEY (scope, period, window_start)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memo (
    tag BLOB PRIMARY KEY,
    window_end INTEGER NOT NULL,
    last_bucket INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS definitions (
    source TEXT PRIMARY KEY,
    etag TEXT,
    body BLOB NOT NULL,
    fetched_at REAL NOT NULL
) WITHOUT ROWID;
"""

LEDGER_KEEP_SECONDS = 8 * 86400
"""Ledger rows are kept this long after their window ends (for inspection), then pruned."""


class StateError(LdpkitError):
    """The state directory cannot be used (permissions, corrupt secret, newer schema)."""


def prepare_state_dir(path: str | os.PathLike[str]) -> Path:
    """Expand ``~``, create the directory (and parents) and make it private (0700)."""
    directory = Path(os.path.expanduser(os.fspath(path))).resolve()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if stat.S_IMODE(directory.stat().st_mode) != 0o700:
            os.chmod(directory, 0o700)
    except OSError as exc:
        raise StateError(f"cannot use state_dir {directory}: {exc}") from exc
    if not directory.is_dir():
        raise StateError(f"state_dir {directory} is not a directory")
    return directory


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def load_or_create_secret(directory: Path) -> bytes:
    """The device secret: created once from os.urandom (mode 0600), then read back."""
    path = directory / SECRET_FILE
    for _ in range(50):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            data = path.read_bytes()
            if len(data) == SECRET_SIZE:
                if stat.S_IMODE(path.stat().st_mode) & 0o077:
                    os.chmod(path, 0o600)
                return data
            if data:
                raise StateError(
                    f"{path} holds {len(data)} bytes, expected {SECRET_SIZE}; it is corrupt"
                ) from None
            time.sleep(0.01)  # another process is writing it right now
            continue
        except OSError as exc:
            raise StateError(f"cannot create the device secret {path}: {exc}") from exc
        secret = os.urandom(SECRET_SIZE)
        try:
            os.write(fd, secret)
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(directory)
        return secret
    raise StateError(f"{path} stays empty; another process may have died writing it")


class Store:
    """The SQLite state. Not thread-safe by itself: the caller serializes access (one
    connection, the reporter's lock). Several processes may share a state_dir: every
    read-modify-write runs in a ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, directory: Path, *, durable_reports: bool = False) -> None:
        self.path = directory / DATABASE_FILE
        if not self.path.exists():
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        self.durable_reports = durable_reports
        try:
            self.db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(f"PRAGMA synchronous={'FULL' if durable_reports else 'NORMAL'}")
            self.db.execute("PRAGMA foreign_keys=OFF")
            version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise StateError(
                    f"{self.path} has schema version {version}, newer than this client's "
                    f"{SCHEMA_VERSION}; upgrade ldpkit"
                )
            self.db.executescript(
                f"BEGIN IMMEDIATE;{_SCHEMA}PRAGMA user_version={SCHEMA_VERSION};COMMIT;"
            )
        except sqlite3.Error as exc:
            raise StateError(f"cannot open the client database {self.path}: {exc}") from exc
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.chmod(f"{self.path}{suffix}", 0o600)
        self._closed = False

    # --- transactions ---------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any exception)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def make_durable(self) -> None:
        """fsync the WAL: every committed transaction so far survives a power loss."""
        if self.durable_reports:
            return
        self.db.execute("PRAGMA synchronous=FULL")
        try:
            with self.transaction() as db:
                db.execute("UPDATE meta SET value = value + 1 WHERE key = 'syncs'")
        finally:
            self.db.execute("PRAGMA synchronous=NORMAL")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(sqlite3.Error):
                self.db.close()

    # --- outbox ---------------------------------------------------------------------
    def outbox_rows(self) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'outbox_rows'").fetchone()
        return int(row[0])

    def insert_report(
        self, report_id: bytes, metric: str, fingerprint: str, bucket: int, report: bytes
    ) -> int:
        cur = self.db.execute(
            "INSERT INTO outbox (report_id, metric, fingerprint, bucket, report) "
            "VALUES (?, ?, ?, ?, ?)",
            (report_id, metric, fingerprint, bucket, report),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def insert_reports(self, rows: Iterable[tuple[bytes, str, str, int, bytes]]) -> None:
        self.db.executemany(
            "INSERT INTO outbox (report_id, metric, fingerprint, bucket, report) "
            "VALUES (?, ?, ?, ?, ?)",
            rows,
        )

    def max_seq(self) -> int:
        row = self.db.execute("SELECT max(seq) FROM outbox").fetchone()
        return int(row[0]) if row[0] is not None else 0

    def oldest(self, limit: int, *, after: int = 0, upto: int | None = None) -> list[OutboxRow]:
        """Up to ``limit`` queued rows with ``after < seq <= upto``, oldest first."""
        rows = self.db.execute(
            "SELECT seq, report_id, metric, fingerprint, bucket, report FROM outbox "
            "WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
            (after, upto if upto is not None else 2**62, limit),
        ).fetchall()
        return [OutboxRow(int(s), bytes(i), m, f, int(b), bytes(r)) for s, i, m, f, b, r in rows]

    def delete(self, seqs: Sequence[int]) -> int:
        """Remove rows; returns how many were still there."""
        if not seqs:
            return 0
        with self.transaction() as db:
            before = self.outbox_rows()
            db.executemany("DELETE FROM outbox WHERE seq = ?", ((s,) for s in seqs))
            return before - self.outbox_rows()

    # --- ledger ---------------------------------------------------------------------
    def spent(self, scope: str, period: str, window_start: int) -> float:
        row = self.db.execute(
            "SELECT spent FROM ledger WHERE scope = ? AND period = ? AND window_start = ?",
            (scope, period, window_start),
        ).fetchone()
        return float(row[0]) if row is not None else 0.0

    def spend(
        self, scope: str, period: str, window_start: int, window_end: int, epsilon: float
    ) -> None:
        self.db.execute(
            "INSERT INTO ledger (scope, period, window_start, window_end, spent) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (scope, period, window_start) "
            "DO UPDATE SET spent = spent + excluded.spent",
            (scope, period, window_start, window_end, epsilon),
        )

    # --- memo -----------------------------------------------------------------------
    def memo_last_bucket(self, tag: bytes) -> int | None:
        row = self.db.execute("SELECT last_bucket FROM memo WHERE tag = ?", (tag,)).fetchone()
        return int(row[0]) if row is not None else None

    def memo_put(self, tag: bytes, window_end: int, bucket: int) -> None:
        self.db.execute(
            "INSERT INTO memo (tag, window_end, last_bucket) VALUES (?, ?, ?) "
            "ON CONFLICT (tag) DO UPDATE SET last_bucket = excluded.last_bucket",
            (tag, window_end, bucket),
        )

    def prune(self, now: float) -> None:
        """Forget memo tags of ended windows and old ledger rows."""
        with self.transaction() as db:
            db.execute("DELETE FROM memo WHERE window_end <= ?", (int(now),))
            db.execute(
                "DELETE FROM ledger WHERE window_end <= ?", (int(now) - LEDGER_KEEP_SECONDS,)
            )

    # --- definitions ----------------------------------------------------------------
    def load_definitions(self, source: str) -> tuple[str | None, bytes, float] | None:
        row = self.db.execute(
            "SELECT etag, body, fetched_at FROM definitions WHERE source = ?", (source,)
        ).fetchone()
        if row is None:
            return None
        return row[0], bytes(row[1]), float(row[2])

    def save_definitions(
        self, source: str, etag: str | None, body: bytes, fetched_at: float
    ) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO definitions (source, etag, body, fetched_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (source) DO UPDATE SET etag = excluded.etag, "
                "body = excluded.body, fetched_at = excluded.fetched_at",
                (source, etag, body, fetched_at),
            )

    def touch_definitions(self, source: str, fetched_at: float) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE definitions SET fetched_at = ? WHERE source = ?", (fetched_at, source)
            )
