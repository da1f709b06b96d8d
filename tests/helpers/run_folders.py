"""Run directories for the report's tests, written by the project's own writer
(``output_files.write_outputs``) in the shape ``jobs.train`` leaves them."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ring_actors.coordinator.output_files import write_outputs


def make_run(
    directory: Path,
    method: str = "dfedavg",
    seed: int = 0,
    dataset: str = "fashion-mnist",
    partition: dict[str, Any] | None = None,
    clients: int = 3,
    rounds: int = 12,
    completed: int | None = None,
    stopped: str | None = None,
    bytes_per_hop: float = 400_000.0,
    events: Sequence[dict[str, Any]] = (),
    time_budget_s: float | None = None,
) -> list[dict[str, Any]]:
    """Write a run whose accuracies are drawn from ``seed``; return its metric rows."""
    completed = rounds if completed is None else completed
    partition = partition or {"kind": "shard", "classes_per_client": 2}
    rng = random.Random(f"{method}-{seed}-{dataset}")
    rows = [
        {
            "client": client,
            "round": round_,
            "time_s": 2.0 * round_ + 0.3 * client + rng.random(),
            "local_acc": rng.uniform(0.5, 1.0),
            "global_acc": rng.uniform(0.1, 0.5),
            "loss": rng.uniform(0.1, 2.0),
            "bytes_sent": bytes_per_hop,
        }
        for round_ in range(completed)
        for client in range(clients)
    ]
    hops = 0 if stopped else clients * completed
    config = {
        "experiment": {
            "name": "test",
            "seed": seed,
            "rounds": rounds,
            "time_budget_s": time_budget_s,
        },
        "data": {"dataset": dataset, "partition": partition},
        "clients": {"count": clients},
        "algorithm": {"name": method},
    }
    kinds = [e["kind"] for e in events]
    summary = {
        "algorithm": method,
        "dataset": dataset,
        "clients": clients,
        "rounds_completed": completed,
        "mode": "sync",
        "topology": "ring",
        "bytes_per_hop": bytes_per_hop if hops else 0.0,
        "hops": hops,
        "bytes_total": bytes_per_hop * hops,
        "events": {
            "crashes": kinds.count("crash"),
            "hangs": kinds.count("hang"),
            "bypasses": kinds.count("bypass"),
            "joins": kinds.count("join"),
            "lost_payloads": 0,
        },
        "stopped": stopped,
        "wall_s": 2.0 * completed,
        "mlflow": {"tracking_uri": "sqlite:///unused.db", "run_id": "0"},
    }
    write_outputs(directory, config, summary, rows, list(events))
    return rows


def event(time_s: float, kind: str, client: int, round_: int) -> dict[str, Any]:
    return {"time_s": time_s, "kind": kind, "client": client, "round": round_, "epoch": 1,
            "detail": ""}  # fmt: skip
