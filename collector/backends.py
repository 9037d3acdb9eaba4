"""Which store a database string names: a path is SQLite, ``postgresql://...`` PostgreSQL
(when that module and its driver exist). Apart from :mod:`~ldpkit.collector.store`, so
that the interface does not import the stores built on it."""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from .config import POSTGRES_PREFIXES, Synchronous
from .store import Store


def open_store(
    database: str,
    *,
    synchronous: Synchronous = Synchronous.FULL,
    pool_size: int = 8,
    sqlite_cache_mib: int = 256,
) -> Store:
    """The store for ``database``: a SQLite file path, or a PostgreSQL URL (``pool_size``:
    that store's connections per process)."""
    if database.startswith(POSTGRES_PREFIXES):
        try:
            module = importlib.import_module(f"{__package__}.postgres_store")
        except ImportError as exc:
            raise ConfigError(f"the PostgreSQL store is not available: {exc}") from None
        store: Store = module.PostgresStore(database, pool_size=pool_size)
        return store
    from .sqlite_store import SQLiteStore

    return SQLiteStore(database, synchronous=synchronous, cache_mib=sqlite_cache_mib)
