"""Serving the app on a socket: aiohttp's low-level server, with three changes.

- **JSON errors from the HTTP parser.** A request aiohttp cannot parse (a NUL in a header,
  a header over 8,190 bytes, a bad Content-Length...) never reaches the app and its
  middlewares; aiohttp answers it with a text/plain body quoting the parser's message,
  which quotes the offending bytes (an ``Authorization`` header, say). Our connection
  handler answers those as JSON ``{"error", "detail"}`` with a fixed detail per status.
- **An access log without query strings** (a token sent as ``?access_token=`` must not
  be written down) and without client addresses unless asked for.
- **Bodies read while stopping.** aiohttp drops the bytes a connection receives once a
  graceful stop began, so a body half arrived at SIGTERM was answered 408; it is read.
- **A header timeout.** aiohttp's keep-alive timer closes a connection whose next
  request has not *completely* arrived in ``keepalive_timeout`` seconds, counted from
  the connection's opening or the previous answer: with ``header_timeout`` there, a
  client that sends half a request head (or nothing) is closed after that long.

``web.run_app`` offers no hook for the first, so :func:`serve` runs the app as run_app
does (an :class:`~aiohttp.web.AppRunner`, SIGTERM/SIGINT for a graceful stop) with its
own connection handler on the listening socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from .config import CollectorConfig
from .responses import STATUS_CODES, error_response

# What to say about a request the HTTP parser refused (never the parser's own message,
# which quotes the bytes it choked on).
PARSER_DETAILS: dict[int, str] = {
    400: "malformed HTTP request (bad request line, header or framing)",
    413: "request too large",
    414: "request line too long",
    431: "request headers too large",
    501: "unsupported transfer coding",
}
MAX_LOGGED_PATH = 200


class JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler, answering requests it cannot parse with JSON, and
    reading the body of a request in progress while the collector stops."""

    _body: StreamReader | None = None  # the latest request's body (its payload)

    def data_received(self, data: bytes) -> None:
        # A graceful stop marks every connection closing, and aiohttp then drops what
        # arrives: a batch whose head came before SIGTERM and its body after would wait
        # out upload_grace and be answered 408 "too slow". Its body is read while it is
        # due: not complete, and neither answered nor lost (aiohttp sets an exception on
        # it then), also before its handler starts (on Python 3.11 a loop turn after the
        # request is taken). No new request is started: the connection still closes after
        # this answer. Not once the connection is gone (force_close: no transport; after
        # connection_lost no parser either), as in aiohttp, not even resume_reading's b"".
        body = self._body
        if (
            (self._close or self._force_close)
            and self.transport is not None
            and body is not None
            and not body.is_eof()
            and body.exception() is None
        ):
            flags = self._close, self._force_close
            self._close = self._force_close = False
            try:
                super().data_received(data)
            finally:
                self._close, self._force_close = flags
            return
        taken = self._request_count
        super().data_received(data)
        if self._request_count != taken and self._messages:
            self._body = self._messages[-1][1]

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        error = STATUS_CODES.get(status, f"http_{status}")
        detail = PARSER_DETAILS.get(status, "the request could not be handled")
        if status >= 500 and status != 501:
            # Unexpected (the app's middlewares answer its own errors): the parent logs
            # it with its traceback; its text answer is discarded.
            super().handle_error(request, status, exc, None)
            error, detail = "internal_error", "unexpected error; see the collector's log"
        else:
            # A client's malformed request: one line at INFO, never the parser's message
            # (it quotes the request's bytes) nor, unless configured, the address.
            if request.writer.output_size > 0:
                raise ConnectionError("the answer was started; cannot send an error")
            self.logger.info(
                "Error handling request from %s: %s (status %d; request not logged)",
                request.remote,
                type(exc).__name__ if exc is not None else "error",
                status,
            )
        response = error_response(status, error, detail)
        response.force_close()
        return response


class AccessLog(AbstractAccessLogger):
    """One line per request: ``"METHOD /path HTTP/1.1" status bytes seconds``, the path
    without its query string (a token may be sent there), cut at 200 characters; the
    client address first only when the format starts with ``%a`` (``log_addresses``)."""

    def log(self, request: Any, response: web.StreamResponse, time: float) -> None:
        path = request.rel_url.raw_path  # percent-encoded: no raw newline can split a line
        if len(path) > MAX_LOGGED_PATH:
            path = path[:MAX_LOGGED_PATH] + "..."
        version = request.version
        line = (
            f'"{request.method[:16]} {path} HTTP/{version.major}.{version.minor}" '
            f"{response.status} {response.body_length} {time:.6f}s"
        )
        if self.log_format.startswith("%a"):
            line = f"{request.remote} {line}"
        self.logger.info(line)


def serve(
    app: web.Application,
    sock: socket.socket,
    *,
    config: CollectorConfig,
    access_log: logging.Logger | None,
    access_log_format: str,
    announce: Callable[[], None],
) -> None:
    """Serve ``app`` on ``sock`` until SIGTERM or SIGINT, then stop gracefully (answers in
    flight finish within ``shutdown_timeout``, the app's cleanup runs). Exceptions from
    the app's startup propagate."""
    options: dict[str, Any] = {
        "keepalive_timeout": config.header_timeout,
        "access_log_class": AccessLog,
        "access_log_format": access_log_format,
        "lingering_time": min(10.0, max(1.0, config.upload_grace)),
        # Compressed bodies are refused (uploads.py): never inflate them, not even the
        # first buffer the parser would inflate before the app sees the request.
        "auto_decompress": False,
        "access_log": access_log,  # None: no access log
    }
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    main = loop.create_task(_serve(app, sock, config, options, announce), name="ldpkit-serve")
    try:
        with contextlib.suppress(web.GracefulExit, KeyboardInterrupt):
            loop.run_until_complete(main)
    finally:
        main.cancel()
        with contextlib.suppress(asyncio.CancelledError, web.GracefulExit, KeyboardInterrupt):
            loop.run_until_complete(main)
        rest = asyncio.all_tasks(loop)
        for task in rest:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()


async def _serve(
    app: web.Application,
    sock: socket.socket,
    config: CollectorConfig,
    options: dict[str, Any],
    announce: Callable[[], None],
) -> None:
    runner = web.AppRunner(
        app, handle_signals=True, access_log=None, shutdown_timeout=config.shutdown_timeout
    )
    await runner.setup()  # the app's startup: opens the store
    loop = asyncio.get_running_loop()
    manager = runner.server
    assert manager is not None

    def connection() -> RequestHandler:
        return JsonErrorHandler(manager, loop=loop, **options)

    listener = None
    try:
        listener = await loop.create_server(connection, sock=sock, backlog=1024)
        announce()
        await asyncio.Event().wait()  # until SIGTERM/SIGINT (GracefulExit) or cancelled
    finally:
        if listener is not None:
            listener.close()  # stop accepting; the runner closes idle connections
        await runner.cleanup()
