"""``ldpkit demo`` as a newcomer runs it: past the client's outbox bound, with progress,
and stopped by SIGTERM without leaving a collector or a temp folder behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

DEMO = [sys.executable, "-m", "ldpkit.cli", "demo"]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}


def test_demo_runs_past_the_outbox_bound_with_progress() -> None:
    # 40,000 users x 3 metrics = 120,000 reports: more than one Reporter outbox holds.
    out = subprocess.run(
        [*DEMO, "--users", "40000", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(),
    )
    assert out.returncode == 0, out.stderr + out.stdout
    assert "reachable" not in out.stdout + out.stderr
    for metric in ("theme", "country", "session_minutes"):
        assert f"{metric}: n=40,000" in out.stdout
    progress = [line for line in out.stdout.splitlines() if "users sent" in line]
    assert progress and "40,000/40,000 users sent (100%)" in progress[-1]
    assert re.search(r"about \d+ s (left|in all)", out.stdout), out.stdout


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def test_sigterm_to_demo_serve_stops_its_collector_and_removes_its_folder() -> None:
    proc = subprocess.Popen(
        [*DEMO, "--serve", "--users", "300", "--seed", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_clean_env(),
        start_new_session=True,
    )
    assert proc.stdout is not None
    workdir = url = None
    try:
        for line in proc.stdout:  # readiness: the line, or the output's end if it exits
            if match := re.search(r"on SQLite in (\S+)", line):
                workdir = Path(match.group(1))
            if match := re.search(r"Dashboard: open (http://\S+)/ui", line):
                url = match.group(1)
                break
        assert workdir is not None and url is not None
        assert workdir.exists()
        with urllib.request.urlopen(url + "/healthz", timeout=10) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGTERM)
        rest = proc.stdout.read()
        assert proc.wait(timeout=60) == 0, rest
        assert "stopped" in rest
        assert not workdir.exists(), "the demo's temp folder was left behind"
        assert not _processes_mentioning(str(workdir)), "the demo's collector still runs"
        try:
            urllib.request.urlopen(url + "/healthz", timeout=5)
            raise AssertionError("the collector still answers after SIGTERM")
        except urllib.error.URLError:
            pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if workdir is not None:  # on failure: end the orphaned collector this test started
            for pid in _processes_mentioning(str(workdir)):
                os.kill(pid, signal.SIGKILL)


def test_demo_runs_from_the_folder_that_holds_a_clone_named_ldpkit(tmp_path: Path) -> None:
    # A clone called ``ldpkit`` in the working directory: ``python -m ldpkit.cli`` would
    # import that folder (a namespace package) instead of the installed ldpkit.
    clone = Path(__file__).resolve().parents[2]
    (tmp_path / "ldpkit").symlink_to(clone, target_is_directory=True)
    # As the README's first command runs it: the venv's console script, not ``-m``.
    script = Path(sys.executable).parent / "ldpkit"
    out = subprocess.run(
        [str(script), "demo", "--users", "300", "--seed", "2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(),
    )
    assert out.returncode == 0, out.stderr + out.stdout
    assert "theme: n=300" in out.stdout


def test_a_collector_that_dies_at_start_fails_at_once_with_its_log(tmp_path: Path) -> None:
    from ldpkit.collector.launcher import running_collector
    from ldpkit.errors import LdpkitError

    # No timeout involved: the failure is known when the child's log ends.
    command = (sys.executable, "-c", "import sys; sys.exit('no such collector')")
    try:
        with running_collector(tmp_path / "none.toml", command=command):
            raise AssertionError("a collector that exited cannot be running")
    except LdpkitError as error:
        assert "exited" in str(error) and "no such collector" in str(error)
    else:
        raise AssertionError("no error for a collector that exited")


def test_demo_explains_estimates_outside_their_interval() -> None:
    out = subprocess.run(
        [*DEMO, "--users", "300", "--seed", "4"],
        capture_output=True,
        text=True,
        env=_clean_env(),
    )
    assert out.returncode == 0, out.stderr + out.stdout
    rows = re.findall(r"(-?\d+\.\d+)\s+\[\s*(-?\d+\.\d+),\s*(-?\d+\.\d+)\]", out.stdout)
    assert rows
    # every metric, the maintained kinds too, is estimated from all 300 users' reports
    assert re.findall(r"^(\w+): n=(\d[\d,]*\d|\d)", out.stdout, re.M) == [
        (metric, "300")
        for metric in (
            *("theme", "country", "rating", "session_minutes", "session_minutes_dist"),
            *("latency_ms", "region", "region", "car", "search_term"),
        )
    ]
    outside = [r for r in rows if not float(r[1]) <= float(r[0]) <= float(r[2])]
    assert outside, "300 users at these epsilons give estimates below 0"  # the regime
    assert "unbiased estimate" in out.stdout and "clipped" in out.stdout
    # every row with an estimate outside its interval is marked, the note says what the mark is
    for line in out.stdout.splitlines():
        m = re.search(r"(-?\d+\.\d+)\s+\[\s*(-?\d+\.\d+),\s*(-?\d+\.\d+)\]", line)
        if m and not float(m[2]) <= float(m[1]) <= float(m[3]):
            assert "*" in line, line
