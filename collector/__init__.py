"""ldpkit's collector: an aiohttp service that stores perturbed reports durably,
deduplicates them by id, keeps per-bucket aggregates and serves estimates.

>>> from ldpkit.collector import create_app, load_config      # doctest: +SKIP
>>> app = create_app(load_config("collector.toml"))            # doctest: +SKIP

Run it with ``ldpkit serve --config collector.toml``. The HTTP API is docs/protocol.md;
operation (durability, backups, privacy of logs) is docs/deployment.md.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..errors import ConfigError as ConfigError
    from .app import create_app as create_app
    from .backends import open_store as open_store
    from .config import CollectorConfig as CollectorConfig
    from .config import Tokens as Tokens
    from .config import load_config as load_config
    from .store import Store as Store

# Loaded on first use, so that importing a submodule (``ldpkit.collector.config``,
# ``ldpkit.collector.launcher``) does not load aiohttp, prometheus_client and the stores.
_HOMES = {
    "create_app": ".app",
    "CollectorConfig": ".config",
    "ConfigError": "..errors",
    "Tokens": ".config",
    "load_config": ".config",
    "Store": ".store",
    "open_store": ".backends",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_HOMES[name], __name__), name)


__all__ = sorted(_HOMES)
