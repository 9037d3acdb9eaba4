"""The Store contract, run against SQLite and PostgreSQL alike.

Every test here takes ``database`` (a SQLite path or a PostgreSQL URL with a fresh
schema) and opens stores with :func:`open_store`, as the collector does. PostgreSQL
variants carry the ``postgres`` marker (they skip, or fail with
LDPKIT_REQUIRE_POSTGRES=1, when the server is unreachable: see tests/collector/postgres.py).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import ldpkit
from ldpkit.aggregate import Aggregate
from ldpkit.collector.backends import open_store
from ldpkit.collector.ingest import oldest_bucket, prune_before
from ldpkit.collector.store import (
    ID_DTYPE,
    CheckedReports,
    Hold,
    Moved,
    PutOutcome,
    Store,
    StoreError,
)
from ldpkit.metrics import MetricDefinition, Period

from ..readiness import HANG_GUARD
from .helpers import batch, block_of, estimates, grr_reports, make_config, post_batch, running

THEME = MetricDefinition.from_dict(
    "theme", {"categories": ["a", "b", "c", "d"], "epsilon": 1.0, "mechanism": "grr"}
)
LATENCY = MetricDefinition.from_dict(
    "latency", {"kind": "numeric", "bounds": [0.0, 100.0], "epsilon": 1.0, "mechanism": "duchi"}
)
DAY = 86400
B0 = 1_763_683_200  # a day bucket (2025-11-21)
B1 = B0 + DAY


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database string for open_store: a fresh SQLite file or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return str(tmp_path / "contract.sqlite3")
    url: str = request.getfixturevalue("pg_url")
    return url


def is_postgres(database: str) -> bool:
    return database.startswith("postgresql://")


@asynccontextmanager
async def opened(
    database: str, *metrics: MetricDefinition, listener: Callable[[], None] | None = None
) -> AsyncIterator[Store]:
    store = open_store(database)
    store.catalog_listener = listener  # before open(): it may hear at once
    await store.open()
    try:
        for m in metrics or (THEME,):
            await store.put_metric(m)
        yield store
    finally:
        await store.close()


def ids_of(n: int) -> bytes:
    return os.urandom(16 * n)


def sealed_block(
    values: list[int] | np.ndarray, bucket: int = B0, index: int = 0
) -> CheckedReports:
    reports = np.asarray(values, dtype="<u4")
    return CheckedReports(
        THEME.fingerprint, bucket, THEME.mechanism_instance, None, reports, index=index
    )


def grr_block(
    values: list[int] | np.ndarray, ids: bytes | None = None, bucket: int = B0
) -> CheckedReports:
    reports = np.asarray(values, dtype="<u4")
    raw = ids if ids is not None else ids_of(len(reports))
    return CheckedReports(
        THEME.fingerprint, bucket, THEME.mechanism_instance, np.frombuffer(raw, ID_DTYPE), reports
    )


async def totals(
    store: Store, definition: MetricDefinition = THEME
) -> dict[int, tuple[int, np.ndarray]]:
    size = definition.mechanism_instance.stats_size
    rows = await store.aggregates(definition.fingerprint, size, None, None)
    return {r.bucket: (r.aggregate.n, r.aggregate.sums) for r in rows}


def counts(values: list[int] | np.ndarray) -> np.ndarray:
    return np.bincount(np.asarray(values, dtype=np.int64), minlength=4).astype(float)


# --- ingest and aggregates ---------------------------------------------------------------
async def test_ingest_aggregates_per_bucket_and_metric(database: str) -> None:
    rng = np.random.default_rng(1)
    async with opened(database, THEME, LATENCY) as store:
        v0, v1 = rng.integers(0, 4, 500), rng.integers(0, 4, 300)
        mech = LATENCY.mechanism_instance
        lat = mech.perturb(rng.uniform(0, 100, 200), rng=rng)
        lat_block = CheckedReports(
            LATENCY.fingerprint, B0, mech, np.frombuffer(ids_of(200), ID_DTYPE), lat
        )
        result = await store.ingest([grr_block(v0), grr_block(v1, bucket=B1), lat_block])
        assert (result.accepted, result.duplicates) == (1000, 0)
        assert result.accepted_by_fingerprint == {THEME.fingerprint: 800, LATENCY.fingerprint: 200}
        got = await totals(store)
        assert sorted(got) == [B0, B1]
        assert got[B0][0] == 500 and got[B1][0] == 300
        np.testing.assert_array_equal(got[B0][1], counts(v0))
        np.testing.assert_array_equal(got[B1][1], counts(v1))
        lat_rows = await totals(store, LATENCY)
        expected = mech.aggregate(lat)
        assert lat_rows[B0][0] == 200
        np.testing.assert_allclose(lat_rows[B0][1], expected.sums, rtol=1e-12)
        # A bucket range [start, end) selects buckets by start.
        only_b1 = await store.aggregates(THEME.fingerprint, 4, B1, B1 + DAY)
        assert [r.bucket for r in only_b1] == [B1]
        assert await store.aggregates(THEME.fingerprint, 4, B0 + 1, B1) == []
        assert await store.report_count() == 1000
        with pytest.raises(StoreError):  # the stored vector is not that size
            await store.aggregates(THEME.fingerprint, 5, None, None)


async def test_dedupe_within_a_batch(database: str) -> None:
    async with opened(database) as store:
        a, b = ids_of(1), ids_of(1)
        # The same id twice in a block and again in a second block: counted once (first).
        result = await store.ingest(
            [grr_block([0, 1, 2], a + b + a), grr_block([3, 3], a + ids_of(1), bucket=B1)]
        )
        assert (result.accepted, result.duplicates) == (3, 2)
        got = await totals(store)
        np.testing.assert_array_equal(got[B0][1], counts([0, 1]))
        np.testing.assert_array_equal(got[B1][1], counts([3]))
        assert await store.report_count() == 3


async def test_dedupe_across_batches_and_concurrent_groups(database: str) -> None:
    async with opened(database) as store:
        old = ids_of(4)
        await store.ingest([grr_block([0, 1, 2, 3], old)])
        fresh = ids_of(3)
        # old[0], fresh x3, fresh[0] again, old[3]: only the three fresh ones are new.
        mixed = old[:16] + fresh + fresh[:16] + old[48:]
        result = await store.ingest([grr_block([0, 2, 2, 2, 3, 3], mixed)])
        assert (result.accepted, result.duplicates) == (3, 3)
        # The same batch five times at once (one group or several): stored once.
        ids = ids_of(10)
        results = await asyncio.gather(
            *(store.ingest([grr_block([1] * 10, ids)]) for _ in range(5))
        )
        assert sorted((r.accepted, r.duplicates) for r in results) == [(0, 10)] * 4 + [(10, 0)]
        got = await totals(store)
        assert got[B0][0] == 4 + 3 + 10
        np.testing.assert_array_equal(got[B0][1], counts([0, 1, 2, 3, 2, 2, 2] + [1] * 10))
        assert await store.report_count() == 17


async def test_many_concurrent_batches_add_up(database: str) -> None:
    rng = np.random.default_rng(2)
    async with opened(database) as store:
        values = [rng.integers(0, 4, 200) for _ in range(60)]
        results = await asyncio.gather(*(store.ingest([grr_block(v)]) for v in values))
        assert sum(r.accepted for r in results) == 12_000
        got = await totals(store)
        assert got[B0][0] == 12_000
        np.testing.assert_array_equal(got[B0][1], counts(np.concatenate(values)))
        assert store.pending_batches == 0 and store.pending_reports == 0


async def test_a_failing_batch_is_rolled_back_alone(database: str) -> None:
    async with opened(database) as store:
        good = [store.ingest([grr_block([1, 2])]) for _ in range(3)]
        bad_ids = ids_of(2)
        bad = store.ingest([grr_block([1, 9], bad_ids)])  # 9 is not a GRR d=4 report
        results = await asyncio.gather(*good, bad, return_exceptions=True)
        assert [getattr(r, "accepted", None) for r in results[:3]] == [2, 2, 2]
        assert isinstance(results[3], ldpkit.ReportError)
        assert (await totals(store))[B0][0] == 6
        again = await store.ingest([grr_block([1, 2], bad_ids)])  # its ids were not kept
        assert again.accepted == 2


# --- sealed (v2) batches ------------------------------------------------------------------
async def test_a_sealed_batch_counts_once(database: str) -> None:
    async with opened(database) as store:
        batch_id = os.urandom(16)
        blocks = [sealed_block([0, 1, 1]), sealed_block([2], bucket=B1, index=1)]
        first = await store.ingest(blocks, batch_id=batch_id)
        assert (first.accepted, first.duplicates) == (4, 0)
        assert first.accepted_by_fingerprint == {THEME.fingerprint: 4}
        # Retries, five at once (one group or several): duplicates, whole.
        again = await asyncio.gather(*(store.ingest(blocks, batch_id=batch_id) for _ in range(5)))
        assert [(r.accepted, r.duplicates, r.refused_before) for r in again] == [(0, 4, ())] * 5
        # The same reports under another batch id are another batch.
        other = await store.ingest([sealed_block([0, 1, 1])], batch_id=os.urandom(16))
        assert other.accepted == 3
        got = await totals(store)
        np.testing.assert_array_equal(got[B0][1], counts([0, 1, 1, 0, 1, 1]))
        assert got[B1][0] == 1
        assert await store.report_count() == 7
        # v1 blocks need their ids.
        with pytest.raises(ValueError):
            await store.ingest([sealed_block([0])])
    async with opened(database) as store:  # dedupe survives restarts
        retry = await store.ingest(blocks, batch_id=batch_id)
        assert (retry.accepted, retry.duplicates) == (0, 4)


async def test_a_repeat_names_the_blocks_not_counted_the_first_time(database: str) -> None:
    async with opened(database) as store:
        batch_id = os.urandom(16)
        # First time, block 1 was refused before the store (say, a version not known yet).
        await store.ingest([sealed_block([0]), sealed_block([3], index=2)], batch_id=batch_id)
        blocks = [sealed_block([0]), sealed_block([1, 1], index=1), sealed_block([3], index=2)]
        retry = await store.ingest(blocks, batch_id=batch_id)
        assert (retry.accepted, retry.duplicates, retry.refused_before) == (0, 2, (1,))
        assert (await totals(store))[B0][0] == 2


async def test_a_repeat_with_other_content_claims_only_what_was_counted(database: str) -> None:
    async with opened(database) as store:
        batch_id = os.urandom(16)
        await store.ingest([sealed_block([0, 1]), sealed_block([3], index=2)], batch_id=batch_id)
        # The id replayed: block 0 with 5 reports (2 counted), block 1 new, block 2 with 1.
        blocks = [sealed_block([1] * 5), sealed_block([1, 1], index=1), sealed_block([2], index=2)]
        retry = await store.ingest(blocks, batch_id=batch_id)
        assert (retry.accepted, retry.duplicates, retry.refused_before) == (0, 3, ())
        assert retry.reused == ((0, 3), (1, 2))
        # Two copies in one group: the second is answered from the first's counts.
        other = os.urandom(16)
        first, second = await asyncio.gather(
            store.ingest([sealed_block([0])], batch_id=other),
            store.ingest([sealed_block([0, 0, 0])], batch_id=other),
        )
        assert (first.accepted, second.duplicates, second.reused) == (1, 1, ((0, 2),))
        assert (await totals(store))[B0][0] == 4


async def test_ingest_appends_and_compaction_folds_exactly_once(database: str) -> None:
    rng = np.random.default_rng(5)
    async with opened(database, THEME, LATENCY) as store:
        values = [rng.integers(0, 4, int(rng.integers(1, 300))) for _ in range(40)]
        mech = LATENCY.mechanism_instance
        latencies = [mech.perturb(rng.uniform(0, 100, 50), rng=rng) for _ in range(5)]
        for i, v in enumerate(values):
            await store.ingest([sealed_block(v, bucket=B0 if i % 3 else B1)], batch_id=ids_of(1))
        for lat in latencies:
            block = CheckedReports(LATENCY.fingerprint, B0, mech, None, lat)
            await store.ingest([block], batch_id=ids_of(1))
        # Ingest only appended: no aggregate row yet, every sum visible at once.
        assert (
            await store._read(
                lambda c: store._x(c, "SELECT count(*) FROM aggregates").fetchone()[0]
            )
            == 0
        )  # type: ignore[attr-defined]
        before, lat_before = await totals(store), await totals(store, LATENCY)
        expected = counts(np.concatenate(values[1::3] + values[2::3]))
        np.testing.assert_array_equal(before[B0][1], expected)
        folded = await store.compact(limit=7)  # a part, then the rest
        assert folded == 7
        mid = await totals(store)
        np.testing.assert_array_equal(mid[B0][1], expected)
        assert await store.compact() == 45 - 7
        assert await store.compact() == 0
        after, lat_after = await totals(store), await totals(store, LATENCY)
        for b in (B0, B1):
            assert after[b][0] == before[b][0]
            np.testing.assert_array_equal(after[b][1], before[b][1])
        whole = mech.aggregate(np.concatenate(latencies))
        assert lat_after[B0][0] == 250
        np.testing.assert_allclose(lat_before[B0][1], whole.sums, rtol=1e-12)
        np.testing.assert_allclose(lat_after[B0][1], whole.sums, rtol=1e-12)
        assert await store.report_count() == sum(len(v) for v in values) + 250
        # New partial rows on top of compacted ones are summed with them.
        await store.ingest([sealed_block([3, 3])], batch_id=ids_of(1))
        assert (await totals(store))[B0][1][3] == after[B0][1][3] + 2


async def test_pruning_forgets_old_batch_ids(database: str) -> None:
    async with opened(database) as store:
        old, new = ids_of(1), ids_of(1)
        await store.ingest([sealed_block([0] * 5, bucket=B0)], batch_id=old)
        # A batch spanning both days is kept until its latest bucket is pruned.
        await store.ingest([sealed_block([1], bucket=B0), sealed_block([2], B1, 1)], batch_id=new)
        assert await store.prune_report_ids(B1) == 1
        assert (await store.ingest([sealed_block([0] * 5)], batch_id=old)).accepted == 5
        spanning = [sealed_block([1], bucket=B0), sealed_block([2], B1, 1)]
        assert (await store.ingest(spanning, batch_id=new)).duplicates == 2


# --- catalog -----------------------------------------------------------------------------
async def test_catalog_versions(database: str) -> None:
    async with opened(database) as store:
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
        assert await store.put_metric(LATENCY) is PutOutcome.CREATED
        catalog = await store.load_catalog()
        assert catalog.current["theme"].fingerprint == THEME.fingerprint
        assert catalog.current["theme"].description == "new words"
        assert list(catalog.versions["theme"]) == [THEME.fingerprint, changed.fingerprint]
        assert set(catalog.current) == {"theme", "latency"}


# --- restart -----------------------------------------------------------------------------
# --- held records --------------------------------------------------------------------------
HOLD = Hold("support count", "item 0 is supported by 5 of 5 reports")


async def test_held_records_count_only_once_released(database: str) -> None:
    """Held blocks and moved windows are kept apart, never counted until released (once);
    totals are exact after every step, across compaction, retries and a restart."""
    async with opened(database) as store:
        counted = await store.ingest([sealed_block([0, 1, 2, 3])], batch_id=ids_of(1))
        assert counted.held == ()
        batch_id = ids_of(1)
        forged = replace(sealed_block([0] * 5, index=1), hold=HOLD)
        both = [sealed_block([1, 2], bucket=B1), forged]
        result = await store.ingest(both, batch_id=batch_id)
        assert (result.accepted, result.duplicates) == (7, 0)  # held reports are accepted
        assert result.held == ((THEME.fingerprint, "support count", 5),)
        assert result.accepted_by_fingerprint == {THEME.fingerprint: 2}
        again = await store.ingest(both, batch_id=batch_id)  # a retry: no second held copy
        assert (again.accepted, again.duplicates, again.held) == (0, 7, ())
        # A sender's window moves what it counted: a negative partial row and a record.
        window = Aggregate(4, counts([0, 1, 2, 3]))
        sender = Hold("support count", "its sender's window failed", "sender")
        await store.move_to_held([Moved(THEME.fingerprint, B0, window, sender)])
        assert {b: n for b, (n, _) in (await totals(store)).items()} == {B0: 0, B1: 2}
        assert await store.compact() > 0
        assert {b: n for b, (n, _) in (await totals(store)).items()} == {B0: 0, B1: 2}
        records = await store.held_records(10)
        assert [(r.origin, r.n, r.bucket, r.metric, r.released) for r in records] == [
            ("sender", 4, B0, "theme", None),
            ("batch", 5, B0, "theme", None),
        ]
        assert all(r.day % DAY == 0 for r in records)  # no finer time than the day
        assert [r.id for r in await store.held_records(10, before=records[0].id)] == [records[1].id]
    async with opened(database) as store:  # they survive a restart
        assert await store.release_held(records[1].id) is True
        assert await store.release_held(records[1].id) is False  # once
        got = await totals(store)
        assert got[B0][0] == 5 and got[B0][1][0] == 5
        assert await store.drop_held(records[1].id) is False  # released: counted
        assert await store.drop_held(records[0].id) is True
        assert await store.drop_held(records[0].id) is None
        assert await store.release_held(10**9) is None
        assert [r.released is not None for r in await store.held_records(10)] == [True]
        assert await store.report_count() == 2 + 5
        assert await store.batch_stored(batch_id) and not await store.batch_stored(ids_of(1))


async def test_restart_keeps_everything(database: str) -> None:
    store = open_store(database)
    await store.open()
    await store.put_metric(THEME)
    await store.put_metric(LATENCY)
    ids = ids_of(3)
    tasks = [asyncio.ensure_future(store.ingest([grr_block([0, 1, 2])])) for _ in range(40)]
    tasks.append(asyncio.ensure_future(store.ingest([grr_block([3, 3, 3], ids)])))
    await asyncio.sleep(0)  # submitted, mostly not committed yet
    await store.close()  # commits everything queued first
    assert all(t.done() and t.result().accepted == 3 for t in tasks)
    async with opened(database) as again:
        assert await again.report_count() == 123
        got = await totals(again)
        assert got[B0][0] == 123
        np.testing.assert_array_equal(got[B0][1], [40, 40, 40, 3])
        catalog = await again.load_catalog()
        assert set(catalog.current) == {"theme", "latency"}
        retry = await again.ingest([grr_block([3, 3, 3], ids)])  # dedupe survives restarts
        assert (retry.accepted, retry.duplicates) == (0, 3)


# --- retention ---------------------------------------------------------------------------
async def test_pruning_deletes_old_ids_only(database: str) -> None:
    async with opened(database) as store:
        old_ids, new_ids = ids_of(50), ids_of(30)
        await store.ingest([grr_block([0] * 50, old_ids, bucket=B0)])
        await store.ingest([grr_block([1] * 30, new_ids, bucket=B1)])
        assert await store.prune_report_ids(B0) == 0  # nothing before B0
        assert await store.prune_report_ids(B1) == 50
        assert await store.prune_report_ids(B1) == 0  # already done (from any process)
        got = await totals(store)  # aggregates stay
        assert (got[B0][0], got[B1][0]) == (50, 30)
        retry = await store.ingest([grr_block([1] * 30, new_ids, bucket=B1)])
        assert retry.duplicates == 30
        # Pruned ids are forgotten: why the collector refuses buckets that old.
        forgotten = await store.ingest([grr_block([0] * 50, old_ids, bucket=B0)])
        assert forgotten.accepted == 50


async def test_the_collector_refuses_buckets_older_than_the_retention(database: str) -> None:
    config = make_config(database, report_id_retention_days=30)
    now = time.time()
    today = Period.DAY.start(now)
    oldest_ok = -(-oldest_bucket(now, 30) // DAY) * DAY
    async with running(config) as client:
        body = batch(
            block_of("theme", grr_reports([1]), bucket=oldest_ok),
            block_of("theme", grr_reports([2]), bucket=oldest_ok - DAY),  # too old
            block_of("theme", grr_reports([3]), bucket=today - 400 * DAY),  # too old
            block_of("theme", grr_reports([0]), bucket=today),
        )
        status, answer = await post_batch(client, body)
        assert status == 200
        assert answer["accepted"] == 2
        assert [r["index"] for r in answer["rejected"]] == [1, 2]
        assert {r["error"] for r in answer["rejected"]} == {"invalid_bucket"}
        assert all("too old" in r["detail"] for r in answer["rejected"])
        assert str(oldest_ok) in answer["rejected"][0]["detail"]
        _, est = await estimates(client, "theme")
        assert est["n"] == 2


def test_prune_cutoff_stays_a_day_behind_the_oldest_accepted_bucket() -> None:
    for now in (B0, B0 + 1, B0 + DAY - 1, B0 + 12345.6):
        cutoff = prune_before(now, 30)
        assert cutoff % DAY == 0
        assert oldest_bucket(now, 30) - 2 * DAY < cutoff <= oldest_bucket(now, 30) - DAY


# --- several stores on one database ------------------------------------------------------
async def test_two_stores_on_one_database(database: str) -> None:
    """Overlapping batches and retries through two stores at once: each id counts once."""
    rng = np.random.default_rng(3)
    pool = [ids_of(1) for _ in range(600)]
    value = {i: i % 4 for i in range(600)}  # a report id always comes with the same report
    bucket = {i: B0 if i % 3 else B1 for i in range(600)}  # ... and the same bucket

    def make_batch() -> list[CheckedReports]:
        picks = rng.choice(600, size=60, replace=False)
        blocks = []
        for b in (B0, B1):
            mine = [int(i) for i in picks if bucket[int(i)] == b]
            ids = b"".join(pool[i] for i in mine)
            blocks.append(grr_block([value[i] for i in mine], ids, bucket=b))
        return blocks

    async with opened(database) as a, opened(database) as b:
        batches = [make_batch() for _ in range(40)]
        sends = [(a if k % 2 else b).ingest(blocks) for k, blocks in enumerate(batches)]
        sends += [(b if k % 2 else a).ingest(blocks) for k, blocks in enumerate(batches[::3])]
        results = await asyncio.gather(*sends)
        sent = {pool.index(bytes(x)) for blocks in batches for blk in blocks for x in blk.ids}
        assert sum(r.accepted for r in results) == len(sent)
        reports = sum(blk.n for blocks in batches + batches[::3] for blk in blocks)
        assert sum(r.accepted + r.duplicates for r in results) == reports
        assert await a.report_count() == len(sent)
        got = await totals(b)
        for bk in (B0, B1):
            mine = [value[i] for i in sent if bucket[i] == bk]
            assert got[bk][0] == len(mine)
            np.testing.assert_array_equal(got[bk][1], counts(mine))


# --- schema ------------------------------------------------------------------------------
async def test_a_newer_schema_is_refused(database: str) -> None:
    async with opened(database):
        pass
    if is_postgres(database):
        import psycopg

        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("INSERT INTO schema_migrations (version, description) VALUES (99, 'x')")
    else:
        conn = sqlite3.connect(database)
        conn.execute("PRAGMA user_version = 99")
        conn.close()
    store = open_store(database)
    with pytest.raises(StoreError, match="newer"):
        await store.open()


async def test_sqlite_version_1_gains_buckets(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE report_ids (id BLOB PRIMARY KEY) WITHOUT ROWID;"
        "INSERT INTO report_ids VALUES (x'00112233445566778899aabbccddeeff');"
        "PRAGMA user_version = 1;"
    )
    conn.close()
    async with opened(str(path)) as store:
        result = await store.ingest(
            [grr_block([1], bytes.fromhex("00112233445566778899aabbccddeeff"))]
        )
        assert result.duplicates == 1
        assert await store.prune_report_ids(Period.DAY.start(time.time())) == 0  # kept a while
        assert await store.prune_report_ids(Period.DAY.start(time.time()) + DAY) == 1


# --- PostgreSQL only ---------------------------------------------------------------------
@pytest.mark.postgres
async def test_concurrent_first_starts_migrate_once(fresh_pg_database: str) -> None:
    import psycopg

    stores = [open_store(fresh_pg_database) for _ in range(3)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        outcomes = await asyncio.gather(*(s.put_metric(THEME) for s in stores))
        assert sorted(outcomes) == sorted([PutOutcome.CREATED] + [PutOutcome.UNCHANGED] * 2)
        results = await asyncio.gather(*(s.ingest([grr_block([1, 2])]) for s in stores))
        assert [r.accepted for r in results] == [2, 2, 2]
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    with psycopg.connect(fresh_pg_database) as conn:
        rows = conn.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
    from ldpkit.collector.postgres_store import MIGRATIONS

    assert [r[0] for r in rows] == [m[0] for m in MIGRATIONS]


@pytest.mark.postgres
async def test_catalog_changes_are_announced_to_other_processes(pg_url: str) -> None:
    heard = asyncio.Event()
    async with opened(pg_url) as a, opened(pg_url, listener=heard.set) as b:
        # Readiness, not a sleep: b calls its listener once its LISTEN has begun (in case
        # a change was missed), and only then can it hear a's. The listener is b's from
        # before b opened, so that first call is never missed.
        await asyncio.wait_for(heard.wait(), HANG_GUARD)
        heard.clear()
        await a.put_metric(LATENCY)
        await asyncio.wait_for(heard.wait(), HANG_GUARD)
        assert "latency" in (await b.load_catalog()).current


async def test_unreachable_postgres_is_a_store_error() -> None:
    store = open_store("postgresql://nobody@127.0.0.1:1/none")
    store.connect_timeout = 1.0  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="cannot connect"):
        await store.open()


@pytest.mark.postgres
async def test_connections_closed_by_the_server_are_replaced(pg_url: str) -> None:
    import psycopg

    async with opened(pg_url) as store:
        await store.ingest([grr_block([0, 1])])
        with psycopg.connect(pg_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND application_name LIKE 'ldpkit-collector%'"
            ).fetchone()
        assert killed is not None and killed[0] >= 2  # the pool and the listener
        result = await store.ingest([grr_block([2, 3])])
        assert result.accepted == 2
        assert (await totals(store))[B0][0] == 4


async def test_buckets_before_the_pruning_mark_stay_refused(database: str) -> None:
    """After the window is raised (or a replica with a shorter one pruned), buckets whose
    ids may be gone are still refused."""
    today = Period.DAY.start(time.time())
    async with opened(database) as store:
        assert await store.pruned_before() is None
        await store.prune_report_ids(today - 10 * DAY)
        assert await store.pruned_before() == today - 10 * DAY
    config = make_config(database, report_id_retention_days=60)
    async with running(config) as client:
        body = batch(
            block_of("theme", grr_reports([1]), bucket=today - 11 * DAY),  # pruned: refused
            block_of("theme", grr_reports([2]), bucket=today - 10 * DAY),
        )
        status, answer = await post_batch(client, body)
        assert status == 200 and answer["accepted"] == 1
        assert [(r["index"], r["error"]) for r in answer["rejected"]] == [(0, "invalid_bucket")]
        assert "too old" in answer["rejected"][0]["detail"]


@pytest.mark.postgres
async def test_heavily_overlapping_batches_on_three_stores_never_deadlock(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Many transactions at once (3 stores x 4 writers) over a small id pool, in random
    orders and two buckets: exact totals, and no deadlock for the server to break."""
    rng = np.random.default_rng(11)
    pool = np.frombuffer(rng.bytes(16 * 1500), ID_DTYPE)
    value = rng.integers(0, 4, 1500)
    bucket = np.where(np.arange(1500) % 2, B0, B1)
    async with opened(pg_url) as a, opened(pg_url) as b, opened(pg_url) as c:
        stores = [a, b, c]
        sends = []
        sent = np.zeros(1500, dtype=bool)
        for k in range(240):
            picks = rng.choice(1500, size=150, replace=False)
            sent[picks] = True
            blocks = [
                grr_block(value[p], pool[p].tobytes(), bucket=int(bk))
                for bk in (B1, B0)
                if (p := picks[bucket[picks] == bk]).size
            ]
            sends.append(stores[k % 3].ingest(blocks))
        results = await asyncio.gather(*sends)
        assert sum(r.accepted for r in results) == int(sent.sum())
        got = await totals(c)
        for bk in (B0, B1):
            mine = sent & (bucket == bk)
            assert got[bk][0] == int(mine.sum())
            np.testing.assert_array_equal(got[bk][1], counts(value[mine]))
    assert "retried" not in caplog.text


# --- retirement --------------------------------------------------------------------------
async def test_retirement(database: str) -> None:
    from ldpkit.collector.store import Origin

    async with opened(database, THEME, LATENCY) as store:
        await store.ingest([grr_block([1, 2])])
        assert await store.retire_metric("theme") is True
        assert await store.retire_metric("theme") is False
        assert await store.retire_metric("nothing") is None
        catalog = await store.load_catalog()
        assert catalog.retired == {"theme"} and "theme" in catalog.current
        assert (await totals(store))[B0][0] == 2  # the data stays
        # A config file does not take a retired metric back; the API does.
        assert await store.put_metric(THEME, origin=Origin.CONFIG) is PutOutcome.RETIRED
        assert (await store.load_catalog()).retired == {"theme"}
        assert await store.put_metric(THEME) is PutOutcome.RESTORED
        catalog = await store.load_catalog()
        assert catalog.retired == frozenset() and catalog.origins["theme"] is Origin.API
        assert await store.put_metric(LATENCY, origin=Origin.CONFIG) is PutOutcome.UNCHANGED
        assert (await store.load_catalog()).origins["latency"] is Origin.CONFIG
    async with opened(database) as again:  # survives a restart
        assert await again.retire_metric("latency") is True
    async with opened(database) as again:
        assert (await again.load_catalog()).retired == {"latency"}


async def test_sqlite_version_2_gains_origins_and_retirement(tmp_path: Path) -> None:
    path = str(tmp_path / "v2.sqlite3")
    async with opened(path, THEME):
        pass
    conn = sqlite3.connect(path)  # back to the version 2 layout of the metrics table
    conn.executescript(
        "CREATE TABLE m2 (name TEXT PRIMARY KEY, fingerprint TEXT NOT NULL);"
        "INSERT INTO m2 SELECT name, fingerprint FROM metrics; DROP TABLE metrics;"
        "ALTER TABLE m2 RENAME TO metrics; PRAGMA user_version = 2;"
    )
    conn.close()
    async with opened(path) as store:
        catalog = await store.load_catalog()
        assert set(catalog.current) == {"theme"} and catalog.retired == frozenset()
        assert catalog.origins["theme"].value == "api"  # never retired for leaving a config
        assert await store.retire_metric("theme") is True


async def test_sqlite_version_6_gains_batch_counts(tmp_path: Path) -> None:
    """Batches stored before version 7 have no counts: a repeat is answered as before."""
    path = str(tmp_path / "v6.sqlite3")
    batch_id = os.urandom(16)
    async with opened(path) as store:
        await store.ingest([sealed_block([0, 1])], batch_id=batch_id)
    conn = sqlite3.connect(path)  # back to the version 6 layout of the batches table
    conn.executescript(
        "CREATE TABLE b6 (id BLOB PRIMARY KEY, bucket INTEGER NOT NULL, blocks BLOB NOT NULL)"
        " WITHOUT ROWID; INSERT INTO b6 SELECT id, bucket, blocks FROM batches;"
        "DROP TABLE batches; ALTER TABLE b6 RENAME TO batches; PRAGMA user_version = 6;"
    )
    conn.close()
    async with opened(path) as store:
        old = await store.ingest([sealed_block([0, 1, 1])], batch_id=batch_id)
        assert (old.duplicates, old.reused) == (3, ())
        new_id = os.urandom(16)
        await store.ingest([sealed_block([0])], batch_id=new_id)
        new = await store.ingest([sealed_block([0, 1, 1])], batch_id=new_id)
        assert (new.duplicates, new.reused) == (1, ((0, 2),))
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
    conn.close()
