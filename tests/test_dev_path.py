"""The README's development path works as written: its test command does not skip the
browser tests silently, its lint line runs without setting PYTHON, and the examples are
run the way the README runs Python (.venv/bin/python)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.browser import browser_problem
from tests.readiness import HANG_GUARD

ROOT = Path(__file__).resolve().parents[1]


def test_missing_browser_fails_with_instructions_unless_opted_out() -> None:
    missing = "/nonexistent/chromium"
    verdict, reason = browser_problem({}, missing)
    assert verdict == "fail"
    assert "apt-get install chromium" in reason and "LDPKIT_SKIP_BROWSER=1" in reason
    verdict, reason = browser_problem({"LDPKIT_SKIP_BROWSER": "1"}, missing)
    assert verdict == "skip" and "LDPKIT_SKIP_BROWSER" in reason
    # Required (CI) wins over an opt-out.
    env = {"LDPKIT_SKIP_BROWSER": "1", "LDPKIT_REQUIRE_BROWSER": "1"}
    assert browser_problem(env, missing)[0] == "fail"
    readme = (ROOT / "README.md").read_text()
    assert "LDPKIT_SKIP_BROWSER=1" in readme and "chromium" in readme


def test_typecheck_runs_without_python_set() -> None:
    """The README's development line calls tools/typecheck with no PYTHON."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = "/usr/bin:/bin"  # no `python` of the venv (or at all) on the PATH
    out = subprocess.run(
        [str(ROOT / "tools" / "typecheck"), "--version"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "mypy" in out.stdout


@pytest.mark.parametrize("script", sorted(ROOT.glob("examples/*/*.py")), ids=lambda p: p.stem)
def test_examples_say_run_with_the_venv_python(script: Path) -> None:
    doc = script.read_text().split('"""')[1]
    runs = re.findall(r"(\S*python\S*) examples/", doc)
    assert runs, doc
    assert set(runs) == {".venv/bin/python"}, runs


def test_the_suite_runs_without_xdist() -> None:
    """tests/conftest.py's xdist scheduler hook is optional: with the plugin off (``-p
    no:xdist``, e.g. an environment without it) pytest still starts, not an INTERNALERROR
    about an unknown hook."""
    out = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider"),
            *("-o", "addopts=", "-q", "--collect-only", "tests/test_readme.py"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=HANG_GUARD,
    )
    assert out.returncode == 0, out.stdout + out.stderr
