"""An idle client holds almost nothing on its device: its optimiser state (and a large
model's parameters) wait on the host and its allocator's cache is returned, and the state
comes back bit for bit."""

from __future__ import annotations

import pytest
import ray
import torch

from ring_actors.algorithms import ALGORITHMS, TaskSpec
from ring_actors.client.core import Ungated
from ring_actors.client.slot_release import (
    IdleRelease,
    modules_of,
    move_optimizer_state,
    offloads_parameters,
    optimizers_of,
    parameter_bytes,
    state_devices,
)
from ring_actors.config import ConfigError, load_config
from ring_actors.data.images import LabelledImages
from ring_actors.runtime.driver import launch, shutdown, wait_and_finalize
from tests.conftest import LIGHT, needs_data, small_config
from tests.helpers.synthetic import separable

CPU = torch.device("cpu")
GPU_ONLY = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def method(name: str, device: torch.device, *overrides: str):
    options = load_config(None, [f"algorithm.name={name}", "algorithm.backbone=cnn", *overrides])
    task = TaskSpec(4, (1, 28, 28), 1, 32, device, seed=3, shared_seed=0)
    return ALGORITHMS[name](options.algorithm.options, task)


def trained(algorithm, offload: bool, rounds: int = 3, parameters: bool = False):
    cpu = separable(n=96)
    data = LabelledImages(*(t.to(algorithm.device) for t in (cpu.x, cpu.y, cpu.mean, cpu.std)))
    idle = IdleRelease(Ungated(), lambda: algorithm, algorithm.device, offload, parameters)
    idle.release()  # as a client does once it is built
    for _ in range(rounds):
        with idle.hold(0):
            algorithm.train_round(data)
            assert state_devices(optimizers_of(algorithm)) <= {str(algorithm.device)}
        if offload:
            assert state_devices(optimizers_of(algorithm)) == {"cpu"}
        with idle.resident():  # a lap between slots, as the only member
            for lap in algorithm.laps(0):
                algorithm.apply_lap(lap, 0, algorithm.contribute(lap, 0), [0])
    return algorithm


def storages(algorithm, alive: list[torch.Tensor]) -> list[int]:
    """Where every parameter's data lives now; ``alive`` keeps that data from being freed,
    so that a later copy cannot reuse its address."""
    data = [p.data for m in modules_of(algorithm) for p in m.parameters()]
    alive += data
    return [t.data_ptr() for t in data]


def tensors_of(algorithm) -> list[torch.Tensor]:
    """Every parameter and optimiser state tensor, in a fixed order."""
    found = [t for t in vars(algorithm).values() if isinstance(t, torch.Tensor)]
    for value in vars(algorithm).values():
        if isinstance(value, torch.nn.Module):
            found += list(value.state_dict().values())
    for optimizer in optimizers_of(algorithm):
        for state in optimizer.state.values():
            found += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return found


@pytest.mark.parametrize(
    ("name", "overrides", "count"),
    [
        ("fedavg", ("algorithm.optimizer=adam",), 1),
        ("dfedavg", ("algorithm.optimizer=sgd", "algorithm.momentum=0.9"), 1),
        ("fedrep", (), 2),  # two attributes
        ("drdfl", (), 6),  # a dict of them
    ],
)
def test_offloaded_training_is_bit_for_bit_the_same(name, overrides, count):
    torch.manual_seed(0)
    plain = trained(method(name, CPU, *overrides), offload=False)
    torch.manual_seed(0)
    moved = trained(method(name, CPU, *overrides), offload=True)
    assert len(optimizers_of(moved)) == count
    ours, theirs = tensors_of(moved), tensors_of(plain)
    assert len(ours) == len(theirs) > count
    assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(ours, theirs, strict=True))


@pytest.mark.parametrize("name", ["fedavg", "drdfl"])
def test_parameters_parked_on_the_host_train_bit_for_bit_the_same(name):
    torch.manual_seed(0)
    plain = trained(method(name, CPU), offload=True)
    torch.manual_seed(0)
    moved = method(name, CPU)
    parameters = [p for m in modules_of(moved) for p in m.parameters()]
    trained(moved, offload=True, parameters=True)
    # The same parameter objects (the optimisers hold them), with every value equal.
    assert [p for m in modules_of(moved) for p in m.parameters()] == parameters
    ours, theirs = tensors_of(moved), tensors_of(plain)
    assert len(ours) == len(theirs)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_parameters_come_back_for_a_call_and_leave_after_it():
    algorithm = method("fedavg", CPU)
    idle = IdleRelease(Ungated(), lambda: algorithm, CPU, offload=True, offload_parameters=True)
    idle.release()
    alive: list[torch.Tensor] = []
    parked = storages(algorithm, alive)
    with idle.resident():
        inside = storages(algorithm, alive)
        assert not set(inside) & set(parked)  # copied back to the device
    assert idle.parameters_away
    assert not set(storages(algorithm, alive)) & set(inside)


def test_only_a_model_past_the_threshold_parks_its_parameters():
    algorithm = method("fedavg", CPU)
    mb = parameter_bytes(modules_of(algorithm)) / 2**20
    assert 0.1 < mb < 32  # the small cnn on 28x28 inputs
    assert not offloads_parameters(True, 32.0, algorithm)
    assert offloads_parameters(True, mb * 0.99, algorithm)
    assert not offloads_parameters(False, 0.0, algorithm)  # only where the state moves
    assert not offloads_parameters(True, None, algorithm)


def test_a_negative_parameter_threshold_names_the_key():
    with pytest.raises(ConfigError, match="clients.offload_parameters_mb"):
        load_config(None, ["clients.offload_parameters_mb=-1"])


def test_a_move_replaces_every_state_tensor_and_counts_its_bytes():
    algorithm = trained(method("fedavg", CPU, "algorithm.optimizer=adam"), offload=False)
    (optimizer,) = optimizers_of(algorithm)

    def state() -> list[torch.Tensor]:
        return [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]

    before = state()  # held, so no new tensor can take an old one's place
    params = sum(p.numel() * 4 for p in optimizer.param_groups[0]["params"])
    assert move_optimizer_state([optimizer], CPU) == 2 * params  # Adam: two moments
    after = state()
    assert len(after) == len(before)
    assert not any(a is b for a in after for b in before)
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))


@GPU_ONLY
def test_a_gpu_client_that_gives_its_slot_back_keeps_no_cache_and_no_optimiser_state():
    gpu = torch.device("cuda", 0)
    algorithm = method("fedavg", gpu, "algorithm.optimizer=adam")
    cpu = separable(n=96)
    data = LabelledImages(*(t.to(gpu) for t in (cpu.x, cpu.y, cpu.mean, cpu.std)))
    torch.cuda.synchronize()
    resident = torch.cuda.memory_allocated(gpu)  # parameters and data
    grads = sum(
        p.numel() * p.element_size() for p in optimizers_of(algorithm)[0].param_groups[0]["params"]
    )
    idle = IdleRelease(Ungated(), lambda: algorithm, gpu, offload=True)
    for _ in range(2):
        with idle.hold(0):
            algorithm.train_round(data)
        assert state_devices(optimizers_of(algorithm)) == {"cpu"}
        # Left on the GPU: parameters, data, the last step's gradients and a few scalars
        # (512 bytes each); no cuBLAS workspace (33 MB a handle on an H200), nothing cached.
        assert torch.cuda.memory_allocated(gpu) <= resident + grads + 64 * 2**10
        # What torch still reserves is the rest of segments that hold live tensors, which
        # no allocator can hand back; a wholly free segment would be cache kept.
        segments = torch.cuda.memory_snapshot()
        assert [s["total_size"] for s in segments if s["allocated_size"] == 0] == []


@needs_data
@pytest.mark.slow
def test_clients_on_logical_gpus_offload_between_slots_in_a_real_ring(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        *LIGHT,
        "clients.count=3",
        "experiment.rounds=2",
        "clients.num_gpus=0.25",
        "clients.offload_idle=true",
        "clients.offload_parameters_mb=0",  # parameters wait on the host between calls too
        "algorithm.optimizer=adam",
    )
    experiment = launch(config, tmp_path / "out")
    try:
        ray.get(experiment.coordinator.start_clients.remote())
        summary = wait_and_finalize(experiment, 0.0, progress=False)
        stats = ray.get([handle.stats.remote() for handle in experiment.clients.values()])
    finally:
        shutdown(experiment)
    assert summary["rounds_completed"] == 2
    for facts in stats:
        assert facts["optimizer_state_devices"] == ["cpu"]  # state exists, and waits on host
        assert facts["allocator_reserved_bytes"] == 0
