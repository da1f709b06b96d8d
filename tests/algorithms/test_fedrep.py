"""FedRep: head-then-body local update, the exact body average by lap, the head kept local."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ring_actors.algorithms import ALGORITHMS
from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.fedavg import WEIGHT
from ring_actors.algorithms.fedrep import FedRep, FedRepOptions
from ring_actors.delivery.payloads import Payload, detach_to_cpu
from tests.helpers.ring_runs import learn_on_ring
from tests.helpers.synthetic import run_laps, separable

pytestmark = pytest.mark.usefixtures("one_thread")  # as a client on one CPU runs
CPU = torch.device("cpu")
SHAPE = (1, 16, 16)  # small images keep the CNN fast on two cores


def make(seed=1, classes=4, shape=SHAPE, epochs=1, batch=16, **options) -> FedRep:
    task = TaskSpec(classes, shape, epochs, batch, CPU, seed, shared_seed=0)
    return FedRep(FedRepOptions(**options), task)


def perturb(algo: FedRep, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for value in algo.model.state_dict().values():
            if value.is_floating_point():
                value.add_(torch.randn(value.shape, generator=g))


def snapshot(algo: FedRep, prefix: str) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in algo.model.state_dict().items() if k.startswith(prefix)}


def test_registered_with_defaults_and_checked_options():
    assert ALGORITHMS["fedrep"] is FedRep
    opts = FedRepOptions()
    assert (opts.head_epochs, opts.body_epochs, opts.head_lr) == (1, None, None)
    for key, value in [("head_epochs", -1), ("body_epochs", -2), ("head_lr", 0.0)]:
        with pytest.raises(ValueError, match=rf"^{key}: must be"):
            FedRepOptions(**{key: value})


def test_lap_gives_every_client_the_weighted_body_and_keeps_each_head():
    clients = [make(seed=s) for s in range(3)]
    sizes = [10, 30, 60]
    for client, size in zip(clients, sizes, strict=True):
        perturb(client, 100 + size)
        client.num_samples = size
    bodies = [snapshot(c, "body.") for c in clients]
    heads = [snapshot(c, "head.") for c in clients]
    assert clients[0].shared_state() == {} and clients[0].laps(0) == ("average",)
    token = clients[0].contribute("average", 0)
    assert not any(k.startswith("head.") for k in token)  # the head never leaves
    assert float(token[WEIGHT]) == 10
    run_laps(clients, round_=0)
    for name in bodies[0]:
        expected = sum(b[name].double() * n for b, n in zip(bodies, sizes, strict=True)) / 100
        for client in clients:
            actual = client.model.state_dict()[name].double()
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
    for client, head in zip(clients, heads, strict=True):
        for name, value in head.items():
            assert torch.equal(client.model.state_dict()[name], value)
    assert not torch.equal(clients[0].model.head.weight, clients[1].model.head.weight)


def test_head_phase_leaves_the_body_and_body_phase_leaves_the_head():
    data = separable(32, 4, SHAPE)
    head_only = make(head_epochs=2, body_epochs=0)
    body = snapshot(head_only, "body.")
    head = snapshot(head_only, "head.")
    out = head_only.train_round(data)
    assert all(torch.equal(head_only.model.state_dict()[k], v) for k, v in body.items())
    assert not torch.equal(head_only.model.head.weight, head["head.weight"])
    assert head_only.head_optimizer.state[head_only.model.head.weight]["step"] == 2 * 2
    assert set(out) == {"loss", "loss_head"}

    body_only = make(head_epochs=0, body_epochs=1)
    body = snapshot(body_only, "body.")
    head = snapshot(body_only, "head.")
    body_only.train_round(data)
    assert all(torch.equal(body_only.model.state_dict()[k], v) for k, v in head.items())
    assert not torch.equal(body_only.model.body[0].weight, body["body.0.weight"])
    assert body_only.model.head.weight.requires_grad  # unfrozen again for the next round


def test_body_epochs_default_to_the_runs_local_epochs_and_head_lr_applies():
    algo = make(epochs=3, head_lr=0.05)
    algo.train_round(separable(16, 4, SHAPE))  # one batch an epoch
    assert algo.optimizer.state[algo.model.body[0].weight]["step"] == 3
    assert algo.head_optimizer.param_groups[0]["lr"] == 0.05
    assert algo.optimizer.param_groups[0]["lr"] == FedRepOptions().lr


def test_a_joiner_takes_the_body_and_keeps_its_own_head():
    source, joiner = make(seed=1), make(seed=2)
    perturb(source, 7)
    head = snapshot(joiner, "head.")
    handed = source.hand_off_state()
    assert set(handed) == set(source.body_state())
    joiner.init_from(Payload(0, 0, 0, 0, detach_to_cpu(handed)))
    for name, value in handed.items():
        assert torch.equal(joiner.model.state_dict()[name], value)
    assert all(torch.equal(joiner.model.state_dict()[k], v) for k, v in head.items())


# ---- learning on real data -----------------------------------------------------------------


@pytest.mark.slow
def test_learns_on_real_data(fmnist_triples, tmp_path):
    losses, accuracy, _ = learn_on_ring("fedrep", fmnist_triples, 3, tmp_path)
    assert losses[-1] < losses[0]
    assert np.mean(accuracy) > 0.7, accuracy
