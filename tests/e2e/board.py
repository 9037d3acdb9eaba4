"""A collector with several days of data and a metric that changed version, for the
dashboard tests: ``theme`` and ``session_minutes`` reported over five daily buckets,
``os`` reported under epsilon 1, then redefined with epsilon 2 and reported again,
``country``: 16 categories with long names, over the same five days, and ``spend``: a
Laplace mean on [0, 100] today, 5% of its reports forged at the noise cap (issue 26)."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldpkit import wire
from ldpkit.client import Reporter
from ldpkit.collector.launcher import environment_without_tokens
from ldpkit.metrics import MetricDefinition
from tests.harness import running_collector

from .conftest import ADMIN, INGEST, READ, RELAY, THEMES
from .versioned import put_definition

DAYS = 5
PER_DAY = 1500
OS = ["android", "ios", "other"]
COUNTRIES = [f"country-{c}" for c in "abcdefghijklmnop"]  # 16 long labels to place
OLD_OS, NEW_OS = 2000, 400

CONFIG = f"""
[collector]
database = "collector.sqlite3"
screen_relay = false  # the forged spend batch goes in through the relay token, unscreened

[tokens]
ingest = ["{INGEST}"]
relay = ["{RELAY}"]
read = ["{READ}"]
admin = ["{ADMIN}"]

[metrics.theme]
categories = {json.dumps(THEMES)}
epsilon = 1.0
mechanism = "auto"

[metrics.session_minutes]
kind = "numeric"
bounds = [0, 240]
epsilon = 1.0
mechanism = "auto"

[metrics.os]
categories = {json.dumps(OS)}
epsilon = 1.0
mechanism = "auto"

[metrics.country]
categories = {json.dumps(COUNTRIES)}
epsilon = 2.0
mechanism = "auto"

[metrics.spend]
kind = "numeric"
bounds = [0, 100]
epsilon = 1.0
mechanism = "laplace"
"""
SPEND = MetricDefinition.numeric("spend", (0.0, 100.0), epsilon=1.0, mechanism="laplace")


@dataclass
class Board:
    url: str
    directory: Path
    first_day: int  # unix seconds of the first daily bucket
    os_old: str
    os_new: str


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def board_collector(directory: Path) -> Iterator[Board]:
    (directory / "collector.toml").write_text(CONFIG)
    with running_collector(
        "collector.toml", cwd=directory, env=environment_without_tokens()
    ) as collector:
        url = collector.url
        rng = np.random.default_rng(14)
        clock = Clock()
        today = int(clock.now // 86400) * 86400
        first = today - (DAYS - 1) * 86400
        with Reporter(
            url, token=RELAY, state_dir=directory / "devices", background=False, clock=clock
        ) as r:
            r.refresh_definitions()
            for day in range(DAYS):
                clock.now = first + day * 86400 + 3600
                dark = 0.45 + 0.05 * day  # a trend to see
                themes = rng.choice(THEMES, size=PER_DAY, p=[0.8 - dark, dark, 0.2])
                r.simulate("theme", themes.tolist(), rng=rng)
                minutes = np.clip(rng.gamma(2.0, 15.0 + 3 * day, size=PER_DAY), 0, 240)
                r.simulate("session_minutes", minutes.tolist(), rng=rng)
                weights = 1.0 / np.arange(1, len(COUNTRIES) + 1)
                countries = rng.choice(COUNTRIES, size=PER_DAY, p=weights / weights.sum())
                r.simulate("country", countries.tolist(), rng=rng)
            clock.now = today + 3600
            r.simulate("os", rng.choice(OS, size=OLD_OS, p=[0.6, 0.3, 0.1]).tolist(), rng=rng)
            assert r.flush().sent == 3 * DAYS * PER_DAY + OLD_OS
        answer = put_definition(
            url, "os", {"kind": "categorical", "categories": OS, "epsilon": 2.0}
        )
        with Reporter(url, token=RELAY, state_dir=directory / "new", background=False) as r:
            r.refresh_definitions()
            r.simulate("os", rng.choice(OS, size=NEW_OS, p=[0.6, 0.3, 0.1]).tolist(), rng=rng)
            assert r.flush().sent == NEW_OS
        forge_spend(url, rng)
        yield Board(
            url,
            directory,
            first,
            str(answer["previous_version"]),
            str(answer["definition"]["fingerprint"]),  # type: ignore[index]
        )


def forge_spend(url: str, rng: np.random.Generator) -> None:
    """9,500 honest reports of values in [40, 60] and 500 forged at the noise cap, sent
    as one batch: the mean's interval lies beyond the bounds."""
    m: Any = SPEND.mechanism_instance
    forged = np.full(500, m.grid_steps + m.noise_cap, dtype=m.report_dtype)
    reports = np.concatenate([m.perturb(rng.uniform(40.0, 60.0, 9500), rng=rng), forged])
    block = wire.make_block(
        "spend",
        SPEND.fingerprint,
        int(time.time() // 86400) * 86400,
        os.urandom(16 * 10_000),
        reports,
    )
    request = urllib.request.Request(
        f"{url}/v1/reports",
        data=wire.encode_batch([block]),
        headers={"Authorization": f"Bearer {RELAY}", "Content-Type": wire.CONTENT_TYPE},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.load(response)["accepted"] == 10_000
