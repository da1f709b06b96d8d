"""One client's training epoch under glibc's default thresholds and under the run's allocator
settings (``ring_actors/runtime/worker_env.py``): seconds, page faults, and resident memory
before and after the slot's memory is given back.

    RING_ACTORS_DATA=../shared/datasets python -m benchmarks.allocator --repeats 2

Each run is a fresh process (glibc reads its settings at start) that builds client 0 of the
``benchmarks.vs_flower`` workload (Fashion-MNIST shards, the FedAvg CNN, SGD with momentum,
batch 64, one torch thread), trains it on a thread of its own as a ring client does, and gives
its memory back after each epoch as a client does with its slot. Both settings keep glibc to
two arenas, as every actor of a run does; the epochs after the first are reported. Settings
alternate, ``--repeats`` times each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, RESULTS, write_json

SETTINGS = {
    "two arenas, glibc's thresholds": {"MALLOC_ARENA_MAX": "2"},
    "the run's settings": None,  # ring_actors.runtime.worker_env.ALLOCATOR_ENV
}


def resident_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(epochs: int, max_train: int, data_root: str | None) -> list[dict[str, float]]:
    """Train client 0 ``epochs`` times on a thread; what each epoch cost."""
    import torch

    from benchmarks.vs_flower import fedavg_client, fedavg_workload
    from ring_actors.runtime.worker_env import release_freed_memory

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="allocator-") as tmp:
        spec = fedavg_workload(8, epochs, max_train, data_root, 1, Path(tmp))
        algorithm, train = fedavg_client(spec, 0)
    epochs_run: list[dict[str, float]] = []

    def run() -> None:
        for _ in range(epochs):
            faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            started = time.perf_counter()
            algorithm.train_round(train)
            seconds = time.perf_counter() - started
            faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults
            computing = resident_mb()
            release_freed_memory()
            epochs_run.append(
                {"s": seconds, "faults": faults, "rss_mb": computing, "idle_rss_mb": resident_mb()}
            )

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return epochs_run


def run_setting(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from ring_actors.runtime.worker_env import ALLOCATOR_ENV

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env |= SETTINGS[name] or ALLOCATOR_ENV
    command = [sys.executable, "-m", "benchmarks.allocator", "--child"]
    command += ["--epochs", str(args.epochs), "--max-train-per-client", str(args.max_train)]
    if args.data_root:
        command += ["--data-root", args.data_root]
    out = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=True)
    epochs = json.loads(out.stdout.strip().splitlines()[-1])
    later = epochs[1:]
    return {
        "setting": name,
        "env": {k: v for k, v in env.items() if k.startswith("MALLOC_")},
        "epochs": epochs,
        "s_per_epoch": [round(e["s"], 2) for e in later],
        "faults_per_epoch": [e["faults"] for e in later],
        "idle_rss_mb": [round(e["idle_rss_mb"], 1) for e in later],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.allocator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-train-per-client", dest="max_train", type=int, default=7500)
    parser.add_argument("--data-root", default=os.environ.get("RING_ACTORS_DATA"))
    parser.add_argument("--json", type=Path, default=RESULTS / "allocator.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args.epochs, args.max_train, args.data_root)))
        return 0
    command = " ".join(["python -m benchmarks.allocator", *(argv or sys.argv[1:])])
    runs = []
    for repeat in range(args.repeats):
        for name in SETTINGS:
            result = {"repeat": repeat, "load_before": os.getloadavg()[0]}
            result |= run_setting(name, args)
            brief = {k: result[k] for k in ("s_per_epoch", "faults_per_epoch", "idle_rss_mb")}
            print(f"{name} (repeat {repeat}): {json.dumps(brief)}", flush=True)
            runs.append(result)
            write_json(args.json, {"command": command, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
