"""The client's state on the device: one SQLite database and one secret, in ``state_dir``.

::

    state_dir/            mode 0700
      device.key          32 random bytes (os.urandom), mode 0600: the memo secret
      client.sqlite3      mode 0600, WAL journal, 1 KiB pages
        reports           one row per report made: the outbox, the ledger and the memo
        definitions       the last GET /v1/metrics body and its ETag
        meta              counters (fsyncs before sends)

One row per report holds everything the device keeps about it: the perturbed report and
its random id (the *outbox*: ``report`` is set to NULL once the collector has
acknowledged it), the epsilon it spent and the budget windows it spent it in (the
*ledger*: the sums per metric window and per total window), and the HMAC tag of its
value (the *memo*). So a report is one row appended to one table: one page written per
commit, which keeps ``report()`` fast. Rows whose report was delivered are deleted once
both of their budget windows have ended. The raw value is in no column.

The ledger sums, the memo tags and the outbox count are also kept in memory, so that
``report()`` reads nothing from SQLite. They are checked against ``PRAGMA data_version``
at the start of every transaction and reloaded when another connection (another process
on the same state_dir) has committed in between, and dropped when a transaction rolls
back.

Durability. Every write is one transaction in the WAL. Reports are committed with
``synchronous=NORMAL``: the commit is written to the WAL (in the OS page cache) before
``report()`` returns, so it survives a crash of the app, but not necessarily a power
loss or kernel crash. Before any batch leaves the device, :meth:`DeviceStore.make_durable`
commits with ``synchronous=FULL``, which fsyncs the WAL and with it every earlier
transaction: a report that was sent, its budget spend and its memo tag are on stable
storage first. A power loss can therefore only lose reports that never left the device
(whose privacy cost was never paid). ``durable_reports=True`` fsyncs every report instead.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import wire
from ..errors import StateError as StateError  # its home is ldpkit.errors
from .protocol import OutboxRow, OutgoingBatch, seal_batch
from .results import StateLoss

SECRET_FILE = "device.key"
DATABASE_FILE = "client.sqlite3"
SECRET_SIZE = 32
SCHEMA_VERSION = 3
"""2: reports.delta (the delta a report of an (epsilon, delta) mechanism spent).
3: sealed batches (``batches``, ``reports.sealed``); reports queued before are ``legacy``
(sent as v1 with their report ids, so a batch sent before the upgrade and answered after
it still counts once)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (key, value) VALUES ('syncs', 0);
CREATE TABLE IF NOT EXISTS reports (
    seq INTEGER PRIMARY KEY,     -- outbox order; rows are matched by (seq, report_id)
    report_id BLOB NOT NULL,     -- 16 random bytes (sent only in a v1 batch)
    metric TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    bucket INTEGER NOT NULL,     -- the coarse time bucket start, unix seconds
    report BLOB,                 -- the perturbed report; NULL once acknowledged
    tag BLOB,                    -- memo: HMAC tag of (version, value, window), or NULL
    epsilon REAL NOT NULL,       -- ledger: epsilon this report spent (0 if memoized)
    delta REAL NOT NULL DEFAULT 0,  -- ledger: delta this report spent (schema 2)
    budget_seconds INTEGER,      -- ledger: the metric's budget period and window
    window_start INTEGER,
    total_seconds INTEGER,       -- ledger: the total budget's period and window
    total_start INTEGER,
    sealed BLOB,                 -- the id of the sealed batch holding it, or NULL (schema 3)
    legacy INTEGER NOT NULL DEFAULT 0  -- 1: queued before schema 3, sent as v1
);
CREATE TABLE IF NOT EXISTS batches (  -- sealed batches not answered yet (schema 3)
    id BLOB PRIMARY KEY,         -- 16 random bytes, drawn when the batch was sealed
    first_seq INTEGER NOT NULL,  -- send order
    seqs BLOB NOT NULL,          -- the rows it holds, in wire order (little-endian int64)
    body BLOB NOT NULL           -- the exact bytes sent, every time
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS reports_sealed ON reports (sealed) WHERE sealed IS NOT NULL;
-- Finding "no report queued before schema 3" must not scan the whole outbox on every batch.
CREATE INDEX IF NOT EXISTS reports_legacy ON reports (seq) WHERE legacy = 1;
CREATE TABLE IF NOT EXISTS definitions (
    source TEXT PRIMARY KEY,
    etag TEXT,
    body BLOB NOT NULL,
    fetched_at REAL NOT NULL
) WITHOUT ROWID;
"""

EXCLUSIVE_OPEN_TIMEOUT = 2.0  # seconds an exclusive open waits for another's transaction
_SEQS_PER_STATEMENT = 8000  # parameters bound per statement (SQLite allows 32766)

TOTAL_KEY = "*"
"""Ledger key of the total across metrics (metric names match ^[a-z], never this)."""


def delta_key(key: str) -> str:
    """The ledger key of the delta spent by a metric (or in total): beside its epsilon."""
    return f"{key}\x00delta"


HIGH_WATER = "clock_high_water"  # meta: the latest time the ledger has seen
# meta: the latest collector time the ledger has seen (anchored, see ReporterState.now);
# 0 until the device first heard from a collector that sends its time.
ANCHORED_HIGH_WATER = "anchored_high_water"
LOST_AT = "ledger_lost_at"  # meta: when this database replaced a lost one
LOST_REASON = "ledger_lost_reason"  # meta: index in LOSS_REASONS
LOSS_REASONS = ("missing", "empty", "corrupt")
LONGEST_PERIOD = 7 * 86400


def _corrupt(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite says the file is not (or no longer) a database."""
    text = str(exc)
    return type(exc) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text


def _missing_or_empty(path: Path) -> str | None:
    try:
        return "empty" if path.stat().st_size == 0 else None
    except FileNotFoundError:
        return "missing"


def _count_outbox(path: Path) -> int | None:
    """Best effort: how many undelivered reports an unreadable database still shows."""
    read_only = f"file:{path}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(read_only, uri=True, timeout=1.0)) as db:
            row = db.execute("SELECT count(*) FROM reports WHERE report IS NOT NULL").fetchone()
    except sqlite3.Error:
        return None
    return int(row[0])


def _move_aside(path: Path) -> str:
    """Keep an unreadable database (and its WAL) for inspection; the path it went to."""
    target = f"{path}.corrupt-{int(time.time())}"
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}{suffix}", f"{target}{suffix}")
    return target


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


def device_known(directory: Path) -> bool:
    """Whether ``directory`` has a device secret: then a missing ledger was lost, not never made."""
    try:
        return (directory / SECRET_FILE).stat().st_size == SECRET_SIZE
    except FileNotFoundError:
        return False


class LedgerWindows:
    """Epsilon (or delta) spent per budget window of one ledger key.

    Kept by window length, each length's window starts sorted, so that :meth:`overlapping`
    costs a binary search per length (a device has one or a few), not a scan of every
    window the outbox still holds (a device offline for weeks holds thousands).
    """

    __slots__ = ("_by_length",)

    def __init__(self) -> None:
        self._by_length: dict[int, tuple[list[int], dict[int, float]]] = {}

    def add(self, length: int, start: int, amount: float) -> None:
        found = self._by_length.get(length)
        if found is None:
            found = self._by_length[length] = ([], {})
        starts, spent = found
        before = spent.get(start)
        if before is None:
            bisect.insort(starts, start)
            before = 0.0
        spent[start] = before + amount

    def overlapping(self, start: int, seconds: int) -> float:
        """The sum over windows that overlap ``[start, start + seconds)``."""
        end, total = start + seconds, 0.0
        for length, (starts, spent) in self._by_length.items():
            # A window [s, s + length) overlaps iff start - length < s < end.
            first = bisect.bisect_right(starts, start - length)
            for s in starts[first : bisect.bisect_left(starts, end)]:
                total += spent[s]
        return total


def _create_private(path: Path) -> None:
    """A new (or emptied) database file, made private before SQLite writes to it."""
    if not path.exists() or path.stat().st_size == 0:
        path.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _upgrade(db: sqlite3.Connection, path: Path) -> str:
    """The statements that bring an older database to SCHEMA_VERSION (StateError if newer)."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise StateError(
            f"{path} has schema version {version}, newer than this client's "
            f"{SCHEMA_VERSION}; upgrade ldpkit"
        )
    columns = {row[1] for row in db.execute("PRAGMA table_info(reports)")}
    upgrade = ""
    if columns and "delta" not in columns:  # a schema 1 database
        upgrade += "ALTER TABLE reports ADD COLUMN delta REAL NOT NULL DEFAULT 0;"
    if columns and "sealed" not in columns:  # schema 1 or 2: reports sent as v1
        upgrade += (
            "ALTER TABLE reports ADD COLUMN sealed BLOB;"
            "ALTER TABLE reports ADD COLUMN legacy INTEGER NOT NULL DEFAULT 0;"
            "UPDATE reports SET legacy = 1 WHERE report IS NOT NULL;"
        )
    return upgrade


_LEDGER_GROUPS = (  # (a ledger key and window, what groups it): per metric, in total
    ("metric, budget_seconds, window_start", "metric, budget_seconds, window_start"),
    (f"'{TOTAL_KEY}', total_seconds, total_start", "total_seconds, total_start"),
)


def _read_ledger(db: sqlite3.Connection) -> dict[str, LedgerWindows]:
    """The ledger's cache: epsilon spent per budget window, per metric and in total, and
    delta beside it (under delta_key)."""
    ledger: dict[str, LedgerWindows] = {}
    for amount, key_of in (("epsilon", str), ("delta", delta_key)):
        for columns, group in _LEDGER_GROUPS:
            query = (
                f"SELECT {columns}, sum({amount}) FROM reports WHERE {amount} > 0 GROUP BY {group}"
            )
            for key, seconds, start, spent in db.execute(query):
                windows = ledger.setdefault(key_of(key), LedgerWindows())
                windows.add(int(seconds), int(start), float(spent))
    return ledger


class _Transaction:
    """:meth:`DeviceStore.transaction` (a plain context manager: report() runs one per call)."""

    __slots__ = ("_store",)

    def __init__(self, store: DeviceStore) -> None:
        self._store = store

    def __enter__(self) -> sqlite3.Connection:
        store = self._store
        store._cursor.execute("BEGIN IMMEDIATE")
        store._dirty = True  # (until the caches are known good: a failed reload is not)
        try:
            store._validate()
        except BaseException:
            store._rolled_back()
            raise
        store._dirty = False
        return store.db

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        store = self._store
        if exc_type is not None:  # the body's exception (re-raised on return)
            store._rolled_back()
            return
        try:
            store._cursor.execute("COMMIT")
        except BaseException:
            store._dirty = True
            store._rolled_back()
            raise


class DeviceStore:
    """The SQLite state. Not thread-safe by itself: the caller serializes access (one
    connection, the reporter's lock). ``exclusive``: this connection holds the database
    while open (no other can commit, so the caches are trusted). Otherwise several
    processes may share a state_dir: every read-modify-write runs in a ``BEGIN
    IMMEDIATE`` transaction, which checks the caches first."""

    def __init__(
        self,
        directory: Path,
        *,
        durable_reports: bool = False,
        exclusive: bool = False,
        known_device: bool = False,
        now: float | None = None,
    ) -> None:
        """Open (or create) the database. ``known_device``: this state_dir had a device
        secret before (a database that is then missing, empty or unreadable is a lost
        ledger, recorded at ``now``: see :meth:`ledger_lost`). ``exclusive``: this
        connection keeps SQLite's lock until it closes (see ``Reporter``'s
        ``exclusive_state``)."""
        self.path = directory / DATABASE_FILE
        self.durable_reports = durable_reports
        self.exclusive = exclusive
        self._closed = False
        self._version: int | None = None
        # Whether this transaction changed the caches (or may have): a rollback then
        # reloads them; a refused report (budget, outbox) changed nothing and reloads nothing.
        self._dirty = False
        self._rows = 0
        # key (a metric, the total, or their delta_key) -> what it spent per window
        self._ledger: dict[str, LedgerWindows] = {}
        self._memo: dict[bytes, set[int]] = {}  # tag -> the buckets it was queued for
        self._high_water = 0  # the latest time the ledger has seen (unix seconds)
        self._anchored_high_water = 0  # the latest collector time it has seen (0: none)
        self._lost: StateLoss | None = None
        self._unsynced = True  # reports may have been queued and not fsynced yet
        self._synced_version: int | None = None
        loss = _missing_or_empty(self.path) if known_device else None
        moved_to: str | None = None
        lost_reports: int | None = None
        try:
            self.db = self._open()
        except sqlite3.DatabaseError as exc:
            if not _corrupt(exc):  # locked, I/O error...: not a loss, report it
                raise self._open_failed(exc) from exc
            loss = "corrupt"
            lost_reports = _count_outbox(self.path)
            moved_to = _move_aside(self.path)
            try:
                self.db = self._open()
            except sqlite3.Error as again:
                raise self._open_failed(again) from again
        except sqlite3.Error as exc:
            raise self._open_failed(exc) from exc
        # One cursor for report()'s statements: a little cheaper than a new one each.
        self._cursor = self.db.cursor()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.chmod(f"{self.path}{suffix}", 0o600)
        if loss is not None:
            at = int(now if now is not None else time.time())
            with self.transaction() as db:
                db.executemany(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                    [(LOST_AT, at), (LOST_REASON, LOSS_REASONS.index(loss))],
                )
            self._lost = StateLoss(at, loss, moved_to, lost_reports, fresh=True)

    def _open_failed(self, exc: sqlite3.Error) -> StateError:
        why = str(exc)
        if "locked" in why:  # held by an exclusive reporter, or a stuck transaction
            holder = (
                "another reporter holds it (exclusive_state=True, the default, lets no "
                "other open it; reporters that share a state_dir all pass "
                "exclusive_state=False)"
                if self.exclusive
                else "another reporter holds it: one with exclusive_state=True (the default) "
                "keeps it locked while open, one with exclusive_state=False for a "
                "transaction only"
            )
            why = f"{why}; {holder}"
        return StateError(f"cannot open the client database {self.path}: {why}")

    def _open(self) -> sqlite3.Connection:
        _create_private(self.path)
        # Exclusive: the lock is held from the first transaction on, so a second process
        # would wait for ever; it waits a little (for another's transaction) and fails.
        timeout = EXCLUSIVE_OPEN_TIMEOUT if self.exclusive else 30.0
        db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=timeout
        )
        try:
            if self.exclusive:
                # Before WAL is entered, so that SQLite keeps the WAL index in its own memory
                # (no -shm file, no file lock per transaction): ~5 us less per report.
                db.execute("PRAGMA locking_mode=EXCLUSIVE")
            # Small pages: a commit appends one WAL frame per page it touches.
            db.execute("PRAGMA page_size=1024")  # only takes effect on a new file
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={'FULL' if self.durable_reports else 'NORMAL'}")
            # The reports table is altered before _SCHEMA creates what is missing.
            db.executescript(
                f"BEGIN IMMEDIATE;{_upgrade(db, self.path)}{_SCHEMA}"
                f"PRAGMA user_version={SCHEMA_VERSION};COMMIT;"
            )
            db.execute("SELECT count(*) FROM reports").fetchone()  # readable at all?
        except BaseException:
            db.close()
            raise
        return db

    def _data_version(self) -> int:
        return int(self._cursor.execute("PRAGMA data_version").fetchone()[0])

    def _validate(self) -> None:
        """Reload the caches if another connection committed since they were read."""
        if self.exclusive and self._version is not None:
            return  # no other connection can commit while this one holds the lock
        version = self._data_version()
        if version == self._version:
            return
        db = self.db
        self._rows = int(
            db.execute("SELECT count(*) FROM reports WHERE report IS NOT NULL").fetchone()[0]
        )
        self._ledger = _read_ledger(db)
        memo: dict[bytes, set[int]] = {}
        for tag, bucket in db.execute(
            "SELECT DISTINCT tag, bucket FROM reports WHERE tag IS NOT NULL"
        ):
            memo.setdefault(bytes(tag), set()).add(int(bucket))
        self._memo = memo
        self._read_meta(db)
        self._version = version

    def _read_meta(self, db: sqlite3.Connection) -> None:
        """The ledger's latest time and how it was lost, if it was."""
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        latest = db.execute(
            "SELECT max(max(coalesce(window_start, 0), coalesce(total_start, 0))) FROM reports"
        ).fetchone()[0]
        self._high_water = max(self._high_water, int(meta.get(HIGH_WATER, 0)), int(latest or 0))
        anchored = int(meta.get(ANCHORED_HIGH_WATER, 0))
        self._anchored_high_water = max(self._anchored_high_water, anchored)
        if LOST_AT in meta and (self._lost is None or self._lost.at != int(meta[LOST_AT])):
            code = int(meta.get(LOST_REASON, 0))
            reason = LOSS_REASONS[code] if 0 <= code < len(LOSS_REASONS) else "lost"
            self._lost = StateLoss(int(meta[LOST_AT]), reason, None, None, fresh=False)

    def transaction(self) -> _Transaction:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on exceptions); caches valid inside."""
        return _Transaction(self)

    def _rolled_back(self) -> None:
        if self._dirty:  # the caches may hold what was rolled back: read them again
            self._version = None
        with contextlib.suppress(sqlite3.Error):
            self.db.execute("ROLLBACK")

    def _fresh(self) -> None:
        if not self.db.in_transaction:
            self._validate()

    def make_durable(self) -> None:
        """fsync the WAL: every committed transaction so far survives a power loss.

        Skipped when nothing was queued since the last fsync (by this connection, and no
        other connection committed since), so a flush of many batches fsyncs once.
        """
        if self.durable_reports:
            return
        if not self._unsynced and self._synced_version == self._data_version():
            return
        self.db.execute("PRAGMA synchronous=FULL")
        try:
            with self.transaction() as db:
                db.execute("UPDATE meta SET value = value + 1 WHERE key = 'syncs'")
                self._save_high_water(db)
        finally:
            self.db.execute("PRAGMA synchronous=NORMAL")
        self._unsynced = False
        self._synced_version = self._data_version()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(sqlite3.Error):
                self.db.close()

    def outbox_rows(self) -> int:
        """Reports queued and not yet acknowledged."""
        self._fresh()
        return self._rows

    def outbox_rows_seen(self) -> int:
        """:meth:`outbox_rows` as of this connection's latest transaction (no statement)."""
        return self._rows

    def spent(self, key: str, seconds: int, window_start: int) -> float:
        """Epsilon spent by one metric (``key`` = its name) or in total (``key`` =
        :data:`TOTAL_KEY`), or delta (``key`` = :func:`delta_key` of those), in every
        ledger window that overlaps the window of ``seconds`` starting at
        ``window_start``: spending recorded under another period length (the definition
        changed, day to week say) counts wherever it overlaps."""
        self._fresh()
        windows = self._ledger.get(key)
        return windows.overlapping(window_start, seconds) if windows is not None else 0.0

    def memo_buckets(self, tag: bytes) -> set[int] | None:
        """The buckets a report with this memo tag was queued for, or None if none."""
        self._fresh()
        return self._memo.get(tag)

    def ledger_time_hint(self, now: float, anchored: bool = False) -> float:
        """:meth:`ledger_time` without reading the database (another process may have
        moved it: check with ledger_time inside a transaction)."""
        return max(now, float(self._anchored_high_water if anchored else self._high_water))

    def ledger_time(self, now: float, anchored: bool = False) -> float:
        """``now``, or the latest time the ledger has seen if the clock went back since:
        budget windows never reopen because the clock moved back. ``anchored``: ``now``
        is the collector's time (see ReporterState.now); then only the collector times
        seen count, so a device clock that ran ahead does not move the budget forward."""
        self._fresh()
        return self.ledger_time_hint(now, anchored)

    def saw(self, now: float, anchored: bool = False) -> None:
        """The ledger has seen ``now`` (kept in memory; saved by make_durable and prune,
        and implied by the window starts of the reports themselves)."""
        self._high_water = max(self._high_water, int(now))
        if anchored:
            self._anchored_high_water = max(self._anchored_high_water, int(now))

    def ledger_lost(self) -> StateLoss | None:
        """How this state_dir lost its ledger (the latest time), or None."""
        self._fresh()
        return self._lost

    def _save_high_water(self, db: sqlite3.Connection) -> None:
        db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) "
            "DO UPDATE SET value = max(value, excluded.value)",
            (HIGH_WATER, self._high_water),
        )
        if self._anchored_high_water:
            db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) "
                "DO UPDATE SET value = max(value, excluded.value)",
                (ANCHORED_HIGH_WATER, self._anchored_high_water),
            )

    def add_report(
        self,
        report_id: bytes,
        metric: str,
        fingerprint: str,
        bucket: int,
        report: bytes,
        *,
        tag: bytes | None,
        epsilon: float,
        budget_seconds: int,
        window_start: int,
        total_seconds: int,
        total_start: int,
        delta: float = 0.0,
    ) -> None:
        """Queue a report and record its spend and memo tag: one row, one page."""
        self._dirty = True
        self._cursor.execute(
            "INSERT INTO reports (report_id, metric, fingerprint, bucket, report, tag, "
            "epsilon, budget_seconds, window_start, total_seconds, total_start, delta) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                report_id,
                metric,
                fingerprint,
                bucket,
                report,
                tag,
                epsilon,
                budget_seconds,
                window_start,
                total_seconds,
                total_start,
                delta,
            ),
        )
        self._rows += 1
        self._unsynced = True
        if epsilon > 0:
            self._spend(
                metric, TOTAL_KEY, epsilon, budget_seconds, window_start, total_seconds, total_start
            )
        if delta > 0:
            self._spend(
                delta_key(metric),
                delta_key(TOTAL_KEY),
                delta,
                budget_seconds,
                window_start,
                total_seconds,
                total_start,
            )
        if tag is not None:
            self._memo.setdefault(tag, set()).add(bucket)

    def _spend(
        self,
        key: str,
        total_key: str,
        amount: float,
        budget_seconds: int,
        window_start: int,
        total_seconds: int,
        total_start: int,
    ) -> None:
        """Add ``amount`` to the ledger cache: the metric's window and the total's."""
        ledger = self._ledger
        windows = ledger.get(key)
        if windows is None:
            windows = ledger[key] = LedgerWindows()
        windows.add(budget_seconds, window_start, amount)
        windows = ledger.get(total_key)
        if windows is None:
            windows = ledger[total_key] = LedgerWindows()
        windows.add(total_seconds, total_start, amount)

    def add_unmetered(self, rows: Sequence[tuple[bytes, str, str, int, bytes]]) -> None:
        """Queue reports that spend nothing of this device's budget (``simulate``)."""
        self._dirty = True
        self.db.executemany(
            "INSERT INTO reports (report_id, metric, fingerprint, bucket, report, epsilon) "
            "VALUES (?, ?, ?, ?, ?, 0)",
            rows,
        )
        self._rows += len(rows)
        self._unsynced = True

    def max_seq(self) -> int:
        row = self.db.execute("SELECT max(seq) FROM reports").fetchone()
        return int(row[0]) if row[0] is not None else 0

    def oldest(
        self, limit: int, *, after: int = 0, upto: int | None = None, legacy: bool = False
    ) -> list[OutboxRow]:
        """Up to ``limit`` queued reports with ``after < seq <= upto`` not in a sealed batch, oldest
        first: those queued before sealed batches if ``legacy``, else the others."""
        # legacy as a literal, so that SQLite can use the partial index reports_legacy
        rows = self.db.execute(
            "SELECT seq, report_id, metric, fingerprint, bucket, report FROM reports "
            "WHERE seq > ? AND seq <= ? AND report IS NOT NULL AND sealed IS NULL "
            f"AND legacy = {int(legacy)} ORDER BY seq LIMIT ?",
            (after, upto if upto is not None else 2**62, limit),
        ).fetchall()
        return list(map(OutboxRow._make, rows))  # sqlite gives int, bytes, str: no conversion

    def sealed_batch(self) -> OutgoingBatch | None:
        """The oldest sealed batch not answered yet, exactly as it was first sent."""
        row = self.db.execute(
            "SELECT id, seqs, body FROM batches ORDER BY first_seq LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        batch_id, seqs, body = bytes(row[0]), np.frombuffer(bytes(row[1]), "<i8"), bytes(row[2])
        ids = dict(
            self.db.execute("SELECT seq, report_id FROM reports WHERE sealed = ?", (batch_id,))
        )
        keys = tuple(int(s) for s in seqs)
        blocks = len(wire.decode(body).blocks)
        # A row another process acknowledged meanwhile keeps its place (matched by id).
        return OutgoingBatch(
            body, keys, blocks, tuple(bytes(ids.get(s, b"")) for s in keys), batch_id
        )

    def seal(self, batches: Sequence[Sequence[OutboxRow]]) -> None:
        """Seal each list of rows into a new batch under a random id, stored with its exact bytes,
        in one transaction (the caller makes it durable before any is sent:
        a batch sent whose seal a power loss undid would be sealed again, and count twice)."""
        with self.transaction() as db:
            for rows in batches:
                batch = seal_batch(rows, os.urandom(wire.ID_SIZE))
                seqs = np.asarray(batch.seqs, dtype="<i8").tobytes()
                db.execute(
                    "INSERT INTO batches (id, first_seq, seqs, body) VALUES (?, ?, ?, ?)",
                    (batch.batch_id, min(batch.seqs), seqs, batch.body),
                )
                for start in range(0, len(batch.seqs), _SEQS_PER_STATEMENT):
                    chunk = batch.seqs[start : start + _SEQS_PER_STATEMENT]
                    marks = ", ".join("?" * len(chunk))
                    db.execute(
                        f"UPDATE reports SET sealed = ? WHERE seq IN ({marks})",
                        (batch.batch_id, *chunk),
                    )
            self._unsynced = True

    def unseal(self, batch_id: bytes) -> None:
        """Forget a sealed batch (the collector refused it whole, stored nothing): its
        rows go back to the outbox, to be sealed again."""
        with self.transaction() as db:
            db.execute("UPDATE reports SET sealed = NULL WHERE sealed = ?", (batch_id,))
            db.execute("DELETE FROM batches WHERE id = ?", (batch_id,))

    def acknowledge(
        self, rows: Sequence[tuple[int, bytes]], *, batch_id: bytes | None = None
    ) -> int:
        """Take (seq, report_id) rows out of the outbox; returns how many were queued.
        ``batch_id``: the sealed batch was answered: it is forgotten, and its rows not
        taken out (kept to be sent again) go back to the outbox, for a new batch.

        A row that spent budget or carries a memo tag keeps its ledger and memo columns
        (the report bytes are dropped) until :meth:`prune`; others are deleted. Matching
        the random id as well as ``seq`` makes this safe even if another process pruned
        the row and SQLite reused its ``seq``.
        """
        if not rows and batch_id is None:
            return 0
        removed = 0
        with self.transaction() as db:
            for start in range(0, len(rows), _SEQS_PER_STATEMENT):
                chunk = dict(rows[start : start + _SEQS_PER_STATEMENT])
                marks = ", ".join("?" * len(chunk))
                found = db.execute(
                    f"SELECT seq, report_id FROM reports WHERE seq IN ({marks}) "
                    "AND report IS NOT NULL",
                    list(chunk),
                ).fetchall()
                seqs = [seq for seq, rid in found if chunk.get(seq) == bytes(rid)]
                if not seqs:
                    continue
                marks = ", ".join("?" * len(seqs))
                db.execute(
                    f"DELETE FROM reports WHERE seq IN ({marks}) AND tag IS NULL AND epsilon = 0",
                    seqs,
                )
                db.execute(f"UPDATE reports SET report = NULL WHERE seq IN ({marks})", seqs)
                removed += len(seqs)
            if batch_id is not None:
                db.execute("UPDATE reports SET sealed = NULL WHERE sealed = ?", (batch_id,))
                db.execute("DELETE FROM batches WHERE id = ?", (batch_id,))
            self._save_high_water(db)  # the collector's time seen with the answer, too
            self._dirty = True
            self._rows -= removed
        return removed

    def acknowledge_batch(self, batch_id: bytes) -> int:
        """:meth:`acknowledge` of every row of the sealed batch ``batch_id`` (its answer
        kept none back); returns how many were queued. The rows are those sealed under
        this random id (found through the ``reports_sealed`` index), so no list of seqs
        is bound and no report id needs matching: a row another process acknowledged
        meanwhile has no report any more, and a reused seq is never sealed under it.
        """
        with self.transaction() as db:
            deleted = db.execute(
                "DELETE FROM reports WHERE sealed = ? AND report IS NOT NULL "
                "AND tag IS NULL AND epsilon = 0",
                (batch_id,),
            ).rowcount
            kept = db.execute(
                "UPDATE reports SET report = NULL, sealed = NULL "
                "WHERE sealed = ? AND report IS NOT NULL",
                (batch_id,),
            ).rowcount
            db.execute("UPDATE reports SET sealed = NULL WHERE sealed = ?", (batch_id,))
            db.execute("DELETE FROM batches WHERE id = ?", (batch_id,))
            removed = max(deleted, 0) + max(kept, 0)
            self._save_high_water(db)  # the collector's time seen with the answer, too
            self._dirty = True
            self._rows -= removed
        return removed

    def prune(self, now: float, anchored: bool = False) -> int:
        """Delete delivered rows whose budget windows both ended a week (the longest
        period) or more before the ledger's time: until then they may overlap a window
        of a period that changed (see :meth:`spent`). Once the device has heard the
        collector's time, only that time prunes: a device clock running ahead would
        delete the rows of the real current windows (their spending, their memo)."""
        self.saw(now, anchored)
        with self.transaction() as db:
            latest = self._anchored_high_water or max(int(now), self._high_water)
            cutoff = latest - LONGEST_PERIOD
            cur = db.execute(
                "DELETE FROM reports WHERE report IS NULL "
                "AND coalesce(window_start + budget_seconds, 0) <= ? "
                "AND coalesce(total_start + total_seconds, 0) <= ?",
                (cutoff, cutoff),
            )
            self._save_high_water(db)
            self._version = None  # reload the caches on the next transaction
            return max(cur.rowcount, 0)

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
