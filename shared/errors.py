"""The one exception tree of ldpkit.

Every error ldpkit raises on purpose derives from :class:`LdpkitError`, so an app can
catch them all in one place. Errors about bad arguments also derive from ``ValueError``
or ``TypeError`` so that ordinary Python code handles them the usual way.

::

    LdpkitError
    ├── ParameterError (ValueError)       a mechanism, metric or query parameter is invalid
    │   └── QueryError                    an estimates query parameter (``param`` names it)
    ├── ConfigError (ValueError)          the collector's configuration is invalid
    ├── ReportError (ValueError)          a value or report does not fit its mechanism
    ├── ProtocolError (ValueError)        bytes on the wire do not follow protocol v1
    │   └── UnsupportedVersion            a wire format the collector no longer accepts
    ├── BudgetExceeded                    a report would overspend the privacy budget
    ├── OutboxFull                        the client's outbox is at its bound; nothing recorded
    ├── StateError                        the client's state directory cannot be used
    ├── UnknownMetric (LookupError)       the collector has no such metric (or version)
    ├── RateLimited                       an ingest token is over its rate; retry later
    ├── OverDeviceCap                     a device token's batch carries more than one device may
    ├── StoreError                        the collector's store failed; nothing was stored
    │   ├── StoreClosed                   the store is closing and takes no more work
    │   └── BatchNotStored                a batch of reports failed in the store
    └── TransportError                    the collector could not be reached or refused
        ├── CollectorUnavailable          network failure or 5xx after every retry
        │   ├── CollectorTimedOut         connected, but no answer within the timeout
        │   └── EstimatePending           the estimate is being computed; ask again later
        └── CollectorRejected             4xx: bad token, unknown metric, bad request
"""

from __future__ import annotations


class LdpkitError(Exception):
    """Base class of every error raised on purpose by ldpkit."""


class ParameterError(LdpkitError, ValueError):
    """A parameter (epsilon, domain size, bounds, level, ...) is invalid."""


class QueryError(ParameterError):
    """A query parameter is invalid; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param


class ConfigError(LdpkitError, ValueError):
    """The collector's configuration is invalid (the message names the file and key)."""


class ReportError(LdpkitError, ValueError):
    """A value to perturb, or a perturbed report, does not fit the mechanism."""


class ProtocolError(LdpkitError, ValueError):
    """Bytes on the wire do not follow the ldpkit protocol."""


class UnsupportedVersion(ProtocolError):
    """A batch in a wire format version the collector no longer takes (v1 unless ``accept_v1``)."""


class BudgetExceeded(LdpkitError):
    """A report would spend more privacy budget than is left in its period.

    The client fills the attributes: ``metric`` (the metric reported), ``scope``
    (``"metric"`` for the metric's own budget or ``"total"`` for the total across
    metrics), ``budget`` and ``left`` (epsilon), ``needed`` (the epsilon of the report)
    and ``renews_at`` (unix seconds, UTC, when the period ends and the budget renews).
    """

    def __init__(
        self,
        message: str,
        *,
        metric: str | None = None,
        scope: str | None = None,
        budget: float | None = None,
        left: float | None = None,
        needed: float | None = None,
        renews_at: float | None = None,
    ) -> None:
        super().__init__(message)
        self.metric = metric
        self.scope = scope
        self.budget = budget
        self.left = left
        self.needed = needed
        self.renews_at = renews_at


class OutboxFull(LdpkitError):
    """The client's durable outbox holds its maximum number of reports.

    Nothing was recorded and no budget was spent. Reports leave the outbox once the
    collector acknowledges them; ``rows`` and ``limit`` say how full it is.
    """

    def __init__(self, message: str, *, rows: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.rows = rows
        self.limit = limit


class StateError(LdpkitError):
    """The state directory cannot be used (permissions, corrupt secret, newer schema)."""


class UnknownMetric(LdpkitError, LookupError):
    """The collector has no metric of that name, or no such version of it: ``error`` is
    ``"unknown_metric"`` or ``"unknown_version"``, ``param`` the query parameter to blame
    (None for the path)."""

    def __init__(self, message: str, *, error: str = "unknown_metric", param: str | None = None):
        super().__init__(message)
        self.error = error
        self.param = param


class RateLimited(LdpkitError):
    """An ingest token (``error`` ``"rate_limited"``), or the source address of device-token
    batches (``"source_rate_limited"``), is over its rate limit: nothing of its batch was
    stored; it may send again in ``retry_after`` seconds."""

    def __init__(self, retry_after: int, *, error: str = "rate_limited") -> None:
        who = "this token" if error == "rate_limited" else "this source address"
        super().__init__(f"{who} is over its ingest rate limit; retry later")
        self.retry_after = retry_after
        self.error = error


class OverDeviceCap(LdpkitError):
    """A batch sent with a device (ingest) token carries more reports of one metric version
    and bucket than one device's budget ledger lets it queue: refused whole, nothing stored.
    ``metric``, ``fingerprint``, ``bucket``, ``cap`` (the most allowed) and ``sent``."""

    def __init__(self, metric: str, fingerprint: str, bucket: int, cap: int, sent: int) -> None:
        super().__init__(
            f"this batch carries {sent} reports of metric {metric!r} (version {fingerprint}) "
            f"for bucket {bucket}; one device may send at most {cap} (its budget ledger's "
            "limit): a device token carries one device's reports; use a relay token for "
            "server-side batching"
        )
        self.metric = metric
        self.fingerprint = fingerprint
        self.bucket = bucket
        self.cap = cap
        self.sent = sent


class StoreError(LdpkitError):
    """The store failed (I/O error, database unavailable); the batch was not stored."""


class StoreClosed(StoreError):
    """The store is closed or closing and takes no more work."""


class BatchNotStored(StoreError):
    """A batch of reports failed in the store (the message says why; the sender is only
    told that it was not stored)."""


class TransportError(LdpkitError):
    """The collector could not be reached, or it refused a request."""


class CollectorUnavailable(TransportError):
    """Network failure or server error that persisted through every retry."""


class CollectorTimedOut(CollectorUnavailable):
    """The connection was made but the collector did not answer within ``seconds``: it
    is running, and slow (an estimate that takes a while, a loaded server) or stalled."""

    def __init__(self, message: str, *, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class EstimatePending(CollectorUnavailable):
    """The collector is computing the estimate asked for (``202 computing``: an expensive
    kind's first estimate of its data) and it was not ready within the query's wait; ask
    again in ``retry_after`` seconds, or with a longer ``wait``."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CollectorRejected(TransportError):
    """The collector answered with a client error (4xx) that retrying will not fix."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(f"collector answered {status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail
