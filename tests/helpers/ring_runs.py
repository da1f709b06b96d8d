"""A method learning on a real ring: the client and coordinator cores in one process, so a
method's test runs the round loop, pushes and laps a cluster runs, not a loop of its own."""

from __future__ import annotations

import statistics
from pathlib import Path

from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.in_process import InProcessRing
from tests.helpers.fashion_mnist_clients import Clients


def learn_on_ring(
    name: str, clients: Clients, rounds: int, output_dir: Path
) -> tuple[list[float], list[float], InProcessRing]:
    """``rounds`` sync rounds of method ``name`` (its default options) over 10-class
    28x28 clients: the mean training loss of each round, each client's final Local-T, and
    the ring, whose clients' methods a test can inspect."""
    config = config_from_dict(
        {
            "experiment": {"name": f"learn-{name}", "rounds": rounds},
            "clients": {"count": len(clients), "batch_size": 20},
            "algorithm": {"name": name},
            "schedule": {"mode": "sync"},
        }
    )
    data = [ClientData(train=train, local_test=test, global_test=test) for train, test in clients]
    ring = InProcessRing(config, data, 10, (1, 28, 28), output_dir)
    summary = ring.run(timeout_s=120)
    assert summary["rounds_completed"] == rounds and summary["events"]["lost_payloads"] == 0
    rows = ring.coordinator.rows
    losses = [statistics.fmean(r["loss"] for r in rows if r["round"] == k) for k in range(rounds)]
    final = [
        r["local_acc"] for r in sorted(rows, key=lambda r: r["round"]) if r["round"] == rounds - 1
    ]
    return losses, final, ring
