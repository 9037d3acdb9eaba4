"""Waiting for a condition in tests: readiness, not the machine's speed.

A test waits until what it needs holds (a replica sees a metric, an outbox drains), polling,
and fails at once when the process it waits on exits. The only time limit is a hang guard
far above any wait seen on a loaded machine (two cores at load 18): it turns a hang into a
failure instead of a stuck run, and never decides a result on a merely slow machine.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

HANG_GUARD = 600.0
"""Seconds after which a wait is a hang (the slowest readiness wait seen: under 30 s)."""


def wait_until(
    condition: Callable[[], object],
    what: str,
    *,
    process: subprocess.Popen[str] | None = None,
    interval: float = 0.02,
) -> None:
    """Poll ``condition`` until it is true; fail if ``process`` exits first (or on a hang)."""
    guard = time.monotonic() + HANG_GUARD
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{what}: the process exited ({process.returncode}) first")
        if time.monotonic() > guard:
            raise AssertionError(f"{what}: still not true after {HANG_GUARD:g} s (a hang)")
        time.sleep(interval)


async def async_wait_until(condition: Callable[[], object], what: str) -> None:
    """:func:`wait_until` for a coroutine: yields to the event loop between polls."""
    import asyncio

    guard = time.monotonic() + HANG_GUARD
    while not condition():
        if time.monotonic() > guard:
            raise AssertionError(f"{what}: still not true after {HANG_GUARD:g} s (a hang)")
        await asyncio.sleep(0.01)
