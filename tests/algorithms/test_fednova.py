"""FedNova: the normalising factor, the normalised update by lap, FedAvg as its special case."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ring_actors.algorithms import ALGORITHMS, optim
from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.fedavg import FedAvg
from ring_actors.algorithms.fednova import FedNova, FedNovaOptions, normalising_factor
from ring_actors.config import ConfigError, load_config
from tests.helpers.ring_runs import learn_on_ring
from tests.helpers.synthetic import run_laps, separable

pytestmark = pytest.mark.usefixtures("one_thread")  # as a client on one CPU runs
CPU = torch.device("cpu")
SHAPE = (1, 16, 16)  # small images keep the CNN fast on two cores


def make(seed=1, classes=4, shape=SHAPE, epochs=1, batch=16, **options) -> FedNova:
    task = TaskSpec(classes, shape, epochs, batch, CPU, seed, shared_seed=0)
    return FedNova(FedNovaOptions(**options), task)


def params(algo) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in algo.model.named_parameters()}


def test_registered_with_sgd_only():
    assert ALGORITHMS["fednova"] is FedNova
    opts = FedNovaOptions()
    assert (opts.optimizer, opts.lr, opts.momentum) == ("sgd", 0.01, 0.9)
    with pytest.raises(ConfigError, match="algorithm.optimizer"):
        load_config(None, ["algorithm.name=fednova", "algorithm.optimizer=adam"])


@pytest.mark.parametrize(("steps", "momentum"), [(1, 0.0), (5, 0.0), (3, 0.5), (7, 0.9)])
def test_factor_is_how_far_momentum_sgd_moves_on_a_constant_gradient(steps, momentum):
    """tau constant unit gradients move a weight lr * a_i: the factor is the optimizer's own."""
    w = torch.zeros(1, requires_grad=True)
    sgd = optim.SGD([w], lr=0.1, momentum=momentum)
    for _ in range(steps):
        w.grad = torch.ones(1)
        sgd.step()
    expected = -0.1 * normalising_factor(steps, momentum)
    assert float(w.detach()) == pytest.approx(expected, rel=1e-6)


def test_factor_by_hand():
    # rho = 0.5, tau = 3: the gradients move 1.75, 1.5 and 1 lr in all: 4.25
    assert normalising_factor(3, 0.5) == pytest.approx(4.25)
    assert normalising_factor(4, 0.0) == 4.0


def test_lap_applies_the_normalised_update_computed_by_hand():
    clients = [make(seed=s) for s in range(3)]
    start = params(clients[0])
    sizes, factors = [10.0, 20.0, 70.0], [2.0, 5.0, 11.0]
    g = torch.Generator().manual_seed(0)
    ends = []
    for client, n, a in zip(clients, sizes, factors, strict=True):
        client.start = {k: v.clone() for k, v in start.items()}
        client.num_samples, client.factor = int(n), a
        with torch.no_grad():
            for value in client.model.parameters():
                value.sub_(torch.randn(value.shape, generator=g))  # as if trained
        ends.append(params(client))
    run_laps(clients, round_=0)
    p = [n / sum(sizes) for n in sizes]
    tau_eff = sum(pi * a for pi, a in zip(p, factors, strict=True))  # 0.2 + 1 + 7.7 = 8.9
    assert tau_eff == pytest.approx(8.9)
    for name, w0 in start.items():
        d = [(w0.double() - e[name].double()) / a for e, a in zip(ends, factors, strict=True)]
        expected = w0.double() - tau_eff * sum(pi * di for pi, di in zip(p, d, strict=True))
        for client in clients:
            actual = dict(client.model.named_parameters())[name].detach().double()
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_equal_factors_give_fedavg_and_unequal_do_not():
    def trained(cls, sizes):
        clients = []
        for seed, n in enumerate(sizes):
            options = {"optimizer": "sgd", "lr": 0.01, "momentum": 0.0}
            task = TaskSpec(4, SHAPE, 1, 16, CPU, seed, shared_seed=0)
            client = cls(cls.Options(**options), task)
            client.train_round(separable(n, 4, SHAPE, seed=seed))
            clients.append(client)
        run_laps(clients, round_=0)
        return params(clients[0])

    # 32 and 48 samples in batches of 16: 2 and 3 steps, so FedNova reweights the updates.
    for sizes, same in (([32, 32], True), ([32, 48], False)):
        nova, avg = trained(FedNova, sizes), trained(FedAvg, sizes)
        close = all(torch.allclose(nova[k], avg[k], atol=1e-6) for k in nova)
        assert close is same, sizes


def test_train_round_counts_steps_and_starts_momentum_afresh():
    algo = make(epochs=2, batch=16)
    algo.train_round(separable(40, 4, SHAPE))  # 3 batches an epoch
    assert algo.factor == pytest.approx(normalising_factor(6, 0.9))
    single = make(epochs=1, batch=16)
    start = params(single)
    for p in single.model.parameters():  # a buffer left over from an earlier round
        single.optimizer.state[p] = {"momentum_buffer": torch.ones_like(p)}
    single.train_round(separable(8, 4, SHAPE))  # a single step
    assert single.factor == 1.0
    assert all(torch.equal(single.start[k], v) for k, v in start.items())
    # From a zero buffer, one step leaves exactly its gradient in it; else 0.9 + gradient.
    head = single.model.head.weight
    assert torch.equal(single.optimizer.state[head]["momentum_buffer"], head.grad)


def test_all_clients_agree_after_the_lap_and_buffers_are_weighted_means():
    clients = [make(seed=s, backbone="resnet18") for s in range(2)]
    for seed, (client, n) in enumerate(zip(clients, (16, 32), strict=True)):
        client.train_round(separable(n, 4, SHAPE, seed=seed))
    means = [c.model.state_dict()["body.1.running_mean"].clone() for c in clients]
    run_laps(clients, round_=0)
    states = [c.model.state_dict() for c in clients]
    for name, value in states[0].items():
        if value.is_floating_point():
            torch.testing.assert_close(states[1][name], value)
    torch.testing.assert_close(states[0]["body.1.running_mean"], (means[0] + 2 * means[1]) / 3)


def test_a_client_without_data_takes_part_without_contributing():
    algo = make()
    algo.train_round(separable(0, 4, SHAPE))
    assert algo.contribute("average", 0) == {}


# ---- learning on real data -----------------------------------------------------------------


@pytest.mark.slow
def test_learns_on_real_data_with_unequal_local_steps(fmnist_sizes, tmp_path):
    losses, accuracy, ring = learn_on_ring("fednova", fmnist_sizes, 4, tmp_path)
    assert len({c.core.algorithm.factor for c in ring.clients.values()}) == 3  # 3, 5 and 7 steps
    assert losses[-1] < losses[0]
    assert np.mean(accuracy) > 0.7, accuracy
