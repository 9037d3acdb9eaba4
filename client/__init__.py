"""ldpkit's client SDK: perturb on the device, queue durably, deliver in batches.

>>> from ldpkit.client import Reporter
>>> with Reporter("http://127.0.0.1:8787", token="app-secret",
...               state_dir="~/.myapp/ldpkit") as r:          # doctest: +SKIP
...     r.report("theme", "dark")
...     r.report("session_minutes", 42.5)
...     r.flush()

:class:`Reporter` (a background thread, stdlib HTTP) and :class:`AsyncReporter` (an
asyncio task, aiohttp, imported on first use) are thin shells over one base
(:mod:`ldpkit.client.base`), I/O-free decisions (``policies``, ``codec``, ``protocol``,
``flush``) and one on-device store (:mod:`ldpkit.client.storage`). See ``docs/client.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import (
    BudgetExceeded,
    CollectorRejected,
    CollectorUnavailable,
    LdpkitError,
    OutboxFull,
    ParameterError,
)
from ..http import Timeout
from ..metrics import MetricDefinition, Period
from .policies import RetryPolicy
from .results import BudgetStatus, FlushResult, MetricBudget, ReportReceipt, StateLoss, TotalBudget
from .storage import StateError
from .sync import Reporter

if TYPE_CHECKING:
    from .aio import AsyncReporter


def __getattr__(name: str) -> Any:
    # AsyncReporter needs aiohttp (~0.3 s and 400 modules to import): load it on first use
    # only, so that an app using the sync Reporter never pays for it.
    if name == "AsyncReporter":
        from .aio import AsyncReporter

        return AsyncReporter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AsyncReporter",
    "BudgetExceeded",
    "BudgetStatus",
    "CollectorRejected",
    "CollectorUnavailable",
    "FlushResult",
    "LdpkitError",
    "MetricBudget",
    "MetricDefinition",
    "OutboxFull",
    "ParameterError",
    "Period",
    "ReportReceipt",
    "Reporter",
    "RetryPolicy",
    "StateError",
    "StateLoss",
    "Timeout",
    "TotalBudget",
]
