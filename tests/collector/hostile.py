"""Raw HTTP for the attack tests: sockets that send what a hostile client would."""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ldpkit import wire

from .helpers import auth


@dataclass(frozen=True)
class RawAnswer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def address(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def head(method: str, path: str, headers: Mapping[str, str]) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: 127.0.0.1",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Raw:
    """One TCP connection to the collector, written and read by hand."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(address(url), timeout=timeout)
        self._buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()

    def _fill(self, deadline: float) -> bool:
        """Read more; False at EOF (or a reset)."""
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return False
        if not chunk:
            return False
        self._buffer += chunk
        return True

    def answer(self, timeout: float = 30.0) -> RawAnswer | None:
        """The next HTTP answer, or None if the connection closed first."""
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self._buffer:
            if not self._fill(deadline):
                return None
        raw_head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        status_line, *lines = raw_head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(self._buffer) < length:
            if not self._fill(deadline):
                break
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return RawAnswer(int(status_line.split()[1]), headers, body)

    def closed_within(self, timeout: float) -> bool:
        """Whether the server closes the connection within ``timeout`` (data is discarded)."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if not self._fill(deadline):
                    return True
        except TimeoutError:
            return False
        return False


def request(
    url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> RawAnswer:
    """One ordinary request (http.client, a fresh connection)."""
    host, port = address(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body, dict(headers or {}))
        response = conn.getresponse()
        data = response.read()
        return RawAnswer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
    finally:
        conn.close()


def post_batch(url: str, body: bytes, token: str = "relay") -> RawAnswer:
    headers = {**auth(token), "Content-Type": wire.CONTENT_TYPE}
    return request(url, "POST", "/v1/reports", body, headers)


def prometheus(url: str) -> str:
    return request(url, "GET", "/metrics").body.decode()


def counter(text: str, name: str, **labels: str) -> float:
    """The value of one sample of ``/metrics`` (0 if absent)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        sample, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in sample for k, v in labels.items()):
            total += float(value)
    return total
