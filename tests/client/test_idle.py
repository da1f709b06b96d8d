"""An idle client holds almost nothing on its device: its optimiser state waits on the host
and its allocator's cache is returned, and the state comes back bit for bit."""

from __future__ import annotations

import pytest
import ray
import torch

from ring_actors.algorithms import ALGORITHMS, TaskSpec
from ring_actors.client.core import Ungated
from ring_actors.client.idle import IdleRelease, move_optimizer_state, optimizers_of, state_devices
from ring_actors.config import load_config
from ring_actors.data.images import LabelledImages
from ring_actors.runtime.driver import launch, shutdown, wait_and_finalize
from tests.algorithms.synthetic import separable
from tests.conftest import needs_data, small_config

CPU = torch.device("cpu")
GPU_ONLY = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def method(name: str, device: torch.device, *overrides: str):
    options = load_config(None, [f"algorithm.name={name}", "algorithm.backbone=cnn", *overrides])
    task = TaskSpec(4, (1, 28, 28), 1, 32, device, seed=3, shared_seed=0)
    return ALGORITHMS[name](options.algorithm.options, task)


def trained(algorithm, offload: bool, rounds: int = 3):
    cpu = separable(n=96)
    data = LabelledImages(*(t.to(algorithm.device) for t in (cpu.x, cpu.y, cpu.mean, cpu.std)))
    idle = IdleRelease(Ungated(), lambda: algorithm, algorithm.device, offload)
    for _ in range(rounds):
        with idle.hold(0):
            algorithm.train_round(data)
            assert state_devices(optimizers_of(algorithm)) <= {str(algorithm.device)}
        if offload:
            assert state_devices(optimizers_of(algorithm)) == {"cpu"}
    return algorithm


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
        # Left on the GPU: parameters, data and the last step's gradients; nothing cached.
        assert torch.cuda.memory_allocated(gpu) <= resident + grads
        assert torch.cuda.memory_reserved(gpu) - torch.cuda.memory_allocated(gpu) < 2 * 2**20


@needs_data
@pytest.mark.slow
def test_clients_on_logical_gpus_offload_between_slots_in_a_real_ring(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        "clients.count=3",
        "experiment.rounds=2",
        "clients.num_gpus=0.25",
        "clients.offload_idle=true",
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
