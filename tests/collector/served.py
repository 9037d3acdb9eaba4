"""The real collector app served on a loopback port by an event loop in a thread.

Synchronous tests (hypothesis properties, matrices) talk to it over HTTP with
:meth:`ServedCollector.request` and reach its store with :meth:`ServedCollector.call`.
"""

from __future__ import annotations

import asyncio
import http.client
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from ldpkit.collector import create_app
from ldpkit.collector.config import CollectorConfig
from ldpkit.collector.keys import COLLECTOR
from ldpkit.collector.service import Collector
from ldpkit.collector.store import Store

T = TypeVar("T")


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes


class ServedCollector:
    def __init__(self, config: CollectorConfig, *, store: Store | None = None) -> None:
        self.config = config
        self._store = store
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._conn: http.client.HTTPConnection | None = None
        self.port = 0
        self.requests = 0  # HTTP requests sent through request()

    # --- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> ServedCollector:
        self._thread.start()
        self.call(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._runner is not None:
            self.call(self._runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()

    async def _start(self) -> None:
        self.app = create_app(self.config, store=self._store)
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

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
