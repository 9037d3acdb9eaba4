"""CORS for web pages on other origins: only the ingest routes, only configured origins."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpkit.collector.config import ConfigError

from .helpers import INGEST, READ, make_config, running

APP = "https://app.example"
PREFLIGHT = {
    "Origin": APP,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}


async def test_preflight_and_answers_carry_cors_headers(tmp_path: Path) -> None:
    config = make_config(tmp_path / "c.sqlite3", cors_origins=[APP])
    async with running(config) as client:
        pre = await client.options("/v1/reports", headers=PREFLIGHT)
        assert pre.status == 204
        assert pre.headers["Access-Control-Allow-Origin"] == APP
        assert "POST" in pre.headers["Access-Control-Allow-Methods"]
        assert "Authorization" in pre.headers["Access-Control-Allow-Headers"]
        got = await client.get(
            "/v1/metrics", headers={"Origin": APP, "Authorization": f"Bearer {INGEST}"}
        )
        assert got.status == 200
        assert got.headers["Access-Control-Allow-Origin"] == APP
        assert "ETag" in got.headers["Access-Control-Expose-Headers"]
        # Errors too: a page must be able to read a 401 (or a 429's Retry-After).
        denied = await client.post("/v1/reports", data=b"", headers={"Origin": APP})
        assert denied.status == 401
        assert denied.headers["Access-Control-Allow-Origin"] == APP
        # Another origin, or a route apps do not call: no CORS at all.
        other = await client.options(
            "/v1/reports", headers={**PREFLIGHT, "Origin": "https://evil.example"}
        )
        assert other.status == 405
        assert "Access-Control-Allow-Origin" not in other.headers
        estimates = await client.get(
            "/v1/estimates/theme", headers={"Origin": APP, "Authorization": f"Bearer {READ}"}
        )
        assert estimates.status == 200
        assert "Access-Control-Allow-Origin" not in estimates.headers


async def test_no_cors_by_default(tmp_path: Path) -> None:
    async with running(make_config(tmp_path / "c.sqlite3")) as client:
        pre = await client.options("/v1/reports", headers=PREFLIGHT)
        assert pre.status == 405
        assert "Access-Control-Allow-Origin" not in pre.headers


@pytest.mark.parametrize("bad", [["app.example"], ["https://app.example/path"], "https://x", [1]])
def test_bad_origins_are_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match="cors_origins"):
        make_config(tmp_path / "c.sqlite3", cors_origins=bad)
