"""A real ``ldpkit serve`` process on loopback, filled through the real client."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from ldpkit.client import Reporter
from ldpkit.collector.launcher import environment_without_tokens
from tests.harness import running_collector

from .browser import CHROMIUM, CHROMIUM_ARGS, require_browser

if TYPE_CHECKING:
    from .allkinds import AllKinds

INGEST, READ, ADMIN = "e2e-ingest", "e2e-read", "e2e-admin"
RELAY = "e2e-relay"  # simulate(): many devices' reports in a batch
THEMES = ["light", "dark", "system"]
THEME_TRUTH = [0.25, 0.55, 0.20]
USERS = 6000
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")

CONFIG = f"""
[collector]
database = "collector.sqlite3"

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
"""


@dataclass
class Populated:
    url: str
    directory: Path
    themes: np.ndarray
    minutes: np.ndarray


STALE_INTERVAL = 5
"""estimate_interval_seconds of the stale-estimate tests' collectors."""


def stale_config(metric: str, upper: float, resolution: int) -> str:
    """A collector.toml whose maintained estimates are computed again at most every
    :data:`STALE_INTERVAL` s: sooner after the last computation a query gets that one
    (stale) unless it waits for the next. One distribution metric on ``[0, upper]``."""
    return f"""
[collector]
database = "collector.sqlite3"
estimate_interval_seconds = {STALE_INTERVAL}

[tokens]
relay = ["{RELAY}"]
read = ["{READ}"]

[metrics.{metric}]
kind = "distribution"
bounds = [0.0, {upper!r}]
resolution = {resolution}
epsilon = 2.0
"""


@pytest.fixture(scope="package")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Populated]:
    """A collector holding USERS simulated users' reports of two metrics."""
    directory = tmp_path_factory.mktemp("e2e")
    (directory / "collector.toml").write_text(CONFIG)
    with running_collector(
        "collector.toml", cwd=directory, env=environment_without_tokens()
    ) as collector:
        rng = np.random.default_rng(2024)
        themes = rng.choice(THEMES, size=USERS, p=THEME_TRUTH)
        minutes = np.clip(rng.gamma(2.0, 18.0, size=USERS), 0, 240)
        url = collector.url
        with Reporter(url, token=RELAY, state_dir=directory / "device", background=False) as r:
            r.simulate("theme", themes.tolist(), rng=rng)
            r.simulate("session_minutes", minutes.tolist(), rng=rng)
            result = r.flush()
            assert result.sent == 2 * USERS
        yield Populated(url, directory, themes, minutes)


@pytest.fixture(scope="package")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AllKinds]:
    """A collector holding every metric kind over DAYS daily buckets (tests/e2e/allkinds.py),
    every maintained estimate computed: seeded once for the dashboard tests of every kind.
    Parallel workers run its modules on one worker (tests/conftest.py, ``SHARED``)."""
    from .allkinds import all_kinds_collector  # it imports this module's tokens

    yield from all_kinds_collector(tmp_path_factory.mktemp("allkinds"))


# The browser tests' fixtures (each module its own browser; screenshots to
# $LDPKIT_SCREENSHOTS, default a temporary folder).
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_playwright = require_browser()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("LDPKIT_SCREENSHOTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path
