"""The README's first screen stays true: CI runs its test command, and its snippets run."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _first_block(text: str) -> list[str]:
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.strip().splitlines() if not line.startswith("#")]


def test_ci_runs_the_readme_test_command() -> None:
    install_and_demo, tests = _first_block((ROOT / "README.md").read_text())
    assert install_and_demo.endswith("ldpkit demo")
    assert "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines(), "the README's test command must be in .ci/run verbatim"


def test_core_snippet_runs() -> None:
    text = (ROOT / "README.md").read_text()
    snippet = re.search(r"## The core in ten lines\n\n```python\n(.*?)```", text, re.S)
    assert snippet is not None
    namespace: dict[str, object] = {}
    exec(compile(snippet.group(1), "README.md", "exec"), namespace)
    est = namespace["est"]
    assert est.n == 3  # type: ignore[attr-defined]
    assert np.asarray(est.ci(0.95).low).shape == (64,)  # type: ignore[attr-defined]


def _extra(name: str, extras: dict[str, list[str]]) -> set[str]:
    """The distributions an extra installs, following ldpkit[...] self-references."""
    found: set[str] = set()
    for requirement in extras[name]:
        dist = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()
        if dist == "ldpkit":
            inner = requirement.split("[", 1)[1].split("]", 1)[0]
            for sub in inner.split(","):
                found |= _extra(sub.strip(), extras)
        else:
            found.add(dist)
    return found


def test_what_the_readme_shows_works_after_the_readme_install() -> None:
    """The README installs one extra; every optional library its examples use is in it."""
    import tomllib

    text = (ROOT / "README.md").read_text()
    install = _first_block(text)[0]
    match = re.search(r"-e '\.\[(\w+)\]'", install)
    assert match is not None, install
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    installed = _extra(match.group(1), extras)
    uses = {"--plot": "matplotlib", "to_pandas()": "pandas", "postgresql://": "psycopg"}
    for shown, dist in uses.items():
        if shown in text:
            assert dist in installed, (
                f"the README shows {shown} but '.[{match.group(1)}]' lacks {dist}"
            )
