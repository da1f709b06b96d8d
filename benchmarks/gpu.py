"""N clients sharing one GPU: the ring (each client a Ray actor at 1/N of the GPU) against a
plain PyTorch loop that trains the same clients one after another in one process.

    RING_ACTORS_DATA=../shared/datasets python -m benchmarks.gpu --models resnet18 cnn \\
        --clients 8 20 50 100 --rounds 3 --json benchmarks/results/gpu.jsonl

The workload on both sides: CIFAR-10, an IID partition capped at ``--samples`` training images
per client, FedAvg's whole-model average (``algorithm.name=fedavg``) of the chosen backbone
(the paper cells' ResNet-18, or the small CNN), SGD with momentum 0.9, batch 64, one local
epoch per round, each client evaluated on its local test split after every round (the ring
also on 64 Global-T images). Plain keeps every client's model, optimiser and data on the GPU (what a
simulation loop such as PFLlib's does) and trains them in turn; the ring runs them as actors
with ``clients.num_gpus = 1/N``, the slot pool letting ``slots_per_gpu`` compute at once, and
each idle client's optimiser state on the host (``clients.offload_idle``).

``--set`` adds config overrides to the ring's workload (and records them in each row): for
instance ``clients.offload_parameters_mb=null`` keeps every client's parameters on the GPU
between its slots, against the default that parks a large model's on the host.

Each (model, N, side) runs in its own subprocess, so one that runs out of memory ends only
itself; the largest N that ran is reported per model and side. Figures, per run:

* ``s_per_round``: the median round after the first (the ring: the gap between consecutive
  rounds' latest client reports; plain: its loop), ``samples_per_s`` = N x samples / that;
* ``gpu_total_mb``: the most ``nvidia-smi`` saw in use on the GPU during the run, less what
  was in use before it started (every process's CUDA context included);
* the ring's round broken down (``client_*``, medians over client-rounds after the first):
  the client's whole round, its training, its wait for a compute slot and its wait for its
  in-neighbours' pushes (the gather); the rest of the round is its laps, evaluation and
  publishing; and its start-up: ``ray_init_s``, then ``launch_and_end_s`` (placing the
  actors, loading data and building models, and at the end writing the outputs);
* per client: ``context_mb`` (a client process's memory on the GPU less what torch reserved
  in it; plain has one process for all), ``resident_mb`` (what torch holds for the client
  between its slots: parameters, data, and the optimiser state where it stays on the GPU)
  and ``working_mb`` (the most it allocated while training, less the resident part).

Without CUDA it runs on the CPU with the GPU figures left empty: ``tests/benchmarks`` runs
its code that way at tiny sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, markdown_table

MB = 2**20
SAMPLE_S = 0.5
DEFAULT_DATA = os.environ.get("RING_ACTORS_DATA", "")


def overrides(spec: dict[str, Any]) -> list[str]:
    """The ring's config for the workload; the plain loop builds its clients from it too."""
    n, gpu = spec["clients"], spec["cuda"]
    return [
        "experiment.name=gpu",
        f"experiment.rounds={spec['rounds']}",
        "algorithm.name=fedavg",
        f"algorithm.backbone={spec['model']}",
        "algorithm.optimizer=sgd",
        "algorithm.lr=0.01",
        "algorithm.momentum=0.9",
        f"clients.count={n}",
        f"clients.num_gpus={1 / n if gpu else 0}",
        f"clients.num_cpus={spec['cores'] / n}",
        f"clients.batch_size={spec['batch_size']}",
        "clients.checkpoint=false",
        "data.dataset=cifar10",
        f"data.root={spec['data_root']}",
        "data.download=false",
        "data.partition.kind=iid",
        f"data.max_train_per_client={spec['samples']}",
        "eval.every=1",  # a round's report (and its time) comes with its evaluation
        "eval.global_max_samples=64",
        f"tracking.uri=sqlite:///{spec['work']}/mlflow.db",
        *spec.get("set", ()),
    ]


def round_times(ends: list[float], start: float) -> dict[str, float]:
    durations = [b - a for a, b in zip([start, *ends], ends, strict=False)]
    rest = durations[1:] or durations
    return {"first_round_s": durations[0], "s_per_round": statistics.median(rest)}


def round_breakdown(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Where a ring client's round goes, the median over client-rounds: training, waiting
    for a compute slot, and waiting for the in-neighbours' pushes."""
    return {
        f"client_{key}": statistics.median(r[key] for r in rows)
        for key in ("round_s", "train_s", "slot_wait_s", "gather_wait_s")
    }


# ---- the two sides, each run in its own subprocess ------------------------------------------


def side_ring(spec: dict[str, Any]) -> dict[str, Any]:
    import pyarrow.parquet as pq
    import ray

    from ring_actors.config import load_config
    from ring_actors.runtime.driver import run_experiment

    config = load_config(None, overrides(spec))
    started = time.monotonic()
    ray.init(
        address="local",
        num_cpus=spec["cores"],
        num_gpus=1 if spec["cuda"] else 0,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    out = Path(spec["work"]) / "ring"
    ray_up = time.monotonic()
    summary = run_experiment(config, out, progress=False)
    run_s = time.monotonic() - ray_up
    ray.shutdown()
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    ends = [max(r["time_s"] for r in rows if r["round"] == k) for k in range(spec["rounds"])]
    result = {
        "rounds_completed": summary["rounds_completed"],
        **round_times(ends, 0.0),
        "ray_init_s": ray_up - started,
        # Launch (actors placed, data loaded, models built) and the end (outputs written,
        # actors stopped): the run's own wall time covers the rounds between them.
        "launch_and_end_s": run_s - summary["wall_s"],
        **round_breakdown([r for r in rows if r["round"] > 0] or rows),
    }
    last = [r for r in rows if r["round"] == spec["rounds"] - 1]
    if spec["cuda"] and last:
        result["resident_mb"] = statistics.median(r["gpu_allocated_mb"] for r in last)
        result["peak_allocated_mb"] = statistics.median(r["gpu_peak_allocated_mb"] for r in last)
        result["peak_reserved_mb"] = statistics.median(r["gpu_peak_reserved_mb"] for r in last)
    return result


def side_plain(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from ring_actors.client.method_factory import build_algorithm, client_data
    from ring_actors.config import load_config
    from ring_actors.data.client_splits import split_for
    from ring_actors.data.sources import load_dataset

    config = load_config(None, overrides(spec))
    device = torch.device("cuda", 0) if spec["cuda"] else torch.device("cpu")
    torch.set_num_threads(spec["cores"])
    dataset = load_dataset("cifar10", spec["data_root"], download=False)
    splits = split_for(config, dataset)
    empty = (dataset.test_x[:0], dataset.test_y[:0])
    clients = []
    for c in range(spec["clients"]):
        algorithm = build_algorithm(config, c, dataset.num_classes, dataset.input_shape, device)
        data = client_data(dataset, splits[c], empty, device)
        clients.append((algorithm, data.train, data.local_test))
    start, ends = time.monotonic(), []
    for _ in range(spec["rounds"]):
        for algorithm, train, test in clients:
            algorithm.train_round(train)
            algorithm.evaluate(test)
        if spec["cuda"]:
            torch.cuda.synchronize()
        ends.append(time.monotonic())
    result = {"rounds_completed": spec["rounds"], **round_times(ends, start)}
    if spec["cuda"]:
        n = spec["clients"]
        result["resident_mb"] = torch.cuda.memory_allocated(device) / MB / n
        result["peak_allocated_mb"] = torch.cuda.max_memory_allocated(device) / MB
        result["peak_reserved_mb"] = torch.cuda.max_memory_reserved(device) / MB
    return result


def side_terms(spec: dict[str, Any]) -> dict[str, Any]:
    """One client's terms of the memory formula, measured in this process: its resident
    state (parameters, optimiser state, data) and its working set (the most training adds
    over that: activations, gradients, the allocator's slack). On the CPU the working set is
    the most the process's RSS (sampled every millisecond) grows over the first round, from
    a baseline after glibc has returned its free pages, less the optimiser state that round
    creates."""
    import torch

    from ring_actors.client.slot_release import move_optimizer_state, optimizers_of
    from ring_actors.runtime.worker_env import release_freed_memory

    algorithm, train = _one_client({**spec, "clients": 2})
    device = algorithm.device
    params = sum(t.numel() * t.element_size() for t in _parameters(algorithm))
    data = train.x.numel() * train.x.element_size() + train.y.numel() * train.y.element_size()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        algorithm.train_round(train)
        peak = torch.cuda.max_memory_allocated(device)
    else:
        release_freed_memory()
        before = _rss()
        sampler = _RssPeak()
        sampler.start()
        algorithm.train_round(train)
        sampler.stopping.set()
        sampler.join()
        peak = sampler.peak
    state = move_optimizer_state(optimizers_of(algorithm), device)  # counts its bytes
    return {
        "parameters_mb": params / MB,
        "optimizer_state_mb": state / MB,
        "data_mb": data / MB,
        "working_mb": max(0, peak - before - state) / MB,
        "device": str(device),
    }


def _rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _RssPeak(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stopping = threading.Event()
        self.peak = _rss()

    def run(self) -> None:
        while not self.stopping.wait(0.001):
            self.peak = max(self.peak, _rss())


def _one_client(spec: dict[str, Any]) -> tuple[Any, Any]:
    import torch

    from ring_actors.client.method_factory import build_algorithm, client_data
    from ring_actors.config import load_config
    from ring_actors.data.client_splits import split_for
    from ring_actors.data.sources import load_dataset

    config = load_config(None, overrides(spec))
    device = torch.device("cuda", 0) if spec["cuda"] else torch.device("cpu")
    torch.set_num_threads(spec["cores"])
    dataset = load_dataset("cifar10", spec["data_root"], download=False)
    split = split_for(config, dataset)[0]
    empty = (dataset.test_x[:0], dataset.test_y[:0])
    algorithm = build_algorithm(config, 0, dataset.num_classes, dataset.input_shape, device)
    return algorithm, client_data(dataset, split, empty, device).train


def _parameters(algorithm: Any) -> list[Any]:
    import torch

    found = [t for t in vars(algorithm).values() if isinstance(t, torch.Tensor)]
    for value in vars(algorithm).values():
        if isinstance(value, torch.nn.Module):
            found += list(value.state_dict().values())
    return found


SIDES = {"ring": side_ring, "plain": side_plain, "terms": side_terms}


# ---- the parent: one subprocess per run, GPU memory sampled from outside --------------------


def _nvidia_smi(*query: str) -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", *query, "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [[f.strip() for f in line.split(",")] for line in out.strip().splitlines()]


class GpuSampler(threading.Thread):
    """The GPU's memory in use and each process's, at most every ``SAMPLE_S`` seconds."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stopping = threading.Event()
        self.baseline = float(_nvidia_smi("--query-gpu=memory.used")[0][0])
        self.peak = self.baseline
        self.per_process: dict[str, float] = {}

    def run(self) -> None:
        while not self.stopping.wait(SAMPLE_S):
            self.peak = max(self.peak, float(_nvidia_smi("--query-gpu=memory.used")[0][0]))
            for pid, used in _nvidia_smi("--query-compute-apps=pid,used_memory"):
                if used.isdigit():
                    self.per_process[pid] = max(self.per_process.get(pid, 0.0), float(used))


def run_one(spec: dict[str, Any], side: str, timeout_s: float) -> dict[str, Any]:
    """One side of one (model, N) in a subprocess; its figures, or why it did not finish."""
    sampler = GpuSampler() if spec["cuda"] else None
    if sampler:
        sampler.start()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"gpu-{side}-") as work:
        call = json.dumps({**spec, "work": work})
        command = [sys.executable, "-m", "benchmarks.gpu", "--side", side, "--spec", call]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, cwd=REPO
            )
            ok = done.returncode == 0
            detail = done.stdout.strip().splitlines()[-1] if ok else done.stderr[-2000:]
        except subprocess.TimeoutExpired:
            ok, detail = False, f"no answer in {timeout_s:g} s"
    if sampler:
        sampler.stopping.set()
        sampler.join()
    row: dict[str, Any] = {
        "model": spec["model"],
        "clients": spec["clients"],
        "side": side,
        "device": "cuda" if spec["cuda"] else "cpu",
        "set": list(spec.get("set", ())),
        "ok": ok,
        "command_s": time.monotonic() - started,
        "load": os.getloadavg()[0],
    }
    if not ok:
        return {**row, "error": detail}
    row.update(json.loads(detail))
    if side == "terms":
        return row
    row["samples_per_s"] = spec["clients"] * spec["samples"] / row["s_per_round"]
    if sampler:
        n = spec["clients"]
        row["gpu_total_mb"] = sampler.peak - sampler.baseline
        used = statistics.median(sampler.per_process.values()) if sampler.per_process else 0.0
        row["context_mb"] = used - row["peak_reserved_mb"]  # one process's, less torch's
        row["working_mb"] = row["peak_allocated_mb"] - row["resident_mb"] * (
            n if side == "plain" else 1
        )
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The runs as a Markdown table."""
    keys = [
        "model",
        "clients",
        "side",
        "ok",
        "s_per_round",
        "samples_per_s",
        "gpu_total_mb",
        "context_mb",
        "resident_mb",
        "working_mb",
    ]

    return markdown_table(keys, ([r.get(k) for k in keys] for r in rows))


def largest_that_ran(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Per model and side, the largest N whose run finished."""
    best: dict[str, int] = {}
    for r in rows:
        if r["ok"]:
            key = f"{r['model']}/{r['side']}"
            best[key] = max(best.get(key, 0), r["clients"])
    return best


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "cnn"])
    parser.add_argument("--clients", nargs="+", type=int, default=[8, 20, 50, 100])
    parser.add_argument(
        "--sides",
        nargs="+",
        default=["ring", "plain"],
        choices=list(SIDES),
        help="terms: one client's resident state and working set, measured alone",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=500, help="training images per client")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--json", type=Path, help="append one line per run")
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides on top of the workload (e.g. clients.offload_parameters_mb=null)",
    )
    parser.add_argument("--side", choices=list(SIDES), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:  # a subprocess: run one side and print its figures as the last line
        print(json.dumps(SIDES[args.side](json.loads(args.spec))))
        return []
    import torch

    cuda = torch.cuda.is_available()
    rows: list[dict[str, Any]] = []
    for model in args.models:
        for side in args.sides:
            for n in sorted(args.clients):
                spec = {
                    "model": model,
                    "clients": n,
                    "rounds": args.rounds,
                    "samples": args.samples,
                    "batch_size": args.batch_size,
                    "data_root": args.data,
                    "cores": os.cpu_count() or 1,
                    "cuda": cuda,
                    "set": args.set,
                }
                row = run_one(spec, side, args.timeout_s)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json:
                    with args.json.open("a") as handle:
                        handle.write(json.dumps(row) + "\n")
                if not row["ok"]:
                    break  # a larger N will not fit either
    print(table(rows))
    print("largest N that ran:", json.dumps(largest_that_ran(rows)))
    return rows


if __name__ == "__main__":
    main()
