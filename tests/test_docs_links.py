"""The README and the per-kind pages: one page per metric kind with every layer, linked
from the README, and every relative link (file and heading) resolving."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ldpkit.kinds import NAMES

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
LAYERS = ("**Definition**", "**Device**", "**HTTP answer**", "**CLI**", "**Python**")
LAYERS += ("**Dashboard**", "**Statistics**")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # no headings in code
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def _broken(page: Path) -> list[str]:
    broken = []
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no such heading in {path.name}")
    return broken


@pytest.mark.parametrize("kind", NAMES)
def test_each_kind_has_a_page_with_every_layer_linked_from_the_readme(kind: str) -> None:
    page = ROOT / "docs" / "kinds" / f"{kind}.md"
    assert page.exists(), f"no page for the {kind} kind"
    text = page.read_text()
    assert f'kind = "{kind}"' in text
    missing = [layer for layer in LAYERS if layer not in text]
    assert not missing, f"{page.name} lacks {missing}"
    assert f"](docs/kinds/{kind}.md)" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize(
    "page",
    [ROOT / "README.md", *sorted((ROOT / "docs" / "kinds").glob("*.md"))],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_relative_links_resolve(page: Path) -> None:
    assert not _broken(page)


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Only this\n")
    page = tmp_path / "p.md"
    page.write_text("[x](a.md#only-this) [y](a.md#not-there) [z](gone.md) [w](http://e.org)")
    assert _broken(page) == ["a.md#not-there: no such heading in a.md", "gone.md: no such file"]
