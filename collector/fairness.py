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

The same lane, keyed by metric and run on a process pool, takes the maintained estimates'
computations (:mod:`~ldpkit.collector.results`): one metric's decodes share the workers
with the others'.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

T = TypeVar("T")

EXPENSIVE_SECONDS = 0.02
"""Batches estimated to take longer than this to aggregate go through the fair lane."""


def _one_thread() -> Executor:
    return ThreadPoolExecutor(1, thread_name_prefix="ldpkit-aggregate")


class FairLane:
    """Run blocking jobs on ``workers`` of an executor's workers (default: one thread),
    round-robin between keys (senders, metrics). A process pool that broke (a worker
    killed) is made anew; the job that was running fails."""

    def __init__(self, executor: Callable[[], Executor] = _one_thread, workers: int = 1) -> None:
        self._queues: dict[Hashable, deque[tuple[Callable[[], Any], asyncio.Future[Any]]]] = {}
        self._turns: deque[Hashable] = deque()
        self._wake: asyncio.Event | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._make = executor
        self._count = workers
        self._executor: Executor | None = None

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._executor = self._make()
        self._workers = [
            asyncio.create_task(self._run(), name="ldpkit-fair-lane") for _ in range(self._count)
        ]

    def queued(self, key: Hashable) -> int:
        """Jobs of ``key`` waiting for their turn."""
        return len(self._queues.get(key, ()))

    async def stop(self, *, wait: bool = True) -> None:
        """Stop taking jobs; ``wait``: for those running to end (else they are left to
        the executor's shutdown)."""
        for worker in self._workers:
            worker.cancel()
        for worker in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        self._workers = []
        for queue in self._queues.values():
            for _, future in queue:
                future.cancel()
        self._queues.clear()
        self._turns.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=wait, cancel_futures=True)
            self._executor = None

    @property
    def executor(self) -> Executor | None:
        return self._executor

    async def run(self, key: Hashable, job: Callable[[], T]) -> T:
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
                executor = self._executor
                try:
                    future.set_result(await loop.run_in_executor(executor, job))
                except BrokenProcessPool as exc:
                    if self._executor is executor:  # not made anew by another worker yet
                        executor.shutdown(wait=False, cancel_futures=True)
                        self._executor = self._make()
                    future.set_exception(exc)
                except Exception as exc:
                    future.set_exception(exc)
