"""One FedAvg workload three ways: plain PyTorch, Flower's Ray simulation, and the ring.

    python3 -m venv ../flowervenv && ../flowervenv/bin/pip install -e ".[bench]"  # once
    RING_ACTORS_DATA=../shared/datasets python -m benchmarks.vs_flower \\
        --flower-python ../flowervenv/bin/python

The workload is the same on every side: Fashion-MNIST, N clients (default 8) on the shard
partition that ``split_for`` computes for the ring's own config (so the index sets are
identical), the FedAvg CNN (``algorithm.backbone=cnn``), SGD at lr 0.01 with momentum 0.9,
batch 64, one local epoch per round, the sample-weighted average of the whole model, R rounds
(default 5), and every client evaluated on its local test split after each round's average.
Plain and Flower train with ring-actors' own ``FedAvg`` algorithm object (same seeds, same
initial model, same shuffling, same optimiser), so only the runtime differs, and the three
Local-T figures should agree up to float summation order:

* plain: one process, clients one after another each round, with ``--plain-threads`` torch
  threads (one run per value). At one thread it does exactly the work of a ring or Flower
  client, so its s/round over the cores is the "floor", what perfect parallelism of that
  work would reach; a run with every core for torch is the loop a user would write;
* flower: ``flwr.simulation.run_simulation`` (ClientApp / ServerApp, the message-API
  ``FedAvg`` strategy, ``fraction_train = fraction_evaluate = 1``), ``client_resources.num_cpus``
  from ``--num-cpus-flower``, Ray started the way Flower starts it (no dashboard). Flower pins
  its own Ray, so it usually runs under another interpreter (``--flower-python``). A ClientApp
  is rebuilt for every message, so each client keeps its momentum buffers and shuffling
  generator in ``context.state`` (what the long-lived ring client keeps in memory) and sets
  its torch threads to ``max(1, int(num_cpus))``;
* ring: ``run_experiment`` with ``algorithm.name=fedavg``, ``clients.num_cpus = cores / N``,
  Ray started the way ``jobs.train`` starts a local Ray (no dashboard unless asked).

Every side runs in its own subprocess (a fresh Ray for each Ray side, started and shut down
inside it), so its memory can be measured from the outside: every 5 s a thread sums
``Pss`` from ``/proc/PID/smaps_rollup`` over the subprocess and all its descendants (a local
Ray's daemons and workers descend from the driver that started it), and keeps the largest
USS (``Private_Clean + Private_Dirty``) of a client process: a ``ray::ClientActor`` or
``ray::ClientAppActor`` worker, or for plain the one process that holds every client. The
JSON also has every process kind's largest USS and share of the peak PSS (so, say, Ray's
dashboard can be taken out). s/round is the median of the rounds after the first, which is
reported on its own: plain times its loop (every model built, every split loaded); Flower
stamps the end of every round (after client-side evaluation) through the strategy's
``evaluate_fn`` hook, which also fires once before round 1, so Flower's first round includes
waiting for its actor pool and each actor's first data load; the ring takes, per round, the
latest time a client's report reached the coordinator (``metrics.parquet`` ``time_s``, counted
from ``start_clients``, when every actor already holds its data), and s/round is the gap
between consecutive rounds' latest reports. The whole command is the subprocess's wall time.
Local-T is the mean over clients after the last round; Global-T is not part of the workload
(the ring evaluates a 1-sample global set).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, SAMPLE_S, TreeSampler, markdown_table

SIDES = ("plain", "flower", "ring")


# ---- the shared workload ----------------------------------------------------------------------


def ring_overrides(spec: dict[str, Any]) -> list[str]:
    """The ring's config for the workload; plain and Flower read theirs from the same one."""
    cap = spec["max_train_per_client"]
    return [
        "experiment.name=vs-flower",
        f"experiment.seed={spec['seed']}",
        f"experiment.rounds={spec['rounds']}",
        "algorithm.name=fedavg",
        "algorithm.backbone=cnn",
        "algorithm.optimizer=sgd",
        f"algorithm.lr={spec['lr']}",
        f"algorithm.momentum={spec['momentum']}",
        f"clients.count={spec['clients']}",
        f"clients.num_cpus={spec['cores'] / spec['clients']}",
        f"clients.batch_size={spec['batch_size']}",
        "clients.local_epochs=1",
        "data.dataset=fashion-mnist",
        f"data.root={spec['data_root'] or 'null'}",
        "data.download=false",
        "data.partition.kind=shard",
        f"data.max_train_per_client={'null' if cap is None else cap}",
        "schedule.mode=sync",
        "eval.every=1",
        "eval.global_max_samples=1",  # Global-T is not part of this workload
    ]


def write_splits(spec: dict[str, Any], path: Path) -> dict[str, Any]:
    """Every client's train/test indices, as the ring computes them, for the other sides."""
    import numpy as np

    from ring_actors.data.client_splits import split_for
    from ring_actors.data.sources import load_dataset

    config = ring_config(spec)
    dataset = load_dataset("fashion-mnist", spec["data_root"], download=False)
    splits = split_for(config, dataset)
    arrays = {f"train_{i}": s.train for i, s in enumerate(splits)}
    arrays |= {f"test_{i}": s.test for i, s in enumerate(splits)}
    np.savez(path, **arrays)
    return {
        "train_samples": int(sum(len(s.train) for s in splits)),
        "test_samples": int(sum(len(s.test) for s in splits)),
        "num_classes": dataset.num_classes,
        "input_shape": list(dataset.input_shape),
    }


_DATASET: dict[str, Any] = {}  # per process: a Flower worker loads the arrays once


def ring_config(spec: dict[str, Any]) -> Any:
    """The ring's resolved ``Config``: the one source of every other side's options too."""
    from ring_actors.config import load_config

    return load_config(None, ring_overrides(spec))


def task_spec(spec: dict[str, Any], client: int) -> Any:
    """The TaskSpec a ring ``ClientActor`` builds for ``client`` (same seeds)."""
    import torch

    from ring_actors.client.method_factory import task_spec as ring_task_spec

    shape = tuple(spec["input_shape"])
    config = ring_config(spec)
    return ring_task_spec(config, client, spec["num_classes"], shape, torch.device("cpu"))


def client_data(spec: dict[str, Any], client: int) -> tuple[Any, Any]:
    """(train, local test) of one client, as a ring ``ClientActor`` builds them."""
    import numpy as np

    from ring_actors.data.images import LabelledImages
    from ring_actors.data.sources import load_dataset

    if "arrays" not in _DATASET:
        _DATASET["arrays"] = load_dataset("fashion-mnist", spec["data_root"], download=False)
        _DATASET["splits"] = dict(np.load(spec["splits"]))
    dataset, splits = _DATASET["arrays"], _DATASET["splits"]
    train_idx, test_idx = splits[f"train_{client}"], splits[f"test_{client}"]

    def images(x: np.ndarray, y: np.ndarray) -> LabelledImages:
        return LabelledImages.from_arrays(x, y, dataset.mean, dataset.std, "cpu")

    train = images(dataset.train_x[train_idx], dataset.train_y[train_idx])
    test = images(dataset.test_x[test_idx], dataset.test_y[test_idx])
    return train, test


def new_fedavg(spec: dict[str, Any], task: Any) -> Any:
    """The algorithm object a ring client builds: ``FedAvg`` with the ring's options."""
    from ring_actors.plugins.methods import resolve_algorithm

    config = ring_config(spec)
    return resolve_algorithm(config.algorithm.name)(config.algorithm.options, task)


def fedavg_workload(
    clients: int,
    rounds: int,
    max_train: int | None,
    data_root: str | None,
    cores: int,
    folder: Path,
) -> dict[str, Any]:
    """The workload's spec at its default optimiser settings, its splits written to ``folder``:
    what the benchmarks that time its training alone (no runtime) start from."""
    spec: dict[str, Any] = {
        "clients": clients,
        "rounds": rounds,
        "max_train_per_client": max_train,
        "data_root": str(Path(data_root).resolve()) if data_root else None,
        "cores": cores,
        "seed": 0,
        "lr": 0.01,
        "momentum": 0.9,
        "batch_size": 64,
        "splits": str(folder / "splits.npz"),
    }
    sizes = write_splits(spec, folder / "splits.npz")
    return spec | {"num_classes": sizes["num_classes"], "input_shape": sizes["input_shape"]}


def fedavg_client(spec: dict[str, Any], client: int) -> tuple[Any, Any]:
    """(algorithm, training data) of one client, built as every side builds them."""
    train, _ = client_data(spec, client)
    return new_fedavg(spec, task_spec(spec, client)), train


def round_figures(ends: list[float], start: float) -> dict[str, Any]:
    """First round and the median of the rest from the times rounds ended (seconds)."""
    durations = [b - a for a, b in zip([start, *ends], ends, strict=False)]
    rest = durations[1:]
    return {
        "round_durations_s": durations,
        "first_round_s": durations[0] if durations else float("nan"),
        "s_per_round": statistics.median(rest) if rest else float("nan"),
    }


# ---- side workers (each in its own subprocess) ----------------------------------------------


def breakdown(phases: list[dict[str, float]], s_per_round: float, cores: int) -> dict[str, float]:
    """Where a client-round's time goes, from per-client records of the rounds after the
    first: each phase's median, and ``compute_share``, the training seconds of a round over
    the core-seconds it lasted (1.0: every core trained all the time)."""
    later = [p for p in phases if p["round"] > 0]
    rounds = {p["round"] for p in later}
    names = sorted({k for p in later for k in p if k.endswith("_s")})
    medians = {
        f"{name}_median": statistics.median(p[name] for p in later if name in p) for name in names
    }
    trained = sum(p.get("train_s", 0.0) for p in later)
    share = trained / (cores * s_per_round * len(rounds)) if rounds else float("nan")
    return {**medians, "compute_share": share}


def worker_plain(spec: dict[str, Any]) -> dict[str, Any]:
    """Every client in one process, one after another, with ``plain_threads`` for torch."""
    import torch

    torch.set_num_threads(spec["plain_threads"])
    clients = []
    for c in range(spec["clients"]):
        train, test = client_data(spec, c)
        clients.append((new_fedavg(spec, task_spec(spec, c)), train, test))
    start, ends, accs, phases = time.monotonic(), [], [], []
    for r in range(spec["rounds"]):
        for algorithm, train, _ in clients:
            started = time.perf_counter()
            algorithm.train_round(train)
            phases.append({"round": r, "train_s": time.perf_counter() - started})
        total: dict[str, torch.Tensor] = {}
        for algorithm, _, _ in clients:  # the same sums the ring lap adds up
            for key, value in algorithm.contribute("average", r).items():
                total[key] = total[key] + value if key in total else value.clone()
        for algorithm, _, _ in clients:
            algorithm.apply_lap("average", r, total, list(range(len(clients))))
        accs = [algorithm.evaluate(test)["acc"] for algorithm, _, test in clients]
        ends.append(time.monotonic())
    figures = round_figures(ends, start)
    result = {
        **figures,
        "breakdown": breakdown(phases, figures["s_per_round"], spec["cores"]),
        "local_acc": statistics.fmean(accs),
        "torch_threads": torch.get_num_threads(),
    }
    # Only one thread's loop is the clients' own work: a loop of several threads already
    # spreads it over cores, as well as torch's intra-op split manages.
    if spec["plain_threads"] == 1:
        result["floor_s_per_round"] = figures["s_per_round"] / spec["cores"]
    return result


def _optimizer_state(algorithm: Any) -> dict[str, Any]:
    """Momentum buffers and the shuffling generator: what a long-lived client carries over."""
    out = {
        f"momentum_{i}": algorithm.optimizer.state[p]["momentum_buffer"]
        for i, p in enumerate(algorithm.model.parameters())
        if "momentum_buffer" in algorithm.optimizer.state.get(p, {})
    }
    out["generator"] = algorithm.generator.get_state()
    return out


def _restore_optimizer_state(algorithm: Any, saved: dict[str, Any]) -> None:
    algorithm.generator.set_state(saved["generator"])
    for i, p in enumerate(algorithm.model.parameters()):
        if f"momentum_{i}" in saved:
            state = algorithm.optimizer.state.setdefault(p, {})  # torch.optim's or optim's
            state["momentum_buffer"] = saved[f"momentum_{i}"].clone()


def make_client_app(spec: dict[str, Any]) -> Any:
    """The Flower ClientApp: train and evaluate one partition with ring-actors' FedAvg."""
    import torch
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    app = ClientApp()

    def load(msg: Message, context: Context) -> tuple[Any, Any, Any]:
        # One torch thread per whole CPU of the actor (at least one), as a ring client has.
        torch.set_num_threads(max(1, int(spec["num_cpus"])))
        client = int(context.node_config["partition-id"])
        train, test = client_data(spec, client)
        algorithm = new_fedavg(spec, task_spec(spec, client))
        algorithm.model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        return algorithm, train, test

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        started = time.perf_counter()
        algorithm, train_set, _ = load(msg, context)
        if "optimizer" in context.state:
            saved = context.state["optimizer"].to_torch_state_dict()
            _restore_optimizer_state(algorithm, saved)
        loaded = time.perf_counter()
        algorithm.train_round(train_set)
        trained = time.perf_counter()
        context.state["optimizer"] = ArrayRecord(_optimizer_state(algorithm))
        metrics = {"num-examples": len(train_set), "load-s": loaded - started}
        metrics["train-s"] = trained - loaded
        content = RecordDict(
            {
                "arrays": ArrayRecord(algorithm.model.state_dict()),
                "metrics": MetricRecord(metrics),
            }
        )
        return Message(content=content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        started = time.perf_counter()
        algorithm, _, test_set = load(msg, context)
        acc = algorithm.evaluate(test_set)["acc"]
        metrics = {"acc": acc, "num-examples": len(test_set)}
        metrics["eval-s"] = time.perf_counter() - started
        metrics["client"] = int(context.node_config["partition-id"])
        return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)

    return app


def make_server_app(spec: dict[str, Any], record: dict[str, Any]) -> Any:
    """The Flower ServerApp: FedAvg over every node, stamping each round's end in ``record``."""
    from flwr.app import ArrayRecord, Context, MetricRecord
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg

    class RecordingFedAvg(FedAvg):
        """FedAvg that also keeps every client's own accuracy (the summary is unweighted)
        and counts error replies (Flower logs a failed ClientApp and averages the rest)."""

        def aggregate_train(self, server_round: int, replies: Any) -> Any:
            replies = list(replies)
            record["errors"] += [
                f"train {server_round}: {m.error}" for m in replies if m.has_error()
            ]
            record["phases"] += [
                {
                    "round": server_round - 1,
                    "load_s": m.content["metrics"]["load-s"],
                    "train_s": m.content["metrics"]["train-s"],
                }
                for m in replies
                if m.has_content()
            ]
            return super().aggregate_train(server_round, replies)

        def aggregate_evaluate(self, server_round: int, replies: Any) -> MetricRecord | None:
            replies = list(replies)
            record["errors"] += [
                f"eval {server_round}: {m.error}" for m in replies if m.has_error()
            ]
            record["accs"][server_round] = {
                int(m.content["metrics"]["client"]): float(m.content["metrics"]["acc"])
                for m in replies
                if m.has_content()
            }
            record["phases"] += [
                {"round": server_round - 1, "eval_s": m.content["metrics"]["eval-s"]}
                for m in replies
                if m.has_content()
            ]
            return super().aggregate_evaluate(server_round, replies)

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        n = spec["clients"]
        initial = ArrayRecord(new_fedavg(spec, task_spec(spec, 0)).model.state_dict())
        strategy = RecordingFedAvg(
            fraction_train=1.0,
            fraction_evaluate=1.0,
            min_train_nodes=n,
            min_evaluate_nodes=n,
            min_available_nodes=n,
        )

        def stamp(server_round: int, arrays: ArrayRecord) -> None:
            record["stamps"][server_round] = time.monotonic()  # 0: before round 1

        strategy.start(
            grid=grid, initial_arrays=initial, num_rounds=spec["rounds"], evaluate_fn=stamp
        )

    return app


def worker_flower(spec: dict[str, Any]) -> dict[str, Any]:
    """Flower's simulation runtime on a fresh local Ray."""
    import flwr
    import ray
    from flwr.simulation import run_simulation

    record: dict[str, Any] = {"stamps": {}, "accs": {}, "errors": [], "phases": []}
    run_simulation(
        server_app=make_server_app(spec, record),
        client_app=make_client_app(spec),
        num_supernodes=spec["clients"],
        backend_config={
            "client_resources": {"num_cpus": spec["num_cpus"], "num_gpus": 0.0},
            "init_args": {"address": "local", "num_cpus": spec["cores"]},
        },
    )
    if ray.is_initialized():
        ray.shutdown()
    stamps = record["stamps"]
    if len(stamps) != spec["rounds"] + 1:
        raise RuntimeError(f"Flower finished {len(stamps) - 1} of {spec['rounds']} rounds")
    ends = [stamps[r] for r in range(1, spec["rounds"] + 1)]
    last = record["accs"][spec["rounds"]]
    if record["errors"] or len(last) != spec["clients"]:
        raise RuntimeError(f"{len(last)} clients evaluated; errors: {record['errors']}")
    figures = round_figures(ends, stamps[0])
    return {
        **figures,
        "breakdown": breakdown(record["phases"], figures["s_per_round"], spec["cores"]),
        "local_acc": statistics.fmean(last.values()),
        "local_acc_by_round": {r: record["accs"][r] for r in sorted(record["accs"])},
        "flwr_version": flwr.__version__,
        "ray_version": ray.__version__,
    }


def worker_ring(spec: dict[str, Any]) -> dict[str, Any]:
    """ring-actors' own driver, as ``jobs.train`` runs it, on a fresh local Ray."""
    import pyarrow.parquet as pq
    import ray

    from ring_actors.config import load_config
    from ring_actors.runtime.driver import connect_ray, run_experiment

    tmp = Path(spec["tmp"])
    overrides = [
        *ring_overrides(spec),
        *spec.get("ring_set", []),  # runtime settings under test, e.g. clients.concurrency=1
        f"tracking.uri=sqlite:///{tmp / 'ring-mlflow.db'}",
    ]
    config = load_config(None, overrides)  # ring_config(spec) plus a throwaway MLflow store
    # A local Ray of its own, started as jobs.train starts it: its client actors inherit the
    # allocator settings and take workers Ray started ahead, with no runtime_env of their own.
    connect_ray(None, config.ray.dashboard)
    try:
        summary = run_experiment(config, output_dir=tmp / "ring-out", progress=False)
    finally:
        ray.shutdown()
    rows = pq.read_table(tmp / "ring-out" / "metrics.parquet").to_pylist()
    ends = [max(row["time_s"] for row in rows if row["round"] == r) for r in range(spec["rounds"])]
    figures = round_figures(ends, 0.0)  # time_s counts from start_clients
    phases = [
        {
            "round": row["round"],
            "train_s": row["train_s"],
            "train_cpu_s": row["train_cpu_s"],  # the training thread's CPU time
            "slot_wait_s": row["slot_wait_s"],
            "gather_wait_s": row["gather_wait_s"],
            # evaluation, the lap's hops and publishing: the round less the phases above
            "rest_s": row["round_s"] - row["train_s"] - row["slot_wait_s"] - row["gather_wait_s"],
        }
        for row in rows
    ]
    return {
        **figures,
        "breakdown": breakdown(phases, figures["s_per_round"], spec["cores"]),
        "local_acc": summary["local_acc"]["mean"],
        "bytes_per_hop": summary["bytes_per_hop"],
        "ray_version": ray.__version__,
        "overrides": overrides,
        "clients_config": dataclasses.asdict(config.clients),  # slots, threads: as resolved
    }


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "plain": worker_plain,
    "flower": worker_flower,
    "ring": worker_ring,
}


# ---- outside measurements ----------------------------------------------------------------------


def run_side(side: str, python: str, spec: dict[str, Any], tmp: Path, label: str) -> dict[str, Any]:
    """Run one side's worker in a subprocess, measured from the outside."""
    stem = re.sub(r"[^\w.=-]+", "_", label).strip("_")  # "flower (num_cpus=1)": flower_num_cpus=1
    spec_path, result_path, log_path = (tmp / f"{stem}.{ext}" for ext in ("spec", "json", "log"))
    spec_path.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["FLWR_TELEMETRY_ENABLED"] = "0"  # no usage events to Flower's servers
    command = [python, "-m", "benchmarks.vs_flower", "--worker", side]
    command += ["--spec", str(spec_path), "--result", str(result_path)]
    load = os.getloadavg()[0]
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid, side == "plain", spec["sample_every_s"])
        sampler.start()
        code = proc.wait()
    wall = time.monotonic() - started
    sampler.stop.set()
    sampler.join()
    if code != 0 or not result_path.exists():
        tail = "".join(log_path.read_text(errors="replace").splitlines(True)[-40:])
        raise RuntimeError(f"{label} side exited with {code}; last lines of its log:\n{tail}")
    result = json.loads(result_path.read_text())
    result.update(
        side=label,
        python=python,
        load_before=load,
        command_s=wall,
        peak_pss_gb=sampler.peak_pss_kb / 2**20,
        peak_pss_mb_by_process=(
            {k: round(v / 1024, 1) for k, v in sorted(sampler.peak_pss_by_title.items())}
        ),
        max_client_uss_mb=sampler.client_uss_mb(),
        max_uss_mb_by_process={k: round(v / 1024, 1) for k, v in sampler.max_uss_kb.items()},
        memory_samples=sampler.samples,
        sampler_cpu_s=sampler.own_cpu_s,
        cpu_s_by_process=sampler.cpu_s_by_title(),
        max_processes=sampler.max_procs,
    )
    return result


# ---- driver ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.vs_flower",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--max-train-per-client", type=int, default=None, help="default: full partitions"
    )
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument(
        "--num-cpus-flower",
        type=float,
        nargs="+",
        default=[1.0],
        help="Flower's client_resources num_cpus; one Flower run per value (e.g. 1 0.25)",
    )
    parser.add_argument(
        "--flower-python",
        default=None,
        help="interpreter with flwr[simulation] and ring-actors (default: this one if it has flwr)",
    )
    parser.add_argument(
        "--plain-threads",
        type=int,
        nargs="+",
        default=[1],
        help="torch threads of the plain loop, one run per value: 1 gives the floor, "
        "the number of cores the loop a user would write",
    )
    parser.add_argument(
        "--ring-set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="ring runtime settings to measure, e.g. clients.concurrency=1 (never the workload)",
    )
    parser.add_argument(
        "--sample-every",
        type=float,
        default=SAMPLE_S,
        help="seconds between memory samples; sampling takes CPU from the side measured",
    )
    parser.add_argument("--data-root", default=os.environ.get("RING_ACTORS_DATA"))
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--json", type=Path, default=REPO / "benchmarks" / "results" / "vs_flower.json"
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="keep every side's log, spec and result (and the ring's outputs) here "
        "(default: a temporary directory, removed at the end)",
    )
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.plain_threads) < 1:
        parser.error(f"--plain-threads: each an int >= 1, got {args.plain_threads}")
    return args


def flower_python(args: argparse.Namespace) -> str:
    """The interpreter for the Flower side, or a clear stop when none has flwr."""
    if args.flower_python:
        return args.flower_python
    if importlib.util.find_spec("flwr") is not None:
        return sys.executable
    raise SystemExit(
        'the flower side needs flwr[simulation]: pip install -e ".[bench]" in a virtualenv '
        "of its own (Flower pins its own Ray) and pass --flower-python that/venv/bin/python"
    )


def table(results: list[dict[str, Any]]) -> str:
    header = ["side", "s/round", "first round s", "whole command s", "peak PSS GB",
              "max client USS MB", "Local-T"]  # fmt: skip
    rows = []
    for r in results:
        per_round = f"{r['s_per_round']:.2f}"
        if "floor_s_per_round" in r:
            per_round += f" (floor {r['floor_s_per_round']:.2f})"
        rows.append([r["side"], per_round, f"{r['first_round_s']:.2f}", f"{r['command_s']:.1f}",
                     f"{r['peak_pss_gb']:.2f}", f"{r['max_client_uss_mb']:.0f}",
                     f"{r['local_acc']:.2%}"])  # fmt: skip
    return markdown_table(header, rows)


def breakdown_table(results: list[dict[str, Any]]) -> str:
    """Each side's client-round by phase (medians, seconds) and its compute share."""
    phases = sorted({k for r in results for k in r.get("breakdown", {}) if k.endswith("_median")})
    header = ["side", *(p.removesuffix("_median") for p in phases), "compute share"]
    rows = []
    for r in results:
        cells = [r.get("breakdown", {}).get(p) for p in phases]
        shown = ["" if c is None else f"{c:.2f}" for c in cells]
        share = r.get("breakdown", {}).get("compute_share")
        rows.append([r["side"], *shown, f"{share or 0:.2f}"])
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:  # inside a side's subprocess
        spec = json.loads(args.spec.read_text())
        args.result.write_text(json.dumps(WORKERS[args.worker](spec), indent=2))
        return 0
    python = flower_python(args) if "flower" in args.sides else None
    command = shlex.join(["python", "-m", "benchmarks.vs_flower", *sys.argv[1:]])
    print(f"$ {command}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="vs-flower-") as tmp_dir:
        tmp = Path(tmp_dir)
        if args.work_dir:
            tmp = args.work_dir.resolve()
            if tmp.exists() and any(tmp.iterdir()):
                raise SystemExit(f"--work-dir {tmp} is not empty: the ring needs a fresh one")
            tmp.mkdir(parents=True, exist_ok=True)
        spec: dict[str, Any] = {
            "clients": args.clients,
            "rounds": args.rounds,
            "max_train_per_client": args.max_train_per_client,
            "data_root": str(Path(args.data_root).resolve()) if args.data_root else None,
            "cores": args.cores,
            "seed": args.seed,
            "lr": args.lr,
            "momentum": args.momentum,
            "batch_size": args.batch_size,
            "splits": str(tmp / "splits.npz"),
            "tmp": str(tmp),
            "sample_every_s": args.sample_every,
        }
        sizes = write_splits(spec, tmp / "splits.npz")
        spec |= {"num_classes": sizes.pop("num_classes"), "input_shape": sizes.pop("input_shape")}
        print(f"workload: {json.dumps({**sizes, **spec})}", flush=True)
        for side in args.sides:
            runs = [(side, sys.executable, {}, side)]
            if side == "ring" and args.ring_set:
                runs = [
                    (
                        side,
                        sys.executable,
                        {"ring_set": args.ring_set},
                        f"ring ({', '.join(args.ring_set)})",
                    )
                ]
            if side == "plain":
                runs = [
                    (side, sys.executable, {"plain_threads": t}, f"plain ({t} torch threads)")
                    for t in args.plain_threads
                ]
            if side == "flower":
                runs = [
                    (side, python, {"num_cpus": c}, f"flower (num_cpus={c:g})")
                    for c in args.num_cpus_flower
                ]
            for name, interpreter, extra, label in runs:
                print(f"  running {label} ...", flush=True)
                result = run_side(name, interpreter, {**spec, **extra}, tmp, label)
                brief = ("s_per_round", "command_s", "peak_pss_gb", "local_acc", "sampler_cpu_s")
                shown = {k: result[k] for k in brief}
                shown["train_s_median"] = result["breakdown"].get("train_s_median")
                print(f"  {label}: {json.dumps(shown)}", flush=True)
                results.append(result)
    printed = table(results) + "\n\n" + breakdown_table(results)
    print(printed)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    saved = {
        "command": command,
        "argv": sys.argv,
        "workload": {**sizes, **{k: v for k, v in spec.items() if k not in ("splits", "tmp")}},
        "results": results,
        "table": printed,
    }
    args.json.write_text(json.dumps(saved, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
