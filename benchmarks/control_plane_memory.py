"""What the control plane's processes hold: the coordinator's and the slot pool's memory in a
tiny real run, beside a client's, read from ``/proc/<pid>/smaps_rollup`` of the Ray workers
(found by their process titles, so the same script measures any version of the package)::

    python -m benchmarks.control_plane_memory --json benchmarks/results/control_plane_memory.json

USS is a process's private pages (what ending it frees), PSS its private pages plus its share
of the pages it shares (its fair part of the node's memory).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import ray

from ring_actors.config import config_from_dict
from ring_actors.runtime.driver import launch, shutdown, wait_and_finalize

ROLES = {"coordinator": "ray::Coordinator", "slot pool": "ray::SlotPool", "client": "ray::Client"}


def smaps_mb(pid: int) -> dict[str, float]:
    """USS, PSS and RSS of one process, in MB."""
    fields: dict[str, float] = {}
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    uss = fields.get("Private_Clean", 0.0) + fields.get("Private_Dirty", 0.0)
    return {"uss_mb": round(uss, 1), "pss_mb": fields["Pss"], "rss_mb": fields["Rss"]}


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        pid = _parent(pid)
        if pid == ancestor:
            return True
    return False


def processes_by_role() -> dict[str, list[int]]:
    """The Ray workers this driver's Ray started, by the title Ray gives an actor's process
    (other Ray instances on the machine are not counted)."""
    found: dict[str, list[int]] = {role: [] for role in ROLES}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            role = next((r for r, prefix in ROLES.items() if title.startswith(prefix)), None)
            if role is not None and _descends_from(int(entry.name), os.getpid()):
                found[role].append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # the process ended while it was read
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("RING_ACTORS_DATA"))
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--label", default="this version")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="control-plane-"))
    base = {
        "experiment": {"name": "control-plane", "rounds": 2},
        "data": {
            "dataset": "fashion-mnist",
            "root": args.data,
            "download": False,
            "max_train_per_client": 300,
        },
        "clients": {"count": args.clients, "num_cpus": 0.5, "batch_size": 32},
        "algorithm": {"name": "drdfl", "backbone": "cnn"},
        "eval": {"global_max_samples": 500},
        "tracking": {"uri": f"sqlite:///{work / 'mlflow.db'}"},
    }
    config = config_from_dict(base)
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    experiment = launch(config, work / "out")
    try:
        ray.get(experiment.coordinator.start_clients.remote())
        summary = wait_and_finalize(experiment, 0.0, progress=False)
        roles = processes_by_role()  # after the run: MLflow written, every slot given back
        memory = {role: [smaps_mb(pid) for pid in pids] for role, pids in roles.items()}
    finally:
        shutdown(experiment)
        ray.shutdown()
    result = {
        "label": args.label,
        "rounds_completed": summary["rounds_completed"],
        "clients": args.clients,
        "memory": memory,
        "load": os.getloadavg(),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with args.json.open("a") as handle:
            handle.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
