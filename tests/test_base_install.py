"""What a base install (no extras) must do, checked fast in this venv by hiding the extras
from a subprocess. tools/base-install-check (run by CI) does the same in a fresh venv."""

from __future__ import annotations

import subprocess
import sys
import textwrap

EXTRAS = ("prometheus_client", "psycopg", "psycopg_pool", "matplotlib", "pandas", "scipy")


def run_without_extras(code: str) -> subprocess.CompletedProcess[str]:
    prelude = textwrap.dedent(
        f"""
        import sys
        class _Hide:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {EXTRAS!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}} (hidden)")
                return None
        sys.meta_path.insert(0, _Hide())
        """
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_plan_and_analyst_work_without_extras() -> None:
    out = run_without_extras(
        """
        import contextlib, io
        from ldpkit.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as text:
            with contextlib.suppress(SystemExit):
                main(["--help"])
            assert main(["plan", "--epsilon", "1", "--domain-size", "8", "--n", "10000"]) == 0
        assert "serve" in text.getvalue() and "chosen" in text.getvalue()
        from ldpkit.analyst import Analyst
        from ldpkit.collector.analyst import Analyst as Old
        assert Old is Analyst
        print("ok")
        """
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_serve_names_the_extra_it_needs() -> None:
    out = run_without_extras(
        """
        from ldpkit.cli import main
        raise SystemExit(main(["serve", "--port", "0"]))
        """
    )
    assert out.returncode == 2, out.stderr
    assert "pip install 'ldpkit[collector]'" in out.stderr


def test_the_sync_reporter_loads_no_aiohttp() -> None:
    out = run_without_extras(
        """
        import sys
        from ldpkit.client import Reporter
        assert not any(m.split(".")[0] == "aiohttp" for m in sys.modules), "aiohttp loaded"
        from ldpkit.client import AsyncReporter  # on first use
        assert "aiohttp" in sys.modules
        print("ok")
        """
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
