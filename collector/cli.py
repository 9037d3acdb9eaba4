"""The ``ldpkit`` command: one function per subcommand, registered in :data:`COMMANDS`.

Add a subcommand with::

    def _demo_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--users", type=int, default=1000)

    @command("demo", "simulate users against a collector", _demo_arguments)
    def demo(args: argparse.Namespace) -> int:
        ...
        return 0

Errors an operator can fix (a bad config, a bad argument) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import LdpkitError
from .config import (
    POSTGRES_PREFIXES,
    CollectorConfig,
    ConfigError,
    default_config,
    load_config,
)

log = logging.getLogger("ldpkit.collector")

LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
Configure = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Configure
    run: Run


COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, configure: Configure | None = None) -> Callable[[Run], Run]:
    """Register ``run`` as ``ldpkit <name>``; ``configure`` adds its arguments."""

    def register(run: Run) -> Run:
        if name in COMMANDS:
            raise ValueError(f"ldpkit subcommand {name!r} registered twice")
        COMMANDS[name] = Command(name, help, configure or (lambda parser: None), run)
        return run

    return register


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ldpkit", description="ldpkit: local differential privacy collector and tools"
    )
    parser.add_argument("--version", action="version", version=f"ldpkit {__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=LOG_LEVELS,
        help="logging level (default: INFO)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        # Also after the subcommand, where people type it; SUPPRESS keeps the top level's.
        p.add_argument(
            "--log-level",
            default=argparse.SUPPRESS,
            choices=LOG_LEVELS,
            help="logging level (default: INFO)",
        )
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        code: int = args._run(args)
        sys.stdout.flush()
    except (ConfigError, LdpkitError) as exc:
        print(f"ldpkit {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly as pipeline tools do, and point
        # stdout at /dev/null so the interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13  # as if killed by SIGPIPE
    return code


# --- serve -----------------------------------------------------------------------------
def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="collector TOML file (default: built-in defaults)")
    parser.add_argument("--host", help="address to listen on (overrides [collector] host)")
    parser.add_argument(
        "--port", type=int, help="port to listen on; 0 picks a free one (overrides the config)"
    )
    parser.add_argument(
        "--database", help="SQLite path or postgresql:// URL (overrides [collector] database)"
    )
    parser.add_argument(
        "--no-access-log", action="store_true", help="do not log one line per request"
    )


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=1024, reuse_port=False)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve_config(args: argparse.Namespace) -> CollectorConfig:
    config = load_config(args.config) if args.config else default_config()
    return config.with_overrides(host=args.host, port=args.port, database=args.database)


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


@command("serve", "run the collector (HTTP API of docs/protocol.md)", _serve_arguments)
def serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT, then finish the batches in flight and exit 0."""
    from .app import create_app
    from .middlewares import access_log_format, install_log_privacy
    from .serving import serve as serve_app

    config = serve_config(args)
    check_database(config, flag=args.database is not None)
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
            access_log=None if args.no_access_log else logging.getLogger("aiohttp.access"),
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


# --- hash-token ------------------------------------------------------------------------
def _hash_token_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--new", action="store_true", help="make a new random token; print it and its hash"
    )


@command(
    "hash-token",
    "print a token's sha256:... form for [tokens] (reads the token from stdin, one a line)",
    _hash_token_arguments,
)
def hash_token(args: argparse.Namespace) -> int:
    """The token is read from stdin (or a hidden prompt), never from the command line,
    where other users could see it in the process list."""
    import getpass
    import secrets

    from .auth import token_hash
    from .config import _check_token

    if args.new:
        token = secrets.token_urlsafe(32)
        print(f"token: {token}")
        print(f"hash:  {token_hash(token)}")
        return 0
    if sys.stdin.isatty():
        tokens = [getpass.getpass("token: ")]
    else:
        tokens = [line.strip() for line in sys.stdin if line.strip()]
    if not tokens:
        raise ConfigError("no token given on stdin")
    for i, token in enumerate(tokens):
        _check_token(token, "stdin", i)
        print(token_hash(token))
    return 0


# The analyst's and newcomer's subcommands register themselves on import.
from . import commands as _commands  # noqa: E402, F401

if __name__ == "__main__":
    # Run as `python -m ldpkit.collector.cli`: this module is __main__, and the commands
    # registered into the importable ldpkit.collector.cli, so dispatch through that one.
    from ldpkit.collector.cli import main as _main

    sys.exit(_main())
