"""Detection latency and time to heal for a crash, a hang and the loss of a node.

    python -m benchmarks.failures --kinds crash hang node --repeats 3

One long ring per kind; the driver injects the fault ``--repeats`` times, one victim at a
time, and clocks on its own monotonic clock (same machine as the coordinator):

* detection: from the fault until the coordinator bypasses the victim(s) (the epoch bumps
  and the live set shrinks);
* heal: from the fault until every survivor has finished a round it started after the fault.

crash = ``ray.kill`` of the client's actor; hang = SIGSTOP of its process (heartbeats stop
too); node = ``ray.cluster_utils.Cluster.remove_node`` of a worker node hosting two clients.
Prints medians and writes every sample to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from ring_actors.config import load_config
from ring_actors.coordinator.progress import Progress
from ring_actors.runtime.driver import launch, shutdown
from ring_actors.runtime.experiment import Experiment

POLL_S = 0.02


def progress(experiment: Experiment) -> Progress:
    return ray.get(experiment.coordinator.progress.remote())


def wait_until(experiment: Experiment, done, timeout_s: float = 300.0) -> tuple[float, Progress]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = progress(experiment)
        if done(state):
            return time.monotonic(), state
        time.sleep(POLL_S)
    raise TimeoutError("the ring did not get there in time")


def measure(experiment: Experiment, inject, lost: int) -> dict[str, float]:
    """Inject one fault and clock its detection and the healing of the ring."""
    before = progress(experiment)
    t0 = time.monotonic()
    inject()
    detected, state = wait_until(experiment, lambda s: s.live <= before.live - lost)
    # Every survivor finishes a round that it began after the fault.
    target = before.newest + 1
    healed, _ = wait_until(experiment, lambda s: s.round > target)
    return {"detection_s": detected - t0, "heal_s": healed - t0, "epoch": state.epoch}


def run_kind(kind: str, repeats: int, args: argparse.Namespace, workdir: Path) -> list[dict]:
    clients = 2 * (repeats + 1) if kind == "node" else repeats + 3
    overrides = [
        f"experiment.name=failures-{kind}",
        "experiment.rounds=1000",  # long enough; the benchmark stops it
        "data.dataset=fashion-mnist",
        "data.max_train_per_client=200",
        f"clients.count={clients}",
        "clients.num_cpus=0.25",
        "algorithm.name=dfedavg",
        "eval.every=1000",
        "eval.global_max_samples=200",
        f"schedule.hop_timeout_s={args.hop_timeout}",
        f"schedule.heartbeat_s={args.heartbeat}",
        f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}",
    ]
    cluster = None
    if kind == "node":
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        workers = [cluster.add_node(num_cpus=1) for _ in range(repeats + 1)]
        overrides += [f"ray.address={cluster.address}", "clients.placement=spread"]
    config = load_config(None, overrides)
    experiment = launch(config, workdir / kind)
    samples = []
    try:
        ray.get(experiment.coordinator.start_clients.remote())
        wait_until(experiment, lambda s: s.round >= 2)
        victims = sorted(experiment.placement)
        stopped = []
        for repeat in range(repeats):
            if kind == "node":
                nodes = Counter(f.node_id for f in experiment.placement.values())
                node_id = sorted(nodes)[repeat]
                node = next(w for w in workers if w.node_id == node_id)
                sample = measure(experiment, lambda n=node: cluster.remove_node(n), nodes[node_id])
            elif kind == "crash":
                handle = experiment.clients[victims[repeat]]
                sample = measure(experiment, lambda h=handle: ray.kill(h, no_restart=True), 1)
            else:
                pid = experiment.placement[victims[repeat]].pid
                stopped.append(pid)
                sample = measure(experiment, lambda p=pid: os.kill(p, signal.SIGSTOP), 1)
            samples.append({"kind": kind, "repeat": repeat, **sample})
            print(json.dumps(samples[-1]), flush=True)
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    finally:
        shutdown(experiment)
        if cluster is not None:
            ray.shutdown()
            cluster.shutdown()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=["crash", "hang", "node"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hop-timeout", type=float, default=5.0)
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/failures.json"))
    args = parser.parse_args()
    samples = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            if kind != "node" and not ray.is_initialized():
                ray.init(log_to_driver=False, configure_logging=False)
            if kind == "node" and ray.is_initialized():
                ray.shutdown()
            samples += run_kind(kind, args.repeats, args, Path(tmp))
    medians = {
        kind: {
            key: statistics.median(s[key] for s in samples if s.kind == kind)
            for key in ("detection_s", "heal_s")
        }
        for kind in args.kinds
    }
    settings = {"hop_timeout_s": args.hop_timeout, "heartbeat_s": args.heartbeat}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"settings": settings, "medians": medians, "samples": samples}, indent=2)
    )
    print(json.dumps({"settings": settings, "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
