"""The analyst's CLI where a newcomer trips: plot paths, pipes, phrasing, log levels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import READ, Populated

CLI = [sys.executable, "-m", "ldpkit.collector.cli"]


def ldpkit(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**clean, **(env or {})},
    )


def test_plot_paths(populated: Populated, tmp_path: Path) -> None:
    query = ["estimates", "theme", "--collector", populated.url, "--token", READ]
    missing = ldpkit(*query, "--plot", str(tmp_path / "no" / "such" / "theme.png"))
    assert missing.returncode == 2, missing.stderr
    assert "Traceback" not in missing.stderr
    assert "--plot" in missing.stderr and str(tmp_path / "no" / "such") in missing.stderr

    bare = ldpkit(*query, "--plot", "theme", cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    assert (tmp_path / "theme.png").read_bytes()[:4] == b"\x89PNG"
    assert "written to theme.png" in bare.stderr

    svg = ldpkit(*query, "--plot", "theme.svg", cwd=tmp_path)
    assert svg.returncode == 0, svg.stderr
    assert b"<svg" in (tmp_path / "theme.svg").read_bytes()[:400]

    odd = ldpkit(*query, "--plot", "theme.docx", cwd=tmp_path)
    assert odd.returncode == 2 and "png" in odd.stderr and "Traceback" not in odd.stderr


def test_output_into_a_closed_pipe_is_quiet(populated: Populated) -> None:
    """`ldpkit estimates ... | head -c 1`: the reader goes away; no traceback."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}
    proc = subprocess.Popen(
        [
            *CLI,
            "estimates",
            "theme",
            "--per-bucket",
            "--format",
            "json",
            "--collector",
            populated.url,
            "--token",
            READ,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command prints: its first write meets a closed pipe
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
