"""HTTP endpoints, as specified in docs/protocol.md."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from aiohttp import web

from ..errors import LdpkitError
from ..metrics import MetricDefinition
from ..wire import CONTENT_TYPE as BATCH_CONTENT_TYPE
from .auth import Scope, requires, token_id
from .estimates import QueryError, parse_query
from .keys import COLLECTOR, CONFIG, TELEMETRY
from .responses import JSON, ApiError, etag_matches, json_response
from .store import PutOutcome, StoreError
from .telemetry import CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE

BATCH_CONTENT_TYPES = frozenset(
    {BATCH_CONTENT_TYPE, "application/msgpack", "application/x-msgpack"}
)


def _check_body(request: web.Request, accepted: frozenset[str] | str) -> None:
    """415 for a wrong content type, 413 for a declared length over the limit."""
    types = {accepted} if isinstance(accepted, str) else accepted
    if request.content_type not in types:
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Type must be {' or '.join(sorted(types))}, got {request.content_type!r}",
        )
    limit = request.app[CONFIG].max_body_bytes
    length = request.content_length
    if length is not None and length > limit:
        raise ApiError(
            413, "payload_too_large", f"body of {length} bytes is over the limit of {limit} bytes"
        )


def _cached(request: web.Request, body: bytes, etag: str) -> web.Response:
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if etag_matches(request.headers.get("If-None-Match"), etag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, content_type=JSON, headers=headers)


# --- reports ---------------------------------------------------------------------------
def _rate_limited(wait: int) -> ApiError:
    return ApiError(
        429,
        "rate_limited",
        "this token is over its ingest rate limit; retry later",
        headers={"Retry-After": str(wait)},
    )


@requires(Scope.INGEST)
async def post_reports(request: web.Request) -> web.Response:
    collector = request.app[COLLECTOR]
    telemetry = request.app[TELEMETRY]
    _check_body(request, BATCH_CONTENT_TYPES)
    limiter = collector.limiter
    token = token_id(request.headers.get("Authorization"))
    if (wait := limiter.blocked(token)) is not None:
        telemetry.batches.labels("rate_limited").inc()
        raise _rate_limited(wait)
    # A body's size counts from admission; unannounced (chunked) ones count at the limit.
    size = request.content_length or collector.config.max_body_bytes
    if collector.overloaded(size):
        telemetry.throttled.inc()
        telemetry.batches.labels("throttled").inc()
        retry = str(collector.config.retry_after)
        raise ApiError(
            429,
            "too_many_requests",
            "the store is behind; retry later",
            headers={"Retry-After": retry},
        )

    def charge(reports: int) -> None:
        if (wait := limiter.take(token, reports)) is not None:
            telemetry.batches.labels("rate_limited").inc()
            raise _rate_limited(wait)

    collector.admitted += 1  # until answered: bodies being read count against the limit
    collector.admitted_bytes += size
    try:
        body = await request.read()
        started = time.perf_counter()
        try:
            answer = await collector.ingest(body, charge=charge)
        except ApiError as exc:
            if exc.status != 429:
                telemetry.batches.labels("bad_request" if exc.status == 400 else "error").inc()
            raise
    finally:
        collector.admitted -= 1
        collector.admitted_bytes -= size
    telemetry.batch_seconds.observe(time.perf_counter() - started)
    telemetry.batches.labels("ok").inc()
    return json_response(answer)


# --- metric definitions ----------------------------------------------------------------
@requires(Scope.INGEST, Scope.READ, Scope.ADMIN)
async def get_metrics(request: web.Request) -> web.Response:
    listing = request.app[COLLECTOR].metrics_list()
    return _cached(request, listing.body, listing.etag)


@requires(Scope.INGEST, Scope.READ, Scope.ADMIN)
async def get_metric(request: web.Request) -> web.Response:
    found = request.app[COLLECTOR].metric(request.match_info["name"])
    return _cached(request, found.body, found.etag)


@requires(Scope.INGEST, Scope.READ, Scope.ADMIN)
async def get_metric_versions(request: web.Request) -> web.Response:
    return json_response(request.app[COLLECTOR].metric_versions(request.match_info["name"]))


@requires(Scope.ADMIN)
async def put_metric(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    _check_body(request, JSON)
    raw = await request.read()
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "bad_request", f"body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "bad_request", "body must be a JSON object (a metric definition)")
    try:
        definition = MetricDefinition.from_dict(name, data)
    except (LdpkitError, ValueError, TypeError, ImportError) as exc:
        raise ApiError(400, "invalid_definition", str(exc)) from None
    collector = request.app[COLLECTOR]
    try:
        outcome, previous = await collector.put_metric(definition)
    except StoreError as exc:
        raise ApiError(503, "store_unavailable", f"the definition was not stored: {exc}") from None
    created = outcome in (PutOutcome.CREATED, PutOutcome.NEW_VERSION)
    return json_response(
        {
            "outcome": outcome.value,
            "previous_version": previous,
            "definition": definition.to_dict(),
        },
        status=201 if created else 200,
    )


# --- estimates -------------------------------------------------------------------------
@requires(Scope.READ, Scope.ADMIN)
async def get_estimates(request: web.Request) -> web.Response:
    started = time.perf_counter()
    try:
        query = parse_query(request.query, [k for k, _ in request.query.items()])
    except QueryError as exc:
        raise ApiError(400, "invalid_parameter", str(exc), param=exc.param) from None
    body = await request.app[COLLECTOR].estimate(request.match_info["name"], query)
    request.app[TELEMETRY].estimate_seconds.observe(time.perf_counter() - started)
    return web.Response(body=body, content_type=JSON)


# --- operations ------------------------------------------------------------------------
async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    collector = request.app[COLLECTOR]
    if not collector.ready or collector.draining:
        raise ApiError(503, "not_ready", "starting up or shutting down")
    try:
        await asyncio.wait_for(collector.store.ping(), timeout=2.0)
    except (StoreError, TimeoutError) as exc:
        raise ApiError(503, "not_ready", f"the store does not answer: {exc}") from None
    if collector.overloaded():
        raise ApiError(503, "not_ready", "the store is behind")
    return json_response({"status": "ready"})


async def prometheus(request: web.Request) -> web.Response:
    body = request.app[TELEMETRY].exposition()
    return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})


STATIC_DIR = Path(__file__).with_name("static")


async def ui_redirect(request: web.Request) -> web.Response:
    raise web.HTTPPermanentRedirect("/ui/")


async def ui_index(request: web.Request) -> web.FileResponse:
    """The dashboard: static HTML and JavaScript reading this API with a read token."""
    return web.FileResponse(STATIC_DIR / "index.html")


def setup_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/ui", ui_redirect)
    r.add_get("/ui/", ui_index)
    r.add_static("/ui/", STATIC_DIR, show_index=False, follow_symlinks=False)
    r.add_post("/v1/reports", post_reports)
    r.add_get("/v1/metrics", get_metrics)
    r.add_get("/v1/metrics/{name}", get_metric)
    r.add_put("/v1/metrics/{name}", put_metric)
    r.add_get("/v1/metrics/{name}/versions", get_metric_versions)
    r.add_get("/v1/estimates/{name}", get_estimates)
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/metrics", prometheus)
