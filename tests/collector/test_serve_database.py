"""``ldpkit serve`` with a database it cannot use: exit 2 naming the ``database`` key and
the cause, at once, as for any other config error; nothing created behind the operator's back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .postgres import with_database


def serve(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "ldpkit.cli", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
    )
    return out, time.monotonic() - started


def test_missing_folder_is_refused_not_created(tmp_path: Path) -> None:
    out, _ = serve("--database", "no/such/folder/c.sqlite3", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "database" in out.stderr and "no/such/folder" in out.stderr
    assert "does not exist" in out.stderr
    assert not (tmp_path / "no").exists()


def test_a_folder_or_a_non_database_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    out, _ = serve("--database", "adir", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "database" in out.stderr and "folder" in out.stderr

    (tmp_path / "junk.db").write_bytes(b"this is not SQLite" * 300)
    out, _ = serve("--database", "junk.db", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "--database" in out.stderr and "not a database" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.postgres
def test_a_postgres_database_that_does_not_exist_fails_fast_with_the_cause(
    tmp_path: Path, pg_server: str
) -> None:
    url = with_database(pg_server, "ldpkit_no_such_database_i14")
    out, _ = serve("--database", url, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "--database" in out.stderr
    assert "does not exist" in out.stderr
    # Refused by the start-up check's one connection, not after the store's pool retried
    # for its connect_timeout (15 s) and gave up ("cannot connect"), nor left to retry.
    assert "cannot connect" not in out.stderr and "will retry" not in out.stderr


def test_the_config_key_is_named_when_the_database_comes_from_the_file(tmp_path: Path) -> None:
    config = tmp_path / "collector.toml"
    config.write_text('[collector]\ndatabase = "missing/c.sqlite3"\n')
    out, _ = serve("--config", str(config), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert f"{config}: [collector] database" in out.stderr and "does not exist" in out.stderr
