"""A real collector (``ldpkit.collector.app.create_app``) served from a background thread.

The client never imports the collector; only these tests do. The collector can be
stopped and started again on the same port and database, to play "collector down".
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.request
from pathlib import Path
from typing import Any

from aiohttp import web

from ldpkit.collector.app import create_app
from ldpkit.collector.config import config_from_dict

INGEST = "client-test-ingest"
READ = "client-test-read"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveCollector:
    def __init__(self, directory: Path, metrics: dict[str, dict[str, Any]]) -> None:
        self.config = config_from_dict(
            {
                "collector": {"database": str(directory / "collector.sqlite3")},
                "tokens": {"ingest": [INGEST], "read": [READ]},
                "metrics": metrics,
            },
            source="<client tests>",
            environ={},
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def start(self) -> None:
        async def go() -> web.AppRunner:
            runner = web.AppRunner(create_app(self.config), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True).start()
            return runner

        self._runner = self._call(go())

    def stop(self) -> None:
        if self._runner is not None:
            self._call(self._runner.cleanup())
            self._runner = None

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def estimate(self, metric: str, **query: object) -> dict[str, Any]:
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        request = urllib.request.Request(
            f"{self.url}/v1/estimates/{metric}?{qs}", headers={"Authorization": f"Bearer {READ}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            data: dict[str, Any] = json.load(response)
        return data

    def n(self, metric: str) -> int:
        return int(self.estimate(metric)["n"])
