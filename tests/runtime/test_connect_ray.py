"""A run given no address starts a Ray of its own, whatever else runs on the machine."""

from __future__ import annotations

import pytest
import ray
from ray.cluster_utils import Cluster

from ring_actors.runtime.driver import connect_ray

pytestmark = pytest.mark.slow


def test_no_address_starts_a_local_ray_beside_a_cluster_already_running(no_ray, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    other = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})  # another user's
    try:
        assert connect_ray(None, False, ()) is True
        assert ray.get_runtime_context().gcs_address != other.address
        assert ray.cluster_resources().get("CPU", 0) > 0  # not the CPU-less head's
    finally:
        ray.shutdown()
        other.shutdown()
