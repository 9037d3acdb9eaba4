"""Admission of batches (``POST /v1/reports``): one :class:`Admission` per collector
counts the batches received and not yet answered, the bytes of request bodies held
(uploads.py), keeps the per-token rate limits (limits.py) and the per-source ones of
device tokens (sources.py), and counts each batch's outcome.
The ingest route holds a batch in :meth:`Admission.batch` until answered; whatever way it
leaves, what it held is released."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ..errors import RateLimited
from .config import CollectorConfig
from .limits import IngestLimiter
from .responses import ApiError, domain_error
from .sources import Sources
from .store import Store
from .telemetry import Telemetry
from .uploads import BodyPool, Held


@dataclass
class Ticket:
    """One batch's place in the collector, from :meth:`Admission.batch`: ``held`` the
    bytes of its body, a batch slot once :meth:`received`."""

    admission: Admission
    token: bytes  # the digest of the sender's token
    held: Held
    started: float | None = None  # perf_counter when it took a batch slot

    def received(self) -> None:
        """Its body arrived: take a batch slot (429 if they filled while it arrived)."""
        admission = self.admission
        if admission.admitted >= admission.config.max_pending_batches:
            raise admission.busy()
        admission.admitted += 1
        self.started = time.perf_counter()

    def charge(self, reports: int) -> None:
        """Charge its ``reports`` to its token: RateLimited (nothing charged) if over."""
        if (wait := self.admission.limiter.take(self.token, reports)) is not None:
            raise RateLimited(wait)


class Admission:
    def __init__(self, config: CollectorConfig, store: Store, telemetry: Telemetry) -> None:
        self.config = config
        self.store = store
        self.telemetry = telemetry
        self.admitted = 0  # batches received (body read) and not yet answered
        self.bodies = BodyPool(config.max_pending_bytes)  # request bodies held, by bytes
        bodies = self.bodies
        telemetry.bodies_receiving.set_function(lambda: bodies.receiving)
        telemetry.bodies_held_bytes.set_function(lambda: bodies.held)
        self.limiter = IngestLimiter(config.ingest_reports_per_second, config.ingest_burst)
        self.sources = Sources(config)

    def overloaded(self, incoming_bytes: int = 0) -> bool:
        """Whether to refuse a new batch: ``max_pending_batches`` batches are received and
        not yet answered, or wait for the store; a body of ``incoming_bytes`` would not fit
        in ``max_pending_bytes`` beside the bodies held (one body alone always fits); or
        the store's queue holds ``max_pending_reports``. Bodies still arriving count only
        by the bytes that arrived (see uploads.py)."""
        limit = self.config.max_pending_batches
        return (
            self.admitted >= limit
            or self.bodies.full_for(incoming_bytes)
            or self.store.pending_batches >= limit
            or self.store.pending_reports >= self.config.max_pending_reports
        )

    def busy(self) -> ApiError:
        detail, retry = "the store is behind; retry later", str(self.config.retry_after)
        return ApiError(429, "too_many_requests", detail, headers={"Retry-After": retry})

    @asynccontextmanager
    async def batch(
        self, token: bytes, announced: int | None, device_source: bytes | None = None
    ) -> AsyncIterator[Ticket]:
        """Hold one batch of ``token`` (its announced length ``announced``) until answered.

        Refused before its body is read when the token is over its rate, or a device
        token's source (``device_source``) over its own (RateLimited), or the collector
        is overloaded (429). A body then holds what has arrived (see uploads.py), so its
        announced size only decides whether it may start."""
        try:
            if (wait := self.limiter.blocked(token)) is not None:
                raise RateLimited(wait)
            if (
                device_source is not None
                and (wait := self.sources.limiter.take(device_source, 1)) is not None
            ):
                raise RateLimited(wait, error="source_rate_limited")
            if self.overloaded(announced or 1):
                raise self.busy()
            async with self.bodies.hold() as held:
                ticket = Ticket(self, token, held)
                try:
                    yield ticket
                finally:
                    if ticket.started is not None:
                        self.admitted -= 1
        except BaseException as exc:
            self._count_refusal(exc)
            raise
        if ticket.started is not None:
            self.telemetry.batch_seconds.observe(time.perf_counter() - ticket.started)
        self.telemetry.batches.labels("ok").inc()

    def _count_refusal(self, exc: BaseException) -> None:
        """Count a batch answered with an error, by its answer (a client gone, or a bug
        answered 500, is not counted)."""
        if (answer := domain_error(exc, self.config.retry_after)) is None:
            return
        if answer.error in ("rate_limited", "source_rate_limited", "over_device_cap"):
            outcome = answer.error
        elif answer.status == 429:
            outcome = "throttled"
            self.telemetry.throttled.inc()
        else:
            outcome = "bad_request" if answer.status < 500 else "error"
        self.telemetry.batches.labels(outcome).inc()
