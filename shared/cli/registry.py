"""The subcommand table and ``main``: what every command module registers into."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import __version__
from ..errors import LdpkitError

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
        "--log-level", default="INFO", choices=LOG_LEVELS, help="logging level (default: INFO)"
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
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        code: int = args._run(args)
        sys.stdout.flush()
    except LdpkitError as exc:  # ConfigError, ParameterError, ...
        print(f"ldpkit {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly as pipeline tools do, and point
        # stdout at /dev/null so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # as if killed by SIGPIPE
    return code
