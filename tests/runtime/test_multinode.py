"""A ring spread over a three-node Ray cluster on one machine; losing a node heals the ring;
laps summed by the engine across the nodes."""

from __future__ import annotations

import time
from collections import Counter

import pyarrow.parquet as pq
import pytest
import ray
from ray.cluster_utils import Cluster

from ring_actors.runtime.driver import launch, shutdown, wait_and_finalize
from ring_actors.runtime.worker_env import ALLOCATOR_ENV, actor_runtime_env
from tests.conftest import LIGHT, needs_data, small_config

pytestmark = [needs_data, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster():
    """A head node that only hosts the driver and coordinator, and three worker nodes."""
    ray.shutdown()  # an earlier module's shared Ray: this module's driver joins the cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    workers = [cluster.add_node(num_cpus=1) for _ in range(3)]
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()


def test_clients_spread_over_nodes_and_a_lost_node_is_bypassed(cluster, tmp_path):
    cluster_handle, workers = cluster
    # Nodes started elsewhere: the allocator settings go with every actor.
    assert actor_runtime_env() == {"env_vars": ALLOCATOR_ENV}
    config = small_config(
        tmp_path,
        *LIGHT,
        "experiment.rounds=5",
        "clients.num_cpus=0.5",
        "clients.placement=spread",
        "schedule.hop_timeout_s=10",
        "schedule.heartbeat_s=0.5",
    )
    experiment = launch(config, tmp_path / "out")
    try:
        nodes = {i: facts.node_id for i, facts in experiment.placement.items()}
        per_node = Counter(nodes.values())
        assert len(per_node) >= 2  # spread, not packed on one node
        assert ray.get_runtime_context().get_node_id() not in per_node  # head has no CPUs
        victim_id, _ = per_node.most_common(1)[0]
        lost = sorted(i for i, node in nodes.items() if node == victim_id)
        started = time.monotonic()
        ray.get(experiment.coordinator.start_clients.remote())
        while ray.get(experiment.coordinator.progress.remote()).rounds_done < 8:
            time.sleep(0.2)
        victim = next(w for w in workers if w.node_id == victim_id)
        cluster_handle.remove_node(victim)
        summary = wait_and_finalize(experiment, started, progress=False)
    finally:
        shutdown(experiment)
    survivors = [i for i in range(4) if i not in lost]
    assert summary["ring_order"] == survivors
    assert summary["events"]["crashes"] == len(lost)
    assert summary["events"]["bypasses"] == len(lost)
    assert summary["events"]["lost_payloads"] == 0
    assert summary["rounds_completed"] == 5


def test_laps_are_summed_by_the_engine_across_nodes(cluster, tmp_path):
    """FedAvg's laps over gloo among clients on different nodes, the group found through
    the cluster's key-value store: every round, each member applied one total the engine
    summed (a lap by the engine is 2(N-1) steps of one buffer; a token lap, two sends)."""
    config = small_config(
        tmp_path,
        *LIGHT,
        "algorithm.name=fedavg",
        "experiment.rounds=3",
        "clients.num_cpus=0.5",
        "clients.placement=spread",
        "schedule.hop_timeout_s=10",
        "schedule.lap_engine=collective",
    )
    experiment = launch(config, tmp_path / "out")
    try:
        nodes = {facts.node_id for facts in experiment.placement.values()}
        started = time.monotonic()
        ray.get(experiment.coordinator.start_clients.remote())
        summary = wait_and_finalize(experiment, started, progress=False)
    finally:
        shutdown(experiment)
    assert len(nodes) >= 2 and summary["rounds_completed"] == 3
    rows = pq.read_table(tmp_path / "out" / "metrics.parquet").to_pylist()
    events = pq.read_table(tmp_path / "out" / "events.parquet").to_pylist()
    assert not [e for e in events if e["kind"] == "lap_engine_fallback"], events
    assert any(e["kind"] == "lap_group_formed" for e in events)
    for round_ in range(3):
        applied = [r for r in rows if r["round"] == round_]
        assert len(applied) == 4 and len({r["lap_average_checksum"] for r in applied}) == 1
    assert all(r["hops"] == 2 * (4 - 1) for r in rows), [r["hops"] for r in rows]
