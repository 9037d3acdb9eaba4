"""The collector's connection handler (collector/serving.py) driven directly, on a fake
transport: what aiohttp's own handler guarantees still holds with its changes."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.web_server import Server

from ldpkit.collector.serving import JsonErrorHandler


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.written = bytearray()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def write(self, data: Any) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_a_connection_lost_while_its_body_is_read_in_a_stop_takes_no_more_data() -> None:
    """While the collector stops, the body of a request in progress is still read; once the
    connection is lost (force_close: no transport, no parser), nothing is parsed any more,
    as in aiohttp's handler: the body's reader resuming the connection as it drains
    (``resume_reading`` calls ``data_received(b"")``) failed on the parser's assertion."""
    started, release, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
    requests: list[web.BaseRequest] = []

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        requests.append(request)
        started.set()
        try:
            await release.wait()
            return web.Response(text="ok")
        finally:
            done.set()

    loop = asyncio.get_running_loop()
    protocol = JsonErrorHandler(Server(handler), loop=loop)
    protocol.connection_made(FakeTransport())
    protocol.data_received(b"POST / HTTP/1.1\r\nHost: c\r\nContent-Length: 10\r\n\r\nabc")
    await started.wait()
    protocol.close()  # a graceful stop begins (aiohttp's pre_shutdown)
    protocol.data_received(b"def")  # still read: the request is in progress
    assert requests[0].content.total_bytes == 6
    protocol.connection_lost(None)  # the client goes away
    protocol.resume_reading()  # as a StreamReader does when its buffer drains
    protocol.data_received(b"ghij")
    assert requests[0].content.total_bytes == 6
    release.set()
    await done.wait()


async def test_a_body_arriving_before_its_handler_starts_is_read_in_a_stop() -> None:
    """A request taken by the connection whose handler has not started yet (on Python
    3.11 its task runs a loop turn later) when the stop begins: its body's next bytes are
    read, not dropped (they were: the body then waited out upload_grace for a 408)."""
    requests: list[web.BaseRequest] = []

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        requests.append(request)
        body = await request.read()
        return web.Response(body=body)

    loop = asyncio.get_running_loop()
    protocol = JsonErrorHandler(Server(handler), loop=loop)
    transport = FakeTransport()
    protocol.connection_made(transport)
    await asyncio.sleep(0)  # the connection waits for a request
    protocol.data_received(b"POST / HTTP/1.1\r\nHost: c\r\nContent-Length: 6\r\n\r\nabc")
    await asyncio.sleep(0)  # the request is taken; its handler may not have started
    protocol.close()  # a graceful stop begins (aiohttp's pre_shutdown)
    protocol.data_received(b"def")
    for _ in range(100):  # until the answer is written (a few loop turns)
        if transport.written.endswith(b"abcdef"):
            break
        await asyncio.sleep(0)
    assert requests and requests[0].content.total_bytes == 6
    assert transport.written.startswith(b"HTTP/1.1 200") and transport.written.endswith(b"abcdef")
