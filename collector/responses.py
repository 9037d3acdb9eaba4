"""JSON answers, JSON errors and ETags."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from ..errors import (
    BatchNotStored,
    OverDeviceCap,
    ProtocolError,
    QueryError,
    RateLimited,
    StoreClosed,
    StoreError,
    UnknownMetric,
    UnsupportedVersion,
)
from .results import EstimateComputing, EstimateFailed

JSON = "application/json"

# Error codes of the HTTP statuses aiohttp raises itself (unknown route, wrong method...).
STATUS_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    411: "length_required",
    413: "payload_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    429: "too_many_requests",
    431: "headers_too_large",
    500: "internal_error",
    503: "unavailable",
}
# Headers of an aiohttp HTTPException worth keeping on the JSON answer.
KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")


class ApiError(Exception):
    """An error answer: ``status`` with JSON ``{"error": error, "detail": detail, ...}``.

    ``close``: close the connection after the answer instead of reading (and discarding) the rest of
    the request body: for bodies the collector will not read (too large, too slow, compressed)."""

    def __init__(
        self,
        status: int,
        error: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        close: bool = False,
        **extra: Any,
    ) -> None:
        super().__init__(f"{status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = dict(headers or {})
        self.close = close
        self.extra = extra


def domain_error(exc: BaseException, retry_after: int) -> ApiError | None:
    """The HTTP answer to ``exc``: an ApiError is one; an error of the service's domain is
    mapped here, the one place they are (for the error middleware and the admission's
    count); None for anything else, a bug answered 500."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, UnknownMetric):
        extra: dict[str, Any] = {"param": exc.param} if exc.param else {}
        return ApiError(404, exc.error, str(exc), **extra)
    if isinstance(exc, QueryError):
        return ApiError(400, "invalid_parameter", str(exc), param=exc.param)
    if isinstance(exc, ProtocolError):
        error = "unsupported_version" if isinstance(exc, UnsupportedVersion) else "bad_request"
        return ApiError(400, error, str(exc))
    if isinstance(exc, RateLimited):
        return ApiError(429, exc.error, str(exc), headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, EstimateComputing):
        headers = {"Retry-After": str(exc.retry_after)}
        return ApiError(202, "computing", str(exc), headers=headers, retry_after=exc.retry_after)
    if isinstance(exc, EstimateFailed):
        return ApiError(503, "estimate_failed", str(exc))
    if isinstance(exc, OverDeviceCap):
        return ApiError(
            400,
            "over_device_cap",
            str(exc),
            metric=exc.metric,
            version=exc.fingerprint,
            bucket=exc.bucket,
            cap=exc.cap,
        )
    return _store_error(exc, {"Retry-After": str(retry_after)})


def _store_error(exc: BaseException, retry: dict[str, str]) -> ApiError | None:
    if isinstance(exc, StoreClosed):
        return ApiError(503, "unavailable", "the collector is shutting down", headers=retry)
    if isinstance(exc, BatchNotStored):  # its cause is logged, not told
        detail = "the store failed; the batch was not stored"
        return ApiError(503, "store_unavailable", detail, headers=retry)
    if isinstance(exc, StoreError):
        return ApiError(503, "store_unavailable", f"the store failed: {exc}", headers=retry)
    return None


def dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()


def json_response(
    data: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(body=dumps(data), status=status, content_type=JSON, headers=headers)


def error_response(
    status: int, error: str, detail: str, *, headers: Mapping[str, str] | None = None, **extra: Any
) -> web.Response:
    return json_response(
        {"error": error, "detail": detail, **extra}, status=status, headers=headers
    )


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (weak comparison, or ``*``)."""
    tags = [tag.strip() for tag in (if_none_match or "").split(",")]
    return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)
