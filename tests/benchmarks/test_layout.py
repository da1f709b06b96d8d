"""The benchmarks' layout: no benchmark script imports another (shared code lives in
``benchmarks/common.py`` or a library module with no ``main``; a benchmark of several parts is
a package of its own), and ``markdown_table`` is the one writer of Markdown tables."""

from __future__ import annotations

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SEPARATORS = ("|---", "---|")


def _modules() -> dict[str, ast.Module]:
    """Every module under benchmarks/, by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(BENCHMARKS.rglob("*.py")):
        parts = path.relative_to(BENCHMARKS.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return modules


def _is_script(tree: ast.Module) -> bool:
    """A module run as a benchmark: it defines ``main`` or has a ``__main__`` block."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            return True
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return True
    return False


def _imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.startswith("benchmarks.")}


def _package(name: str) -> str:
    """The benchmark a module belongs to: ``benchmarks.exchange`` for its parts."""
    return ".".join(name.split(".")[:2])


def test_no_benchmark_imports_another_benchmark_script():
    modules = _modules()
    assert "benchmarks.common" in modules and "benchmarks.exchange.lap" in modules
    scripts = {name for name, tree in modules.items() if _is_script(tree)}
    scripts |= {_package(name) for name in scripts}  # a package runs through its __main__
    crossing = sorted(
        (name, target)
        for name, tree in modules.items()
        for target in _imported(tree)
        if _package(target) != _package(name) and (target in scripts or _package(target) in scripts)
    )
    assert crossing == []


def _separators(tree: ast.AST) -> list[str]:
    """The string constants under ``tree`` that hold a Markdown table separator."""
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and any(s in node.value for s in SEPARATORS)
    ]


def test_markdown_table_is_the_only_function_that_writes_a_table_separator():
    modules = _modules()
    writers = {
        f"{name}.{node.name}": len(_separators(node))
        for name, tree in modules.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and _separators(node)
    }
    assert list(writers) == ["benchmarks.common.markdown_table"]
    # none outside a function either (a module-level header constant)
    assert sum(len(_separators(tree)) for tree in modules.values()) == sum(writers.values())
