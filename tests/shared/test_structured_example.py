"""examples/structured/structured.py runs and prints truth beside estimate at every level."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "structured" / "structured.py"


def test_structured_example_prints_every_level_and_the_table() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--scale", "20"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "hierarchy: 20,000 reports" in out and "table: 1,860 reports" in out
    for heading in ("depth 1", "depth 2", "depth 3", "cells (type/origin)", "marginal origin"):
        assert heading in out
    assert "MX/Sonora/Obregon" in out and "Large/non-USA" in out
    assert "<- chosen" in out
    assert out.count("(consistent)") == 2
