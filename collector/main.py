"""Running the collector as a process: check the database before serving, listen, serve
until SIGTERM or SIGINT, and say so in the log. ``ldpkit serve`` (:mod:`ldpkit.cli.serve`)
is its command line."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, LdpkitError
from .config import POSTGRES_PREFIXES, CollectorConfig

log = logging.getLogger("ldpkit.collector")


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=1024, reuse_port=False)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


# Connection errors that waiting will not fix: no such database or role, bad password,
# not allowed by pg_hba.conf. libpq gives no SQLSTATE before a session exists, so its
# message decides. Others (refused, timed out) may be a server still starting.
_PERMANENT_PG_ERRORS = re.compile(
    r'(database|role) "[^"]*" does not exist|password authentication failed|no pg_hba\.conf entry'
)


def check_database(config: CollectorConfig, *, flag: bool = False) -> None:
    """Refuse, before serving, a ``database`` the store could not use: like any config
    error it exits 2 and names the key, instead of a store error after startup (exit 1),
    a folder created behind the operator's back, or 15 s of pool retries."""
    where = "--database" if flag else f"{config.source}: [collector] database"
    if config.database.startswith(POSTGRES_PREFIXES):
        _check_postgres(config.database, where)
        return
    path = Path(config.database)
    if path.is_dir():
        raise ConfigError(f"{where} = {str(path)!r} is a folder; name a file in it")
    if not path.parent.is_dir():
        raise ConfigError(
            f"{where} = {str(path)!r}: the folder {str(path.parent)!r} does not exist; "
            "create it first (the collector does not create folders it was not asked for)"
        )
    if path.exists():
        try:
            with path.open("rb") as f:
                header = f.read(16)
        except OSError as exc:
            raise ConfigError(f"{where} = {str(path)!r}: cannot read it: {exc.strerror}") from None
        if header and header != b"SQLite format 3\x00":
            raise ConfigError(f"{where} = {str(path)!r}: this file is not a database (SQLite)")


def _check_postgres(url: str, where: str) -> None:
    try:
        import psycopg

        from .postgres_store import redacted
    except ImportError:
        raise ConfigError(
            f"{where}: PostgreSQL needs psycopg: pip install 'ldpkit[postgres]'"
        ) from None
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.Error as exc:
        if match := _PERMANENT_PG_ERRORS.search(str(exc)):
            cause = str(exc)[match.start() :].strip().splitlines()[0]
            raise ConfigError(f"{where} = {redacted(url)}: {cause}") from None
        log.warning("database %s not reachable yet (%s); the store will retry", redacted(url), exc)


def _log_stop_signals(shutdown_timeout: float) -> Callable[[Any], Awaitable[None]]:
    """An on_startup hook that replaces aiohttp's SIGINT/SIGTERM handlers (installed just
    before startup) with ones that first say which signal came and that draining began."""
    from aiohttp.web_runner import GracefulExit

    def stop(sig: signal.Signals) -> None:
        log.info(
            "%s received: finishing the batches in flight (at most %g s), then stopping",
            sig.name,
            shutdown_timeout,
        )
        raise GracefulExit()  # what aiohttp's own handler raises

    async def install(_app: Any) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
                loop.add_signal_handler(sig, stop, sig)

    return install


def run(config: CollectorConfig, *, database_flag: bool = False, access_log: bool = True) -> int:
    """Serve until SIGTERM or SIGINT, then finish the batches in flight; 0 when stopped
    cleanly, 1 when the store or the socket failed. ``database_flag``: the database came
    from ``--database`` (error messages name the flag instead of the config key)."""
    from .app import create_app
    from .middlewares import access_log_format, install_log_privacy
    from .serving import serve as serve_app

    check_database(config, flag=database_flag)
    install_log_privacy(config.log_addresses)
    app = create_app(config)
    app.on_startup.append(_log_stop_signals(config.shutdown_timeout))
    sock = _listen(config.host, config.port)
    host, port = sock.getsockname()[:2]

    def announce() -> None:
        log.info(
            "ldpkit collector listening on http://%s:%d (database %s)",
            host if ":" not in host else f"[{host}]",
            port,
            config.database,
        )

    try:
        serve_app(
            app,
            sock,
            config=config,
            access_log=logging.getLogger("aiohttp.access") if access_log else None,
            access_log_format=access_log_format(config.log_addresses),
            announce=announce,
        )
    except (OSError, LdpkitError) as exc:
        log.error("collector stopped: %s", exc)
        return 1
    finally:
        sock.close()
    log.info("collector stopped cleanly")
    return 0
