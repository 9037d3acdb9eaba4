"""The one place tests start a collector. Three ways, by what the test needs:

- :func:`running` (async tests): the app in-process behind aiohttp's TestClient;
- :class:`ThreadedCollector` (synchronous tests, the client's tests): the real app on a
  loopback port, its event loop in a thread; it can be stopped and started again on the
  same port and database, to play "collector down";
- :func:`running_collector` (end-to-end): ``ldpkit serve`` as a separate process, as an
  operator runs it (``ldpkit.collector.launcher``).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import urllib.request
from collections.abc import AsyncIterator, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ldpkit.collector import create_app
from ldpkit.collector.config import CollectorConfig
from ldpkit.collector.keys import COLLECTOR
from ldpkit.collector.launcher import running_collector
from ldpkit.collector.service import Collector
from ldpkit.collector.store import Store

T = TypeVar("T")

__all__ = ["Answer", "ThreadedCollector", "running", "running_collector"]


@asynccontextmanager
async def running(
    config: CollectorConfig, *, store: Store | None = None
) -> AsyncIterator[TestClient]:
    """The app started (store open) and served on a loopback port; closed on exit."""
    app = create_app(config, store=store)
    async with TestClient(TestServer(app)) as client:
        yield client


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes


class ThreadedCollector:
    """The real collector app on a loopback port, served by an event loop in a thread.

    Use it as a context manager (or :meth:`start` and :meth:`close`); :meth:`stop` and
    :meth:`start` again keep the port and the database. Synchronous tests talk to it with
    :meth:`request` and reach its store with :meth:`call`.
    """

    def __init__(self, config: CollectorConfig, *, store: Store | None = None) -> None:
        self.config = config
        self._store = store
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        self._conn: http.client.HTTPConnection | None = None
        self.port = 0  # chosen at the first start, kept by the next ones
        self.requests = 0  # HTTP requests sent through request()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> ThreadedCollector:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.call(self._start())

    async def _start(self) -> None:
        self.app = create_app(self.config, store=self._store)
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._runner is not None:
            self.call(self._runner.cleanup())
            self._runner = None

    def close(self) -> None:
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()

    @property
    def collector(self) -> Collector:
        return self.app[COLLECTOR]

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run ``coro`` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # --- HTTP ----------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        chunked: bool = False,
    ) -> Answer:
        """One request on a kept-alive connection (a fresh one if the server closed it)."""
        self.requests += 1
        for attempt in (0, 1):
            reused = self._conn is not None
            if self._conn is None:
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            conn = self._conn
            try:
                if chunked and body is not None:
                    data = body
                    chunks = (data[i : i + 4096] for i in range(0, len(data), 4096))
                    conn.request(method, path, chunks, dict(headers or {}), encode_chunked=True)
                else:
                    conn.request(method, path, body, dict(headers or {}))
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionError):
                conn.close()
                self._conn = None
                if reused and attempt == 0:
                    continue  # the server had closed the kept-alive connection
                raise
            if resp.will_close:
                conn.close()
                self._conn = None
            return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        raise AssertionError("unreachable")

    def estimate(self, metric: str, token: str, **query: object) -> dict[str, Any]:
        """``GET /v1/estimates/{metric}`` as JSON; an error answer raises urllib's HTTPError.
        A maintained kind's estimate is waited for (``wait``, unless given: readiness, it
        answers once computed from every report acknowledged)."""
        query.setdefault("wait", 120)
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        request = urllib.request.Request(
            f"{self.url}/v1/estimates/{metric}?{qs}", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=150) as response:
            data: dict[str, Any] = json.load(response)
        return data
