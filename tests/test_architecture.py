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


def _named_in_architecture() -> set[str]:
    """Every module path ARCHITECTURE.md names: whole paths, and file names in a folder's row."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`(ring_actors/[\w/]+\.py)`", text))
    for folder, row in re.findall(r"\| `(ring_actors/\w+/)` \| ([^|]+)\|", text):
        named.update(folder + name for name in re.findall(r"`([\w/]+\.py)`", row))
    top = text.split("Single modules at the top:", 1)[1].split("\n\n", 2)[1]
    named.update("ring_actors/" + name for name in re.findall(r"`(\w+\.py)`", top))
    return named


def test_architecture_names_every_module_of_the_package():
    modules = {
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and ".venv" not in path.parts
    }
    assert sorted(modules - _named_in_architecture()) == []


def test_the_lower_layers_import_nothing_above_them():
    """Delivery and storage sit under the clients, the coordinator and the config."""
    above = ("client", "coordinator", "runtime", "config", "faults", "heterogeneity", "preflight")
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for folder in ("delivery", "storage")
        for path in (PACKAGE / folder).rglob("*.py")
        for name in _imported_modules(path)
        if name.split(".")[:2] in [["ring_actors", layer] for layer in above]
    ]
    assert offenders == []


TESTS = ROOT / "tests"


def _shared_test_code(name: str) -> bool:
    """What a test may import from tests/: its helpers and the root conftest, no test module."""
    return name == "tests.conftest" or name == "tests.helpers" or name.startswith("tests.helpers.")


def test_no_test_module_imports_another():
    """A helper one test module imports from another hides in a test file, runs that file's
    module-level code, and breaks when the file is renamed; helpers live in tests/helpers/."""
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in TESTS.rglob("*.py")
        for name in _imported_modules(path)
        if (name == "tests" or name.startswith("tests.")) and not _shared_test_code(name)
    ]
    assert offenders == []
