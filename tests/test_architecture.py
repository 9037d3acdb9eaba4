"""The package map of docs/architecture.md, checked on the source: which layer may import
which, and no import cycle.

Layers (``ldpkit.*`` by folder, see pyproject's package-dir):

- core: ``ldpkit`` itself (shared/, minus the two subpackages below) imports only core;
- ``ldpkit.analyst`` (shared/analyst/) imports only core: it reads a collector over HTTP;
- ``ldpkit.client`` (client/) imports only core;
- ``ldpkit.collector`` (collector/) imports core, and the analyst only to re-export it
  from its old home (collector/analyst.py, collector/plots.py);
- ``ldpkit.cli`` (shared/cli/) may import everything: it is the one place that drives a
  client and a collector (the demo).

One HTTP client stack: only ``ldpkit.http`` (the blocking transport of the sync Reporter
and the Analyst) imports a blocking HTTP client (the async reporter's shell is aiohttp).

Every import counts, for the layers and for cycles: one inside a function (a lazy import
is still a dependency) and one under ``if TYPE_CHECKING`` (a type is knowledge of the
other module too). ``__main__`` modules are entry points that nothing imports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"shared": "ldpkit", "client": "ldpkit.client", "collector": "ldpkit.collector"}
ALLOWED = {  # besides itself
    "core": {"core"},
    "analyst": {"core", "analyst"},
    "client": {"core", "client"},
    "collector": {"core", "collector"},
    "cli": {"core", "analyst", "client", "collector", "cli"},
}
# Re-exports that keep the old import paths working.
SHIMS = {
    ("ldpkit.collector.analyst", "ldpkit.analyst"),
    ("ldpkit.collector.plots", "ldpkit.analyst.plots"),
}


def modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path
    return out


def layer(module: str) -> str:
    for name in ("analyst", "client", "collector", "cli"):
        if module == f"ldpkit.{name}" or module.startswith(f"ldpkit.{name}."):
            return name
    return "core"


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str, path: Path, known: set[str]) -> Iterator[tuple[str, bool]]:
    """(imported project module, runs at import time) for each import in ``module``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    lazy: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or (
            isinstance(node, ast.If) and _type_checking(node)
        ):
            lazy.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        eager = id(node) not in lazy
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("ldpkit"):
                    yield _deepest(alias.name, known), eager
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("ldpkit"):
                continue
            for alias in node.names:  # `from . import submodule` imports the submodule
                sub = f"{target}.{alias.name}"
                yield (sub if sub in known else _deepest(target, known)), eager


def _deepest(name: str, known: set[str]) -> str:
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name


def graph() -> tuple[dict[str, set[str]], list[str]]:
    """Every module's imports of project modules (all of them: lazy and for types too),
    and the imports the layers forbid."""
    found = modules()
    known = set(found)
    edges: dict[str, set[str]] = {m: set() for m in found}
    forbidden = []
    for module, path in found.items():
        if module.endswith(".__main__"):
            continue
        for target, _ in imports(module, path, known):
            if target == module:
                continue
            edges[module].add(target)
            if layer(target) not in ALLOWED[layer(module)] and (module, target) not in SHIMS:
                forbidden.append(f"{module} ({layer(module)}) imports {target} ({layer(target)})")
    return edges, forbidden


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_layers_import_only_what_the_map_allows() -> None:
    _, forbidden = graph()
    assert forbidden == []


def test_no_import_cycle() -> None:
    edges, _ = graph()
    assert cycles(edges) == []


BLOCKING_HTTP = ("http.client", "urllib.request")


def blocking_http_users() -> set[str]:
    """The modules that import a blocking HTTP client of the standard library."""
    out = set()
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            if any(n in BLOCKING_HTTP for n in names):
                out.add(module)
    return out


def test_one_http_client_stack() -> None:
    assert blocking_http_users() == {"ldpkit.http"}


def test_the_checks_can_fail() -> None:
    """The checker sees a forbidden edge and a cycle when there is one."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer("ldpkit.client.sync") == "client" and layer("ldpkit.wire") == "core"
    assert "collector" not in ALLOWED["client"] and "client" not in ALLOWED["collector"]
    edges, _ = graph()
    assert "ldpkit.errors" in edges["ldpkit.client.base"]  # imports are found at all
    assert len(edges) > 60
