"""The layout ARCHITECTURE.md describes is the layout the code has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ring_actors"
RAY_FOLDER = PACKAGE / "runtime"


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports inside functions included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_only_the_runtime_folder_imports_ray():
    """The cores run in one process without Ray; a Ray import elsewhere would break that."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in [*PACKAGE.rglob("*.py"), *(ROOT / "topologies").rglob("*.py")]
        if not path.is_relative_to(RAY_FOLDER)
        and any(name == "ray" or name.startswith("ray.") for name in _imported_modules(path))
    ]
    assert offenders == []


def test_every_path_architecture_names_exists():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`((?:ring_actors|topologies|jobs|examples)/[\w/]+(?:\.py)?)`", text))
    folder_files = re.findall(r"\| `(ring_actors/\w+/)` \| ([^|]+)\|", text)
    for folder, row in folder_files:
        named.update(folder + name for name in re.findall(r"`(\w+\.py)`", row))
    assert len(named) > 30  # the check reads the document, not an empty match
    missing = sorted(name for name in named if not (ROOT / name).exists())
    assert missing == []
