"""The SQLite store on its own: group commit, dedupe paths, failures, close, schema."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

import ldpkit
from ldpkit.collector.backends import open_store
from ldpkit.collector.config import ConfigError
from ldpkit.collector.sqlite_store import SQLiteStore
from ldpkit.collector.store import (
    ID_DTYPE,
    CheckedReports,
    PutOutcome,
    StoreClosed,
    StoreError,
    pack_sums,
    unpack_sums,
)
from ldpkit.metrics import MetricDefinition

THEME = MetricDefinition.from_dict(
    "theme", {"categories": ["a", "b", "c", "d"], "epsilon": 1.0, "mechanism": "grr"}
)
MECH = THEME.mechanism_instance
BUCKET = 1_763_683_200


def block(
    values: list[int] | np.ndarray, ids: bytes | None = None, bucket: int = BUCKET
) -> CheckedReports:
    reports = np.asarray(values, dtype="<u4")
    raw = ids if ids is not None else os.urandom(16 * len(reports))
    return CheckedReports(THEME.fingerprint, bucket, MECH, np.frombuffer(raw, ID_DTYPE), reports)


@pytest.fixture
async def store(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "store.sqlite3")
    await s.open()
    await s.put_metric(THEME)
    yield s  # type: ignore[misc]
    await s.close()


async def total(store: SQLiteStore) -> tuple[int, np.ndarray]:
    rows = await store.aggregates(THEME.fingerprint, 4, None, None)
    n = sum(r.aggregate.n for r in rows)
    sums = np.sum([r.aggregate.sums for r in rows], axis=0) if rows else np.zeros(4)
    return n, sums


async def test_concurrent_batches_share_commits(store: SQLiteStore) -> None:
    commits: list[tuple[int, int]] = []
    store.commit_listener = lambda seconds, batches, reports: commits.append((batches, reports))
    rng = np.random.default_rng(0)
    values = [rng.integers(0, 4, 100) for _ in range(60)]
    results = await asyncio.gather(*(store.ingest([block(v)]) for v in values))
    assert all(r.accepted == 100 and r.duplicates == 0 for r in results)
    assert sum(b for b, _ in commits) == 60
    assert len(commits) < 60  # some commits carried several batches
    n, sums = await total(store)
    assert n == 6000
    np.testing.assert_array_equal(sums, np.bincount(np.concatenate(values), minlength=4))
    assert store.pending_batches == 0 and store.pending_reports == 0
    assert await store.report_count() == 6000


async def test_duplicates_in_one_group_count_once(store: SQLiteStore) -> None:
    ids = os.urandom(16 * 10)
    results = await asyncio.gather(*(store.ingest([block([1] * 10, ids)]) for _ in range(5)))
    assert sorted((r.accepted, r.duplicates) for r in results) == [(0, 10)] * 4 + [(10, 0)]
    assert (await total(store))[0] == 10


async def test_mixed_new_and_old_ids(store: SQLiteStore) -> None:
    old = os.urandom(16 * 4)
    await store.ingest([block([0, 1, 2, 3], old)])
    fresh = os.urandom(16 * 3)
    # old[0], fresh x3, fresh[0] again, old[3]: only the three fresh ones are new.
    ids = old[:16] + fresh + fresh[:16] + old[48:]
    result = await store.ingest([block([0, 2, 2, 2, 3, 3], ids)])
    assert (result.accepted, result.duplicates) == (3, 3)
    n, sums = await total(store)
    assert n == 7
    np.testing.assert_array_equal(sums, [1, 1, 4, 1])
    assert result.accepted_by_fingerprint == {THEME.fingerprint: 3}


async def test_a_failing_batch_is_rolled_back_alone(store: SQLiteStore) -> None:
    good = [store.ingest([block([1, 2])]) for _ in range(3)]
    bad_ids = os.urandom(32)
    bad = store.ingest([block([1, 9], bad_ids)])  # 9 is not a valid report: aggregate raises
    results = await asyncio.gather(*good, bad, return_exceptions=True)
    assert [getattr(r, "accepted", None) for r in results[:3]] == [2, 2, 2]
    assert isinstance(results[3], ldpkit.ReportError)
    assert (await total(store))[0] == 6
    # The failed batch's ids were rolled back with it: they are new next time.
    again = await store.ingest([block([1, 2], bad_ids)])
    assert again.accepted == 2


async def test_close_commits_everything_queued(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path)
    await store.open()
    await store.put_metric(THEME)
    tasks = [asyncio.ensure_future(store.ingest([block([0, 1, 2])])) for _ in range(40)]
    await asyncio.sleep(0)  # submitted, mostly not yet committed
    await store.close()
    assert all(t.done() and t.result().accepted == 3 for t in tasks)
    with pytest.raises(StoreClosed):
        await store.ingest([block([1])])
    again = SQLiteStore(path)
    await again.open()
    try:
        assert await again.report_count() == 120
    finally:
        await again.close()


async def test_put_metric_outcomes(store: SQLiteStore) -> None:
    assert await store.put_metric(THEME) is PutOutcome.UNCHANGED
    described = MetricDefinition.from_dict(
        "theme", {**THEME.to_dict(), "mechanism": "grr", "description": "new words"}
    )
    assert await store.put_metric(described) is PutOutcome.UPDATED
    changed = MetricDefinition.from_dict(
        "theme", {"categories": ["a", "b", "c", "d"], "epsilon": 2.0, "mechanism": "grr"}
    )
    assert await store.put_metric(changed) is PutOutcome.NEW_VERSION
    assert await store.put_metric(described) is PutOutcome.REVERTED
    catalog = await store.load_catalog()
    assert catalog.current["theme"].fingerprint == THEME.fingerprint
    assert catalog.current["theme"].description == "new words"
    assert set(catalog.versions["theme"]) == {THEME.fingerprint, changed.fingerprint}


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match="newer"):
        await store.open()


async def test_unopenable_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    store = SQLiteStore(tmp_path / "file" / "db.sqlite3")
    with pytest.raises(StoreError):
        await store.open()


async def test_durability_settings(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "d.sqlite3")
    await store.open()
    try:
        mode = await store._read(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0])
        sync = await store._read(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
        assert (mode, sync) == ("wal", 2)  # 2 = FULL
    finally:
        await store.close()


def test_open_store_picks_the_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(open_store(str(tmp_path / "x.db")), SQLiteStore)
    from ldpkit.collector.postgres_store import PostgresStore

    store = open_store("postgresql://user@localhost/db")  # (opens nothing yet)
    assert isinstance(store, PostgresStore)
    # Without the PostgreSQL extra (psycopg missing): a clear error naming it, not a trace.
    monkeypatch.setitem(sys.modules, "ldpkit.collector.postgres_store", None)
    with pytest.raises(ConfigError, match="PostgreSQL store is not available"):
        open_store("postgresql://user@localhost/db")


# --- compact partial sums ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sums", "tag", "size"),
    [
        (np.array([3.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]), 3, 1 + 4 + 2 * 8),  # sparse
        (np.arange(16, dtype=float), 1, 1 + 2 * 16),  # dense int16
        (np.arange(16, dtype=float) * 40_000, 2, 1 + 4 * 16),  # dense int32
        (np.array([0.5, -2.25, 1e300]), 0, 1 + 8 * 3),  # floats
        (np.array([2.0**31, 1.0]), 0, 1 + 8 * 2),  # an integer over int32
        (np.zeros(1024), 3, 1 + 4),  # nothing counted
        (np.zeros(0), 0, 1),
    ],
)
def test_partial_sums_pack_exactly_and_small(sums: np.ndarray, tag: int, size: int) -> None:
    packed = pack_sums(sums)
    assert (packed[0], len(packed)) == (tag, size)
    back = unpack_sums(packed, sums.size)
    assert back.dtype == np.float64 and back.tobytes() == sums.astype(np.float64).tobytes()
    np.testing.assert_array_equal(unpack_sums(packed), sums)  # the size is in the row


def test_partial_sums_of_a_real_batch_cost_about_min_of_domain_and_reports() -> None:
    rng = np.random.default_rng(3)
    grr = MetricDefinition.from_dict(
        "big", {"categories": [f"c{i}" for i in range(4096)], "epsilon": 1.0, "mechanism": "grr"}
    ).mechanism_instance
    few = grr.aggregate(grr.perturb(rng.integers(0, 4096, 20), rng=rng))
    assert len(pack_sums(few.sums)) <= 1 + 4 + 8 * 20  # sparse: 20 reports, not 4096 sums
    many = grr.aggregate(grr.perturb(rng.integers(0, 4096, 100_000), rng=rng))
    assert len(pack_sums(many.sums)) == 1 + 2 * 4096  # dense int16


@pytest.mark.parametrize(
    "blob",
    [b"", b"\x09abc", b"\x01\x00", b"\x03\x04\x00\x00\x00" + b"\x05\x00\x00\x00\x01\x00\x00\x00"],
)
def test_malformed_partial_sums_are_refused(blob: bytes) -> None:
    with pytest.raises(StoreError):
        unpack_sums(blob, 4)


@pytest.mark.parametrize(
    "spec",
    [
        {"categories": ["a", "b", "c"], "mechanism": "grr"},
        {"categories": [f"c{i}" for i in range(40)], "mechanism": "oue"},
        {"categories": [f"c{i}" for i in range(40)], "mechanism": "olh"},
        {"categories": [f"c{i}" for i in range(40)], "mechanism": "ss"},
        {"kind": "numeric", "bounds": [0.0, 10.0], "mechanism": "duchi"},
        {"kind": "numeric", "bounds": [0.0, 10.0], "mechanism": "piecewise"},
    ],
)
def test_checked_reports_aggregate_once_to_the_same_sums(spec: dict[str, object]) -> None:
    """The store aggregates reports the collector checked, without checking again."""
    d = MetricDefinition.from_dict("m", {"epsilon": 1.0, **spec})
    m = d.mechanism_instance
    rng = np.random.default_rng(4)
    values = rng.uniform(0, 10, 500) if d.bounds else rng.integers(0, len(d.categories or ()), 500)
    reports = m.perturb(values, rng=rng)
    assert m.check_reports(reports).all()
    checked, full = m.aggregate_checked(reports), m.aggregate(reports)
    assert checked.n == full.n == 500
    assert checked.sums.tobytes() == full.sums.tobytes()
