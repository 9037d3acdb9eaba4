"""Every endpoint with every kind of token, and the JSON error answers."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from ldpkit import wire
from ldpkit.collector.middlewares import access_log_format
from ldpkit.collector.sqlite_store import SQLiteStore
from ldpkit.collector.store import BucketAggregate

from .helpers import INGEST, auth, batch, block_of, grr_reports, make_config, running

KINDS = ("ingest", "read", "admin")


def _put_body() -> bytes:
    return json.dumps({"categories": ["x", "y"], "epsilon": 1.0, "mechanism": "grr"}).encode()


# (method, path, content type, body factory, kinds allowed, success status)
ENDPOINTS: list[tuple[str, str, str | None, Any, Sequence[str], int]] = [
    (
        "POST",
        "/v1/reports",
        wire.CONTENT_TYPE,
        lambda: batch(block_of("theme", grr_reports([1]))),
        ("ingest",),
        200,
    ),
    ("GET", "/v1/metrics", None, None, KINDS, 200),
    ("GET", "/v1/metrics/theme", None, None, KINDS, 200),
    ("GET", "/v1/metrics/theme/versions", None, None, KINDS, 200),
    ("PUT", "/v1/metrics/newone", "application/json", _put_body, ("admin",), 201),
    ("GET", "/v1/estimates/theme", None, None, ("read", "admin"), 200),
]


@pytest.mark.parametrize("token", [None, "wrong", "Basic", *KINDS])
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[f"{e[0]} {e[1]}" for e in ENDPOINTS])
async def test_token_matrix(
    client: TestClient, endpoint: tuple[Any, ...], token: str | None
) -> None:
    method, path, content_type, body, allowed, success = endpoint
    headers = auth(token if token != "Basic" else None)
    if token == "Basic":
        headers = {"Authorization": f"Basic {INGEST}"}
    elif token == "wrong":
        headers = {"Authorization": "Bearer not-a-token-at-all"}
    if content_type:
        headers["Content-Type"] = content_type
    resp = await client.request(method, path, data=body() if body else None, headers=headers)
    answer = await resp.json()
    if token in (None, "wrong", "Basic"):
        assert resp.status == 401
        assert answer["error"] == "unauthorized"
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    elif token in allowed:
        assert resp.status == success, answer
    else:
        assert resp.status == 403
        assert answer["error"] == "forbidden"
    assert "token-0001" not in json.dumps(answer)  # a token is never echoed


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
async def test_operational_endpoints_need_no_token(client: TestClient, path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 200


async def test_unknown_route_and_wrong_method(client: TestClient) -> None:
    resp = await client.get("/v2/nothing", headers=auth("admin"))
    assert resp.status == 404
    assert (await resp.json())["error"] == "not_found"
    resp = await client.get("/v1/reports", headers=auth("ingest"))
    assert resp.status == 405
    assert (await resp.json())["error"] == "method_not_allowed"
    assert "POST" in resp.headers["Allow"]
    resp = await client.patch("/v1/metrics/theme", headers=auth("admin"))
    assert resp.status == 405
    assert resp.content_type == "application/json"


class FailingStore(SQLiteStore):
    async def aggregates(
        self, fingerprint: str, stats_size: int, start: int | None, end: int | None
    ) -> list[BucketAggregate]:
        raise RuntimeError("boom: unexpected")


async def test_unexpected_errors_are_json_500_and_logged(
    database: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(database)
    with caplog.at_level(logging.ERROR, logger="ldpkit.collector"):
        async with running(config, store=FailingStore(database)) as client:
            resp = await client.get("/v1/estimates/theme", headers=auth("read"))
            assert resp.status == 500
            answer = await resp.json()
            assert answer["error"] == "internal_error"
            assert "boom" not in answer["detail"]
    assert any(
        "boom" in r.getMessage() or (r.exc_text and "boom" in r.exc_text) for r in caplog.records
    )
    assert all("token-0001" not in (r.exc_text or "") + r.getMessage() for r in caplog.records)


def test_access_log_leaves_addresses_out() -> None:
    assert "%a" not in access_log_format(False)
    assert "%{User-Agent}i" not in access_log_format(False)
    assert access_log_format(True).startswith("%a ")


async def test_schema_stores_nothing_about_the_sender(client: TestClient, database: Path) -> None:
    import sqlite3

    await client.post(
        "/v1/reports",
        data=batch(block_of("theme", grr_reports([1]))),
        headers={**auth("relay"), "Content-Type": wire.CONTENT_TYPE, "User-Agent": "probe/1.0"},
    )
    conn = sqlite3.connect(database)
    try:
        columns = {
            table: [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        dump = "\n".join(conn.iterdump())
    finally:
        conn.close()
    assert columns["report_ids"] == ["id", "bucket"]  # the report's own bucket, for pruning
    # parts: how many partial rows were folded in (the data's mark, issue 27)
    assert columns["aggregates"] == ["fingerprint", "bucket", "n", "sums", "parts"]
    assert columns["estimates"] == [  # estimates of many reports: no sender, no address
        *("fingerprint", "lo", "hi", "n", "parts", "buckets", "computed_at", "seconds"),
        *("result", "error", "claim_owner", "claim_until"),
    ]
    assert "127.0.0.1" not in dump and "probe/1.0" not in dump


def test_aiohttp_error_lines_leave_addresses_out() -> None:
    from ldpkit.collector.middlewares import RedactAddresses

    record = logging.LogRecord(
        "aiohttp.server",
        logging.ERROR,
        __file__,
        1,
        "Error handling request from %s",
        ("203.0.113.9",),
        None,
    )
    RedactAddresses().filter(record)
    assert "203.0.113.9" not in record.getMessage()
