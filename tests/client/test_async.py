"""AsyncReporter, and 429 + Retry-After over real HTTP (a tiny aiohttp stub collector)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from ldpkit.client import (
    AsyncReporter,
    BudgetExceeded,
    CollectorUnavailable,
    Reporter,
    RetryPolicy,
)
from ldpkit.http import HttpAnswer
from ldpkit.wire import decode_batch

from .conftest import FakeClock, FakeCollector, minutes, theme

FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.002)


class AsyncFake:
    def __init__(self, fake: FakeCollector) -> None:
        self.fake = fake

    async def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer:
        await asyncio.sleep(0)
        return self.fake.request(method, path, body, headers)

    async def close(self) -> None:
        pass


async def test_async_reporter_reports_flushes_and_keeps_budget(
    state_dir: Path, clock: FakeClock
) -> None:
    fake = FakeCollector(definitions=[theme(), minutes(budget=1.0)])
    async with AsyncReporter(
        "http://collector.invalid",
        state_dir=state_dir,
        clock=clock,
        retry=FAST,
        transport=AsyncFake(fake),
    ) as r:
        receipt = await r.report("theme", "dark")
        assert receipt.queued and receipt.epsilon_spent == 1.0
        assert (await r.report("theme", "dark")).report == receipt.report
        await r.report("session_minutes", 5.0)
        await r.report("session_minutes", 6.0)
        with pytest.raises(BudgetExceeded):
            await r.report("session_minutes", 7.0)
        assert r.pending == 3
        assert await r.simulate("theme", ["light"] * 100) == 100
        result = await r.flush()
        assert (result.sent, result.remaining) == (103, 0)
        fake.down = True
        clock.advance(86400)
        assert (await r.report("session_minutes", 5.0)).epsilon_spent == 0.5  # renewed
        with pytest.raises(CollectorUnavailable):
            await r.flush()
        assert r.pending == 1
        fake.down = False
    assert len(fake.seen) == 104  # aclose delivered the last one


async def test_async_background_task_flushes(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector()
    async with AsyncReporter(
        "http://collector.invalid",
        state_dir=state_dir,
        metrics=[theme(budget=50.0)],
        memoize=False,
        clock=clock,
        retry=FAST,
        transport=AsyncFake(fake),
        batch_size=4,
        flush_interval=3600,
    ) as r:
        for _ in range(4):
            await r.report("theme", "light")
        for _ in range(200):  # the fake sees the batch before the reporter reads the answer
            if len(fake.seen) == 4 and r.pending == 0:
                break
            await asyncio.sleep(0.01)
        assert len(fake.seen) == 4 and r.pending == 0


# --- a stub collector that says 429 first ---------------------------------------------
class Stub:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.accepted = 0

    async def reports(self, request: web.Request) -> web.Response:
        self.times.append(time.monotonic())
        if len(self.times) == 1:
            return web.json_response(
                {"error": "too_many_requests", "detail": "slow down"},
                status=429,
                headers={"Retry-After": "1"},
            )
        n = sum(b.n for b in decode_batch(await request.read()))
        self.accepted += n
        return web.json_response({"accepted": n, "duplicates": 0, "held": 0, "rejected": []})


@pytest.fixture
def stub_server() -> Iterator[tuple[str, Stub]]:
    stub = Stub()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/reports", stub.reports)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", stub
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.run_until_complete(runner.cleanup())
        loop.close()


def test_429_retry_after_is_honoured_sync(stub_server: tuple[str, Stub], state_dir: Path) -> None:
    url, stub = stub_server
    with Reporter(url, state_dir=state_dir, metrics=[theme()], background=False, retry=FAST) as r:
        r.report("theme", "dark")
        result = r.flush()
    assert result.sent == 1 and stub.accepted == 1
    assert len(stub.times) == 2 and stub.times[1] - stub.times[0] >= 0.95


async def test_429_retry_after_is_honoured_async(
    stub_server: tuple[str, Stub], state_dir: Path
) -> None:
    url, stub = stub_server
    async with AsyncReporter(
        url, state_dir=state_dir, metrics=[theme()], background=False, retry=FAST
    ) as r:
        await r.report("theme", "dark")
        result = await r.flush()
    assert result.sent == 1 and stub.accepted == 1
    assert len(stub.times) == 2 and stub.times[1] - stub.times[0] >= 0.95
