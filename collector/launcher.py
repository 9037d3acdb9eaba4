"""Start ``ldpkit serve`` as a child process and learn its address (demo, examples, tests)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue

from ..errors import LdpkitError

LISTENING = re.compile(r"listening on (http://\S+?) ")


@dataclass(frozen=True)
class RunningCollector:
    process: subprocess.Popen[str]
    url: str
    log: list[str]  # the collector's log lines so far (read by a background thread)


@contextmanager
def running_collector(
    config: str | Path,
    *,
    cwd: str | Path | None = None,
    port: int = 0,
    env: Mapping[str, str] | None = None,
    startup_timeout: float | None = None,
    command: Sequence[str] = (sys.executable, "-P", "-m", "ldpkit.cli"),
    access_log: bool = False,
) -> Iterator[RunningCollector]:
    """``ldpkit serve --config CONFIG --port PORT`` (0: a free port) until the block ends.

    Yields once the collector logs the address it listens on (on loopback); at the end
    it sends SIGTERM (the collector finishes the batches in flight) and waits for the
    exit, unless the block already stopped it. ``command`` runs ``ldpkit`` (the default:
    this interpreter with ``-P``, so a folder named ``ldpkit`` in the working directory,
    such as a clone, is not imported in place of the installed package; tests also try the
    installed console script). ``access_log``: log one line per request (off by default).

    Start-up waits for readiness, not for a fixed time: it ends when the collector logs its
    address or when its log ends (it exited: the error carries its log at once).
    ``startup_timeout`` (seconds, none by default) bounds the wait for a collector that
    neither listens nor exits.
    """
    args = [*command, "serve", "--host", "127.0.0.1", "--config", str(config), "--port", str(port)]
    process = subprocess.Popen(
        args if access_log else [*args, "--no-access-log"],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env) if env is not None else None,
    )
    lines: Queue[str | None] = Queue()
    log: list[str] = []
    assert process.stderr is not None
    stderr = process.stderr

    def pump() -> None:  # keep reading the log so the child never blocks on a full pipe
        for line in stderr:
            log.append(line)
            lines.put(line)
        lines.put(None)  # end of the log: the child exited (or closed stderr)

    threading.Thread(target=pump, daemon=True).start()
    try:
        while True:
            try:
                line = lines.get(timeout=startup_timeout)
            except Empty:
                raise LdpkitError(
                    f"the collector did not start within {startup_timeout:g} s: {''.join(log)}"
                ) from None
            if line is None:
                code = process.wait()
                raise LdpkitError(f"the collector exited ({code}) before listening: {''.join(log)}")
            if match := LISTENING.search(line):
                break
        yield RunningCollector(process, match.group(1), log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def environment_without_tokens() -> dict[str, str]:
    """This process's environment less LDPKIT_* variables (tokens from the config only)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}
