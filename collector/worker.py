"""The estimate worker: maintained estimates are prepared here, in separate processes.

A decode holds the interpreter's lock for seconds at a time (Python loops of the walk,
numpy calls too short to release it for long), so in a thread of the collector it would
slow every request and every batch of the event loop; a process shares nothing but the
cores (docs/deployment.md, "The estimate worker", measures both). Each worker process:

- runs at a lower priority (``nice`` :data:`NICE`), so ingest keeps the cores it needs;
- may hold at most ``memory_bytes`` more than it held once started (``RLIMIT_DATA``, which
  bounds numpy's arrays and Python's heap): a computation over it gets ``MemoryError``;
- may spend at most ``cpu_seconds`` of CPU per computation (``RLIMIT_CPU``'s soft limit,
  moved before each one): the kernel's ``SIGXCPU`` is raised here as :class:`OverBudget`.

Either way the computation fails cleanly: its :class:`Outcome` says why, and the worker
goes on with the next. BLAS runs one thread (the decoder's systems are small). What the
computations leave in the worker (the definitions it built, and what their estimates
built) is forgotten once it is over a quarter of ``memory_bytes``, so that it never takes a
later computation's budget.

Nothing here imports numpy before :func:`start` has set the BLAS threads.
"""

from __future__ import annotations

import gc
import math
import os
import pickle
import resource
import signal
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..aggregate import Aggregate
    from ..metrics import MetricDefinition

NICE = 10
THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
MAX_DEFINITIONS = 16  # built definitions kept per worker (a large design takes a second)


class OverBudget(BaseException):
    """The computation used its CPU budget (a BaseException: no ``except Exception`` in
    the code it interrupts swallows it)."""


@dataclass(frozen=True)
class Job:
    """One estimate to prepare: a version (its stored JSON) and an aggregate."""

    name: str
    fingerprint: str
    definition: str
    n: int
    sums: npt.NDArray[np.float64]


@dataclass(frozen=True)
class Prepared:
    """What is kept of a maintained estimate: the kind's prepared estimate and its
    aggregate (an answer serves its ``n`` and, for most kinds, its sums)."""

    aggregate: Aggregate
    estimate: Any


@dataclass(frozen=True)
class Outcome:
    """A job's outcome: the pickled :class:`Prepared`, or why there is none; the CPU
    seconds it took and the worker's peak memory (resident bytes) while it ran."""

    result: bytes | None
    error: str | None
    cpu_seconds: float
    peak_bytes: int


_budget = {"cpu": math.inf, "memory": 0.0, "held": 0.0}  # held: VmData when last forgot
_computing = False
_definitions: dict[str, MetricDefinition] = {}


def start(cpu_seconds: float, memory_bytes: int) -> None:
    """The pool's initializer: priority, BLAS threads, the budget (see the module)."""
    for name in THREADS:
        os.environ[name] = "1"
    os.nice(NICE)
    import numpy  # noqa: F401 - loaded before the memory mark, with one BLAS thread

    from .. import metrics  # noqa: F401

    _budget.update(cpu=cpu_seconds, memory=memory_bytes)
    signal.signal(signal.SIGXCPU, _over_cpu)
    held = _status("VmData")
    _budget["held"] = held
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = held + memory_bytes
    resource.setrlimit(resource.RLIMIT_DATA, (limit if hard < 0 else min(limit, hard), hard))


def _over_cpu(signum: int, frame: FrameType | None) -> None:
    global _computing
    if _computing:
        _computing = False
        raise OverBudget


def _status(field: str) -> int:
    """A ``/proc/self/status`` figure in bytes (0 where there is none)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _definition(job: Job) -> MetricDefinition:
    from ..metrics import MetricDefinition

    found = _definitions.get(job.fingerprint)
    if found is None:
        import json

        if len(_definitions) >= MAX_DEFINITIONS:
            _definitions.clear()
        found = MetricDefinition.from_served(job.name, json.loads(job.definition), job.fingerprint)
        _definitions[job.fingerprint] = found
    return found


def prepare(job: Job) -> Outcome:
    """Prepare ``job``'s estimate within the budget (run in a worker process)."""
    global _computing
    from ..aggregate import Aggregate

    _forget_if_heavy()  # (here, not after the last job: its result is no longer held)
    definition = _definition(job)
    aggregate = Aggregate(job.n, job.sums)
    _reset_peak()
    used = _cpu()
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    result = error = None
    try:
        if math.isfinite(_budget["cpu"]):  # in a worker process (start() ran)
            resource.setrlimit(resource.RLIMIT_CPU, (math.ceil(used + _budget["cpu"]), hard))
        _computing = True
        prepared = Prepared(aggregate, definition.kind_spec.prepare(definition, aggregate))
        _computing = False
        result = pickle.dumps(prepared, protocol=pickle.HIGHEST_PROTOCOL)
    except OverBudget:
        error = f"over the CPU budget of {_budget['cpu']:g} s a computation (estimate_cpu_seconds)"
    except MemoryError:
        mib = _budget["memory"] / 2**20
        error = f"over the memory budget of {mib:g} MiB a computation (estimate_memory_mib)"
    finally:
        _computing = False
        if math.isfinite(_budget["cpu"]):
            resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
    return Outcome(result, error, _cpu() - used, _status("VmHWM"))


def _forget_if_heavy() -> None:
    """Forget the built definitions once what the worker holds between computations is
    over a quarter of its budget: a definition keeps what its estimate built (a square
    wave's channel, 128 MiB at 4,096 buckets), and what is kept counts against every later
    computation's budget (RLIMIT_DATA), so estimates that each fit would fail in turn.

    Counted from what stayed after the latest forgetting: the modules a first computation
    imports and what the allocator keeps (35 to 46 MiB after a square wave at 1,024
    buckets) no forgetting gives back, and counted they made a small worker forget after
    every computation (at 64 MiB, so that no definition was ever used twice)."""
    if _budget["memory"] > 0 and _status("VmData") - _budget["held"] > _budget["memory"] / 4:
        _definitions.clear()
        gc.collect()  # (a definition in a reference cycle would still be counted)
        _budget["held"] = _status("VmData")


def _reset_peak() -> None:
    """Start the peak resident memory (VmHWM) afresh (Linux: ``clear_refs`` 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def load(blob: bytes) -> Prepared:
    """A :class:`Prepared` from its pickle. Only the collector's own results are read so:
    they come from its worker, through its store (never from a request or a client)."""
    prepared: Prepared = pickle.loads(blob)
    return prepared
