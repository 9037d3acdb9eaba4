"""Three ``ldpkit serve`` processes on one PostgreSQL database, several clients at once.

Clients post overlapping batches, the same batch to two replicas at the same moment, and
retries; the stored totals must equal, exactly, those of the distinct reports sent, and
every replica must answer the same estimates. A metric defined through one replica is
served by the others.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest

from ldpkit import wire
from ldpkit.collector.store import unpack_sums

from ..readiness import wait_until
from .helpers import (
    ADMIN,
    READ,
    RELAY,
    THEME,
    batch,
    block_of,
    definition,
    today,
    without_as_of,
)

pytestmark = pytest.mark.postgres

CONFIG = f"""
[collector]
shutdown_timeout = 20
catalog_refresh_seconds = 2

[tokens]
relay = ["{RELAY}"]  # the tests send many devices' reports
read = ["{READ}"]
admin = ["{ADMIN}"]

[metrics.theme]
categories = {json.dumps(THEME)}
epsilon = 1.0
mechanism = "grr"
"""
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
DAY = 86400


@contextmanager
def replicas(tmp_path: Path, database: str, count: int) -> Iterator[list[str]]:
    """``count`` collector processes started at once on ``database``: their base URLs."""
    config = tmp_path / "collector.toml"
    config.write_text(CONFIG)
    command = [sys.executable, "-m", "ldpkit.cli", "--log-level", "INFO", "serve"]
    command += ["--config", str(config), "--host", "127.0.0.1", "--port", "0"]
    command += ["--database", database, "--no-access-log"]
    procs = [
        subprocess.Popen(
            command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path
        )
        for _ in range(count)
    ]
    lines: list[queue.Queue[str | None]] = []

    def pump(stream: IO[str], q: queue.Queue[str | None]) -> None:
        for line in stream:
            q.put(line)
        q.put(None)  # the log ended: the process exited

    for proc in procs:
        q: queue.Queue[str | None] = queue.Queue()
        assert proc.stderr is not None
        threading.Thread(target=pump, args=(proc.stderr, q), daemon=True).start()
        lines.append(q)
    logs: list[list[str]] = [[] for _ in procs]
    try:
        urls = []
        for q, seen in zip(lines, logs, strict=True):
            while True:  # readiness: the address logged, or the log's end
                if (line := q.get()) is None:
                    raise AssertionError("collector did not start: " + "".join(seen))
                seen.append(line)
                if match := LISTENING.search(line):
                    urls.append(f"http://127.0.0.1:{match.group(1)}")
                    break
        yield urls
        for proc in procs:
            proc.terminate()
        codes = [proc.wait(timeout=30) for proc in procs]
        for q, seen in zip(lines, logs, strict=True):
            while not q.empty():
                if (rest := q.get()) is not None:
                    seen.append(rest)
        text = "".join(line for seen in logs for line in seen)
        assert codes == [0] * count, text
        assert " ERROR " not in text and "WARNING" not in text, text
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def request(
    method: str, url: str, token: str, body: bytes | None = None, content_type: str = ""
) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"}
    if content_type:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post(url: str, body: bytes) -> dict[str, Any]:
    for _ in range(50):  # a real client retries 429/503 with the same ids
        status, answer = request("POST", url + "/v1/reports", RELAY, body, wire.CONTENT_TYPE)
        if status == 200:
            result: dict[str, Any] = json.loads(answer)
            return result
        assert status in (429, 503), (status, answer[:300])
        time.sleep(0.2)
    raise AssertionError("batch never stored")


def test_three_replicas_count_each_report_once(tmp_path: Path, pg_url: str) -> None:
    import psycopg

    rng = np.random.default_rng(7)
    pool_size = 20_000
    ids = np.frombuffer(rng.bytes(16 * pool_size), dtype="V16")
    values = rng.integers(0, len(THEME), pool_size)
    buckets = np.where(rng.random(pool_size) < 0.3, today() - DAY, today())

    def encode(picks: np.ndarray) -> bytes:
        blocks = []
        for b in np.unique(buckets[picks]):
            mine = picks[buckets[picks] == b]
            reports = values[mine].astype("<u4")
            blocks.append(block_of("theme", reports, ids=ids[mine].tobytes(), bucket=int(b)))
        return batch(*blocks)

    with replicas(tmp_path, pg_url, 3) as urls:
        sent = np.zeros(pool_size, dtype=bool)
        lock = threading.Lock()
        answers: list[dict[str, Any]] = []
        posted = 0

        def client(seed: int) -> None:
            nonlocal posted
            r = np.random.default_rng(seed)
            with ThreadPoolExecutor(2) as pair:
                for k in range(25):
                    picks = r.choice(pool_size, size=int(r.integers(100, 600)), replace=False)
                    body = encode(picks)
                    first = urls[(seed + k) % 3]
                    targets = [first]
                    roll = r.random()
                    if roll < 0.3:  # the same batch to two replicas at the same moment
                        targets.append(urls[(seed + k + 1) % 3])
                    elif roll < 0.5:  # a retry to the same replica
                        targets.append(first)
                    got = list(pair.map(lambda u, body=body: post(u, body), targets))
                    with lock:
                        sent[picks] = True
                        answers.extend(got)
                        posted += len(picks) * len(targets)

        with ThreadPoolExecutor(8) as clients:
            list(clients.map(client, range(8)))

        # Every report was either accepted once or reported a duplicate.
        assert all(not a["rejected"] for a in answers)
        assert sum(a["accepted"] for a in answers) == int(sent.sum())
        assert sum(a["accepted"] + a["duplicates"] for a in answers) == posted
        assert posted > 2 * sent.sum()  # plenty of overlaps and retries

        # The stored totals are exactly those of the distinct reports sent.
        fp = definition("theme").fingerprint
        with psycopg.connect(pg_url) as conn:
            stored_ids = conn.execute("SELECT count(*) FROM report_ids").fetchone()
            rows = conn.execute(
                "SELECT bucket, n, sums FROM aggregates WHERE fingerprint = %s ORDER BY bucket",
                (fp,),
            ).fetchall()
            partials = conn.execute(
                "SELECT bucket, n, sums FROM partials WHERE fingerprint = %s", (fp,)
            ).fetchall()
        # Ingest only appends partial rows; compaction folds them into the aggregates.
        totals: dict[int, tuple[int, np.ndarray]] = {}
        for b, n, sums in [(b, n, np.asarray(s)) for b, n, s in rows] + [
            (b, n, unpack_sums(bytes(s))) for b, n, s in partials
        ]:
            old = totals.get(int(b), (0, np.zeros(len(THEME))))
            totals[int(b)] = (old[0] + int(n), old[1] + sums)
        assert stored_ids is not None and stored_ids[0] == int(sent.sum())
        expected = {}
        for b in np.unique(buckets[sent]):
            mine = sent & (buckets == b)
            counts = np.bincount(values[mine], minlength=len(THEME)).astype(float)
            expected[int(b)] = (int(mine.sum()), counts.tolist())
        assert {b: (n, sums.tolist()) for b, (n, sums) in totals.items()} == expected

        # Every replica answers the same estimates.
        path = "/v1/estimates/theme?per_bucket=true&consistent=true"
        bodies = {
            json.dumps(without_as_of(request("GET", u + path, READ)[1])).encode() for u in urls
        }
        assert len(bodies) == 1
        assert json.loads(bodies.pop())["n"] == int(sent.sum())

        # A metric defined through one replica is served by the others.
        spec = {"categories": ["x", "y"], "epsilon": 2.0, "mechanism": "grr"}
        status, _ = request(
            "PUT",
            urls[0] + "/v1/metrics/color",
            ADMIN,
            json.dumps(spec).encode(),
            "application/json",
        )
        assert status == 201
        for u in urls[1:]:
            wait_until(
                lambda u=u: request("GET", u + "/v1/metrics/color", READ)[0] == 200,
                "a replica sees the new metric",
                interval=0.05,
            )
        color = definition_of("color", spec)
        body = batch(
            wire.Block(
                "color", color, today(), rng.bytes(16 * 3), np.array([0, 1, 1], "<u4").tobytes()
            )
        )
        assert post(urls[2], body)["accepted"] == 3
        bodies = {
            json.dumps(without_as_of(request("GET", u + "/v1/estimates/color", READ)[1]))
            for u in urls
        }
        assert len(bodies) == 1 and json.loads(bodies.pop())["n"] == 3


def definition_of(name: str, spec: dict[str, Any]) -> str:
    from ldpkit.metrics import MetricDefinition

    return MetricDefinition.from_dict(name, spec).fingerprint


def test_a_version_defined_on_one_replica_is_taken_by_another_at_once(
    tmp_path: Path, pg_url: str
) -> None:
    """Issue 11, point 11: a replica refused a version defined a moment ago on another one
    as unknown_version (its catalog refresh was throttled, and a notification could be
    missed while a reload ran). Now it looks the version up before refusing."""
    rng = np.random.default_rng(11)
    with replicas(tmp_path, pg_url, 2) as (a, b):
        for k in range(10):
            # Something unknown first: on the old code this started B's refresh throttle.
            unknown = wire.Block("theme", rng.bytes(8).hex(), today(), rng.bytes(16), b"\0" * 4)
            assert post(b, batch(unknown))["rejected"][0]["error"] == "unknown_version"
            spec = {"categories": THEME, "epsilon": 1.05 + k / 10, "mechanism": "grr"}
            status, _ = request(
                "PUT", a + "/v1/metrics/theme", ADMIN, json.dumps(spec).encode(), "application/json"
            )
            assert status == 201
            fresh = wire.Block(
                "theme", definition_of("theme", spec), today(), rng.bytes(16), b"\1\0\0\0"
            )
            answer = post(b, batch(fresh))
            assert answer == {"accepted": 1, "duplicates": 0, "held": 0, "rejected": []}, (
                k,
                answer,
            )


def test_three_replicas_count_each_sealed_batch_once(tmp_path: Path, pg_url: str) -> None:
    """Sealed (v2) batches, each sent to one, two or three replicas at the same moment
    (and retried): every batch counted once, compaction running, identical estimates."""
    rng = np.random.default_rng(11)
    fp = definition("theme").fingerprint
    made: list[tuple[bytes, np.ndarray, int]] = []
    for _ in range(120):
        values = rng.integers(0, len(THEME), int(rng.integers(1, 400)))
        bucket = today() - DAY if rng.random() < 0.3 else today()
        made.append((rng.bytes(16), values, bucket))
    with replicas(tmp_path, pg_url, 3) as urls:

        def send(k: int) -> list[dict[str, Any]]:
            batch_id, values, bucket = made[k]
            block = wire.sealed_block("theme", fp, bucket, values.astype("<u4"))
            body = wire.encode_sealed_batch(batch_id, [block])
            targets = [urls[(k + j) % 3] for j in range(1 + k % 3)]
            with ThreadPoolExecutor(len(targets)) as pair:
                return list(pair.map(lambda u: post(u, body), targets))

        with ThreadPoolExecutor(8) as clients:
            answers = [a for got in clients.map(send, range(len(made))) for a in got]
        total = sum(len(v) for _, v, _ in made)
        assert sum(a["accepted"] for a in answers) == total
        assert sum(a["accepted"] + a["duplicates"] for a in answers) == sum(
            len(v) * (1 + k % 3) for k, (_, v, _) in enumerate(made)
        )
        time.sleep(1.5)  # a compaction or two (compact_seconds = 1)
        path = "/v1/estimates/theme?per_bucket=true&consistent=true"
        bodies = {
            json.dumps(without_as_of(request("GET", u + path, READ)[1])).encode() for u in urls
        }
        assert len(bodies) == 1
        answer = json.loads(bodies.pop())
        assert answer["n"] == total
        # Per bucket, the counts are those of the batches made.
        for item in answer["buckets"]:
            mine = [v for _, v, b in made if b == item["bucket"]]
            assert item["n"] == sum(len(v) for v in mine)
