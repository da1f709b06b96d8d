"""Your own backbone in your own file: ``algorithm.backbone=module:Class``, checked at config
load against the contract the methods rely on, and trained by the built-in methods."""

from __future__ import annotations

import pytest
import ray
import torch
from torch import nn

from examples.stripes import TinyCNN
from ring_actors.algorithms import ALGORITHMS
from ring_actors.client.checkpoint import load_client_state
from ring_actors.client.method_factory import build_algorithm
from ring_actors.config import ConfigError, config_from_dict, load_config
from ring_actors.in_process import InProcessRing
from ring_actors.preflight.dry_run import list_choices
from ring_actors.runtime.driver import launch
from tests.helpers.in_process_ring import CLASSES, SHAPE, client_data
from tests.helpers.synthetic import separable

TINY = "examples.stripes:TinyCNN"

LAB_BACKBONES = """
import torch
from torch import nn


class Good(nn.Module):
    def __init__(self, input_shape, num_classes):
        super().__init__()
        c, h, w = input_shape
        self.feature_dim = 8
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, 8))
        self.head = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.head(self.body(x))


class NoBody(nn.Module):
    def __init__(self, input_shape, num_classes):
        super().__init__()
        self.net = nn.Linear(1, num_classes)


class NoFlatten(Good):
    def __init__(self, input_shape, num_classes):
        super().__init__(input_shape, num_classes)
        self.body = nn.Sequential(nn.Conv2d(input_shape[0], 2, 3), nn.AdaptiveAvgPool2d(1))


class WrongWidth(Good):
    def __init__(self, input_shape, num_classes):
        super().__init__(input_shape, num_classes)
        self.feature_dim = 16


class WrongClasses(Good):
    def __init__(self, input_shape, num_classes):
        super().__init__(input_shape, num_classes)
        self.head = nn.Linear(8, num_classes + 1)


class OwnForward(Good):
    def forward(self, x):
        return 2 * self.head(self.body(x))


class NoArguments(nn.Module):
    def __init__(self):
        super().__init__()


class FailsToBuild(Good):
    def __init__(self, input_shape, num_classes):
        raise RuntimeError("needs a GPU")
"""


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A user's module of backbones, importable as ``lab_backbones``."""
    (tmp_path / "lab_backbones.py").write_text(LAB_BACKBONES)
    monkeypatch.syspath_prepend(str(tmp_path))


def plug_in_ring(tmp_path, method: str, rounds: int = 3) -> InProcessRing:
    config = config_from_dict(
        {
            "experiment": {"name": "inproc", "rounds": rounds},
            "clients": {"count": 3, "batch_size": 16},
            "algorithm": {"name": method, "backbone": TINY},
            "schedule": {"hop_timeout_s": 1.0, "heartbeat_s": 0.1},
        }
    )
    return InProcessRing(config, client_data(3), CLASSES, SHAPE, tmp_path)


@pytest.mark.parametrize("method", ["dfedavg", "fedrep"])
def test_a_plug_in_backbone_trains_in_a_ring(tmp_path, method):
    run = plug_in_ring(tmp_path, method)
    summary = run.run(timeout_s=60)
    assert summary["rounds_completed"] == 3 and summary["events"]["lost_payloads"] == 0
    assert summary["local_acc"]["mean"] > 0.5  # four separable classes: chance is 0.25
    assert all(isinstance(c.core.algorithm.model, TinyCNN) for c in run.clients.values())


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_every_method_builds_and_trains_on_a_plug_in_backbone(method):
    config = load_config(None, [f"algorithm.name={method}", f"algorithm.backbone={TINY}"])
    cpu = torch.device("cpu")
    if method == "fedbn":  # it keeps BatchNorm layers local, and TinyCNN has none
        with pytest.raises(ValueError, match="has none"):
            build_algorithm(config, 0, CLASSES, SHAPE, cpu)
        return
    algorithm = build_algorithm(config, 0, CLASSES, SHAPE, cpu)
    assert _holds_tiny_cnn_layers(algorithm)
    losses = algorithm.train_round(separable(32, CLASSES, SHAPE))
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values())


def _holds_tiny_cnn_layers(algorithm) -> bool:
    """Whether TinyCNN's first layer is among the method's modules (whole, regrouped or body)."""
    nets = [v for v in vars(algorithm).values() if isinstance(v, nn.Module)]
    return any(
        isinstance(m, nn.Conv2d) and (m.out_channels, m.kernel_size) == (8, (3, 3))
        for net in nets
        for m in net.modules()
    )


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("examples.nowhere:Net", "cannot import 'examples.nowhere:Net': ModuleNotFoundError"),
        ("examples.stripes:Missing", "cannot import 'examples.stripes:Missing': AttributeError"),
        ("examples.stripes:load_stripes", "is not a subclass of torch.nn.Module"),
        ("lab_backbones:NoArguments", r"cannot be called as NoArguments\(input_shape, num_cl"),
        ("lab_backbones:FailsToBuild", "cannot be built .* RuntimeError: needs a GPU"),
        ("lab_backbones:NoBody", r"\.body must be an nn.Sequential holding an nn.Flatten"),
        ("lab_backbones:NoFlatten", r"\.body must be an nn.Sequential holding an nn.Flatten"),
        ("lab_backbones:WrongWidth", r"features of shape \(2, 8\) .* feature_dim=16"),
        ("lab_backbones:WrongClasses", r"logits of shape \(2, 11\) .* num_classes=10"),
        ("lab_backbones:OwnForward", r"forward\(x\) must equal head\(body\(x\)\)"),
    ],
)
def test_a_backbone_that_breaks_the_contract_is_a_config_error(lab, name, why):
    with pytest.raises(ConfigError, match=rf"^algorithm.backbone: .*{why}"):
        load_config(None, [f"algorithm.backbone={name}"])


def test_a_good_backbone_of_ones_own_passes_and_leaves_the_rng_alone(lab):
    before = torch.get_rng_state()
    config = load_config(None, ["algorithm.name=fedrep", "algorithm.backbone=lab_backbones:Good"])
    assert torch.equal(torch.get_rng_state(), before)
    assert config.algorithm.options.backbone == "lab_backbones:Good"


def test_a_method_section_checks_its_backbone_too(tmp_path):
    path = tmp_path / "cell.yaml"
    path.write_text('algorithm: {name: drdfl, fedrep: {backbone: "examples.stripes:CLASSES"}}\n')
    with pytest.raises(ConfigError, match=r"^algorithm.fedrep.backbone: .*not a subclass"):
        load_config(path)


@pytest.mark.parametrize(
    ("method", "allowed"),
    [("dfedavg", ["'cnn'", "'resnet18'"]), ("fedbn", ["'cnn_bn'", "'resnet18'"])],
)
def test_a_wrong_built_in_name_still_lists_the_allowed_values(method, allowed):
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"algorithm.name={method}", "algorithm.backbone=vgg"])
    message = str(err.value)
    assert message.startswith("algorithm.backbone: must be one of") and "'vgg'" in message
    assert all(name in message for name in allowed) and "module:Class" in message


def test_a_client_checkpoint_with_a_plug_in_backbone_comes_back(tmp_path):
    config = load_config(None, ["algorithm.name=fedrep", f"algorithm.backbone={TINY}"])
    algorithm = build_algorithm(config, 0, CLASSES, SHAPE, torch.device("cpu"))
    data = separable(32, CLASSES, SHAPE)
    algorithm.train_round(data)
    torch.save({"algorithm": algorithm}, tmp_path / "c.pt")
    restored = load_client_state(tmp_path / "c.pt", torch.device("cpu"))["algorithm"]
    assert isinstance(restored.model, TinyCNN)
    for name, tensor in algorithm.model.state_dict().items():
        assert torch.equal(tensor, restored.model.state_dict()[name]), name
    assert restored.evaluate(data) == algorithm.evaluate(data)


def test_list_says_backbones_and_datasets_may_be_your_own(tmp_path):
    lines = list_choices(tmp_path).splitlines()
    (backbones,) = [line for line in lines if line.startswith("backbones (algorithm.backbone)")]
    (datasets,) = [line for line in lines if line.startswith("datasets (data.dataset)")]
    assert "cnn, resnet18" in backbones and "module:Class" in backbones
    assert "fashion-mnist" in datasets and "module:function" in datasets


def test_with_a_dataset_of_ones_own_the_backbone_is_checked_at_launch_before_ray(
    lab, tmp_path, no_ray
):
    overrides = ["data.dataset=examples.stripes:load_stripes", "algorithm.backbone=lab_backbones:"]
    config = load_config(None, [*overrides[:1], overrides[1] + "WrongWidth"])  # shape unknown yet
    with pytest.raises(ConfigError, match=r"^algorithm.backbone: .*feature_dim=16"):
        launch(config, tmp_path / "out")
    assert not ray.is_initialized()  # stopped before any actor, or Ray itself, started
