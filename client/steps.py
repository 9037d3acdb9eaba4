"""Operations as steps: a generator yields the I/O it needs and is sent back what it got
(or has the failure thrown in), so an operation's decisions are written once and the
synchronous and the asynchronous reporter each only perform the I/O (sans-I/O).

>>> def fetch() -> Steps[bytes]:
...     answer = yield Request("GET", "/v1/metrics", None, {})
...     return answer.body
"""

from __future__ import annotations

import collections.abc
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

R = TypeVar("R")


@dataclass(frozen=True)
class Request:
    """Send an HTTP request; the answer (an HttpAnswer) or NetworkError comes back."""

    method: str
    path: str
    body: bytes | None
    headers: dict[str, str]


@dataclass(frozen=True)
class Sleep:
    """Sleep ``seconds`` (a backoff before the next attempt)."""

    seconds: float


@dataclass(frozen=True)
class Disk:
    """Call ``call`` (the store's disk work: the async shell runs it in a worker thread)."""

    call: Callable[[], object]


@dataclass(frozen=True)
class Locked:
    """Run ``steps`` holding the shell's ``lock`` (one flush at a time, one fetch at a time)."""

    lock: Literal["send", "definitions"]
    steps: Steps[Any]


@dataclass(frozen=True)
class Wait:
    """Wait up to ``seconds`` for a full batch; False comes back when the reporter stops."""

    seconds: float


Op = Request | Sleep | Disk | Locked | Wait
Steps = collections.abc.Generator[Op, Any, R]


class Stepper(Generic[R]):
    """Drives ``steps``: iterating gives the next request; set ``reply`` to what it got,
    or perform it inside ``answering()``, which throws a failure back into ``steps``."""

    def __init__(self, steps: Steps[R]) -> None:
        self._steps = steps
        self.reply: object = None
        self._error: Exception | None = None

    def __iter__(self) -> Iterator[Op]:
        return self

    def __next__(self) -> Op:
        reply, error, self.reply, self._error = self.reply, self._error, None, None
        try:
            return self._steps.throw(error) if error is not None else self._steps.send(reply)
        except StopIteration as stop:
            self.result: R = stop.value
            raise StopIteration from None

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            self._error = exc
