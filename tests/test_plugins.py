"""Your own method in your own file: ``algorithm.name=module:Class``, checked like a built-in."""

from __future__ import annotations

import pytest
import torch

from examples.fedprox import FedProx, FedProxOptions
from ring_actors.client.method_factory import build_algorithm
from ring_actors.config import ConfigError, load_config
from ring_actors.plugins.methods import PluginError, known_names, resolve_algorithm
from ring_actors.preflight.dry_run import list_choices
from tests.helpers.in_process_ring import CLASSES, SHAPE, ring
from tests.helpers.synthetic import separable

LAB_METHOD = """
from ring_actors.algorithms.dfedavg import DFedAvg


class LabAverage(DFedAvg):
    '''DFedAvg under another name, from a folder outside the project.'''
"""


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
        (":FedProx", "cannot import"),
        ("..relative:FedProx", "cannot import"),
        ("collections:OrderedDict", "not a subclass"),
        ("ring_actors.algorithms.base:Algorithm", "abstract"),
        ("no_such_method", "unknown method"),
    ],
)
def test_a_name_that_is_not_a_method_is_refused(name, why):
    with pytest.raises(PluginError, match=why):
        resolve_algorithm(name)
    with pytest.raises(ConfigError, match="algorithm.name"):
        load_config(None, [f"algorithm.name={name}"])


def test_a_module_that_fails_to_import_is_a_config_error(tmp_path, monkeypatch):
    (tmp_path / "broken_lab.py").write_text("raise RuntimeError('no GPU driver here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="RuntimeError: no GPU driver here"):
        load_config(None, ["algorithm.name=broken_lab:Method"])


def test_a_plug_in_methods_section_applies_when_it_is_chosen(tmp_path):
    path = tmp_path / "cell.yaml"
    path.write_text('algorithm: {name: drdfl, "examples.fedprox:FedProx": {mu: 0.3}}\n')
    assert load_config(path).algorithm.name == "drdfl"
    chosen = load_config(path, ["algorithm.name=examples.fedprox:FedProx"])
    assert chosen.algorithm.options == FedProxOptions(mu=0.3)
    path.write_text('algorithm: {name: drdfl, "examples.nowhere:X": {}}\n')
    with pytest.raises(ConfigError, match="algorithm.examples.nowhere:X"):
        load_config(path)


def test_an_installed_package_registers_a_method_by_entry_point(tmp_path, monkeypatch):
    (tmp_path / "lab_methods.py").write_text(LAB_METHOD)
    info = tmp_path / "lab_methods-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-methods\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[ring_actors.algorithms]\nlab_average = lab_methods:LabAverage\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "lab_average" in known_names()
    config = load_config(None, ["algorithm.name=lab_average", "algorithm.lr=0.01"])
    assert resolve_algorithm(config.algorithm.name).__name__ == "LabAverage"
    assert config.algorithm.options.lr == 0.01


def test_list_shows_installed_methods_and_names_a_broken_one(tmp_path, monkeypatch):
    (tmp_path / "lab_methods.py").write_text(LAB_METHOD)
    info = tmp_path / "lab_methods-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-methods\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[ring_actors.algorithms]\nlab_average = lab_methods:LabAverage\n"
        "lab_broken = lab_methods:Nowhere\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    listed = list_choices(tmp_path).splitlines()
    (average,) = [i for i, line in enumerate(listed) if line.split()[:1] == ["lab_average"]]
    assert "lr=" in listed[average + 1]  # its options with their defaults
    (broken,) = [line for line in listed if line.split()[:1] == ["lab_broken"]]
    assert "cannot be used" in broken and "Nowhere" in broken
    assert any(line.split()[:1] == ["drdfl"] for line in listed)


def _moved_by_one_round(mu: float) -> float:
    """How far one round of eight SGD steps takes the model from where it began."""
    overrides = [
        "algorithm.name=examples.fedprox:FedProx",
        f"algorithm.mu={mu}",
        "algorithm.optimizer=sgd",
        "algorithm.lr=0.05",
        "clients.batch_size=8",
    ]
    method = build_algorithm(load_config(None, overrides), 0, CLASSES, SHAPE, torch.device("cpu"))
    start = [p.detach().clone() for p in method.model.parameters()]
    method.train_round(separable(64, CLASSES, SHAPE, seed=0))
    moved = zip(method.model.parameters(), start, strict=True)
    return sum(float((p.detach() - s).norm()) for p, s in moved)


def test_the_proximal_term_keeps_local_training_near_its_start():
    assert _moved_by_one_round(10.0) < 0.5 * _moved_by_one_round(0.0)


def test_a_plug_in_method_trains_in_a_ring(tmp_path):
    run = ring(tmp_path, algorithm="examples.fedprox:FedProx", count=3, rounds=2)
    summary = run.run(timeout_s=60)
    assert summary["rounds_completed"] == 2 and summary["local_acc"]["mean"] > 0.5
    assert all(isinstance(c.core.algorithm, FedProx) for c in run.clients.values())
