"""The asynchronous reporter: a background asyncio task and an aiohttp transport.

>>> from ldpkit.client import AsyncReporter
>>> async def main() -> None:                                        # doctest: +SKIP
...     async with AsyncReporter("http://127.0.0.1:8787", token="app-secret",
...                              state_dir="~/.myapp/ldpkit") as r:
...         await r.report("theme", "dark")

Same core, same store and same behaviour as :class:`~ldpkit.client.Reporter`. ``report``
runs on the event loop (a perturbation and one short SQLite commit, about 0.1 ms); the
flush's disk work (reading a batch, the fsync before sending, deleting acknowledged rows)
runs in a worker thread so the loop never waits on the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from types import TracebackType
from typing import Protocol, Self

import aiohttp

from ..http import MAX_ANSWER_BYTES, CollectorUrl, HttpAnswer, NetworkError, Timeout, too_large
from .base import Generator, ReporterBase, Values
from .results import FlushResult, ReportReceipt
from .steps import Disk, Locked, Op, R, Request, Stepper, Steps, Wait


async def _read_bounded(response: aiohttp.ClientResponse) -> bytes:
    """The answer's body, refused past MAX_ANSWER_BYTES (before reading, if its length says so)."""
    length = response.content_length
    if length is not None and length > MAX_ANSWER_BYTES:
        raise too_large(length)
    data = bytearray()
    async for chunk in response.content.iter_chunked(65536):
        data += chunk
        if len(data) > MAX_ANSWER_BYTES:
            raise too_large()
    return bytes(data)


class AsyncTransport(Protocol):
    async def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer: ...

    async def close(self) -> None: ...


class AiohttpTransport:
    """aiohttp with one session (connection pool), created on first use in the loop."""

    def __init__(
        self, url: CollectorUrl | str, timeout: Timeout, ssl_context: ssl.SSLContext | None = None
    ):
        self.url = CollectorUrl.of(url).base
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(
                    total=self.timeout.total_seconds,
                    connect=self.timeout.connect,
                    sock_read=self.timeout.read_seconds,
                ),
                connector=aiohttp.TCPConnector(ssl=self.ssl_context or True),
            )
        return self._session

    async def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer:
        try:
            async with self._client().request(
                method, self.url + path, data=body, headers=headers
            ) as response:
                data = await _read_bounded(response)
                return HttpAnswer(
                    response.status, {k.lower(): v for k, v in response.headers.items()}, data
                )
        except TimeoutError as exc:
            raise NetworkError(
                f"no complete answer within the {self.timeout.total_seconds:g} s deadline "
                "(Timeout.total), or a read timed out"
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise NetworkError(f"{type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class AsyncReporter(ReporterBase[AsyncTransport]):
    """The asyncio twin of :class:`~ldpkit.client.Reporter` (same parameters).

    Use ``async with AsyncReporter(...) as r`` (or ``await r.start()`` and ``await r.aclose()``);
    ``report``, ``simulate``, ``flush`` and ``refresh_definitions`` are coroutines, ``budget()`` and
    ``pending`` are not (they only read local state).
    """

    def _http_transport(self) -> AsyncTransport:
        return AiohttpTransport(self._settings.collector, self.timeout)

    def _open(self) -> None:
        # asyncio objects belong to a running loop: made in start(), not here.
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._closing = False

    async def start(self) -> None:
        """Start the background flush task (``async with`` or the first ``report`` does it)."""
        self._check_open()
        if self._wake is None:
            self._locks = {"send": asyncio.Lock(), "definitions": asyncio.Lock()}
            self._wake = asyncio.Event()
        if self._background and self._task is None:
            self._task = asyncio.create_task(self._do(self._background_loop()), name="ldpkit-flush")

    async def aclose(self, *, flush: bool = True) -> None:
        """Stop the background task, try one last delivery, close the session and store."""
        if self._closed or self._closing:
            return
        self._closing = True
        try:
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
                self._task = None
            if flush and self._wake is not None:
                await self._do(self._last_delivery())
        finally:
            self._closed = True
            await self._transport.close()
            self._state.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def report(self, metric: str, value: object) -> ReportReceipt:
        """See :meth:`ldpkit.client.Reporter.report`."""
        await self._ready()
        if self._state.knows(metric):  # nothing to fetch: no steps to drive
            return self._reported(metric, value)
        return await self._do(self._reporting(metric, value))

    async def simulate(self, metric: str, values: Values, *, rng: Generator | None = None) -> int:
        """See :meth:`ldpkit.client.Reporter.simulate`."""
        await self._ready()
        return await self._do(self._simulating(metric, values, rng))

    async def flush(self, *, max_attempts: int | None = None) -> FlushResult:
        """See :meth:`ldpkit.client.Reporter.flush`."""
        await self._ready()
        return await self._do(self._flush(max_attempts))

    async def refresh_definitions(self) -> None:
        """Fetch ``GET /v1/metrics`` now (with If-None-Match) and cache the answer."""
        await self._ready()
        await self._do(self._refreshing())

    async def _ready(self) -> None:
        self._check_open()
        if self._wake is None:
            await self.start()

    async def _do(self, steps: Steps[R]) -> R:
        """Run ``steps`` to its end, performing each request it makes (disk work in a
        worker thread, so the loop never waits on the disk)."""
        for op in (stepper := Stepper(steps)):
            with stepper.answering():
                stepper.reply = await self._perform(op)
        return stepper.result

    async def _perform(self, op: Op) -> object:
        if isinstance(op, Request):
            answer = await self._transport.request(op.method, op.path, op.body, op.headers)
            self._state.observe_answer(answer)  # the collector's time
            return answer
        if isinstance(op, Disk):
            return await asyncio.to_thread(op.call)
        if isinstance(op, Locked):
            async with self._locks[op.lock]:
                return await self._do(op.steps)
        if isinstance(op, Wait):
            assert self._wake is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=op.seconds)
            self._wake.clear()
            return True
        await asyncio.sleep(op.seconds)
        return None

    def _wake_flusher(self) -> None:
        if self._wake is not None:
            self._wake.set()
