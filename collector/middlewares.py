"""Middlewares, outermost first: request telemetry, JSON errors, bearer-token auth."""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler

from ..errors import LdpkitError, StoreClosed, StoreError
from .auth import bearer_token, required_scopes
from .keys import CONFIG, GRANTED, TELEMETRY, TOKENS
from .responses import KEPT_HEADERS, STATUS_CODES, ApiError, domain_error, error_response
from .uploads import ClientGone

log = logging.getLogger("ldpkit.collector")


CLIENT_CLOSED = 499
"""The status of requests whose client went away before the answer (as nginx logs them);
it is never sent (there is nobody to send it to), only counted and logged."""


@web.middleware
async def telemetry_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    route = request.match_info.route
    resource = route.resource if route is not None else None
    label = resource.canonical if resource is not None else "unmatched"
    request.app[TELEMETRY].requests.labels(label, request.method, str(response.status)).inc()
    return response


async def _closing(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """Send ``response`` and close the connection at once, without reading the rest of the request
    body (aiohttp would otherwise read and discard it for up to ``lingering_time`` seconds)."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()  # flushes what was written, then closes
    return response


CORS_ROUTES = ("/v1/reports", "/v1/metrics")
"""Paths (and their subpaths) a web page may call across origins: what apps call."""
CORS_HEADERS = {
    "Access-Control-Allow-Methods": "GET, HEAD, POST",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, If-None-Match",
    "Access-Control-Max-Age": "600",
}


def _cors_origin(request: web.Request) -> str | None:
    """The request's Origin when the config lets it call this route, else None."""
    origins = request.app[CONFIG].cors_origins
    origin = request.headers.get("Origin")
    if not origins or origin is None:
        return None
    path = request.path
    if not any(path == r or path.startswith(r + "/") for r in CORS_ROUTES):
        return None
    return origin if ("*" in origins or origin in origins) else None


@web.middleware
async def cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """CORS for the ingest routes, for the origins of ``cors_origins`` only: a preflight
    ``OPTIONS`` is answered 204 before any token check (browsers send it without one);
    every other answer, errors included (a 429's Retry-After must be readable), carries
    ``Access-Control-Allow-Origin``. Nothing changes for other origins or routes."""
    origin = _cors_origin(request)
    if origin is None:
        return await handler(request)
    if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
        return web.Response(
            status=204,
            headers={**CORS_HEADERS, "Access-Control-Allow-Origin": origin, "Vary": "Origin"},
        )
    response = await handler(request)
    if not response.prepared:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = "ETag, Retry-After, LDPKIT-Token-Role"
        response.headers.add("Vary", "Origin")
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as JSON ``{"error", "detail"}``; unexpected exceptions as a logged 500.
    A client that went away is no error (nothing is answered or logged)."""
    try:
        return await handler(request)
    except (ApiError, LdpkitError) as exc:
        return await _error_answer(request, exc)
    except (ClientGone, ConnectionError):
        log.debug("client closed the connection: %s %s", request.method, request.path)
        return web.Response(status=CLIENT_CLOSED, reason="Client Closed Request")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _http_exception_answer(exc)
    except Exception:  # a CancelledError (a BaseException) passes
        return _unexpected(request)


async def _error_answer(request: web.Request, exc: ApiError | LdpkitError) -> web.StreamResponse:
    """An ApiError's answer, or a domain error's (mapped in responses.py; unmapped: 500).
    A store's failure is logged (its closing, at shutdown, is no failure)."""
    if (api := domain_error(exc, request.app[CONFIG].retry_after)) is None:
        return _unexpected(request)
    if isinstance(exc, StoreError) and not isinstance(exc, StoreClosed):
        log.error("%s %s: %s", request.method, request.path, exc)
    response = error_response(api.status, api.error, api.detail, headers=api.headers, **api.extra)
    if api.close and not request.content.is_eof():
        return await _closing(request, response)
    return response


def _http_exception_answer(exc: web.HTTPException) -> web.Response:
    """aiohttp's own errors (unknown route, wrong method...) as JSON errors too."""
    headers = {k: exc.headers[k] for k in KEPT_HEADERS if k in exc.headers}
    detail = exc.text if exc.text and exc.text != f"{exc.status}: {exc.reason}" else exc.reason
    return error_response(
        exc.status, STATUS_CODES.get(exc.status, f"http_{exc.status}"), detail, headers=headers
    )


def _unexpected(request: web.Request) -> web.Response:
    """A bug: logged with its traceback (the path only: never the headers, which hold
    tokens, or the body, which holds reports), answered 500."""
    log.exception("unexpected error answering %s %s", request.method, request.path)
    return error_response(500, "internal_error", "unexpected error; see the collector's log")


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """401 for a missing or unknown token, 403 for a token of the wrong kind."""
    scopes = required_scopes(request.match_info.handler)
    if scopes is None or request.match_info.http_exception is not None:
        return await handler(request)
    token = bearer_token(request.headers.get("Authorization"))
    challenge = {"WWW-Authenticate": 'Bearer realm="ldpkit"'}
    if token is None:
        raise ApiError(
            401, "unauthorized", "missing 'Authorization: Bearer <token>' header", headers=challenge
        )
    granted = request.app[TOKENS].scopes(token)
    if not granted:
        raise ApiError(401, "unauthorized", "unknown token", headers=challenge)
    if not granted & scopes:
        kinds = " or ".join(sorted(s.value for s in scopes))
        article = "an" if kinds[0] in "aeiou" else "a"
        raise ApiError(403, "forbidden", f"this endpoint takes {article} {kinds} token")
    request[GRANTED] = granted
    return await handler(request)


def access_log_format(log_addresses: bool) -> str:
    """aiohttp access-log format: no client address or user agent unless asked for."""
    base = '"%r" %s %b %Tfs'
    return f"%a {base}" if log_addresses else base


class RedactAddresses(logging.Filter):
    """Drop client addresses from aiohttp's own log lines ("Error handling request from
    <address>", for malformed HTTP that never reaches a handler)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and "request from %s" in record.msg and record.args:
            record.args = ("<address not logged>", *tuple(record.args)[1:])
        return True


class RedactBadRequests(logging.Filter):
    """aiohttp logs a request it cannot parse with the parser's error, which quotes the
    raw request bytes (the bad line may be ``Authorization: Bearer <token>``): keep only
    the error's type and status."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.exc_info = None
            record.exc_text = None
            record.msg = (
                f"{record.msg}: {type(exc).__name__} (status {exc.code}; request not logged)"
            )
        return True


def install_log_privacy(log_addresses: bool) -> None:
    """Keep request bytes (tokens) out of aiohttp's server log, and client addresses too
    unless ``log_addresses``."""
    server_log = logging.getLogger("aiohttp.server")
    server_log.addFilter(RedactBadRequests())
    if not log_addresses:
        server_log.addFilter(RedactAddresses())
