"""A real collector for the client's tests (:class:`tests.harness.ThreadedCollector`) with
the client tests' tokens and metrics. The client never imports the collector; only these
tests do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ldpkit.collector.config import config_from_dict
from tests.harness import ThreadedCollector

INGEST = "client-test-ingest"  # a device token
RELAY = "client-test-relay"  # many devices' reports: simulate()
READ = "client-test-read"


class LiveCollector(ThreadedCollector):
    def __init__(self, directory: Path, metrics: dict[str, dict[str, Any]]) -> None:
        super().__init__(
            config_from_dict(
                {
                    # A maintained estimate is computed as soon as its data changes.
                    "collector": {
                        "database": str(directory / "collector.sqlite3"),
                        "estimate_interval_seconds": 0,
                    },
                    "tokens": {"ingest": [INGEST], "relay": [RELAY], "read": [READ]},
                    "metrics": metrics,
                },
                source="<client tests>",
                environ={},
            )
        )

    def estimate(self, metric: str, token: str = READ, **query: object) -> dict[str, Any]:
        return super().estimate(metric, token, **query)

    def n(self, metric: str) -> int:
        return int(self.estimate(metric)["n"])
