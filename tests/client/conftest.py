"""Fixtures for the client tests: a clock to move, metrics, and an in-memory collector."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ldpkit.http import HttpAnswer, NetworkError
from ldpkit.metrics import MetricDefinition
from ldpkit.wire import decode

T0 = 1_763_683_200.0 + 3 * 3600 + 17  # 2025-11-21 03:00:17 UTC


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def theme(**kw: object) -> MetricDefinition:
    kw.setdefault("mechanism", "grr")
    kw.setdefault("epsilon", 1.0)
    return MetricDefinition.categorical(
        "theme",
        ["light", "dark", "system"],
        **kw,  # type: ignore[arg-type]
    )


def minutes(**kw: object) -> MetricDefinition:
    kw.setdefault("mechanism", "duchi")
    kw.setdefault("epsilon", 0.5)
    return MetricDefinition.numeric(
        "session_minutes",
        (0.0, 120.0),
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def metrics() -> list[MetricDefinition]:
    return [theme(), minutes(budget=2.0)]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@dataclass
class FakeCollector:
    """A transport that plays the collector: dedups by report id, can be scripted to fail.

    ``script`` holds answers for the next POSTs: an HttpAnswer, an exception to raise, or
    "ok" for the normal answer; once empty every POST is answered normally.
    """

    definitions: list[MetricDefinition] = field(default_factory=list)
    script: list[object] = field(default_factory=list)
    seen: dict[bytes, tuple[str, str, int, bytes]] = field(default_factory=dict)
    batches: set[bytes] = field(default_factory=set)  # sealed batch ids seen
    posts: int = 0
    reject: Callable[[str, bytes], str | None] | None = None
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    etag: str = '"v1"'
    down: bool = False
    role: str = "relay"  # what GET /v1/metrics says the token is (these tests simulate)

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer:
        self.requests.append((method, path, dict(headers)))
        if self.down:
            raise NetworkError("ConnectionRefusedError: [Errno 111] Connection refused")
        if method == "GET" and path == "/v1/metrics":
            said = {"etag": self.etag, "ldpkit-token-role": self.role}
            if headers.get("If-None-Match") == self.etag:
                return HttpAnswer(304, said, b"")
            body_json = json.dumps({"metrics": [d.to_dict() for d in self.definitions]})
            return HttpAnswer(200, said, body_json.encode())
        assert method == "POST" and path == "/v1/reports", (method, path)
        self.posts += 1
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, HttpAnswer):
                return step
        assert body is not None
        accepted = duplicates = 0
        rejected = []
        index = 0
        batch = decode(body)
        repeat = batch.batch_id is not None and batch.batch_id in self.batches
        if batch.batch_id is not None:
            self.batches.add(batch.batch_id)
        for block in batch.blocks:
            size = len(block.reports) // block.n if block.n else 0
            for k in range(block.n):
                # Sealed: the batch counts once (its reports keyed by batch id and index).
                rid = block.ids[16 * k : 16 * k + 16] or (batch.batch_id or b"") + bytes(
                    [index // 256, index % 256]
                )
                report = block.reports[k * size : (k + 1) * size]
                why = self.reject(block.metric, report) if self.reject else None
                if why:
                    rejected.append({"index": index, "error": why, "detail": "test"})
                elif repeat or rid in self.seen:
                    duplicates += 1
                else:
                    self.seen[rid] = (block.metric, block.fingerprint, block.bucket, report)
                    accepted += 1
                index += 1
        answer = {"accepted": accepted, "duplicates": duplicates, "held": 0, "rejected": rejected}
        return HttpAnswer(200, {}, json.dumps(answer).encode())

    def close(self) -> None:
        pass

    def count(self, metric: str) -> int:
        return sum(1 for m, *_ in self.seen.values() if m == metric)


def answer(status: int, error: str = "x", headers: dict[str, str] | None = None) -> HttpAnswer:
    return HttpAnswer(status, headers or {}, json.dumps({"error": error, "detail": "d"}).encode())
