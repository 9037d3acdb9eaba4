"""/healthz while an admin PUTs the largest definitions allowed (issue 27), against a real
``ldpkit serve``.

    .venv/bin/python benchmarks/definition_put.py

A 256 x 256 table (65,536 cells, ``MAX_CELLS``) and a hierarchy of 65,536 leaves
(``MAX_LEAVES``: 16 x 16 x 16 x 16 paths) are each PUT through ``/v1/metrics/{name}``
while a prober asks ``/healthz`` back to back. Printed for each: the PUT's seconds (its
design is built on a thread, off the event loop) and ``/healthz``'s p50 / p99 / max over
the PUT (< 50 ms p99 wanted), then the same with no PUT (the yardstick).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from ingest import ADMIN, READ, free_port, http

TABLE = {
    "kind": "table",
    "epsilon": 1.0,
    "dimensions": {"row": [f"r{i}" for i in range(256)], "col": [f"c{i}" for i in range(256)]},
}
HIERARCHY = {
    "kind": "hierarchy",
    "epsilon": 1.0,
    "separator": "/",
    "categories": [
        f"a{a}/b{b}/c{c}/d{d}"
        for a in range(16)
        for b in range(16)
        for c in range(16)
        for d in range(16)
    ],
}


class Prober(threading.Thread):
    """Asks /healthz back to back until stopped; each answer's milliseconds."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.times: list[float] = []

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            status, _ = http(self.url + "/healthz")
            assert status == 200
            self.times.append((time.perf_counter() - t) * 1000)


def put(url: str, name: str, spec: dict[str, Any]) -> float:
    body = json.dumps(spec).encode()
    req = urllib.request.Request(
        f"{url}/v1/metrics/{name}",
        data=body,
        method="PUT",
        headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
    )
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as resp:
        assert resp.status in (200, 201), resp.read()
    return time.perf_counter() - t


def probed(url: str, work: Any) -> tuple[float, list[float]]:
    prober = Prober(url)
    prober.start()
    seconds = work()
    prober.stop.set()
    prober.join()
    return seconds, prober.times


def line(label: str, seconds: float, times: list[float]) -> str:
    p50, p99 = np.percentile(times, [50, 99])
    return (
        f"{label:<26} {seconds:7.1f} s   healthz p50 {p50:5.1f} ms  p99 {p99:5.1f} ms  "
        f"max {max(times):6.1f} ms  ({len(times)} asked)"
    )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="ldpkit-put-") as tmp:
        work = Path(tmp)
        config = ["[collector]", 'database = "c.sqlite3"', "", "[tokens]"]
        config += [f'read = ["{READ}"]', f'admin = ["{ADMIN}"]']
        (work / "c.toml").write_text("\n".join(config) + "\n")
        port = free_port()
        command = [sys.executable, "-m", "ldpkit.cli", "--log-level", "WARNING", "serve"]
        command += ["--config", "c.toml", "--port", str(port), "--no-access-log"]
        server = subprocess.Popen(command, cwd=work)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if http(url + "/readyz")[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.1)
            print(line("no PUT (2 s)", *probed(url, lambda: time.sleep(2.0) or 2.0)))
            print(line("PUT table 256 x 256", *probed(url, lambda: put(url, "t", TABLE))))
            print(line("PUT hierarchy 65,536", *probed(url, lambda: put(url, "h", HIERARCHY))))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
