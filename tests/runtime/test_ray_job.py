"""A Ray Job on a local multi-node cluster: the checkout is shipped with the job's working
directory (``ray job submit --working-dir .``), its driver runs there, clients on every node."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from tests.conftest import DATA_ROOT, UNTRACKED, fresh_store, needs_data

pytestmark = [needs_data, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def cluster_with_dashboard():
    port = free_port()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,  # the job's driver runs on the head
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": port,
            # Each node's agent serves the jobs; its default port (52365) is taken by any
            # other Ray on this machine, another worker's too.
            "dashboard_agent_listen_port": free_port(),
        },
    )
    node_dirs = [tempfile.mkdtemp(prefix=f"ra-node{n}-", dir="/tmp") for n in range(2)]
    for node_dir in node_dirs:
        # A directory of its own per node, as separate machines have: nodes that share one
        # would clean up each other's copy of the job's working directory.
        cluster.add_node(
            num_cpus=1,
            temp_dir=node_dir,  # short: Ray's socket paths under it stay within 107 bytes
            dashboard_agent_listen_port=free_port(),
        )
    yield cluster, f"http://127.0.0.1:{port}"
    ray.shutdown()
    cluster.shutdown()
    for node_dir in node_dirs:
        shutil.rmtree(node_dir, ignore_errors=True)


def test_a_job_submitted_with_the_checkout_as_working_dir_runs_on_every_node(
    cluster_with_dashboard, tmp_path
):
    from ray.job_submission import JobStatus, JobSubmissionClient

    cluster, dashboard = cluster_with_dashboard
    out = tmp_path / "run"
    config = "jobs/configs/ring8-drdfl.yaml"  # full Fashion-MNIST, sync, no faults; in the copy
    overrides = [
        "experiment.rounds=2",
        "clients.count=3",
        "clients.num_cpus=0.5",
        "clients.placement=spread",
        "data.max_train_per_client=150",
        f"data.root={Path(DATA_ROOT).resolve()}",  # the job runs in a copy of the checkout
        "eval.global_max_samples=200",
        "eval.local_max_samples=200",
        "algorithm.name=dfedavg",
        # Its cluster by name: a head started without `ray start` leaves Ray's job supervisor
        # no address file, and it hands the driver any cluster it finds on this machine
        # (another test's, beside it, about half the time).
        f"ray.address={cluster.address}",
        f"tracking.uri={fresh_store(tmp_path / 'mlflow.db')}",
        *UNTRACKED,
    ]
    entrypoint = " ".join(
        [sys.executable, "-m jobs.train --no-progress", "--config", config, "--output-dir"]
        + [str(out), *overrides]
    )
    deadline = time.monotonic() + 120
    while True:  # the job server, then its agent, answer seconds after the head is up
        try:
            client = JobSubmissionClient(dashboard)
            job = client.submit_job(
                entrypoint=entrypoint,
                runtime_env={"working_dir": str(REPO)},  # .gitignore keeps .venv and runs/ out
            )
            break
        except Exception:  # noqa: BLE001 - not listening, or no agent, yet
            assert time.monotonic() < deadline
            time.sleep(1)
    deadline = time.monotonic() + 600
    while (status := client.get_job_status(job)) not in JobStatus.__members__.values() or not (
        status.is_terminal()
    ):
        assert time.monotonic() < deadline, client.get_job_logs(job)[-3000:]
        time.sleep(2)
    logs = client.get_job_logs(job)
    # Why Ray ended it (the entrypoint's exit code, or its supervisor's death) beside the log.
    assert status == JobStatus.SUCCEEDED, f"{client.get_job_info(job).message}\n{logs[-3000:]}"
    assert "cluster: 3 node(s)" in logs
    nodes = [line for line in logs.splitlines() if line.startswith("node ")]
    assert len(nodes) >= 2, logs[-3000:]  # the clients were spread over the worker nodes
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and summary["events"]["lost_payloads"] == 0
