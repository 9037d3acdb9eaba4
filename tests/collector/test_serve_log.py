"""What ``ldpkit serve`` logs when it is told to stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def test_sigterm_is_logged_with_the_drain(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ldpkit.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--database",
            str(tmp_path / "c.sqlite3"),
            "--log-level",  # after the subcommand, where people type it
            "INFO",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    try:
        for line in proc.stderr:  # readiness: the line, or the log's end if it exits
            if "listening on" in line:
                break
        else:
            raise AssertionError(f"the collector exited ({proc.wait()}) before listening")
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "SIGTERM received" in rest, rest
    assert "finishing the batches in flight" in rest, rest
    assert rest.index("SIGTERM received") < rest.index("collector stopped cleanly")
