"""Your own method in your own file: ``algorithm.name=module:Class``, checked like a built-in."""

from __future__ import annotations

import pytest

from examples.fedprox import FedProx, FedProxOptions
from ring_actors.config import ConfigError, load_config
from ring_actors.plugins import PluginError, resolve_algorithm
from tests.test_in_process import ring


def test_a_class_path_names_a_method_and_its_options_are_checked():
    config = load_config(None, ["algorithm.name=examples.fedprox:FedProx", "algorithm.mu=0.1"])
    assert isinstance(config.algorithm.options, FedProxOptions)
    assert config.algorithm.options.mu == 0.1
    with pytest.raises(ConfigError, match="algorithm.mu"):
        load_config(None, ["algorithm.name=examples.fedprox:FedProx", "algorithm.mu=-1"])


@pytest.mark.parametrize(
    "name, why",
    [
        ("examples.nowhere:FedProx", "cannot import"),
        ("examples.fedprox:Missing", "cannot import"),
        ("collections:OrderedDict", "not a subclass"),
        ("no_such_method", "unknown method"),
    ],
)
def test_a_name_that_is_not_a_method_is_refused(name, why):
    with pytest.raises(PluginError, match=why):
        resolve_algorithm(name)
    with pytest.raises(ConfigError, match="algorithm.name"):
        load_config(None, [f"algorithm.name={name}"])


def test_a_plug_in_method_trains_in_a_ring(tmp_path):
    run = ring(tmp_path, algorithm="examples.fedprox:FedProx", count=3, rounds=2)
    summary = run.run(timeout_s=60)
    assert summary["rounds_completed"] == 2 and summary["local_acc"]["mean"] > 0.5
    assert all(isinstance(c.core.algorithm, FedProx) for c in run.clients.values())
