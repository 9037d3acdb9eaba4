"""``ldpkit serve`` and ``ldpkit hash-token``: the operator's commands. The collector
(aiohttp, prometheus_client) is imported when one of them runs, not before."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .registry import command

if TYPE_CHECKING:
    from ..collector.config import CollectorConfig


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


def serve_config(args: argparse.Namespace) -> CollectorConfig:
    from ..collector.config import default_config, load_config

    config = load_config(args.config) if args.config else default_config()
    return config.with_overrides(host=args.host, port=args.port, database=args.database)


@command("serve", "run the collector (HTTP API of docs/protocol.md)", _serve_arguments)
def serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT, then finish the batches in flight and exit 0."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError(
            "ldpkit serve needs the collector's extras: pip install 'ldpkit[collector]'"
        ) from None
    from ..collector.main import run

    return run(
        serve_config(args),
        database_flag=args.database is not None,
        access_log=not args.no_access_log,
    )


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

    from ..collector.auth import token_hash
    from ..collector.config import _check_token

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
