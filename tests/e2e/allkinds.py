"""A collector holding every metric kind reported over several daily buckets, for the
dashboard's tests of each kind (tests/e2e/test_kinds_dashboard.py: each view, its marks
against the API's answer; tests/e2e/test_views_inside.py: single and over-time views,
nothing drawn outside its plot area, at 1400 and 420 px): a categorical, an ordered
categorical, a numeric, a distribution (some bins nearly empty, so some estimates fall
below zero), a hierarchy, a table and a strings metric, reported on DAYS days. One
collector for both modules (the ``kinds`` fixture, tests/e2e/conftest.py): seeding it is
the costly part."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldpkit.client import Reporter
from ldpkit.collector.launcher import environment_without_tokens
from tests.harness import running_collector

from .conftest import READ, RELAY

DAYS = 4
PER_DAY = 2500
LEAVES = [
    "MX/Jalisco/Guadalajara",
    "MX/Jalisco/Zapopan",
    "MX/Sonora/Hermosillo",
    "MX/Sonora/Nogales",
    "US/Texas/Austin",
    "US/Texas/El Paso",
]
TYPES = ["Compact", "Large", "Midsize", "Small", "Sporty", "Van"]
ORIGINS = ["USA", "non-USA"]
WORDS = ["weather", "news", "maps", "translate", "música", "football", "recipes"]
MAINTAINED = ("minutes", "region", "car", "search_term")

CONFIG = f"""
[collector]
database = "collector.sqlite3"
# Estimates from every report as soon as they land: the maintenance loop computes some from
# the first batches while the rest arrive, and the default interval (30 s) would then hold
# the last computation back. Nothing here asks for a stale estimate (the stale-then-fresh
# test has its own collector, tests/e2e/test_kinds_dashboard.py).
estimate_interval_seconds = 0

[tokens]
relay = ["{RELAY}"]
read = ["{READ}"]

[metrics.theme]
categories = ["light", "dark", "system"]
epsilon = 1.0

# Ordered categories: the mean rank and the shares "k or later" below the items.
[metrics.rating]
kind = "categorical"
categories = ["1", "2", "3", "4", "5"]
ordered = true
mechanism = "exponential"
epsilon = 4.0

[metrics.spend]
kind = "numeric"
bounds = [0, 100]
epsilon = 1.0

[metrics.minutes]
kind = "distribution"
bounds = [0.0, 120.0]
resolution = 64
epsilon = 2.0

[metrics.region]
kind = "hierarchy"
separator = "/"
categories = {json.dumps(LEAVES)}
epsilon = 2.0

[metrics.car]
kind = "table"
epsilon = 2.0
[metrics.car.dimensions]
type = {json.dumps(TYPES)}
origin = {json.dumps(ORIGINS)}

[metrics.search_term]
kind = "strings"
max_length = 12
k = 8
epsilon = 4.0
"""


@dataclass
class AllKinds:
    url: str
    directory: Path
    first_day: int  # unix seconds of the first daily bucket


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def all_kinds_collector(directory: Path) -> Iterator[AllKinds]:
    """The collector, every maintained estimate computed from every report (readiness)."""
    (directory / "collector.toml").write_text(CONFIG)
    with running_collector(
        "collector.toml", cwd=directory, env=environment_without_tokens()
    ) as collector:
        clock = Clock()
        today = int(clock.now // 86400) * 86400
        first = today - (DAYS - 1) * 86400
        rng = np.random.default_rng(2028)
        with Reporter(
            collector.url,
            token=RELAY,
            state_dir=directory / "devices",
            background=False,
            clock=clock,
        ) as r:
            r.refresh_definitions()
            for day in range(DAYS):
                clock.now = first + day * 86400 + 3600
                _report_day(r, day, rng)
            assert r.flush().remaining == 0
        for metric in MAINTAINED:
            assert estimates(collector.url, metric, wait="120")["as_of"]["fresh"]
        yield AllKinds(collector.url, directory, first)


def _report_day(r: Reporter, day: int, rng: np.random.Generator) -> None:
    n = PER_DAY
    dark = 0.4 + 0.05 * day
    r.simulate(
        "theme",
        rng.choice(["light", "dark", "system"], n, p=[0.8 - dark, dark, 0.2]).tolist(),
        rng=rng,
    )
    # Its own generator: the other metrics' reports stay those their tests were written on.
    own = np.random.default_rng([2029, day])
    ratings = own.choice(["1", "2", "3", "4", "5"], n, p=[0.1, 0.1, 0.2, 0.4, 0.2])
    r.simulate("rating", list(ratings), rng=own)
    r.simulate("spend", rng.uniform(30 + 5 * day, 60 + 5 * day, n).tolist(), rng=rng)
    # Most values low, a bump near 80, the top bins all but empty: some bins below zero.
    minutes = np.concatenate([rng.gamma(2.0, 8.0 + 2 * day, n * 2 // 3), rng.normal(80, 6, n // 3)])
    r.simulate("minutes", np.clip(minutes, 0, 120), rng=rng)
    weights = np.array([3, 4, 2, 1, 3, 1], dtype=float)
    r.simulate("region", list(rng.choice(LEAVES, n, p=weights / weights.sum())), rng=rng)
    cells = [(t, o) for t in TYPES for o in ORIGINS]
    picked = rng.choice(
        len(cells), n, p=np.linspace(2, 1, len(cells)) / np.linspace(2, 1, len(cells)).sum()
    )
    r.simulate("car", [{"type": cells[k][0], "origin": cells[k][1]} for k in picked], rng=rng)
    words = WORDS + [f"w{i}" for i in range(200)]
    p = 1.0 / np.arange(1, len(words) + 1) ** 1.2
    r.simulate("search_term", list(rng.choice(words, 3 * n, p=p / p.sum())), rng=rng)


def estimates(url: str, metric: str, **query: str) -> dict[str, Any]:
    qs = urllib.parse.urlencode(query)
    request = urllib.request.Request(
        f"{url}/v1/estimates/{metric}?{qs}", headers={"Authorization": f"Bearer {READ}"}
    )
    with urllib.request.urlopen(request, timeout=150) as response:
        data: dict[str, Any] = json.load(response)
    return data
