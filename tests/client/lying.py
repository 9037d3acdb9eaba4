"""A collector that lies: a loopback HTTP server whose answers a test scripts.

Each connection's requests are read (head and ``Content-Length`` body) and handed to the
scenario, which writes whatever it wants on the socket: deeply nested JSON, impossible
counts, an answer dripped a byte at a time, a 300 MB body. ``sent`` counts the bytes the
server managed to write, so a test can tell how much of an answer the client read.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ldpkit.metrics import MetricDefinition


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Scenario = Callable[[Request, socket.socket, "LyingCollector"], None]


def answer(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def metrics_body(*definitions: MetricDefinition) -> bytes:
    return json.dumps({"metrics": [d.to_dict() for d in definitions]}).encode()


@dataclass
class LyingCollector:
    scenario: Scenario
    definitions: tuple[MetricDefinition, ...] = ()
    sent: int = 0
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def __enter__(self) -> LyingCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self._stop.set()
        # close() alone does not wake a thread blocked in accept() (Linux): shutdown does,
        # else every LyingCollector leaves its accepting thread behind (issue 28).
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for t in [self._accepting, *self._threads]:
            t.join(timeout=5)

    def write(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        try:
            with conn:
                conn.settimeout(30)
                while not self._stop.is_set():
                    while b"\r\n\r\n" not in buffer:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buffer += chunk
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    line, *lines = head.decode("latin-1").split("\r\n")
                    headers = {}
                    for h in lines:
                        k, _, v = h.partition(":")
                        headers[k.strip().lower()] = v.strip()
                    length = int(headers.get("content-length", "0"))
                    while len(buffer) < length:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buffer += chunk
                    body, buffer = buffer[:length], buffer[length:]
                    method, path, _ = line.split(" ", 2)
                    request = Request(method, path, headers, body)
                    self.requests.append(request)
                    if method == "GET" and path.endswith("/v1/metrics") and self.definitions:
                        self.write(conn, answer(200, metrics_body(*self.definitions)))
                        continue
                    self.scenario(request, conn, self)
        except OSError:
            return


def drip(data: bytes, every: float) -> Scenario:
    """Send ``data`` one byte every ``every`` seconds (until the client goes away)."""

    def scenario(request: Request, conn: socket.socket, server: LyingCollector) -> None:
        for i in range(len(data)):
            if server.stopped:
                return
            server.write(conn, data[i : i + 1])
            time.sleep(every)

    return scenario


def flood(total: int, *, chunked: bool = False) -> Scenario:
    """A 200 answer of ``total`` bytes of JSON-ish filler, as fast as the client reads."""

    def scenario(request: Request, conn: socket.socket, server: LyingCollector) -> None:
        if chunked:
            server.write(conn, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        else:
            server.write(conn, f"HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n".encode())
        block = b" " * 65536
        left = total
        while left > 0 and not server.stopped:
            piece = block[: min(left, len(block))]
            server.write(conn, b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            left -= len(piece)

    return scenario


def fixed(status: int, body: bytes) -> Scenario:
    def scenario(request: Request, conn: socket.socket, server: LyingCollector) -> None:
        server.write(conn, answer(status, body))

    return scenario
