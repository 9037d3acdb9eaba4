"""Every example runs, against a real collector."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from .conftest import INGEST, READ, Populated

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(script: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_quickstart_prints_estimates_beside_the_truth() -> None:
    out = run(EXAMPLES / "quickstart" / "quickstart.py", "--users", "3000")
    assert "delivered 6000 perturbed reports" in out
    assert "theme: n=3000" in out and "session_minutes: n=3000" in out
    assert "truth for dark" in out


def test_analysis_prints_tables_and_writes_plots(populated: Populated, tmp_path: Path) -> None:
    out = run(
        EXAMPLES / "analysis" / "analysis.py",
        "--out",
        str(tmp_path),
        env={"LDPKIT_COLLECTOR": populated.url, "LDPKIT_READ_TOKEN": READ},
    )
    assert "theme: n=" in out and "session_minutes: n=" in out
    for name in ("theme", "session_minutes"):
        for suffix in ("", "-over-time"):
            png = tmp_path / f"{name}{suffix}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_webapp_reports_through_the_async_reporter(
    populated: Populated, tmp_path: Path
) -> None:
    sys.path.insert(0, str(EXAMPLES / "webapp"))
    try:
        from app import create_app  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    import json
    import urllib.request

    def n_reported() -> int:
        request = urllib.request.Request(
            populated.url + "/v1/estimates/theme", headers={"Authorization": f"Bearer {READ}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(json.load(response)["n"])

    before = n_reported()
    app = create_app(populated.url, INGEST, tmp_path / "webapp-state")
    async with TestClient(TestServer(app)) as client:
        ok = await client.post("/settings", json={"theme": "dark"})
        assert ok.status == 200 and (await ok.json())["saved"] is True
        bad = await client.post("/settings", json={"theme": "purple"})
        assert bad.status == 400 and "purple" in (await bad.json())["error"]
        # A body that is not JSON is the client's mistake: 400 with what to send, not 500.
        garbled = await client.post("/settings", data=b"theme=dark")
        assert garbled.status == 400 and "JSON" in (await garbled.json())["error"]
        listed = await client.post("/settings", json=["dark"])
        assert listed.status == 400
    # Closing the app closed the reporter, which flushed its outbox.
    assert n_reported() == before + 1


def test_webapp_listens_on_loopback_by_default() -> None:
    text = (EXAMPLES / "webapp" / "app.py").read_text()
    assert 'host=os.environ.get("HOST", "127.0.0.1")' in text
    assert "0.0.0.0" not in text


@pytest.mark.parametrize("name", ["quickstart", "webapp", "analysis"])
def test_each_example_has_a_docstring_that_says_how_to_run_it(name: str) -> None:
    script = next((EXAMPLES / name).glob("*.py"))
    assert "Run" in script.read_text().split('"""')[1]
