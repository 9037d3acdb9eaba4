"""Each new metric kind through a real collector (``ldpkit serve``, SQLite, loopback HTTP).

For a distribution (1,024 leaves), a hierarchy (8 -> 64 -> 512 leaves), a table (50 x 10)
and a strings metric (max_length 16, k 20), posts N perturbed reports in batches of
100,000 (perturbed here with the mechanism, as a device would), then times
``GET /v1/estimates/{name}``: the first query (for strings: the decoding of the
sketches) and the median of 20 more (for strings: served from the decoded answer the
collector keeps). Targets (issues 15-17): distribution aggregation and estimation at
10^6 under 1 s, queries p50 under 20 ms; hierarchy/table queries p50 under 20 ms; strings
decoding through the collector under 5 s at 10^6, later queries under 50 ms.

Run: ``.venv/bin/python benchmarks/kinds_collector.py [--n 1000000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from ldpkit import wire
from ldpkit.collector.launcher import environment_without_tokens, running_collector
from ldpkit.metrics import MetricDefinition

RELAY, READ = "bench-relay", "bench-read"  # many devices' reports a batch
LEAVES = [f"r{a}/s{a}{b}/m{a}{b}{c}" for a in range(8) for b in range(8) for c in range(8)]
METRICS: dict[str, dict[str, Any]] = {
    "dist": {"kind": "distribution", "bounds": [0.0, 120.0], "resolution": 1024, "epsilon": 1.0},
    "tree": {"kind": "hierarchy", "categories": LEAVES, "epsilon": 1.0},
    "table": {
        "kind": "table",
        "epsilon": 1.0,
        "dimensions": [["a", [f"a{i}" for i in range(50)]], ["b", [f"b{i}" for i in range(10)]]],
    },
    "term": {"kind": "strings", "max_length": 16, "k": 20, "epsilon": 4.0},
}


def values(name: str, n: int, rng: np.random.Generator) -> Any:
    if name == "dist":
        return np.clip(rng.gamma(2.0, 15.0, n), 0, 120)
    if name in ("tree", "table"):
        size = 512 if name == "tree" else 500
        p = 1.0 / np.arange(1, size + 1) ** 1.1
        return rng.permutation(size)[rng.choice(size, n, p=p / p.sum())]
    words = [f"word-{i}" for i in range(100_000)]
    p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    return [words[i] for i in rng.choice(len(words), n, p=p / p.sum())]


def post(url: str, body: bytes) -> None:
    request = urllib.request.Request(
        url + "/v1/reports",
        data=body,
        headers={"Authorization": f"Bearer {RELAY}", "Content-Type": wire.CONTENT_TYPE},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        answer = json.load(response)
    assert not answer.get("rejected"), answer


def query(url: str, name: str, params: str = "") -> float:
    request = urllib.request.Request(
        f"{url}/v1/estimates/{name}?{params}", headers={"Authorization": f"Bearer {READ}"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        response.read()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    args = parser.parse_args()
    rng = np.random.default_rng(17)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        lines = [
            "[collector]",
            'database = "c.sqlite3"',
            "[tokens]",
            f'relay = ["{RELAY}"]',
            f'read = ["{READ}"]',
        ]
        for name, spec in METRICS.items():
            lines.append(f"[metrics.{name}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in spec.items()]
        (directory / "collector.toml").write_text("\n".join(lines) + "\n")
        env = environment_without_tokens()
        with running_collector("collector.toml", cwd=directory, env=env) as collector:
            url = collector.url
            print(f"n = {args.n:,} reports per metric, collector {url}, cpus {os.cpu_count()}")
            print(f"{'metric':<8}{'kind':<14}{'ingest s':>10}{'first query s':>15}{'p50 ms':>9}")
            for name, spec in METRICS.items():
                d = MetricDefinition.from_dict(name, spec)
                m = d.mechanism_instance
                ingest = 0.0
                for lo in range(0, args.n, 100_000):
                    chunk = values(name, min(100_000, args.n - lo), rng)
                    reports = np.ascontiguousarray(m.perturb(chunk, rng=rng))
                    block = wire.Block(
                        name,
                        d.fingerprint,
                        d.bucket.start(time.time()),
                        os.urandom(wire.ID_SIZE * len(reports)),
                        reports.tobytes(),
                    )
                    body = wire.encode_batch([block])
                    started = time.perf_counter()
                    post(url, body)
                    ingest += time.perf_counter() - started
                params = {
                    "dist": "bins=16&quantiles=0.5,0.9&range=30,60",
                    "tree": "depth=2",
                    "table": "consistent=true",
                    "term": "candidates=word-0,word-1",
                }[name]
                first = query(url, name, params)
                times = [query(url, name, params) for _ in range(20)]
                p50 = statistics.median(times) * 1000
                print(f"{name:<8}{d.kind.value:<14}{ingest:>10.2f}{first:>15.3f}{p50:>9.1f}")


if __name__ == "__main__":
    main()
