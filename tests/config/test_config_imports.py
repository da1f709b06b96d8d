"""Importing the config reads no registry: datasets, plug-ins and topologies are looked up
when a section naming one is checked, so a process that only reads a config (the
coordinator, the slot pools, ``--print-config``) does not pay for them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ring_actors.config import ConfigError, config_from_dict

ROOT = Path(__file__).resolve().parents[2]
REGISTRIES = ("ring_actors.data", "ring_actors.plugins", "topologies")


def imported_after(code: str) -> list[str]:
    """The registry modules a fresh interpreter holds after running ``code``."""
    names = f"sorted(m for m in sys.modules if m.startswith({REGISTRIES!r}))"
    probe = f"{code}; import json, sys; print(json.dumps({names}))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_config_imports_no_registry():
    assert imported_after("import ring_actors.config") == []


@pytest.mark.parametrize(
    ("section", "key", "allowed"),
    [
        ({"data": {"dataset": "imagenet"}}, "data.dataset", ["mnist", "cifar10"]),
        ({"topology": {"kind": "star"}}, "topology.kind", ["'ring'", "'exponential'"]),
    ],
)
def test_a_wrong_name_is_refused_naming_the_key_and_the_registered_names(section, key, allowed):
    with pytest.raises(ConfigError) as err:
        config_from_dict(section)
    message = str(err.value)
    assert message.startswith(f"{key}:") and all(name in message for name in allowed), message
