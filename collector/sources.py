"""Where a batch comes from, kept only as a keyed id: the per-source rate limit of device
tokens and the sender windows of screening are keyed by it.

A source is the peer address of the connection (an IPv6 address by its /64: one host
is given a whole /64), or, when ``[collector] source_header`` names a header (a reverse
proxy's ``X-Forwarded-For`` or ``X-Real-IP``) and the peer is one of ``trusted_proxies``,
the last address in that header (the one the proxy appended: earlier ones are whatever
the client wrote). Its id is an HMAC-SHA-256 of the address under a random key drawn when
the process starts and never stored: ids cannot be turned back into addresses (not even
by trying every IPv4 address), differ between processes and restarts, and nothing keeps
an address (the access log only with ``log_addresses``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os

from aiohttp import web

from .config import CollectorConfig
from .limits import IngestLimiter

log = logging.getLogger("ldpkit.collector")

SOURCE_ID_BYTES = 8
MAX_SOURCES = 200_000
"""Rate-limit buckets of sources kept (the least recently seen go first: they start full)."""


class Sources:
    def __init__(self, config: CollectorConfig) -> None:
        self._key = os.urandom(32)
        self._header = config.source_header
        self._trusted = [ipaddress.ip_network(n, strict=False) for n in config.trusted_proxies]
        self._warned = False
        self.limiter = IngestLimiter(
            config.device_batches_per_minute / 60.0,
            config.device_burst,
            max_keys=MAX_SOURCES,
        )

    def _address(self, request: web.Request) -> str:
        peer = request.remote or ""
        if not self._header:
            if not self._warned and "X-Forwarded-For" in request.headers:
                self._warned = True
                log.warning(
                    "requests carry X-Forwarded-For but [collector] source_header is not "
                    "set: every request through that proxy counts as one source (see "
                    "docs/deployment.md, Public tokens)"
                )
            return peer
        forwarded = request.headers.get(self._header)
        if forwarded and _within(peer, self._trusted):
            return forwarded.rsplit(",", 1)[-1].strip()
        return peer

    def source(self, request: web.Request) -> bytes:
        """The keyed id of the request's source."""
        text = self._address(request)
        try:
            address = ipaddress.ip_address(text)
        except ValueError:  # a Unix socket, or a header that is no address
            packed = text.encode("utf-8", "surrogateescape")
        else:
            mapped = address.ipv4_mapped if address.version == 6 else None
            packed = mapped.packed if mapped else address.packed[:8]  # IPv6: its /64
        return hmac.new(self._key, packed, hashlib.sha256).digest()[:SOURCE_ID_BYTES]


def _within(peer: str, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in network for network in networks)
