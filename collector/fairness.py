"""Costly work charged to its sender: a fair lane for expensive aggregations.

Most batches aggregate in microseconds and do so in the store's writer, in their group
commit. Some cost far more: optimized local hashing makes d hash evaluations per report
(a batch of 100,000 reports at d = 65,536 takes seconds), unary encodings and subset
selection unpack d bits per report. Aggregated in the single writer, one such batch
delays every other client's commit by as long (issue 11).

So a batch whose estimated aggregation time is over :data:`EXPENSIVE_SECONDS` is
aggregated *before* it reaches the store, in this lane: one worker thread, taking jobs
round-robin across senders (ingest token digests), each sender's jobs in order. A sender
of costly batches waits for its own work and shares the lane fairly with other costly
senders; cheap batches never queue behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

EXPENSIVE_SECONDS = 0.02
"""Batches estimated to take longer than this to aggregate go through the fair lane."""


class FairLane:
    """Run blocking jobs on one thread, round-robin between keys (senders)."""

    def __init__(self) -> None:
        self._queues: dict[bytes, deque[tuple[Callable[[], Any], asyncio.Future[Any]]]] = {}
        self._turns: deque[bytes] = deque()
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="ldpkit-aggregate")
        self._worker = asyncio.create_task(self._run(), name="ldpkit-fair-lane")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        for queue in self._queues.values():
            for _, future in queue:
                future.cancel()
        self._queues.clear()
        self._turns.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    async def run(self, key: bytes, job: Callable[[], T]) -> T:
        """``job()`` on the lane's thread, in ``key``'s turn."""
        if self._wake is None:
            raise RuntimeError("the fair lane is not started")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            self._turns.append(key)
        queue.append((job, future))
        self._wake.set()
        return await future

    async def _run(self) -> None:
        assert self._wake is not None and self._executor is not None
        loop = asyncio.get_running_loop()
        while True:
            while not self._turns:
                self._wake.clear()
                await self._wake.wait()
            key = self._turns.popleft()
            queue = self._queues[key]
            job, future = queue.popleft()
            if queue:
                self._turns.append(key)  # its next job after the other senders' turns
            else:
                del self._queues[key]
            if future.done():  # the request went away
                continue
            with contextlib.suppress(asyncio.InvalidStateError):  # it went away meanwhile
                try:
                    future.set_result(await loop.run_in_executor(self._executor, job))
                except Exception as exc:
                    future.set_exception(exc)
