"""DFedPGP: the body pushed and gossip-averaged, the head personal, head-then-body updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ring_actors.algorithms import ALGORITHMS
from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.dfedpgp import DFedPGP, DFedPGPOptions
from ring_actors.delivery.payloads import Payload, detach_to_cpu
from tests.helpers.ring_runs import learn_on_ring
from tests.helpers.synthetic import separable

pytestmark = pytest.mark.usefixtures("one_thread")  # as a client on one CPU runs
CPU = torch.device("cpu")
SHAPE = (1, 16, 16)  # small images keep the CNN fast on two cores


def make(seed=1, classes=4, shape=SHAPE, batch=16, backbone="cnn", **options) -> DFedPGP:
    task = TaskSpec(classes, shape, 1, batch, CPU, seed, shared_seed=0)
    return DFedPGP(DFedPGPOptions(backbone=backbone, **options), task)


def perturb(algo: DFedPGP, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for value in algo.model.state_dict().values():
            if value.is_floating_point():
                value.add_(torch.randn(value.shape, generator=g))


def payload(algo: DFedPGP, sender: int, round_: int = 0) -> Payload:
    return Payload(sender, round_, 0, 0, detach_to_cpu(algo.shared_state()))


def test_registered_and_shares_the_body_only():
    assert ALGORITHMS["dfedpgp"] is DFedPGP
    algo = make(backbone="resnet18")
    shared = algo.shared_state()
    assert shared and all(k.startswith("body.") for k in shared)
    assert not any(k.endswith("num_batches_tracked") for k in shared)
    floats = {k for k, v in algo.model.state_dict().items() if v.is_floating_point()}
    assert set(shared) == floats - {"head.weight", "head.bias"}
    assert algo.laps(0) == ()  # no lap: gossip only


@pytest.mark.parametrize("senders", [1, 3])
def test_merge_is_the_mean_of_own_and_received_bodies_and_keeps_the_head(senders):
    own = make(seed=0)
    perturb(own, 10)
    others = [make(seed=s + 1) for s in range(senders)]
    for i, other in enumerate(others):
        perturb(other, 20 + i)
    received = [payload(o, i + 1) for i, o in enumerate(others)]
    body = {k: v.clone() for k, v in own.shared_state().items()}
    head = own.model.head.weight.detach().clone()
    own.merge(received)
    for name, value in body.items():
        parts = [value.double(), *(p.tensors[name].double() for p in received)]
        expected = torch.stack(parts).mean(0)
        actual = own.model.state_dict()[name].double()
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(own.model.head.weight, head)


def test_merge_of_nothing_changes_nothing():
    algo = make()
    before = {k: v.clone() for k, v in algo.model.state_dict().items()}
    algo.merge([])
    assert all(torch.equal(v, before[k]) for k, v in algo.model.state_dict().items())


def test_round_trains_the_head_at_its_own_rate_then_the_body():
    algo = make(head_epochs=2, body_epochs=1, head_lr=0.01, lr=0.002)
    out = algo.train_round(separable(32, 4, SHAPE))  # two batches an epoch
    assert set(out) == {"loss", "loss_head"}
    assert algo.head_optimizer.state[algo.model.head.weight]["step"] == 2 * 2
    assert algo.optimizer.state[algo.model.body[0].weight]["step"] == 2
    assert algo.head_optimizer.param_groups[0]["lr"] == 0.01
    assert algo.optimizer.param_groups[0]["lr"] == 0.002
    assert algo.model.head.weight not in algo.optimizer.state  # the body phase froze it


def test_a_joiner_copies_the_body_and_keeps_its_head():
    source, joiner = make(seed=1), make(seed=2)
    perturb(source, 5)
    head = joiner.model.head.weight.detach().clone()
    handed = payload(source, 0)
    joiner.init_from(handed)
    for name, value in handed.tensors.items():
        assert torch.equal(joiner.model.state_dict()[name], value)
    assert torch.equal(joiner.model.head.weight, head)


def test_gossip_on_a_ring_draws_the_bodies_together():
    clients = [make(seed=s) for s in range(3)]
    for i, client in enumerate(clients):
        perturb(client, i)

    def spread() -> float:
        w = torch.stack([c.model.body[0].weight.detach() for c in clients])
        return float((w - w.mean(0)).norm())

    before = spread()
    for round_ in range(3):
        pushed = [payload(c, i, round_) for i, c in enumerate(clients)]
        for i, client in enumerate(clients):
            client.merge([pushed[i - 1]])  # from the predecessor
    assert spread() < 0.3 * before


# ---- learning on real data -----------------------------------------------------------------


@pytest.mark.slow
def test_learns_on_real_data_by_ring_gossip(fmnist_triples, tmp_path):
    losses, accuracy, _ = learn_on_ring("dfedpgp", fmnist_triples, 3, tmp_path)
    assert losses[-1] < losses[0]
    assert np.mean(accuracy) > 0.7, accuracy
