"""HTTP endpoints, as specified in docs/protocol.md."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp import web

from .._json import loads_bounded
from ..errors import LdpkitError, ProtocolError
from ..metrics import MetricDefinition, check_definition_size
from ..wire import CONTENT_TYPE as BATCH_CONTENT_TYPE
from ..wire import LEGACY_CONTENT_TYPE
from .auth import Scope, requires, token_id, token_role
from .config import CollectorConfig, check_cost
from .keys import COLLECTOR, CONFIG, GRANTED, TELEMETRY
from .queries import parse_query
from .responses import JSON, ApiError, etag_matches, json_response
from .service import Serialized
from .store import PutOutcome
from .telemetry import CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE
from .uploads import Held, check_encoding, read_body

BATCH_CONTENT_TYPES = frozenset(
    {BATCH_CONTENT_TYPE, LEGACY_CONTENT_TYPE, "application/msgpack", "application/x-msgpack"}
)


def _check_body(request: web.Request, accepted: frozenset[str] | str, limit: int) -> None:
    """415 for a wrong content type or a compressed body, 413 for a declared length over
    ``limit`` (a header is never quoted back)."""
    types = {accepted} if isinstance(accepted, str) else accepted
    if request.content_type not in types:
        raise ApiError(
            415, "unsupported_media_type", f"Content-Type must be {' or '.join(sorted(types))}"
        )
    check_encoding(request)
    length = request.content_length
    if length is not None and length > limit:
        raise ApiError(
            413, "payload_too_large", f"body of {length} bytes is over the limit of {limit} bytes"
        )


async def _read(request: web.Request, held: Held, limit: int) -> bytearray:
    cfg = request.app[CONFIG]
    return await read_body(
        request,
        held,
        limit=limit,
        grace=cfg.upload_grace,
        min_rate=cfg.min_upload_rate,
        retry_after=cfg.retry_after,
    )


ROLE_HEADER = "LDPKIT-Token-Role"
"""Answered on ``GET /v1/metrics``: what the presented token is (``auth.token_role``)."""


def _cached(request: web.Request, found: Serialized) -> web.Response:
    headers = {"ETag": found.etag, "Cache-Control": "no-cache"}
    headers[ROLE_HEADER] = token_role(request[GRANTED])
    if etag_matches(request.headers.get("If-None-Match"), found.etag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=found.body, content_type=JSON, headers=headers)


@requires(Scope.INGEST, Scope.RELAY)
async def post_reports(request: web.Request) -> web.Response:
    collector = request.app[COLLECTOR]
    limit = collector.config.max_body_bytes
    _check_body(request, BATCH_CONTENT_TYPES, limit)
    token = token_id(request.headers.get("Authorization"))
    source = collector.admission.sources.source(request)
    device = Scope.RELAY not in request[GRANTED]
    admitted = collector.admission.batch(token, request.content_length, source if device else None)
    async with admitted as ticket:
        body = await _read(request, ticket.held, limit)
        ticket.received()
        answer = await collector.ingest(
            body, token=token, charge=ticket.charge, source=source, device=device
        )
    return json_response(answer)


READERS = (Scope.INGEST, Scope.RELAY, Scope.READ, Scope.ADMIN)


@requires(*READERS)
async def get_metrics(request: web.Request) -> web.Response:
    return _cached(request, request.app[COLLECTOR].metrics_body)


@requires(*READERS)
async def get_metric(request: web.Request) -> web.Response:
    return _cached(request, request.app[COLLECTOR].metric(request.match_info["name"]))


@requires(*READERS)
async def get_metric_versions(request: web.Request) -> web.Response:
    return json_response(request.app[COLLECTOR].metric_versions(request.match_info["name"]))


@requires(Scope.ADMIN)
async def put_metric(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    collector = request.app[COLLECTOR]
    limit = collector.config.max_definition_bytes
    try:
        _check_body(request, JSON, limit)
        async with collector.admission.bodies.hold() as held:
            data = loads_bounded(await _read(request, held, limit))
    except ProtocolError as exc:
        raise ApiError(400, "bad_request", f"body is not valid JSON: {exc}") from None
    except ApiError as exc:
        if exc.status == 413:
            exc.detail += " (max_definition_bytes)"
        raise
    if not isinstance(data, dict):
        raise ApiError(400, "bad_request", "body must be a JSON object (a metric definition)")
    try:  # a 65,536-cell design takes seconds to build: not on the event loop
        definition = await asyncio.get_running_loop().run_in_executor(
            None, _definition, name, data, collector.config
        )
    except (LdpkitError, ValueError, TypeError, ImportError) as exc:
        raise ApiError(400, "invalid_definition", str(exc)) from None
    outcome, previous = await collector.put_metric(definition)  # StoreError: 503 (middleware)
    created = outcome in (PutOutcome.CREATED, PutOutcome.NEW_VERSION)
    return json_response(
        {
            "outcome": outcome.value,
            "previous_version": previous,
            "definition": definition.to_dict(),
        },
        status=201 if created else 200,
    )


def _definition(name: str, data: dict[str, Any], config: CollectorConfig) -> MetricDefinition:
    """A PUT's definition, checked: its size, and its estimate's cost against the budget."""
    definition = check_definition_size(MetricDefinition.from_dict(name, data))
    check_cost(definition, config.estimate_cpu_seconds, config.estimate_memory_mib)
    return definition


@requires(Scope.ADMIN)
async def delete_metric(request: web.Request) -> web.Response:
    """Retire a metric: reports of it are refused (``retired_metric``), apps no longer see
    it in ``GET /v1/metrics``, and its versions and estimates stay available."""
    name = request.match_info["name"]
    retired = await request.app[COLLECTOR].retire_metric(name)  # StoreError: 503 (middleware)
    return json_response({"outcome": "retired" if retired else "unchanged", "metric": name})


@requires(Scope.READ, Scope.ADMIN)
async def get_estimates(request: web.Request) -> web.Response:
    query = parse_query(request.query, [k for k, _ in request.query.items()])
    body = await request.app[COLLECTOR].estimate(request.match_info["name"], query)
    return web.Response(body=body, content_type=JSON)


def _record_id(request: web.Request) -> int:
    text = request.match_info["id"]
    if not text.isdigit() or len(text) > 18:
        raise ApiError(404, "unknown_held", f"no held record {text[:40]!r}")
    return int(text)


@requires(Scope.ADMIN)
async def get_held(request: web.Request) -> web.Response:
    """Held records, newest first: ``limit`` (default 100, at most 1000), ``before`` an id."""
    limit = _query_int(request, "limit", 100, 1, 1000)
    before = _query_int(request, "before", None, 1, 2**62)
    return json_response(await request.app[COLLECTOR].held(limit, before))


def _query_int(request: web.Request, name: str, default: int | None, lo: int, hi: int) -> Any:
    text = request.query.get(name)
    if text is None:
        return default
    if not text.isdigit() or not lo <= int(text) <= hi:
        raise ApiError(
            400, "invalid_parameter", f"{name} must be an integer in {lo}..{hi}", param=name
        )
    return int(text)


def _held_answer(answer: dict[str, object] | None, record: int) -> web.Response:
    if answer is None:
        raise ApiError(404, "unknown_held", f"no held record {record}")
    return json_response(answer)


@requires(Scope.ADMIN)
async def release_held(request: web.Request) -> web.Response:
    record = _record_id(request)
    return _held_answer(await request.app[COLLECTOR].release_held(record), record)


@requires(Scope.ADMIN)
async def drop_held(request: web.Request) -> web.Response:
    """Drop a held record's reports; 409 if it was released (they are counted)."""
    record = _record_id(request)
    answer = await request.app[COLLECTOR].drop_held(record)
    if answer is not None and answer["outcome"] == "released":
        raise ApiError(
            409, "held_released", f"held record {record} was released: its reports are counted"
        )
    return _held_answer(answer, record)


@requires(Scope.ADMIN)
async def get_senders(request: web.Request) -> web.Response:
    return json_response(await request.app[COLLECTOR].senders_answer())


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    if (reason := await request.app[COLLECTOR].readiness()) is not None:
        raise ApiError(503, "not_ready", reason)
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
    r.add_delete("/v1/metrics/{name}", delete_metric)
    r.add_get("/v1/metrics/{name}/versions", get_metric_versions)
    r.add_get("/v1/estimates/{name}", get_estimates)
    r.add_get("/v1/admin/held", get_held)
    r.add_post("/v1/admin/held/{id}/release", release_held)
    r.add_delete("/v1/admin/held/{id}", drop_held)
    r.add_get("/v1/admin/senders", get_senders)
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/metrics", prometheus)
