"""The collector's aiohttp application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from .auth import TokenRegistry
from .backends import open_store
from .config import CollectorConfig
from .keys import COLLECTOR, CONFIG, TELEMETRY, TOKENS
from .middlewares import auth_middleware, cors_middleware, error_middleware, telemetry_middleware
from .routes import setup_routes
from .service import Collector
from .store import Store
from .telemetry import Telemetry


async def _collector_context(app: web.Application) -> AsyncIterator[None]:
    """Open the store at startup; at cleanup (requests done) commit what is queued, close."""
    collector = app[COLLECTOR]
    await collector.start()
    yield
    await collector.stop()


async def _on_shutdown(app: web.Application) -> None:
    app[COLLECTOR].draining = True


def create_app(config: CollectorConfig, *, store: Store | None = None) -> web.Application:
    """The collector app for ``config``. Nothing is opened until the app starts (the store
    opens in a cleanup context). ``store`` overrides the one ``config.database`` names."""
    app = web.Application(
        client_max_size=config.max_body_bytes,
        middlewares=[telemetry_middleware, cors_middleware, error_middleware, auth_middleware],
    )
    telemetry = Telemetry()
    if store is None:
        store = open_store(
            config.database,
            synchronous=config.synchronous,
            pool_size=config.pool_size,
            sqlite_cache_mib=config.sqlite_cache_mib,
        )
    app[CONFIG] = config
    app[TELEMETRY] = telemetry
    app[TOKENS] = TokenRegistry(config.tokens)
    app[COLLECTOR] = Collector(config, store, telemetry)
    app.cleanup_ctx.append(_collector_context)
    app.on_shutdown.append(_on_shutdown)
    setup_routes(app)
    return app
