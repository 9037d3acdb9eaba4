"""After a metric's definition changes, the analyst can list its versions and pick one
(CLI here; the dashboard's picker in test_dashboard.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ldpkit.collector.analyst import Analyst

from .conftest import READ
from .test_analyst import ldpkit
from .versioned import NEW_USERS, OLD_USERS, Versioned, versioned_collector


@pytest.fixture(scope="module")
def versioned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Versioned]:
    yield from versioned_collector(tmp_path_factory.mktemp("versions"))


def test_python_api_lists_versions_with_their_reports(versioned: Versioned) -> None:
    versions = Analyst(versioned.url, READ).versions("theme")
    assert [v.fingerprint for v in versions] == [versioned.old, versioned.new]
    assert [v.current for v in versions] == [False, True]
    assert [v.definition.epsilon for v in versions] == [1.0, 2.0]
    assert [v.n for v in versions] == [OLD_USERS, NEW_USERS]


def test_cli_lists_versions_and_estimates_an_old_one(versioned: Versioned) -> None:
    base = ["--collector", versioned.url, "--token", READ]
    listing = ldpkit("versions", "theme", *base)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0].split()[:2] == ["version", "current"]
    old_line = next(line for line in lines if line.startswith(versioned.old))
    assert f"{OLD_USERS}" in old_line and "1" in old_line.split()
    new_line = next(line for line in lines if line.startswith(versioned.new))
    assert "yes" in new_line.split()
    as_json = json.loads(ldpkit("versions", "theme", *base, "--format", "json").stdout)
    assert [v["n"] for v in as_json] == [OLD_USERS, NEW_USERS]

    old = ldpkit("estimates", "theme", *base, "--version", versioned.old, "--format", "json")
    assert old.returncode == 0, old.stderr
    data = json.loads(old.stdout)
    assert data["version"] == versioned.old and data["n"] == OLD_USERS
    assert data["epsilon"] == 1.0


def test_empty_current_version_note(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Right after a definition change nothing has arrived under the new version yet."""
    from .versioned import put_definition

    directory = tmp_path_factory.mktemp("versions-empty")
    gen = versioned_collector(directory)
    v = next(gen)
    try:
        put_definition(
            v.url,
            "theme",
            {"kind": "categorical", "categories": ["light", "dark", "system"], "epsilon": 3.0},
        )
        out = ldpkit("estimates", "theme", "--collector", v.url, "--token", READ)
        assert out.returncode == 0, out.stderr
        assert "n=0" in out.stdout
        assert "--version" in out.stderr and v.old in out.stderr and v.new in out.stderr
        assert "ldpkit versions theme" in out.stderr
    finally:
        gen.close()
