"""Fixtures: the real collector app on a temporary SQLite file, behind aiohttp's test client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from ldpkit.collector.config import CollectorConfig

from .helpers import make_config, running
from .postgres import fresh_pg_database, pg_database, pg_server, pg_url  # noqa: F401


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "collector.sqlite3"


@pytest.fixture
def config(database: Path) -> CollectorConfig:
    return make_config(database)


@pytest.fixture
async def client(config: CollectorConfig) -> AsyncIterator[TestClient]:
    async with running(config) as c:
        yield c
