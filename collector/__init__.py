"""ldpkit's collector: an aiohttp service that stores perturbed reports durably,
deduplicates them by id, keeps per-bucket aggregates and serves estimates.

>>> from ldpkit.collector import create_app, load_config      # doctest: +SKIP
>>> app = create_app(load_config("collector.toml"))            # doctest: +SKIP

Run it with ``ldpkit serve --config collector.toml``. The HTTP API is docs/protocol.md;
operation (durability, backups, privacy of logs) is docs/deployment.md.
"""

from .app import create_app
from .config import CollectorConfig, ConfigError, Tokens, load_config
from .store import Store, open_store

__all__ = [
    "CollectorConfig",
    "ConfigError",
    "Store",
    "Tokens",
    "create_app",
    "load_config",
    "open_store",
]
