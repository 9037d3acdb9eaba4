"""The ``ldpkit`` command: one function per subcommand, registered in :data:`COMMANDS`.

This subpackage is the one place that drives both a client and a collector (``demo``), so
it belongs to neither. Its modules import only the standard library and the core at the
top; each command imports what it needs (the collector, the client, matplotlib) when it
runs, so ``ldpkit --help`` and ``ldpkit plan`` work on a base install.

Add a subcommand with::

    def _demo_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--users", type=int, default=1000)

    @command("demo", "simulate users against a collector", _demo_arguments)
    def demo(args: argparse.Namespace) -> int:
        ...
        return 0

Errors an operator can fix (a bad config, a bad argument) print one line and exit 2.
"""

from .registry import COMMANDS, Command, build_parser, command, main

# The subcommands register themselves on import, in the order `ldpkit --help` lists them
# (each imports what it needs when it runs).
# isort: off
from . import serve, commands
# isort: on

__all__ = ["COMMANDS", "Command", "build_parser", "command", "commands", "main", "serve"]
