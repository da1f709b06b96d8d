"""The supervised baselines: Local, DFedAvg, and the shared Algorithm machinery."""

from __future__ import annotations

import pytest
import torch

from ring_actors.algorithms import ALGORITHMS, optim
from ring_actors.algorithms.base import Algorithm, AlgorithmOptions, TaskSpec
from ring_actors.algorithms.dfedavg import DFedAvg
from ring_actors.algorithms.fedavg import FedAvg
from ring_actors.algorithms.local import Local
from ring_actors.algorithms.supervised import SupervisedAlgorithm
from ring_actors.delivery.payloads import Payload, detach_to_cpu
from tests.helpers.synthetic import run_laps, separable

CPU = torch.device("cpu")
SHAPE = (1, 16, 16)  # small images keep the CNN fast on two cores


def make_task(shape=SHAPE, classes=4, seed=1, shared_seed=0, batch=32, epochs=1) -> TaskSpec:
    return TaskSpec(classes, shape, epochs, batch, CPU, seed, shared_seed)


def make(cls=DFedAvg, shape=SHAPE, seed=1, shared_seed=0, **options):
    return cls(AlgorithmOptions(**options), make_task(shape, seed=seed, shared_seed=shared_seed))


def payload(algo: Algorithm, sender: int = 0) -> Payload:
    return Payload(sender, 0, 0, 0, detach_to_cpu(algo.shared_state()))


def perturb(algo: Algorithm, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for value in (algo.shared_state() or algo.model.state_dict()).values():
            if value.is_floating_point():
                value.add_(torch.randn(value.shape, generator=g))


def test_registry_names_the_baselines():
    assert ALGORITHMS["local"] is Local
    assert ALGORITHMS["dfedavg"] is DFedAvg
    assert issubclass(Local, SupervisedAlgorithm) and issubclass(DFedAvg, SupervisedAlgorithm)


# ---- options -------------------------------------------------------------------------------


@pytest.mark.parametrize("lr", [0.0, -1e-3])
def test_options_reject_non_positive_lr(lr):
    with pytest.raises(ValueError, match=r"^lr: must be > 0"):
        AlgorithmOptions(lr=lr)


def test_options_reject_bad_momentum_and_weight_decay():
    with pytest.raises(ValueError, match="momentum"):
        AlgorithmOptions(momentum=1.0)
    with pytest.raises(ValueError, match="weight_decay"):
        AlgorithmOptions(weight_decay=-0.1)


def test_make_optimizer_follows_options():
    sgd = make(optimizer="sgd", lr=0.05, momentum=0.5, weight_decay=0.01)
    assert isinstance(sgd.optimizer, optim.SGD)
    group = sgd.optimizer.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.05, 0.5, 0.01)
    adam = make(lr=0.002)
    assert isinstance(adam.optimizer, optim.Adam)
    assert adam.optimizer.param_groups[0]["lr"] == 0.002


# ---- Local ---------------------------------------------------------------------------------


def test_local_shares_nothing_and_ignores_merges():
    algo = make(Local)
    assert algo.shared_state() == {}
    before = {k: v.clone() for k, v in algo.model.state_dict().items()}
    other = make(DFedAvg, shared_seed=5)
    algo.merge([payload(other)])
    algo.set_shared({})
    for name, value in algo.model.state_dict().items():
        assert torch.equal(value, before[name])


# ---- DFedAvg -------------------------------------------------------------------------------


def test_dfedavg_shares_the_whole_model():
    algo = make()
    assert set(algo.shared_state()) == set(algo.model.state_dict())


@pytest.mark.parametrize("senders", [1, 2])
def test_dfedavg_merge_is_the_elementwise_mean(senders):
    own = make(seed=1)
    perturb(own, 100)
    others = []
    for i in range(senders):
        other = make(seed=2 + i)
        perturb(other, 200 + i)
        others.append(other)
    before = {k: v.clone() for k, v in own.shared_state().items()}
    received = [payload(o, sender=i + 1) for i, o in enumerate(others)]
    own.merge(received)
    after = own.model.state_dict()
    for name, value in before.items():
        parts = [value.double()] + [p.tensors[name].double() for p in received]
        expected = torch.stack(parts).mean(0).float()
        torch.testing.assert_close(after[name], expected, rtol=0, atol=1e-6)
        assert not torch.equal(after[name], value)  # it really moved


def test_dfedavg_merge_keeps_integer_buffers_local():
    own, other = make(backbone="resnet18", seed=1), make(backbone="resnet18", seed=2)
    perturb(own, 1)
    perturb(other, 2)
    counters = [k for k, v in own.shared_state().items() if not v.is_floating_point()]
    assert counters and all(k.endswith("num_batches_tracked") for k in counters)
    with torch.no_grad():
        for k in counters:
            own.model.state_dict()[k].fill_(5)
            other.model.state_dict()[k].fill_(100)
    bn_mean = "body.1.running_mean"
    expected_mean = (own.shared_state()[bn_mean] + other.shared_state()[bn_mean]) / 2
    own.merge([payload(other)])
    state = own.model.state_dict()
    for k in counters:
        assert state[k].dtype == torch.int64 and int(state[k]) == 5
    torch.testing.assert_close(state[bn_mean], expected_mean, rtol=0, atol=1e-6)


def test_dfedavg_merge_of_nothing_is_a_no_op():
    algo = make()
    perturb(algo, 3)
    before = {k: v.clone() for k, v in algo.model.state_dict().items()}
    algo.merge([])
    for name, value in algo.model.state_dict().items():
        assert torch.equal(value, before[name])


def test_same_shared_seed_starts_identical_different_seed_does_not():
    a = make(seed=1, shared_seed=7)
    b = make(seed=2, shared_seed=7)
    c = make(seed=1, shared_seed=8)
    sa, sb, sc = a.model.state_dict(), b.model.state_dict(), c.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_init_from_copies_the_shared_state():
    joiner, source = make(shared_seed=1), make(shared_seed=2)
    perturb(source, 9)
    handed = payload(source, sender=3)
    joiner.init_from(handed)
    for name, value in joiner.shared_state().items():
        assert torch.equal(value, handed.tensors[name])
    # A copy, not an alias: training the source afterwards leaves the joiner alone.
    perturb(source, 10)
    name = next(iter(handed.tensors))
    assert torch.equal(joiner.shared_state()[name], handed.tensors[name])
    assert not torch.equal(joiner.shared_state()[name], source.shared_state()[name])


def test_set_shared_raises_key_error_naming_missing_keys():
    algo = make()
    before = {k: v.clone() for k, v in algo.shared_state().items()}
    tensors = detach_to_cpu(make(shared_seed=3).shared_state())
    dropped = sorted(tensors)[0]
    del tensors[dropped]
    with pytest.raises(KeyError, match=dropped):
        algo.set_shared(tensors)
    for name, value in algo.shared_state().items():  # nothing half-copied
        assert torch.equal(value, before[name])


# ---- evaluation and training ---------------------------------------------------------------


def test_evaluate_matches_a_hand_computation_from_predict():
    algo = make(shared_seed=4)
    data = separable(shape=SHAPE, n=300)  # more than one evaluation batch of 256
    result = algo.evaluate(data)
    assert set(result) == {"acc"}
    assert 0.0 <= result["acc"] <= 1.0
    with torch.no_grad():
        logits = algo.predict(data.normalise(data.x))["acc"]
    expected = int((logits.argmax(1) == data.y).sum()) / len(data)
    assert result["acc"] == pytest.approx(expected, abs=1e-9)


def test_evaluate_with_a_constant_head():
    algo = make()
    data = separable(shape=SHAPE, n=40)
    with torch.no_grad():
        algo.model.head.weight.zero_()
        algo.model.head.bias.copy_(torch.tensor([0.0, 0.0, 5.0, 0.0]))
    assert algo.evaluate(data)["acc"] == pytest.approx(float((data.y == 2).float().mean()))


def test_train_rounds_lower_the_loss_and_beat_chance():
    algo = make(Local, shared_seed=0, lr=1e-3)
    data = separable(shape=SHAPE, n=96)
    before = algo.evaluate(data)["acc"]
    losses = [algo.train_round(data)["loss"] for _ in range(3)]
    after = algo.evaluate(data)["acc"]
    assert all(loss == loss and loss > 0 for loss in losses)  # finite, positive
    assert losses[-1] < losses[0]
    assert after > 0.5  # chance is 0.25
    assert after >= before


def test_train_round_runs_local_epochs_and_changes_weights():
    algo = DFedAvg(AlgorithmOptions(), make_task(epochs=2, batch=64))
    weight = algo.model.head.weight.detach().clone()
    out = algo.train_round(separable(shape=SHAPE, n=64))
    assert set(out) == {"loss"}
    assert not torch.equal(algo.model.head.weight, weight)
    assert algo.optimizer.state[algo.model.head.weight]["step"] == 2  # 2 epochs x 1 batch


def test_ring_fedavg_lap_gives_every_client_the_sample_weighted_mean():
    clients = [make(FedAvg, seed=s) for s in range(3)]
    sizes = [10, 30, 60]
    for client, size, seed in zip(clients, sizes, (1, 2, 3), strict=True):
        perturb(client, seed)
        client.num_samples = size
    states = [{k: v.clone() for k, v in c.model.state_dict().items()} for c in clients]
    run_laps(clients, round_=0)
    for name, value in states[0].items():
        if not value.is_floating_point():
            continue
        expected = sum(s[name] * n for s, n in zip(states, sizes, strict=True)) / sum(sizes)
        for client in clients:
            assert torch.allclose(client.model.state_dict()[name], expected, atol=1e-6), name


def test_ring_fedavg_lap_without_contributions_keeps_the_local_model():
    client = make(FedAvg)
    before = {k: v.clone() for k, v in client.model.state_dict().items()}
    client.apply_lap("average", 0, {}, [])
    assert all(torch.equal(v, before[k]) for k, v in client.model.state_dict().items())
    assert client.shared_state() == {} and client.laps(3) == ("average",)


# ---- the papers' optimiser for the baselines ----------------------------------------------


@pytest.mark.parametrize("cls", [Local, DFedAvg, FedAvg])
def test_the_baselines_keep_adam_unless_told(cls):
    assert isinstance(make(cls).optimizer, optim.Adam)


@pytest.mark.parametrize("cls", [Local, DFedAvg, FedAvg])
def test_papers_plain_sgd_takes_exactly_one_gradient_step_per_batch(cls):
    """DRDFL's papers run Local with plain SGD: ``optimizer=sgd, momentum=0`` gives
    w - lr * grad, computed here by hand on one full batch (the order cannot matter)."""
    lr = 0.05
    algo = make(cls, optimizer="sgd", momentum=0.0, lr=lr)
    data = separable(n=32, shape=SHAPE)
    before = {k: v.detach().clone() for k, v in algo.model.named_parameters()}
    x, y = next(data.batches(32, shuffle=False))
    algo.model.train()
    loss = torch.nn.functional.cross_entropy(algo.model(x), y)
    grads = torch.autograd.grad(loss, [algo.model.get_parameter(k) for k in before])
    algo.model.zero_grad(set_to_none=True)
    metrics = algo.train_round(data)
    assert metrics["loss"] == pytest.approx(float(loss), rel=1e-5)
    for (name, old), grad in zip(before.items(), grads, strict=True):
        torch.testing.assert_close(algo.model.get_parameter(name), old - lr * grad)
    adam = make(cls, lr=lr)  # this project's default moves the same weights otherwise
    adam.train_round(data)
    moved = adam.model.get_parameter(next(iter(before)))
    assert not torch.allclose(moved, next(iter(before.values())) - lr * grads[0])
