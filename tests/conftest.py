"""Fixtures for every test directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiohttp import web_app


@pytest.fixture(autouse=True)
def _release_aiohttp_apps() -> Iterator[None]:
    """Let each test's collector app go once the test is done.

    aiohttp memoizes each handler's middleware chain in a module-level
    ``lru_cache(maxsize=1024)`` keyed by the handler and its ``Application``s, so every
    app that served a request stays alive, with its collector, store and computed
    estimates: a serving process has one app, but the test suite makes hundreds (issue 28).
    """
    yield
    cached = getattr(web_app, "_cached_build_middleware", None)
    if cached is not None:  # a private name: only clear it where this aiohttp has it
        cached.cache_clear()
