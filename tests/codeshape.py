"""The library's shape, read from its sources: how complex and how long its functions are,
how many ``type: ignore`` it needs, how many lines it has, and where it branches on a
mechanism's or a metric kind's name.

``tools/codeshape`` prints these figures; ``tests/test_code_shape.py`` holds the library to
them. Complexity is McCabe's, counted as radon counts it (each ``if``/``elif``, conditional
expression, loop and its ``else``, ``except`` and ``try``'s ``else``, boolean operator
operand after the first, comprehension and its ``if``s, ``match`` case, ``assert``), so the
grades are radon's: A 1-5, B 6-10, C 11-20, D 21-30, E 31-40, F 41+. One difference, on
purpose: a nested function is graded on its own (radon folds closures into nothing), so a
long closure cannot hide inside a short function.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("shared", "client", "collector")
"""The library's folders (its Python sources; the JS client and the dashboard are not)."""
C_GRADE = 11
"""The lowest complexity graded C."""


def library_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in LIBRARY for p in (root / folder).rglob("*.py"))


@dataclass(frozen=True)
class FunctionShape:
    path: str
    name: str
    line: int
    lines: int
    complexity: int

    @property
    def grade(self) -> str:
        for grade, top in (("A", 5), ("B", 10), ("C", 20), ("D", 30), ("E", 40)):
            if self.complexity <= top:
                return grade
        return "F"

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line} {self.name}: {self.grade} ({self.complexity}), "
            f"{self.lines} lines"
        )


def _decisions(node: ast.AST) -> int:
    """Decision points of ``node`` itself (not of its children)."""
    if isinstance(node, ast.Try | ast.TryStar):
        return len(node.handlers) + bool(node.orelse)
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.If | ast.IfExp | ast.Assert):
        return 1
    if isinstance(node, ast.For | ast.AsyncFor | ast.While):
        return 1 + bool(node.orelse)
    if isinstance(node, ast.comprehension):
        return 1 + len(node.ifs)
    if isinstance(node, ast.Match):
        wildcard = any(
            isinstance(c.pattern, ast.MatchAs) and c.pattern.pattern is None for c in node.cases
        )
        return max(0, len(node.cases) - wildcard)
    return 0


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _complexity(function: Function) -> int:
    """1 + the decision points of the body, nested functions and classes excluded."""
    total = 1
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        total += _decisions(node)
        stack.extend(ast.iter_child_nodes(node))
    return total


def functions(path: Path, root: Path = ROOT) -> Iterator[FunctionShape]:
    tree = ast.parse(path.read_text(), str(path))
    where = str(path.relative_to(root))

    def walk(node: ast.AST, prefix: str) -> Iterator[FunctionShape]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                yield FunctionShape(where, name, child.lineno, length, _complexity(child))
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def all_functions(root: Path = ROOT) -> list[FunctionShape]:
    return [f for path in library_files(root) for f in functions(path, root)]


def type_ignores(root: Path = ROOT) -> list[str]:
    out = []
    for path in library_files(root):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if "type: ignore" in line:
                out.append(f"{path.relative_to(root)}:{number}")
    return out


def line_count(root: Path = ROOT) -> int:
    return sum(len(p.read_text().splitlines()) for p in library_files(root))


def report(root: Path = ROOT) -> str:
    shapes = all_functions(root)
    complex_ = sorted((f for f in shapes if f.complexity >= C_GRADE), key=lambda f: -f.complexity)
    long_ = sorted((f for f in shapes if f.lines > 80), key=lambda f: -f.lines)
    ignores = type_ignores(root)
    lines = [
        f"library: {len(library_files(root))} modules, {line_count(root):,} lines, "
        f"{len(shapes)} functions",
        f"functions graded C or worse (complexity >= {C_GRADE}): {len(complex_)}",
        *(f"  {f}" for f in complex_),
        f"functions over 80 lines: {len(long_)}",
        *(f"  {f}" for f in long_),
        f"type: ignore: {len(ignores)}",
        *(f"  {i}" for i in ignores),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT))
