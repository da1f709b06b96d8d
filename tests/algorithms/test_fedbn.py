"""FedBN: BatchNorm layers untouched by the lap, everything else its exact weighted mean."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ring_actors.algorithms import ALGORITHMS
from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.fedbn import FedBN, FedBNOptions, batch_norm_keys
from ring_actors.config import ConfigError
from ring_actors.delivery.payloads import Payload, detach_to_cpu
from ring_actors.models import build_backbone
from ring_actors.models.small_cnn import SmallCNN
from tests.conftest import small_config
from tests.helpers.ring_runs import learn_on_ring
from tests.helpers.synthetic import run_laps, separable

pytestmark = pytest.mark.usefixtures("one_thread")  # as a client on one CPU runs
CPU = torch.device("cpu")
SHAPE = (1, 16, 16)  # small images keep the CNN fast on two cores


def make(seed=1, classes=4, shape=SHAPE, batch=16, **options) -> FedBN:
    task = TaskSpec(classes, shape, 1, batch, CPU, seed, shared_seed=0)
    return FedBN(FedBNOptions(**options), task)


def perturb(algo: FedBN, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for value in algo.model.state_dict().values():
            if value.is_floating_point():
                value.add_(torch.rand(value.shape, generator=g))  # variances stay positive


def test_registered_with_a_batchnorm_backbone_by_default():
    assert ALGORITHMS["fedbn"] is FedBN
    assert FedBNOptions().backbone == "cnn_bn"
    norms = [m for m in make().model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(norms) == 2


def test_a_backbone_without_batchnorm_is_refused():
    with pytest.raises(ValueError, match="cnn_bn or resnet18"):
        make(backbone="cnn")


def test_cnn_bn_is_the_cnn_plus_batchnorm_and_trains_on_a_batch_of_one():
    torch.manual_seed(0)
    plain = build_backbone("cnn", (1, 28, 28), 10)
    with_bn = build_backbone("cnn_bn", (1, 28, 28), 10)
    assert isinstance(with_bn, SmallCNN)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in plain.modules())
    # The plain CNN keeps its layout; the BatchNorm variant adds layers after the convolutions.
    assert [k for k in plain.state_dict() if k.endswith("weight")] == [
        "body.0.weight",
        "body.3.weight",
        "body.7.weight",
        "head.weight",
    ]
    others = set(with_bn.state_dict()) - set(batch_norm_keys(with_bn))
    assert len(others) == len(plain.state_dict())
    with_bn.train()
    out = with_bn(torch.randn(1, 1, 28, 28))  # BatchNorm2d needs only spatial positions
    assert out.shape == (1, 10)


def test_batchnorm_is_found_by_module_type_shortcuts_included():
    model = build_backbone("resnet18", (3, 32, 32), 10)
    keys = batch_norm_keys(model)
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(keys) == 5 * len(norms)  # weight, bias, mean, variance, counter
    assert any(".shortcut.1." in k for k in keys)  # named by position, not "bn"
    convs = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    assert not convs & set(keys)


@pytest.mark.parametrize("backbone", ["cnn_bn", "resnet18"])
def test_lap_averages_all_but_batchnorm_which_stays_untouched(backbone):
    clients = [make(seed=s, backbone=backbone) for s in range(3)]
    sizes = [5, 15, 30]
    for client, size in zip(clients, sizes, strict=True):
        perturb(client, size)
        client.num_samples = size
    states = [{k: v.clone() for k, v in c.model.state_dict().items()} for c in clients]
    local = set(clients[0].local_keys)
    assert local and not local & set(clients[0].contribute("average", 0))
    run_laps(clients, round_=0)
    for name, value in states[0].items():
        if name in local:
            for client, state in zip(clients, states, strict=True):
                assert torch.equal(client.model.state_dict()[name], state[name]), name
        elif value.is_floating_point():
            weighted = sum(s[name].double() * n for s, n in zip(states, sizes, strict=True))
            for client in clients:
                actual = client.model.state_dict()[name].double()
                torch.testing.assert_close(actual, weighted / 50, rtol=1e-5, atol=1e-6)
    bn = sorted(k for k in local if k.endswith("running_mean"))[0]
    assert not torch.equal(clients[0].model.state_dict()[bn], clients[1].model.state_dict()[bn])


def test_training_moves_batchnorm_statistics_that_the_lap_then_keeps():
    clients = [make(seed=s) for s in range(2)]
    for seed, client in enumerate(clients):
        client.train_round(separable(32, 4, SHAPE, seed=seed))
    means = [c.model.state_dict()["body.1.running_mean"].clone() for c in clients]
    assert not torch.equal(means[0], means[1])
    run_laps(clients, round_=0)
    for client, mean in zip(clients, means, strict=True):
        assert torch.equal(client.model.state_dict()["body.1.running_mean"], mean)
    torch.testing.assert_close(clients[0].model.body[0].weight, clients[1].model.body[0].weight)


def test_a_joiner_takes_all_but_batchnorm():
    source, joiner = make(seed=1), make(seed=2)
    perturb(source, 3)
    own = {k: joiner.model.state_dict()[k].clone() for k in joiner.local_keys}
    handed = detach_to_cpu(source.hand_off_state())
    assert not set(handed) & set(source.local_keys)
    joiner.init_from(Payload(0, 0, 0, 0, handed))
    for name, value in handed.items():
        assert torch.equal(joiner.model.state_dict()[name], value)
    for name, value in own.items():
        assert torch.equal(joiner.model.state_dict()[name], value)


# ---- learning on real data -----------------------------------------------------------------


@pytest.mark.slow
def test_learns_on_real_data(fmnist_sizes, tmp_path):
    losses, accuracy, _ = learn_on_ring("fedbn", fmnist_sizes, 3, tmp_path)
    assert losses[-1] < losses[0]
    assert np.mean(accuracy) > 0.7, accuracy


def test_a_run_config_with_a_backbone_without_batchnorm_is_refused_before_it_starts(tmp_path):
    allowed = "algorithm.backbone: must be one of 'cnn_bn', 'resnet18'"
    with pytest.raises(ConfigError, match=allowed):
        small_config(tmp_path, "algorithm.name=fedbn", "algorithm.backbone=cnn")
