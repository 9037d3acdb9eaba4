"""Backpressure: a store slower than the input gets 429 + Retry-After, not a growing queue.

Many clients post large batches at once to a collector whose store is slowed down. The
collector must keep at most ``max_pending_batches`` batches admitted (bodies being read
included: each holds up to ``max_body_bytes`` of memory), answer the others
``429 too_many_requests`` with ``Retry-After``, and store every batch it answered 200.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from aiohttp.test_utils import TestClient

from ldpkit import wire
from ldpkit.collector.keys import COLLECTOR
from ldpkit.collector.sqlite_store import SQLiteStore
from ldpkit.collector.store import IngestBlock, IngestResult

from .helpers import auth, batch, block_of, grr_reports, make_config, running


class SlowStore(SQLiteStore):
    """SQLite, with every ingest taking ``delay`` seconds more; counts what is inside."""

    def __init__(self, path: Path, delay: float) -> None:
        super().__init__(path, synchronous="normal")
        self.delay = delay
        self.inside = 0
        self.peak = 0

    @property
    def pending_batches(self) -> int:
        return super().pending_batches + self.inside

    async def ingest(self, blocks: Sequence[IngestBlock]) -> IngestResult:
        self.inside += 1
        self.peak = max(self.peak, self.inside)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.inside -= 1
        return await super().ingest(blocks)


class Peak:
    """The largest value ``read()`` returns while the event loop runs other tasks."""

    def __init__(self, read: Callable[[], int]) -> None:
        self.value = 0
        self._read = read
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            self.value = max(self.value, self._read())
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._task.cancel()


async def test_slow_store_gets_429_and_bounded_queue(tmp_path: Path) -> None:
    database = tmp_path / "c.sqlite3"
    limit = 4
    config = make_config(database, max_pending_batches=limit, retry_after=2)
    store = SlowStore(database, delay=0.02)
    reports = 25_000  # 400 KB of ids + 100 KB of reports per batch
    async with running(config, store=store) as client:
        collector = client.app[COLLECTOR]  # type: ignore[index]
        admitted = Peak(lambda: collector.admitted)
        sent: list[tuple[bytes, int, dict[str, object] | None, str | None]] = []

        async def one() -> None:
            ids = os.urandom(wire.ID_SIZE * reports)
            body = batch(block_of("theme", grr_reports(np.arange(reports) % 4), ids=ids))
            resp = await client.post(
                "/v1/reports",
                data=body,
                headers={**auth("ingest"), "Content-Type": wire.CONTENT_TYPE},
            )
            answer = json.loads(await resp.read())
            sent.append((ids, resp.status, answer, resp.headers.get("Retry-After")))

        for _ in range(3):  # waves of 60 batches at once
            await asyncio.gather(*(one() for _ in range(60)))
        admitted.stop()
        peak_admitted = admitted.value

        statuses = [status for _, status, _, _ in sent]
        assert set(statuses) == {200, 429}, statuses
        throttled = [s for s in sent if s[1] == 429]
        assert all(answer == {"error": "too_many_requests", "detail": answer["detail"]}
                   for _, _, answer, _ in throttled)  # fmt: skip
        assert all(retry == "2" for _, _, _, retry in throttled)
        # Never more than the limit admitted, or waiting in (or for) the store.
        assert peak_admitted <= limit and store.peak <= limit, (peak_admitted, store.peak)
        assert collector.admitted == 0 and store.pending_batches == 0

        # Every acknowledged report is stored, nothing of a refused batch.
        acknowledged = [ids for ids, status, _, _ in sent if status == 200]
        assert all(answer["accepted"] == reports for _, s, answer, _ in sent if s == 200)
        assert await store.report_count() == reports * len(acknowledged)
        resp = await client.get("/readyz")
        assert resp.status == 200  # the queue drained: ready again
        metrics = await (await client.get("/metrics")).text()
        assert f"ldpkit_throttled_total {float(len(throttled))}" in metrics


async def test_bodies_being_read_count_against_the_limit(tmp_path: Path) -> None:
    """Slow uploads: batches whose bodies are still arriving are admitted batches, so a
    crowd of slow senders cannot make the collector buffer more than the limit."""
    database = tmp_path / "c.sqlite3"
    config = make_config(database, max_pending_batches=3, retry_after=1)
    async with running(config) as client:
        collector = client.app[COLLECTOR]  # type: ignore[index]
        body = batch(block_of("theme", grr_reports([1, 2, 3])))
        gate = asyncio.Event()

        async def slow_body() -> object:
            yield body[:10]
            await gate.wait()
            yield body[10:]

        async def slow_post() -> int:
            resp = await client.post(
                "/v1/reports",
                data=slow_body(),
                headers={**auth("ingest"), "Content-Type": wire.CONTENT_TYPE},
            )
            await resp.read()
            return resp.status

        slow = [asyncio.create_task(slow_post()) for _ in range(3)]
        for _ in range(500):
            if collector.admitted == 3:
                break
            await asyncio.sleep(0.01)
        assert collector.admitted == 3
        status, retry = await _post_now(client, body)
        assert (status, retry) == (429, "1")
        assert (await client.get("/readyz")).status == 503
        gate.set()
        assert await asyncio.gather(*slow) == [200, 200, 200]
        assert (await _post_now(client, body))[0] == 200
        assert collector.admitted == 0


async def _post_now(client: TestClient, body: bytes) -> tuple[int, str | None]:
    resp = await client.post(
        "/v1/reports", data=body, headers={**auth("ingest"), "Content-Type": wire.CONTENT_TYPE}
    )
    await resp.read()
    return resp.status, resp.headers.get("Retry-After")


async def test_request_bodies_held_at_once_stay_under_max_pending_bytes(tmp_path: Path) -> None:
    """The byte budget bounds memory whatever the batch count limit says."""
    database = tmp_path / "c.sqlite3"
    reports = 25_000  # about 500 KB per body
    budget = 1_200_000  # room for two such bodies at once, not three
    config = make_config(
        database, max_pending_batches=1000, max_pending_bytes=budget, retry_after=1
    )
    store = SlowStore(database, delay=0.02)
    async with running(config, store=store) as client:
        collector = client.app[COLLECTOR]  # type: ignore[index]
        held = Peak(lambda: collector.admitted_bytes)
        statuses: list[int] = []
        acknowledged = 0

        async def one() -> None:
            nonlocal acknowledged
            ids = os.urandom(wire.ID_SIZE * reports)
            body = batch(block_of("theme", grr_reports(np.arange(reports) % 4), ids=ids))
            resp = await client.post(
                "/v1/reports",
                data=body,
                headers={**auth("ingest"), "Content-Type": wire.CONTENT_TYPE},
            )
            statuses.append(resp.status)
            if resp.status == 200:
                acknowledged += (await resp.json())["accepted"]
            else:
                assert resp.headers.get("Retry-After") == "1"

        await asyncio.gather(*(one() for _ in range(40)))
        held.stop()
        assert set(statuses) == {200, 429}, statuses
        assert 0 < held.value <= budget, held.value
        assert collector.admitted_bytes == 0
        assert await store.report_count() == acknowledged
