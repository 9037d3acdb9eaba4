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
from ldpkit.collector.store import CheckedReports, IngestResult

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

    async def ingest(
        self,
        blocks: Sequence[CheckedReports],
        *,
        batch_id: bytes | None = None,
        screen: float = 0.0,
    ) -> IngestResult:
        self.inside += 1
        self.peak = max(self.peak, self.inside)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.inside -= 1
        return await super().ingest(blocks, batch_id=batch_id, screen=screen)


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
        admitted = Peak(lambda: collector.admission.admitted)
        sent: list[tuple[bytes, int, dict[str, object] | None, str | None]] = []

        async def one() -> None:
            ids = os.urandom(wire.ID_SIZE * reports)
            body = batch(block_of("theme", grr_reports(np.arange(reports) % 4), ids=ids))
            resp = await client.post(
                "/v1/reports",
                data=body,
                headers={**auth("relay"), "Content-Type": wire.CONTENT_TYPE},
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
        assert collector.admission.admitted == 0 and store.pending_batches == 0

        # Every acknowledged report is stored, nothing of a refused batch.
        acknowledged = [ids for ids, status, _, _ in sent if status == 200]
        assert all(answer["accepted"] == reports for _, s, answer, _ in sent if s == 200)
        assert await store.report_count() == reports * len(acknowledged)
        resp = await client.get("/readyz")
        assert resp.status == 200  # the queue drained: ready again
        metrics = await (await client.get("/metrics")).text()
        assert f"ldpkit_throttled_total {float(len(throttled))}" in metrics


async def test_bodies_being_read_hold_their_bytes_not_a_batch_slot(tmp_path: Path) -> None:
    """Slow uploads: a body still arriving holds the bytes that arrived (against
    ``max_pending_bytes``), not one of the ``max_pending_batches`` slots, so a crowd of
    slow senders blocks nobody; only bytes that did arrive can fill the collector up."""
    database = tmp_path / "c.sqlite3"
    config = make_config(database, max_pending_batches=4, max_pending_bytes=60_000, retry_after=1)
    async with running(config) as client:
        collector = client.app[COLLECTOR]  # type: ignore[index]
        body = batch(block_of("theme", grr_reports([1, 2, 3])))
        big = batch(block_of("theme", grr_reports(np.arange(2500) % 4)))  # 50 KB
        gate = asyncio.Event()

        async def slow_body(data: bytes, first: int) -> object:
            yield data[:first]
            await gate.wait()
            yield data[first:]

        async def slow_post(data: bytes, first: int) -> int:
            resp = await client.post(
                "/v1/reports",
                data=slow_body(data, first),
                headers={**auth("relay"), "Content-Type": wire.CONTENT_TYPE},
            )
            await resp.read()
            return resp.status

        slow = [asyncio.create_task(slow_post(body, 10)) for _ in range(5)]  # 5 > 4 slots
        for _ in range(500):
            if collector.admission.bodies.receiving == 5 and collector.admission.bodies.held == 50:
                break
            await asyncio.sleep(0.01)
        assert collector.admission.bodies.receiving == 5 and collector.admission.bodies.held == 50
        assert collector.admission.admitted == 0  # no batch slot taken
        assert await _post_now(client, body) == (200, None)
        assert (await client.get("/readyz")).status == 200
        # A body that did send 49,000 bytes holds them: now a batch of 12 KB does not fit.
        slow.append(asyncio.create_task(slow_post(big, 49_000)))
        for _ in range(500):
            if collector.admission.bodies.held >= 49_000:
                break
            await asyncio.sleep(0.01)
        medium = batch(block_of("theme", grr_reports(np.arange(600) % 4)))
        assert await _post_now(client, medium) == (429, "1")
        assert (await client.get("/readyz")).status == 503
        gate.set()
        statuses = await asyncio.gather(*slow)  # 6 bodies end at once for 4 slots
        assert statuses.count(200) >= 4 and set(statuses) <= {200, 429}, statuses
        assert (await _post_now(client, medium))[0] == 200
        assert collector.admission.admitted == 0 and collector.admission.bodies.held == 0


async def _post_now(client: TestClient, body: bytes) -> tuple[int, str | None]:
    resp = await client.post(
        "/v1/reports", data=body, headers={**auth("relay"), "Content-Type": wire.CONTENT_TYPE}
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
        held = Peak(lambda: collector.admission.bodies.held)
        statuses: list[int] = []
        acknowledged = 0

        async def one() -> None:
            nonlocal acknowledged
            ids = os.urandom(wire.ID_SIZE * reports)
            body = batch(block_of("theme", grr_reports(np.arange(reports) % 4), ids=ids))
            resp = await client.post(
                "/v1/reports",
                data=body,
                headers={**auth("relay"), "Content-Type": wire.CONTENT_TYPE},
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
        assert collector.admission.bodies.held == 0
        assert await store.report_count() == acknowledged
