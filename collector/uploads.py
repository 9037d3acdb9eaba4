"""Request bodies: read under a memory bound and a minimum upload rate.

Every body the collector holds in memory (being received, or received and waiting for
its answer) counts in one :class:`BodyPool` of ``max_pending_bytes``, **by the bytes
that have actually arrived**: a body announced as 16 MiB and sent a byte at a time holds
a byte, not 16 MiB, so slow senders cannot reserve the pool and starve everyone
(issue 11). A chunk that would take the pool over its bound, while other bodies hold
part of it, ends that request with ``429`` (one body alone may always reach
``max_body_bytes``), so the bytes held stay below ``max_pending_bytes`` plus one body.

:func:`read_body` also enforces the upload rate: after ``upload_grace`` seconds a body
must keep arriving at ``min_upload_rate`` bytes per second on average (counted on the
wire: at t seconds, ``min_upload_rate * (t - upload_grace)`` bytes or more), else it is
answered ``408 request_timeout`` and its connection closed; what it held is released at
once. Compressed bodies (``Content-Encoding``) are refused before they are inflated:
reports are random bytes and do not compress, so compression could only serve to send
a small body that inflates into a large one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .responses import ApiError


class ClientGone(Exception):
    """The client closed the connection before its body arrived (nothing to answer)."""


@dataclass
class Held:
    """What one request holds of the pool."""

    pool: BodyPool
    bytes: int = 0

    def take(self, size: int, retry_after: int) -> None:
        """Hold ``size`` more bytes, or raise 429 if the pool is full of other bodies."""
        pool = self.pool
        others = pool.held - self.bytes
        if others > 0 and pool.held + size > pool.limit:
            raise ApiError(
                429,
                "too_many_requests",
                "the collector holds as many request bodies as it may; retry later",
                headers={"Retry-After": str(retry_after)},
            )
        pool.held += size
        self.bytes += size


class BodyPool:
    """The bytes of request bodies held in memory, against ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.receiving = 0  # bodies being received right now

    def full_for(self, size: int) -> bool:
        """Whether a new body of ``size`` bytes would not fit now (one body always fits)."""
        return self.held > 0 and self.held + size > self.limit

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[Held]:
        held = Held(self)
        try:
            yield held
        finally:
            self.held -= held.bytes


def check_encoding(request: web.BaseRequest) -> None:
    """415 for a compressed body (before anything is inflated)."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ApiError(
            415,
            "unsupported_media_type",
            "Content-Encoding is not accepted: send the body uncompressed (ldpkit reports "
            "are random bytes and do not compress)",
        )


async def read_body(
    request: web.BaseRequest,
    held: Held,
    *,
    limit: int,
    grace: float,
    min_rate: int,
    retry_after: int,
) -> bytearray:
    """The whole body, holding its bytes in ``held`` as they arrive (see the module doc).

    Raises ApiError 413 (over ``limit``), 408 (too slow), 429 (the pool is full), 400
    (broken chunked framing), or ClientGone."""
    body = bytearray()
    if not request.body_exists:
        return body
    content = request.content
    started = time.monotonic()
    pool = held.pool
    pool.receiving += 1
    try:
        while True:
            # The bytes so far buy time: the body is late once min_rate * (t - grace)
            # exceeds them (bodies are not compressed: these are the bytes on the wire).
            deadline = started + grace + len(body) / min_rate
            wait = deadline - time.monotonic()
            try:
                if wait <= 0:
                    raise TimeoutError
                async with asyncio.timeout(wait):
                    chunk = await content.readany()
            except TimeoutError:
                raise ApiError(
                    408,
                    "request_timeout",
                    f"the body arrived slower than {min_rate} bytes per second (after "
                    f"{grace:g} s); send it again",
                    close=True,
                ) from None
            except HttpProcessingError:
                raise ApiError(400, "bad_request", "malformed body framing", close=True) from None
            except ConnectionError:
                raise ClientGone from None
            if not chunk:
                break
            if len(body) + len(chunk) > limit:
                raise ApiError(413, "payload_too_large", f"body is over the limit of {limit} bytes")
            held.take(len(chunk), retry_after)
            body += chunk
    finally:
        pool.receiving -= 1
    return body  # not copied into bytes: msgpack reads a bytearray as well
