"""The README's analyst section, run as written against a real collector with data."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from .conftest import READ, Populated

README = Path(__file__).resolve().parents[2] / "README.md"


def _section(title: str) -> str:
    text = README.read_text()
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_readme_analyst_commands_run(populated: Populated, tmp_path: Path) -> None:
    section = _section("For analysts: query estimates")
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    script = (
        block.group(1)
        .replace("http://127.0.0.1:8787", populated.url)
        .replace("analyst-secret", READ)
        .replace(".venv/bin/ldpkit", f'"{sys.executable}" -m ldpkit.cli')
    )
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert (tmp_path / "theme.png").read_bytes()[:4] == b"\x89PNG"
    assert "theme" in out.stdout and "reports" in out.stdout


def test_readme_analyst_python_runs(populated: Populated) -> None:
    section = _section("For analysts: query estimates")
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    code = block.group(1).replace("http://127.0.0.1:8787", populated.url)
    code = code.replace("analyst-secret", READ)
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    frame = namespace["frame"]
    assert list(frame.index) == ["light", "dark", "system"]  # type: ignore[attr-defined]
