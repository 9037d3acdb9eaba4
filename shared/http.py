"""HTTP to a collector, one stack for every reader of its API (the reporters, the
Analyst): the parts without I/O (a collector URL, timeouts, the bound on an answer's
size, an error answer read into the exception tree) and the blocking transport over
``http.client`` that the sync Reporter and the Analyst share. The async reporter's
aiohttp shell (client/aio.py) keeps the same timeouts and bound.

An error answer is read as ``{"error", "detail"}`` when its body is that JSON, the first
bytes of the body otherwise; 408, 429 and 5xx are worth retrying
(:class:`~ldpkit.errors.CollectorUnavailable` once retries are spent), other 4xx are
:class:`~ldpkit.errors.CollectorRejected`.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from ._json import loads_bounded
from ._validation import check_seconds, shown
from .errors import CollectorRejected, CollectorUnavailable, ParameterError, ProtocolError

MAX_ANSWER_BYTES = 16 * 2**20
"""The largest answer read (a batch answer is a few KiB; the metric list of a collector,
whose definitions are limited in size, rarely more than a few MiB)."""


@dataclass(frozen=True)
class Timeout:
    """Network timeouts in seconds: ``connect`` to open a connection, ``read`` for each
    wait on the answer, ``total`` for a whole request, from connecting to the last byte
    of the answer (an answer dripped a byte at a time never trips ``read``).
    ``Timeout(5.0)`` sets connect and read; ``total`` defaults to 60 s, or connect + read
    if that is longer."""

    connect: float = 5.0
    read: float | None = None
    total: float | None = None

    def __post_init__(self) -> None:
        connect = check_seconds(self.connect, "Timeout.connect")
        read = connect if self.read is None else check_seconds(self.read, "Timeout.read")
        total = self.total
        total = max(60.0, connect + read) if total is None else total
        object.__setattr__(self, "connect", connect)
        object.__setattr__(self, "read", read)
        object.__setattr__(self, "total", check_seconds(total, "Timeout.total"))

    @property
    def read_seconds(self) -> float:
        assert self.read is not None
        return self.read

    @property
    def total_seconds(self) -> float:
        assert self.total is not None
        return self.total

    @classmethod
    def coerce(cls, value: Timeout | float | None) -> Timeout:
        if value is None:
            return cls(5.0, 30.0)
        return value if isinstance(value, Timeout) else cls(value)


class NetworkError(OSError):
    """A request got no HTTP answer (refused, reset, timed out, DNS...)."""


class AnswerTimeout(NetworkError):
    """The connection was made and the request sent, but no whole answer came in time: the
    collector is there and slow (or stalled), which a reader must not report as "cannot
    reach it". ``seconds``: the timeout that ran out."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class AnswerTooLarge(OSError):
    """The collector's answer is larger than MAX_ANSWER_BYTES."""


@dataclass(frozen=True)
class CollectorUrl:
    """A collector's base URL, checked once (:meth:`of`) and passed on as this type:
    ``base`` as given without its trailing ``/``, and the parts a connection needs."""

    base: str
    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def of(cls, url: CollectorUrl | str) -> CollectorUrl:
        """``url`` checked: ParameterError unless it is ``http(s)://host[:port][/prefix]``
        (a CollectorUrl is returned as it is: it was checked when it was made)."""
        if isinstance(url, CollectorUrl):
            return url
        if not isinstance(url, str):
            raise ParameterError(f"collector URL must be a string, got {url!r}")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ParameterError(
                f"collector URL must be http(s)://host[:port][/prefix], got {url!r}"
            )
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(url.rstrip("/"), parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


def split_url(url: CollectorUrl | str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix) of a collector base URL (checked unless it is
    a :class:`CollectorUrl` already)."""
    checked = CollectorUrl.of(url)
    return checked.scheme, checked.host, checked.port, checked.prefix


@dataclass(frozen=True)
class HttpAnswer:
    """A response as the transports hand it over (header names lower-case)."""

    status: int
    headers: Mapping[str, str]
    body: bytes


def error_of(body: bytes) -> tuple[str, str]:
    """``(error, detail)`` of an error answer's body, each cut to a readable length."""
    try:
        data = loads_bounded(body[:65536])
        if isinstance(data, dict):
            error, detail = data.get("error", "error"), data.get("detail", "")
            return shown(error, 100).strip("'"), shown(detail, 500).strip("'")
    except ProtocolError:
        pass
    return "error", body[:200].decode("utf-8", "replace")


def transient(status: int) -> bool:
    """Whether retrying later may succeed: 408, 429 and server errors."""
    return status in (408, 429) or status >= 500


def http_error(
    status: int, body: bytes, *, source: str, hint: str = ""
) -> CollectorRejected | CollectorUnavailable:
    """The exception for an error answer of the collector at ``source`` (no retry left);
    ``hint`` is appended to a rejection's detail (what the reader may do about it)."""
    error, detail = error_of(body)
    if transient(status):
        return CollectorUnavailable(f"collector at {source} answered {status} {error}: {detail}")
    return CollectorRejected(status, error, detail + hint)


def too_large(announced: int | None = None) -> AnswerTooLarge:
    said = f" ({announced} announced)" if announced is not None else ""
    return AnswerTooLarge(f"the collector's answer is larger than {MAX_ANSWER_BYTES} bytes{said}")


def _read_bounded(response: http.client.HTTPResponse) -> bytes:
    """The answer's body, refused past MAX_ANSWER_BYTES (before reading, if its length says so)."""
    if response.length is not None and response.length > MAX_ANSWER_BYTES:
        raise too_large(response.length)
    data = response.read(MAX_ANSWER_BYTES + 1)
    if len(data) > MAX_ANSWER_BYTES:
        raise too_large()
    if response.length:  # read(amt) returns short, without an error, if the socket closed
        raise http.client.IncompleteRead(data, response.length)
    if not response.isclosed():
        response.read()  # the end of a chunked body (nothing more: it is under the bound)
    return data


_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
"""What a request on a kept-alive connection the server closed while idle fails with."""


class HttpTransport:
    """Blocking HTTP/1.1 over one kept-alive connection (``http.client``)."""

    def __init__(
        self, url: CollectorUrl | str, timeout: Timeout, ssl_context: ssl.SSLContext | None = None
    ):
        self.scheme, self.host, self.port, self.prefix = split_url(url)
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.scheme == "https":
            context = self.ssl_context or ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout.connect, context=context
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout.connect)
        conn.connect()
        return conn

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: Timeout | None = None,
    ) -> HttpAnswer:
        """One request and its whole answer, within ``timeout.total`` seconds (a timer
        shuts the socket down at the deadline, whatever each read waits) and at most
        MAX_ANSWER_BYTES of body; ``timeout``: this request's, instead of the transport's
        (a query that asks the collector to wait). NetworkError otherwise; AnswerTimeout
        once connected (the collector is there but did not answer in time)."""
        timeout = timeout or self.timeout
        with self._lock:
            deadline = time.monotonic() + timeout.total_seconds
            for attempt in range(2):
                reused = self._conn is not None
                expired = threading.Event()
                sent = threading.Event()
                try:
                    return self._exchange(
                        method, path, body, headers, timeout, deadline, (expired, sent)
                    )
                except (http.client.HTTPException, OSError) as exc:
                    self._drop()
                    if expired.is_set():
                        raise AnswerTimeout(
                            f"no complete answer within the {timeout.total_seconds:g} s "
                            "deadline (Timeout.total)",
                            timeout.total_seconds,
                        ) from exc
                    if sent.is_set() and isinstance(exc, TimeoutError):
                        raise AnswerTimeout(
                            f"no answer within the {timeout.read_seconds:g} s read timeout "
                            "(Timeout.read)",
                            timeout.read_seconds,
                        ) from exc
                    if not (reused and attempt == 0 and isinstance(exc, _STALE)):
                        raise NetworkError(f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _exchange(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: Timeout,
        deadline: float,
        events: tuple[threading.Event, threading.Event],
    ) -> HttpAnswer:
        """One attempt, on the kept-alive connection (a new one if none); a watchdog sets
        ``events[0]`` (expired) and ends it at ``deadline``; ``events[1]`` (sent) is set
        once the request is sent."""
        expired, sent = events
        watchdog: threading.Timer | None = None
        try:
            conn = self._conn if self._conn is not None else self._connect()
            self._conn = conn
            assert conn.sock is not None
            conn.sock.settimeout(timeout.read_seconds)
            watchdog = threading.Timer(
                max(0.0, deadline - time.monotonic()), self._expire, (conn, expired)
            )
            watchdog.daemon = True
            watchdog.start()
            conn.request(method, self.prefix + path, body=body, headers=headers)
            sent.set()
            response = conn.getresponse()
            data = _read_bounded(response)
            if expired.is_set():
                raise TimeoutError("the deadline passed")
        finally:
            if watchdog is not None:
                watchdog.cancel()
        if response.will_close:
            self._drop()
        return HttpAnswer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)

    @staticmethod
    def _expire(conn: http.client.HTTPConnection, expired: threading.Event) -> None:
        """The deadline passed: end the blocked read (the request then fails)."""
        expired.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()
