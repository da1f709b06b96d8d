"""Does a process per client cost training speed by itself? The vs_flower workload's training,
with no Ray and no ring: N clients on C cores, at most C training at once, arranged three ways.

    RING_ACTORS_DATA=../shared/datasets python -m benchmarks.resident \\
        --clients 8 --max-train-per-client 7500 --rounds 3 --repeats 2

* ``per_core``: C processes, each training N/C clients in turn (how Flower's actors run);
* ``per_client``: N resident processes, one client each, taking turns for C compute slots
  (how the ring's client actors run);
* ``per_client_pinned``: the same, each slot a core that its holder pins itself to while it
  trains (``os.sched_setaffinity``), so a training process never migrates between cores;
* ``ray_actor``: N Ray actors, one client each, started as the ring starts its clients (a
  fraction of a CPU each, the same allocator settings), the driver keeping C of them training;
* ``ray_actor_thread``: the same, each actor training on a thread of its own, as a ring
  client's round loop does.

Each client trains one local epoch of ring-actors' own ``FedAvg`` per round, built exactly as
``benchmarks.vs_flower`` builds it; there is no averaging. A round ends at a barrier every
process waits at. The figure is the median training time of a client-round after the first
round; arrangements alternate, ``--repeats`` times each.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, write_json
from benchmarks.vs_flower import fedavg_client, fedavg_workload

ARRANGEMENTS = (
    "per_core",
    "per_client",
    "per_client_pinned",
    "ray_actor",
    "ray_actor_thread",
)


class Trainer:
    """One client in a Ray actor: its data and method built once, a round's training on call."""

    def __init__(self, spec: dict[str, Any], client: int, on_thread: bool) -> None:
        import torch

        torch.set_num_threads(1)
        self.algorithm, self.train = fedavg_client(spec, client)
        self.on_thread = on_thread

    def train_round(self) -> float:
        """Seconds one local epoch took (timed where it ran)."""
        timed: list[float] = []

        def train() -> None:
            started = time.perf_counter()
            self.algorithm.train_round(self.train)
            timed.append(time.perf_counter() - started)

        if self.on_thread:
            thread = threading.Thread(target=train)
            thread.start()
            thread.join()
        else:
            train()
        return timed[0]


def worker(
    spec: dict[str, Any], clients: list[int], pin: bool, slots: Any, barrier: Any, out: Any
) -> None:
    """Train ``clients`` in turn every round, each client-round inside one compute slot."""
    import torch

    torch.set_num_threads(1)
    built = []
    for client in clients:
        built.append((client, *fedavg_client(spec, client)))
    everywhere = os.sched_getaffinity(0)
    barrier.wait()
    for round_ in range(spec["rounds"]):
        for client, algorithm, train in built:
            slot = slots.get()
            if pin:
                os.sched_setaffinity(0, {slot})
            started = time.perf_counter()
            algorithm.train_round(train)
            train_s = time.perf_counter() - started
            if pin:
                os.sched_setaffinity(0, everywhere)
            slots.put(slot)
            out.put({"round": round_, "client": client, "train_s": train_s})
        barrier.wait()


def run_ray(spec: dict[str, Any], on_thread: bool) -> list[dict[str, Any]]:
    """Every client in a Ray actor of its own; at most ``cores`` train at once."""
    import ray

    from ring_actors.runtime.worker_env import actor_runtime_env

    n, cores = spec["clients"], spec["cores"]
    ray.init(address="local", num_cpus=cores, include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=cores / n, runtime_env=actor_runtime_env())(Trainer)
        actors = [remote.remote(spec, c, on_thread) for c in range(n)]
        ray.get([a.__ray_ready__.remote() for a in actors])
        records = []
        for round_ in range(spec["rounds"]):
            queue, running = list(range(n)), {}
            while queue or running:
                while queue and len(running) < cores:
                    client = queue.pop(0)
                    running[actors[client].train_round.remote()] = client
                [done], _ = ray.wait(list(running))
                client = running.pop(done)
                records.append({"round": round_, "client": client, "train_s": ray.get(done)})
        return records
    finally:
        ray.shutdown()


def run(spec: dict[str, Any], arrangement: str) -> dict[str, Any]:
    """One run of an arrangement: every client-round's training time, and the wall time."""
    if arrangement.startswith("ray_actor"):
        started = time.monotonic()
        records = run_ray(spec, on_thread=arrangement == "ray_actor_thread")
        return summary(arrangement, spec["clients"], records, started)
    context = mp.get_context("spawn")
    n, cores = spec["clients"], spec["cores"]
    groups = (
        [[c] for c in range(n)]
        if arrangement != "per_core"
        else [list(range(n))[k::cores] for k in range(cores)]
    )
    slots, out = context.Queue(), context.Queue()
    for core in sorted(os.sched_getaffinity(0))[:cores]:
        slots.put(core)
    barrier = context.Barrier(len(groups))
    pin = arrangement == "per_client_pinned"
    processes = [
        context.Process(target=worker, args=(spec, group, pin, slots, barrier, out))
        for group in groups
    ]
    started = time.monotonic()
    for process in processes:
        process.start()
    records = [out.get() for _ in range(n * spec["rounds"])]
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"{arrangement}: a worker exited with {process.exitcode}")
    return summary(arrangement, len(groups), records, started)


def summary(
    arrangement: str, processes: int, records: list[dict[str, Any]], started: float
) -> dict[str, Any]:
    later = [r["train_s"] for r in records if r["round"] > 0]
    return {
        "arrangement": arrangement,
        "processes": processes,
        "train_s_median": statistics.median(later),
        "train_s_mean": statistics.fmean(later),
        "wall_s": time.monotonic() - started,
        "records": records,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.resident",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-train-per-client", type=int, default=7500)
    parser.add_argument("--arrangements", nargs="+", choices=ARRANGEMENTS, default=ARRANGEMENTS)
    parser.add_argument("--data-root", default=os.environ.get("RING_ACTORS_DATA"))
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--json", type=Path, default=RESULTS / "resident.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join(["python -m benchmarks.resident", *(argv or sys.argv[1:])])
    with tempfile.TemporaryDirectory(prefix="resident-") as tmp:
        spec = fedavg_workload(
            args.clients,
            args.rounds,
            args.max_train_per_client,
            args.data_root,
            args.cores,
            Path(tmp),
        )
        runs = []
        for repeat in range(args.repeats):
            for arrangement in args.arrangements:
                result = {"repeat": repeat, "load_before": os.getloadavg()[0]}
                result |= run(spec, arrangement)
                brief = {k: result[k] for k in ("processes", "train_s_median", "wall_s")}
                print(f"{arrangement} (repeat {repeat}): {json.dumps(brief)}", flush=True)
                runs.append(result)
                write_json(args.json, {"command": command, "workload": spec, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
