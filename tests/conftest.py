"""Fixtures for every test directory."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web_app


def _fix_malloc_thresholds() -> None:
    """Have glibc hand big freed blocks back to the system (issue 28).

    glibc raises its mmap threshold (up to 32 MB) each time a mapped block is freed, so
    later big buffers (request bodies, numpy arrays) come from the heap, and once freed
    stay in this process: after tests/collector/test_backpressure.py malloc_trim gave
    back 69 MB of 151 MB. Fixed thresholds stop that; a serving collector is unaffected.
    """
    if not sys.platform.startswith("linux"):
        return
    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    if mallopt is None:  # not glibc (e.g. musl): leave its allocator alone
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's <malloc.h>
    mallopt(m_mmap_threshold, 256 * 1024)
    mallopt(m_trim_threshold, 1024 * 1024)


_fix_malloc_thresholds()


SHARED = {
    "tests/e2e/test_kinds_dashboard.py": "kinds",
    "tests/e2e/test_views_inside.py": "kinds",
}
"""Test modules that share a package- or session-scoped fixture costly enough to build once
(``kinds``: a collector seeded with every kind, tests/e2e/allkinds.py): one worker runs them."""


@pytest.hookimpl(optionalhook=True)  # xdist's hook: pytest without xdist (-p no:xdist) runs
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pyproject's addopts run the suite on every core (``-n auto --dist loadfile``): each
    module's tests on one worker, so that its module fixtures (a collector seeded, a
    browser) are built once, and the modules of :data:`SHARED` together. (Not xdist_group
    marks: with pytest 9.2 pytest-xdist 3.8's ``--dist loadgroup`` ignores them.)"""
    if config.getvalue("dist") != "loadfile":
        return None  # another --dist asked for: xdist's own
    from xdist.scheduler import LoadFileScheduling

    class ByModule(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SHARED.get(module, module)

    return ByModule(config, log)


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
