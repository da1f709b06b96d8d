"""The layout ARCHITECTURE.md describes is the layout the code has."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def _modules_after(code: str) -> list[str]:
    """The ``ring_actors`` modules a fresh interpreter holds after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('ring_actors'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_config_checks_load_neither_faults_nor_heterogeneity():
    """Both packages check their sections with ``ring_actors.config.checks`` while the config
    declares their sections: the checks must come without either package."""
    loaded = _modules_after("import ring_actors.config.checks")
    above = ("ring_actors.faults", "ring_actors.heterogeneity")
    assert "ring_actors.config.checks" in loaded
    assert [name for name in loaded if name.startswith(above)] == []


# Builds a config with both sections and has one refused, after the modules imported first.
USE_THE_CONFIG = """
from ring_actors.config import *
from ring_actors.config import ConfigError, config_from_dict
config = config_from_dict(
    {
        "faults": [{"at_round": 1, "crash": [0]}],
        "heterogeneity": {"compute": {"factors": [1.0, 2.0]}},
    }
)
assert config.faults[0].crash == (0,) and config.heterogeneity.compute.factors == (1.0, 2.0)
try:
    config_from_dict({"faults": [{"at_round": -1, "crash": [0]}]})
except ConfigError:
    pass
else:
    raise AssertionError("a negative round passed the checks")
"""


@pytest.mark.parametrize("package", ["faults", "heterogeneity"])
def test_faults_or_heterogeneity_imported_before_the_config_work(package):
    """No import order is fixed anywhere: either package imported first, each of its modules,
    then the config, builds and checks a config with both sections."""
    modules = sorted(
        f"ring_actors.{package}.{path.stem}" for path in (PACKAGE / package).glob("*.py")
    )
    first = "\n".join(f"import {name}".removesuffix(".__init__") for name in modules)
    loaded = _modules_after(first + USE_THE_CONFIG)
    assert "ring_actors.config.sections" in loaded


def _shells() -> dict[type, tuple[type, ...]]:
    """Each class that makes or answers remote calls, with the interfaces declaring them."""
    from ring_actors.delivery.transport import ClientHandle, ControlLink, RunClock
    from ring_actors.in_process import LocalHandle
    from ring_actors.runtime.client_actor import BoundedControlLink, ClientActor, ClientReadings
    from ring_actors.runtime.coordinator_actor import Coordinator, RunControl
    from ring_actors.runtime.ray_transport import RayClientHandle

    return {
        ClientActor: (ClientHandle, ClientReadings),
        Coordinator: (ControlLink, RunClock, RunControl),
        RayClientHandle: (ClientHandle,),
        BoundedControlLink: (ControlLink, RunClock),
        LocalHandle: (ClientHandle,),
    }


# The declared calls a shell writes itself, each because it does more than pass the call on.
WRITTEN_BY_HAND = {
    "ClientActor": {"serve", "set_view"},  # answers in wire format; bounds the pulls' size
    "RayClientHandle": {"receive", "serve", "set_view"},  # wire format both ways; a plain dict
    "LocalHandle": {"receive", "set_view"},  # tensors and a dict of handles of its own
}


def test_every_remote_call_is_declared_once_and_reachable_on_each_shell():
    from ring_actors.delivery.transport import declared_calls

    for shell, interfaces in _shells().items():
        names = [name for interface in interfaces for name in declared_calls(interface)]
        assert len(names) == len(set(names)), f"{shell.__name__}: a call declared twice"
        for name, declared in declared_calls(*interfaces).items():
            method = getattr(shell, name, None)
            assert callable(method) and method is not declared, f"{shell.__name__}.{name}"


def test_no_shell_passes_a_declared_call_on_by_hand():
    """A call is declared once (``delivery/transport.py``, or the driver's beside its
    shell); a method written for it by hand is a second place to change."""
    import inspect
    import textwrap

    from ring_actors.delivery.transport import declared_calls

    for shell, interfaces in _shells().items():
        (body,) = ast.parse(textwrap.dedent(inspect.getsource(shell))).body
        written = {node.name for node in body.body if isinstance(node, ast.FunctionDef)}
        by_hand = written & set(declared_calls(*interfaces))
        assert by_hand == WRITTEN_BY_HAND.get(shell.__name__, set()), shell.__name__


def test_ray_exposes_every_declared_call_of_the_actors_and_the_core_answers_it():
    """Ray reads an actor's methods off its class when ``ray.remote`` wraps it: the derived
    ones are there, the control calls on the control group; each is a method of the core
    that answers it."""
    import ray

    from ring_actors.client.core import ClientCore
    from ring_actors.coordinator.core import CoordinatorCore
    from ring_actors.delivery.transport import call_of, declared_calls
    from ring_actors.runtime.client_actor import CONTROL_GROUP, ClientActor
    from ring_actors.runtime.coordinator_actor import Coordinator
    from ring_actors.runtime.experiment import CLIENT

    shells = _shells()
    for actor, core in ((CLIENT, ClientCore), (ray.remote(Coordinator), CoordinatorCore)):
        meta = actor.__ray_metadata__.method_meta
        shell = ClientActor if actor is CLIENT else Coordinator
        for name, declared in declared_calls(*shells[shell]).items():
            assert name in meta.methods and callable(getattr(core, name, None)), name
            group = meta.concurrency_group_for_methods.get(name)
            assert group == (CONTROL_GROUP if call_of(declared).control else None), name


MODULE_LINES_MAX = 400  # past it a module holds more than one job: split it


def test_no_module_is_over_its_line_limit():
    folders = (PACKAGE, ROOT / "jobs", ROOT / "topologies")
    long = {
        str(path.relative_to(ROOT)): lines
        for folder in folders
        for path in folder.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MODULE_LINES_MAX
    }
    assert long == {}
