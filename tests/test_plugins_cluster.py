"""A method from a folder outside the package, shipped by ``ray.py_modules`` to a local
multi-node cluster (the driver connects; the workers get the code with the job)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from ring_actors.runtime.driver import run_experiment
from tests.conftest import needs_data, small_config

pytestmark = [needs_data, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fedprox.py"


@pytest.fixture
def cluster():
    ray.shutdown()  # an earlier module's shared Ray: this module's driver joins the cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_a_method_from_outside_the_package_runs_on_every_node(cluster, tmp_path, monkeypatch):
    package = tmp_path / "labmethods"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(EXAMPLE, package / "prox.py")
    monkeypatch.syspath_prepend(str(tmp_path))  # the driver imports it from here
    config = small_config(
        tmp_path,
        f"ray.address={cluster.address}",
        f"ray.py_modules=[{package}]",
        "experiment.rounds=2",
        "clients.count=2",
        "clients.num_cpus=0.5",
        "algorithm.name=labmethods.prox:FedProx",
        "algorithm.mu=0.05",
    )
    summary = run_experiment(config, tmp_path / "out", progress=False)
    assert summary["algorithm"] == "labmethods.prox:FedProx"
    assert summary["rounds_completed"] == 2 and summary["events"]["lost_payloads"] == 0
