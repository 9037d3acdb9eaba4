"""A collector's HTTP error answer read into the exception tree, one way for every reader
of the API (the reporters, the Analyst): ``{"error", "detail"}`` when the body is that
JSON, the first bytes of the body otherwise; 408, 429 and 5xx are worth retrying
(:class:`~ldpkit.errors.CollectorUnavailable` once retries are spent), other 4xx are
:class:`~ldpkit.errors.CollectorRejected`."""

from __future__ import annotations

from ._json import loads_bounded
from ._validation import shown
from .errors import CollectorRejected, CollectorUnavailable, ProtocolError


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
