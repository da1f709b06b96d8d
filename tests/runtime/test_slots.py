"""Compute slots on a real Ray: the limit holds, the oldest round goes first, a dead holder's
slot comes back, a slot not granted in time is given up, and rings whose laps and joins need
more clients than slots still finish."""

from __future__ import annotations

import time

import pytest
import ray

from ring_actors.runtime.driver import launch, shutdown, wait_and_finalize
from ring_actors.runtime.slot_math import slot_limit, threads_per_slot
from ring_actors.runtime.slots import SlotPool, Slots
from tests.conftest import needs_data, small_config

POOL = ray.remote(SlotPool)


@ray.remote(num_cpus=0)
class Holder:
    """Takes a slot through a client's ``Slots`` and keeps it, as a long training step does."""

    def take(self, pool_name: str, lease_s: float) -> None:
        self.slots = Slots(pool_name, 99, wait_s=60.0, lease_s=lease_s)
        self.held = self.slots.hold(0)
        self.held.__enter__()


def test_auto_limit_is_cores_or_gpus_times_slots_per_gpu():
    node = {"CPU": 8.0, "GPU": 2.0}
    assert slot_limit("auto", 3, 0.0, node) == 8
    assert slot_limit("auto", 3, 0.1, node) == 6
    assert slot_limit("auto", 3, 0.1, {"CPU": 4.0}) == 4  # GPU clients on a CPU-only node
    assert slot_limit(5, 3, 0.1, node) == 5
    assert threads_per_slot(2, {"CPU": 8.0}) == 4
    assert threads_per_slot(16, {"CPU": 8.0}) == 1


@pytest.mark.slow
def test_never_more_than_the_limit_and_oldest_round_first(ray_local):
    pool = POOL.remote(2)
    rounds = {0: 3, 1: 1, 2: 4, 3: 2, 4: 0}
    first = [pool.acquire.remote(c, 5) for c in (10, 11)]
    tokens = ray.get(first)
    waiting = {c: pool.acquire.remote(c, r) for c, r in rounds.items()}
    ready, _ = ray.wait(list(waiting.values()), num_returns=len(waiting), timeout=1.0)
    assert ready == []
    assert ray.get(pool.status.remote())["held"] == 2

    order = []
    for token in tokens:  # each release admits exactly one waiter: the lowest round
        ray.get(pool.release.remote(token))
        ready, _ = ray.wait([w for c, w in waiting.items() if c not in order], timeout=5.0)
        (client,) = [c for c, w in waiting.items() if w in ready]
        order.append(client)
        tokens.append(ray.get(waiting[client]))
        if len(order) == len(rounds):
            break
    assert order == [4, 1, 3, 0, 2]
    status = ray.get(pool.status.remote())
    assert status["most_held"] == 2 and status["held"] == 2 and status["waiting"] == 0
    ray.kill(pool)


@pytest.mark.slow
def test_a_holder_renews_its_slot_and_one_that_dies_gives_it_back(ray_local):
    pool = POOL.options(name="slots-under-test").remote(1, lease_s=1.0)
    holder = Holder.remote()
    ray.get(holder.take.remote("slots-under-test", 1.0))
    waiter = pool.acquire.remote(1, 0)
    assert ray.wait([waiter], timeout=3.0)[0] == []  # three leases: renewed, still held
    ray.kill(holder)
    assert ray.wait([waiter], timeout=10.0)[0] == [waiter]
    assert ray.get(pool.status.remote())["reclaimed"] == 1
    ray.kill(pool)


@pytest.mark.slow
def test_a_restarted_client_asking_again_replaces_its_old_slot(ray_local):
    pool = POOL.remote(1)
    ray.get(pool.acquire.remote(7, 3))
    assert ray.wait([pool.acquire.remote(7, 3)], timeout=5.0)[0]
    assert ray.get(pool.status.remote())["held"] == 1
    ray.kill(pool)


@pytest.mark.slow
def test_a_slot_not_granted_in_time_is_computed_without_and_the_request_withdrawn(ray_local):
    """A pool that grants nothing (its one slot held for good) holds no client past its
    wait: the client computes without a slot, and the pool does not grant it one later."""
    pool = POOL.options(name="slots-held-for-good").remote(1)
    holder = Holder.remote()
    ray.get(holder.take.remote("slots-held-for-good", 10.0))
    slots = Slots("slots-held-for-good", 5, wait_s=1.0)
    with slots.hold(0):
        assert slots.token is None  # computing, without a slot
    assert 1.0 <= slots.waited_s < 5.0
    deadline = time.monotonic() + 5.0
    while ray.get(pool.status.remote())["waiting"] and time.monotonic() < deadline:
        time.sleep(0.05)
    status = ray.get(pool.status.remote())
    assert status["waiting"] == 0 and status["held"] == 1 and status["granted"] == 1
    ray.kill(holder)
    ray.kill(pool)


@needs_data
@pytest.mark.slow
def test_laps_and_a_join_finish_with_one_slot_for_the_whole_ring(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        "algorithm.name=fedavg",
        "clients.concurrency=1",
        "clients.num_cpus=0.4",
        "experiment.rounds=4",
        "faults=[{at_round: 2, join: 1}]",
    )
    experiment = launch(config, tmp_path / "out")
    try:
        started = time.monotonic()
        ray.get(experiment.coordinator.start_clients.remote())
        summary = wait_and_finalize(experiment, started, progress=False)
        (pool,) = experiment.slot_pools.values()
        status = ray.get(pool.status.remote())
    finally:
        shutdown(experiment)
    assert summary["rounds_completed"] == 4
    assert summary["events"]["joins"] == 1 and summary["events"]["lost_payloads"] == 0
    assert status["most_held"] == 1
    # A slot to train and one to evaluate, each round, for 4 clients x 4 rounds and the
    # joiner's rounds 2 and 3 (at least; a joiner may start later than asked).
    assert 2 * (4 * 4 + 1) <= status["granted"] <= 2 * (4 * 4 + 2)
    # One shared model over ten classes after four short rounds: well above chance (0.1).
    assert summary["global_acc"]["mean"] > 0.2


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "limit", "threads"),
    [
        (("clients.num_gpus=0.25",), 2, 1),  # 1 logical GPU x 2 slots; 2 cores / 2 slots
        (("clients.concurrency=1",), 1, 2),  # one slot takes both cores
    ],
)
def test_slots_and_torch_threads_follow_the_node(ray_local, tmp_path, overrides, limit, threads):
    config = small_config(tmp_path, "clients.num_cpus=0.25", *overrides)
    experiment = launch(config, tmp_path / "out")
    try:
        (pool,) = experiment.slot_pools.values()
        assert ray.get(pool.status.remote())["limit"] == limit
        assert {facts.torch_threads for facts in experiment.placement.values()} == {threads}
    finally:
        shutdown(experiment)
