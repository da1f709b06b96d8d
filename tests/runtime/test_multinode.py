"""A ring spread over a three-node Ray cluster on one machine; losing a node heals the ring."""

from __future__ import annotations

import time
from collections import Counter

import pytest
import ray
from ray.cluster_utils import Cluster

from ring_actors.runtime.driver import launch, shutdown, wait_and_finalize
from tests.conftest import needs_data, small_config

pytestmark = [needs_data, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster():
    """A head node that only hosts the driver and coordinator, and three worker nodes."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    workers = [cluster.add_node(num_cpus=1) for _ in range(3)]
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()


def test_clients_spread_over_nodes_and_a_lost_node_is_bypassed(cluster, tmp_path):
    cluster_handle, workers = cluster
    config = small_config(
        tmp_path,
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
