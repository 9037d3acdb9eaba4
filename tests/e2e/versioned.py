"""A collector whose ``theme`` metric changed epsilon after the first users reported:
the old version holds their reports, the new (current) one holds fewer."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ldpkit.client import Reporter
from ldpkit.collector.launcher import environment_without_tokens
from tests.harness import running_collector

from .conftest import ADMIN, CONFIG, RELAY, THEME_TRUTH, THEMES

OLD_USERS, NEW_USERS = 3000, 500


@dataclass
class Versioned:
    url: str
    directory: Path
    old: str  # fingerprints
    new: str


def put_definition(url: str, name: str, definition: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        f"{url}/v1/metrics/{name}",
        data=json.dumps(definition).encode(),
        method="PUT",
        headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, object] = json.load(response)
    return answer


def report(url: str, state: Path, users: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with Reporter(url, token=RELAY, state_dir=state, background=False) as r:
        r.refresh_definitions()
        r.simulate("theme", rng.choice(THEMES, size=users, p=THEME_TRUTH).tolist(), rng=rng)
        assert r.flush().sent == users


def versioned_collector(directory: Path) -> Iterator[Versioned]:
    (directory / "collector.toml").write_text(CONFIG)
    with running_collector(
        "collector.toml", cwd=directory, env=environment_without_tokens()
    ) as collector:
        url = collector.url
        report(url, directory / "device-old", OLD_USERS, 1)
        answer = put_definition(
            url,
            "theme",
            {"kind": "categorical", "categories": THEMES, "epsilon": 2.0, "mechanism": "auto"},
        )
        old = str(answer["previous_version"])
        new = str(answer["definition"]["fingerprint"])  # type: ignore[index]
        report(url, directory / "device-new", NEW_USERS, 2)
        yield Versioned(url, directory, old, new)
