"""The ledger's delta column (schema 2), and the upgrade of a schema 1 database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from ldpkit.client.storage import DATABASE_FILE, SCHEMA_VERSION, TOTAL_KEY, DeviceStore, delta_key


def add(store: DeviceStore, *, epsilon: float, delta: float, start: int = 0) -> None:
    with store.transaction():
        store.add_report(
            b"\x01" * 16,
            "spend",
            "0" * 16,
            0,
            b"r",
            tag=None,
            epsilon=epsilon,
            budget_seconds=86400,
            window_start=start,
            total_seconds=86400,
            total_start=start,
            delta=delta,
        )


def test_delta_is_spent_beside_epsilon_and_survives_a_restart(tmp_path: Path) -> None:
    store = DeviceStore(tmp_path, durable_reports=True, known_device=False)
    add(store, epsilon=1.0, delta=1e-6)
    add(store, epsilon=1.0, delta=1e-6)
    add(store, epsilon=0.5, delta=0.0)
    assert store.spent("spend", 86400, 0) == pytest.approx(2.5)
    assert store.spent(delta_key("spend"), 86400, 0) == pytest.approx(2e-6)
    assert store.spent(delta_key(TOTAL_KEY), 86400, 0) == pytest.approx(2e-6)
    store.close()
    again = DeviceStore(tmp_path, durable_reports=True, known_device=True)
    assert again.spent(delta_key("spend"), 86400, 0) == pytest.approx(2e-6)
    assert again.spent(delta_key("spend"), 86400, 86400) == 0.0  # the next day
    again.close()


def test_a_schema_1_database_is_upgraded_in_place(tmp_path: Path) -> None:
    DeviceStore(tmp_path, durable_reports=True, known_device=False).close()
    db = sqlite3.connect(tmp_path / DATABASE_FILE)
    db.execute("ALTER TABLE reports DROP COLUMN delta")  # as schema 1 made it
    db.execute(
        "INSERT INTO reports (report_id, metric, fingerprint, bucket, report, epsilon, "
        "budget_seconds, window_start, total_seconds, total_start) "
        "VALUES (x'00', 'spend', 'f', 0, x'00', 1.0, 86400, 0, 86400, 0)"
    )
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    store = DeviceStore(tmp_path, durable_reports=True, known_device=True)
    assert store.spent("spend", 86400, 0) == pytest.approx(1.0)  # the old spend is kept
    add(store, epsilon=1.0, delta=1e-6)
    assert store.spent(delta_key("spend"), 86400, 0) == pytest.approx(1e-6)
    store.close()
    db = sqlite3.connect(tmp_path / DATABASE_FILE)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    db.close()


def test_spent_sums_every_overlapping_window_of_every_length(tmp_path: Path) -> None:
    """Spending under several period lengths (a definition changed, hour to day to week),
    at arbitrary starts: ``spent`` is the sum over the windows that overlap the asked one,
    in memory as added and as read back from the database, against a plain scan."""
    rng = np.random.default_rng(5)
    store = DeviceStore(tmp_path, durable_reports=True, known_device=False)
    windows: list[tuple[int, int, float]] = []
    with store.transaction():
        for i in range(600):
            length = int(rng.choice([3600, 86400, 7 * 86400]))
            start = int(rng.integers(0, 60 * 86400))
            epsilon = float(rng.choice([0.25, 0.5, 1.0]))
            windows.append((length, start, epsilon))
            store.add_report(
                i.to_bytes(16, "little"),
                "spend",
                "0" * 16,
                0,
                b"r",
                tag=None,
                epsilon=epsilon,
                budget_seconds=length,
                window_start=start,
                total_seconds=length,
                total_start=start,
                delta=0.0,
            )

    def scan(seconds: int, start: int) -> float:
        end = start + seconds
        return sum(e for length, s, e in windows if s < end and start < s + length)

    lengths = rng.choice([3600, 86400, 7 * 86400], size=200)
    starts = rng.integers(-86400, 62 * 86400, 200)
    asked = [(int(n), int(s)) for n, s in zip(lengths, starts, strict=True)]
    # and windows meeting the stored ones edge to edge
    asked += [(3600, s + length) for length, s, _ in windows[:50]]
    asked += [(86400, s - 86400) for _, s, _ in windows[:50]]
    for seconds, start in asked:
        assert store.spent("spend", seconds, start) == pytest.approx(scan(seconds, start))
    store.close()
    again = DeviceStore(tmp_path, durable_reports=True, known_device=True)
    for seconds, start in asked:
        assert again.spent(TOTAL_KEY, seconds, start) == pytest.approx(scan(seconds, start))
    assert again.spent("spend", 3600, -7200) == 0.0  # (ends before every window)
    again.close()


def test_a_failed_transaction_leaves_neither_row_nor_spend(tmp_path: Path) -> None:
    """An exception inside transaction() rolls the row back and with it the in-memory
    ledger, memo and outbox count it had added to; the next transaction commits."""
    store = DeviceStore(tmp_path, known_device=False)
    add(store, epsilon=1.0, delta=0.0)
    with pytest.raises(RuntimeError, match="inside"), store.transaction():
        store.add_report(
            b"\x02" * 16,
            "spend",
            "0" * 16,
            0,
            b"r",
            tag=b"t" * 16,
            epsilon=2.0,
            budget_seconds=86400,
            window_start=0,
            total_seconds=86400,
            total_start=0,
        )
        assert store.spent("spend", 86400, 0) == pytest.approx(3.0)
        raise RuntimeError("inside")
    assert store.db.in_transaction is False
    assert store.spent("spend", 86400, 0) == pytest.approx(1.0)
    assert store.memo_buckets(b"t" * 16) is None and store.outbox_rows() == 1
    add(store, epsilon=0.5, delta=0.0)
    store.close()
    again = DeviceStore(tmp_path, known_device=True)
    assert again.spent("spend", 86400, 0) == pytest.approx(1.5) and again.outbox_rows() == 2
    again.close()
