"""Per-token ingest rate limits: one token bucket per ingest token, in memory.

``[collector] ingest_reports_per_second = R`` (0: no limit) and ``ingest_burst = B``: a
token's bucket fills at R reports per second up to B. A batch of n reports (an empty
batch counts as 1) needs ``min(n, B)`` in the bucket and then takes n, so a batch larger
than the burst is let through when the bucket is full and leaves it in debt: over any
time, a token sends at most ``B + R * t`` reports plus one batch. A refused batch is
answered ``429 rate_limited`` with ``Retry-After`` (whole seconds, at least 1: when the
bucket will hold enough) and nothing of it is stored.

Buckets are keyed by the SHA-256 digest of the token (never the token), and only tokens
that passed authentication get one, so their number is bounded by the configured tokens.
The same buckets limit device-token batches per source (``collector/sources.py``), keyed
by a keyed hash of the source address, in a bounded number of buckets.
The state is per process: with N replicas behind a load balancer a token may send up to
N times the rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    level: float
    updated: float


class IngestLimiter:
    """Token buckets by key; ``max_keys`` bounds how many are kept (the least recently used
    goes first: it starts full again if it comes back, so a bound only ever lets more
    through)."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int | None = None,
    ) -> None:
        self.rate = float(rate)
        self.burst = int(burst)
        self._clock = clock
        self._buckets: dict[bytes, _Bucket] = {}
        self.max_keys = max_keys

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def _bucket(self, key: bytes) -> _Bucket:
        now = self._clock()
        bucket = self._buckets.pop(key, None) or _Bucket(float(self.burst), now)
        self._buckets[key] = bucket  # the most recently used last
        if self.max_keys is not None and len(self._buckets) > self.max_keys:
            del self._buckets[next(iter(self._buckets))]
        elapsed = max(0.0, now - bucket.updated)
        bucket.level = min(float(self.burst), bucket.level + elapsed * self.rate)
        bucket.updated = now
        return bucket

    def _wait(self, bucket: _Bucket, needed: float) -> int | None:
        if bucket.level >= needed:
            return None
        return max(1, math.ceil((needed - bucket.level) / self.rate))

    def blocked(self, key: bytes) -> int | None:
        """Seconds to wait if the token could not send even one report now, else None
        (checked before a body is read, so a token in debt costs no body read)."""
        return self._wait(self._bucket(key), 1.0) if self.enabled else None

    def take(self, key: bytes, reports: int) -> int | None:
        """Take a batch of ``reports``: None if it may go (the bucket is charged), else
        the seconds to wait (nothing is charged)."""
        if not self.enabled:
            return None
        cost = max(1, reports)
        bucket = self._bucket(key)
        wait = self._wait(bucket, float(min(cost, self.burst)))
        if wait is None:
            bucket.level -= cost
        return wait
