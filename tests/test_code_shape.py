"""The house rules of docs/architecture.md that a reader of the sources can check.

- A mechanism's knowledge lives in its module: no code outside it and the registry
  (``ldpkit.mechanisms``) branches on its name: a comparison with the name, a ``match``
  case, a dispatch table keyed by names, a list of names. Likewise a metric kind's:
  nothing outside its module (``ldpkit.kinds.<kind>``) and the kinds' registry
  (``ldpkit.kinds``) branches on a kind's name or a ``MetricKind`` member.
- Functions stay readable: none over 80 lines, at most 30 graded C or worse by
  complexity (``tests/codeshape.py`` counts as radon does), and at most 15 ``type: ignore``.

``tools/codeshape`` prints the figures behind the second group.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ldpkit.kinds import KINDS
from ldpkit.mechanisms import _REGISTRY, ALIASES
from tests import codeshape
from tests.test_architecture import modules

MAX_FUNCTION_LINES = 80
MAX_COMPLEX_FUNCTIONS = 30
MAX_TYPE_IGNORES = 15

MECHANISM_REGISTRY = "ldpkit.mechanisms"
KIND_REGISTRY = "ldpkit.kinds"
KIND_ENUM = "MetricKind"


def _names(node: ast.AST, names: set[str]) -> list[str]:
    """The names ``node`` spells: a string constant, a ``MetricKind`` member, or a tuple,
    list or set of those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in names else []
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        member = node.attr.lower()
        return [member] if node.value.id == KIND_ENUM and member in names else []
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [
            n
            for e in node.elts
            if not isinstance(e, ast.Tuple | ast.List | ast.Set)
            for n in _names(e, names)
        ]
    return []


def _exports(tree: ast.Module) -> set[int]:
    """The nodes of ``__all__ = [...]`` (public names, not branches)."""
    out: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            out.update(id(n) for n in ast.walk(node))
    return out


def name_branches(source: str, names: set[str]) -> Iterator[tuple[int, str]]:
    """(line, names) of every place ``source`` branches on one of ``names``."""
    tree = ast.parse(source)
    skip = _exports(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        found: list[str] = []
        if isinstance(node, ast.Compare):
            found = [n for o in (node.left, *node.comparators) for n in _names(o, names)]
        elif isinstance(node, ast.Match):
            found = [
                n
                for case in node.cases
                for p in ast.walk(case.pattern)
                if isinstance(p, ast.MatchValue)
                for n in _names(p.value, names)
            ]
        elif isinstance(node, ast.Dict):  # a dispatch table
            keys = [n for k in node.keys if k is not None for n in _names(k, names)]
            found = keys if len(keys) >= 2 else []
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):  # a list of names
            listed = _names(node, names)
            found = listed if len(listed) >= 2 else []
        if found:
            yield getattr(node, "lineno", 0), ", ".join(sorted(set(found)))


def _mechanism_owners() -> dict[str, str]:
    """Every name (aliases too) -> the module that defines its mechanism."""
    owners = {name: f"{MECHANISM_REGISTRY}.{module}" for name, (module, _) in _REGISTRY.items()}
    owners.update({alias: owners[name] for alias, name in ALIASES.items()})
    return owners


def _stray(owners: dict[str, str], registry: str) -> list[str]:
    out = []
    for module, path in modules().items():
        if module == registry:
            continue
        for line, found in name_branches(path.read_text(), set(owners)):
            if any(owners[n] != module for n in found.split(", ")):
                out.append(f"{path.relative_to(codeshape.ROOT)}:{line} branches on {found}")
    return out


def test_no_branch_on_a_mechanism_name_outside_its_module() -> None:
    assert _stray(_mechanism_owners(), MECHANISM_REGISTRY) == []


def test_no_branch_on_a_kind_name_outside_its_module() -> None:
    owners = {name: f"{KIND_REGISTRY}.{name}" for name in KINDS}
    assert _stray(owners, KIND_REGISTRY) == []


def test_the_branch_finder_finds_branches() -> None:
    names = {"grr", "oue", "table"}
    source = """
if m.name == "grr": pass
if name in ("oue", "x"): pass
match kind:
    case "table": pass
RULES = {"grr": 1, "oue": 2}
ORACLES = ("grr", "oue")
if kind is MetricKind.TABLE: pass
__all__ = ["grr", "oue"]
x = "grr"
y = {"grr": 1}
"""
    found = sorted(name_branches(source, names))
    assert [line for line, _ in found] == [2, 3, 4, 6, 7, 8]
    assert found[-1] == (8, "table")


def test_no_function_over_80_lines() -> None:
    long_ = [str(f) for f in codeshape.all_functions() if f.lines > MAX_FUNCTION_LINES]
    assert long_ == []


def test_few_complex_functions() -> None:
    complex_ = [str(f) for f in codeshape.all_functions() if f.complexity >= codeshape.C_GRADE]
    assert len(complex_) <= MAX_COMPLEX_FUNCTIONS, "\n".join(complex_)


def test_few_type_ignores() -> None:
    ignores = codeshape.type_ignores()
    assert len(ignores) <= MAX_TYPE_IGNORES, "\n".join(ignores)


def test_the_complexity_count_is_radons() -> None:
    """Spot checks of the count against radon's rules."""
    source = """
def f(x):
    if x and y or z:            # if: 1, boolean operands: 2
        pass
    elif x:                     # 1
        pass
    for i in range(3):          # 1, and its else: 1
        pass
    else:
        pass
    try:
        pass
    except ValueError:          # 1
        pass
    except KeyError:            # 1
        pass
    assert x                    # 1
    return [i for i in x if i]  # comprehension 1, its if 1
    def inner():                # graded on its own
        if x: pass
"""
    tree = ast.parse(source)
    f = tree.body[0]
    assert isinstance(f, ast.FunctionDef)
    assert codeshape._complexity(f) == 1 + 3 + 1 + 2 + 2 + 1 + 2
