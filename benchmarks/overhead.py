"""Framework overhead: N clients in the ring of Ray actors vs the same N trainings without Ray.

    RING_ACTORS_DATA=../shared/datasets python -m benchmarks.overhead --clients 2 4 --repeats 3

Both sides train the same FedAvg CNN on the same Fashion-MNIST partition (``split_for``,
shard, 2 classes per client), with the same seeds, batch size, local epochs, rounds and final
Local-T / Global-T evaluation, on the same cores:

* ring: ``launch`` + ``start_clients`` + ``wait_and_finalize`` (exactly what ``run_experiment``
  does) with ``algorithm.name=dfedavg`` (the full model travels every round), sync schedule,
  ``clients.num_cpus = cores / N`` and evaluation only at the last round;
* plain: N ``multiprocessing`` (spawn) processes, each with ``torch.set_num_threads(max(1,
  int(cores / N)))``, each building ``Local`` (the same ``SupervisedAlgorithm`` training as
  ``DFedAvg``, nothing sent) on its split and calling ``train_round`` ``rounds`` times, then the
  same two evaluations; timed from a barrier that all N processes and the parent pass once set
  up, to the last process finishing.

Ring throughput is reported two ways: the summary's ``samples_per_s`` (samples reported by the
clients / ``wall_s``, where ``wall_s`` runs from just before ``start_clients`` until the
driver's 0.5 s progress poll sees every client done), and samples / the time from
``start_clients`` to the coordinator receiving the last client's last round (the largest
``time_s`` in ``metrics.parquet``), which leaves out the poll's granularity. Ray is started for
each ring run (as ``jobs.train`` starts it, ``connect_ray``) and shut down before the plain run,
so plain processes never share the cores with idle Ray daemons. Every measurement records the
1-minute load average before it, and the machine's busy CPU over it (from ``/proc/stat``); the
ring run also records the CPU time each kind of process used (from ``/proc/<pid>/stat``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import CLOCK_TICKS, cpu_by_kind, markdown_table, process_cpu

# ---- machine probes (plain /proc reads: no extra dependency) ------------------------------


def loadavg() -> float:
    return os.getloadavg()[0]


def wait_for_low_load(limit: float, max_wait_s: float) -> float:
    """Wait (at most ``max_wait_s``) until the 1-minute load is below ``limit``; return it."""
    deadline = time.monotonic() + max_wait_s
    while loadavg() >= limit and time.monotonic() < deadline:
        time.sleep(5)
    return loadavg()


def cpu_busy_idle() -> tuple[float, float]:
    """Machine-wide busy and idle CPU seconds since boot (all cores)."""
    with open("/proc/stat") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / CLOCK_TICKS, idle / CLOCK_TICKS


# ---- the shared config -----------------------------------------------------------------------


def make_config(args: argparse.Namespace, clients: int, tmp: Path):
    from ring_actors.config import config_from_dict

    return config_from_dict(
        {
            "experiment": {"name": "overhead", "seed": args.seed, "rounds": args.rounds},
            "data": {
                "dataset": "fashion-mnist",
                "root": args.data_root,
                "download": False,
                "max_train_per_client": args.train_total // clients,
                "partition": {"kind": "shard", "classes_per_client": 2},
            },
            "clients": {
                "count": clients,
                "num_cpus": args.cores / clients,
                "local_epochs": args.local_epochs,
                "batch_size": args.batch_size,
                "checkpoint": not args.no_checkpoint,
            },
            "algorithm": {"name": "dfedavg", "lr": args.lr},
            "schedule": {"mode": "sync", "hop_timeout_s": 60},
            "eval": {"every": args.rounds, "global_max_samples": args.global_eval},
            "tracking": {"uri": f"sqlite:///{tmp / 'mlflow.db'}"},
        }
    )


# ---- plain side: N processes, no Ray ----------------------------------------------------------


def plain_worker(client_id: int, config, threads: int, barrier, results) -> None:
    """One client's training without Ray: same data, model, seeds and steps as ClientActor."""
    import torch

    from ring_actors.algorithms.local import Local
    from ring_actors.client.method_factory import client_data, task_spec
    from ring_actors.data.client_splits import global_test_set, split_for
    from ring_actors.data.sources import load_dataset

    torch.set_num_threads(threads)
    dataset = load_dataset(config.data.dataset, config.data.root, config.data.download)
    splits = split_for(config, dataset)
    cpu = torch.device("cpu")
    data = client_data(dataset, splits[client_id], global_test_set(config, dataset, splits), cpu)
    train = data.train
    task = task_spec(config, client_id, dataset.num_classes, dataset.input_shape, cpu)
    algorithm = Local(config.algorithm.options, task)
    cpu0 = time.process_time()
    barrier.wait()
    started = time.monotonic()
    round_s = []
    for _ in range(config.experiment.rounds):
        t = time.monotonic()
        algorithm.train_round(train)
        round_s.append(time.monotonic() - t)
    local = algorithm.evaluate(data.local_test)["acc"]
    global_ = algorithm.evaluate(data.global_test)["acc"]
    results.put(
        {
            "client": client_id,
            "started": started,
            "finished": time.monotonic(),
            "cpu_s": time.process_time() - cpu0,
            "samples": len(train) * config.experiment.rounds * config.clients.local_epochs,
            "round_s": round_s,
            "local_acc": local,
            "global_acc": global_,
            "threads": torch.get_num_threads(),
        }
    )


def run_plain(config, cores: int) -> dict[str, Any]:
    n = config.clients.count
    threads = max(1, int(cores / n))
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(n + 1), ctx.Queue()
    procs = [
        ctx.Process(target=plain_worker, args=(i, config, threads, barrier, results))
        for i in range(n)
    ]
    for proc in procs:
        proc.start()
    barrier.wait(timeout=300)  # every process has loaded its data and built its model
    started = time.monotonic()
    busy0, idle0 = cpu_busy_idle()
    procs0 = process_cpu()
    rows = [results.get(timeout=1800) for _ in range(n)]
    wall = max(r["finished"] for r in rows) - started
    busy1, idle1 = cpu_busy_idle()
    procs1 = process_cpu()
    for proc in procs:
        proc.join()
    samples = sum(r["samples"] for r in rows)
    round_s = [s for r in rows for s in r["round_s"]]
    return {
        "wall_s": wall,
        "samples": samples,
        "samples_per_s": samples / wall,
        "threads": threads,
        "round_s_mean": statistics.fmean(round_s),
        "cpu_s_workers": sum(r["cpu_s"] for r in rows),
        "machine_busy_s": busy1 - busy0,
        "outside_cpu_s": cpu_by_kind(procs0, procs1).get("outside", 0.0),
        "machine_idle_s": idle1 - idle0,
        "local_acc": statistics.fmean(r["local_acc"] for r in rows),
        "global_acc": statistics.fmean(r["global_acc"] for r in rows),
    }


# ---- ring side: the framework, as run_experiment runs it --------------------------------------


def run_ring(config, out: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq
    import ray
    from mlflow.tracking import MlflowClient

    from ring_actors.runtime.driver import launch, shutdown, wait_and_finalize

    t0 = time.monotonic()
    experiment = launch(config, out)  # loads data, starts Ray (connect_ray) and every actor
    launch_s = time.monotonic() - t0
    threads = sorted({p.torch_threads for p in experiment.placement.values()})
    try:
        procs0 = process_cpu()
        busy0, idle0 = cpu_busy_idle()
        started = time.monotonic()  # the same two lines as run_experiment
        ray.get(experiment.coordinator.start_clients.remote())
        summary = wait_and_finalize(experiment, started, progress=False)
        driver_wall = time.monotonic() - started  # also counts finalize (outputs, MLflow)
        busy1, idle1 = cpu_busy_idle()
        procs1 = process_cpu()
    finally:
        shutdown(experiment)
        ray.shutdown()

    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    last_report_s = max(r["time_s"] for r in rows)
    samples = sum(p.num_train for p in experiment.placement.values()) * (
        config.experiment.rounds * config.clients.local_epochs
    )
    reported = summary["samples_per_s"] * summary["wall_s"]  # what the summary counted
    client = MlflowClient(summary["mlflow"]["tracking_uri"])
    run_id = summary["mlflow"]["run_id"]
    train_s, round_gap_s = [], []
    for c in range(config.clients.count):
        history = sorted(
            client.get_metric_history(run_id, f"client_{c}/train_s"), key=lambda m: m.step
        )
        train_s += [m.value for m in history]
        stamps = [m.timestamp / 1000 for m in history]
        round_gap_s += [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return {
        "launch_s": launch_s,
        "wall_s": summary["wall_s"],
        "samples": samples,
        "samples_reported": reported,
        "samples_per_s": summary["samples_per_s"],
        "to_last_report_s": last_report_s,
        "samples_per_s_to_last_report": samples / last_report_s,
        "driver_wall_s": driver_wall,
        "threads": threads,
        "train_s_mean": statistics.fmean(train_s),
        "round_gap_s_mean": statistics.fmean(round_gap_s) if round_gap_s else float("nan"),
        "machine_busy_s": busy1 - busy0,
        "machine_idle_s": idle1 - idle0,
        "cpu_by_kind": cpu_by_kind(procs0, procs1),
        "outside_cpu_s": cpu_by_kind(procs0, procs1).get("outside", 0.0),
        "local_acc": summary["local_acc"]["mean"],
        "global_acc": summary["global_acc"]["mean"],
        "hops": summary["hops"],
        "bytes_per_hop": summary["bytes_per_hop"],
        "lost_payloads": summary["events"]["lost_payloads"],
    }


# ---- driver -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__)
    parser.add_argument("--clients", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--train-total",
        type=int,
        default=3000,
        help="training samples over all clients: each client gets train_total // N",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--global-eval", type=int, default=500, help="eval.global_max_samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--data-root", default=os.environ.get("RING_ACTORS_DATA"))
    parser.add_argument("--max-load", type=float, default=1.0, help="wait for a lower load")
    parser.add_argument("--max-wait", type=float, default=120.0, help="longest wait for it, s")
    parser.add_argument(
        "--max-outside",
        type=float,
        default=0.05,
        help="redo a plain/ring pair if processes outside the benchmark took more than this "
        "share of the machine's CPU during either run",
    )
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument(
        "--no-checkpoint", action="store_true", help="ring clients write no per-round checkpoint"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every run here")
    parser.add_argument("--report", type=Path, default=None, help="only reprint a --json file")
    return parser.parse_args(argv)


def measure(args: argparse.Namespace, side: str, n: int, tmp: Path, rep: int) -> dict[str, Any]:
    load = wait_for_low_load(args.max_load, args.max_wait)
    config = make_config(args, n, tmp / f"{side}-{n}-{rep}")
    if side == "plain":
        result = run_plain(config, args.cores)
    else:
        result = run_ring(config, tmp / f"{side}-{n}-{rep}" / "out")
    result.update(side=side, clients=n, repeat=rep, load_before=load)
    short = {k: result[k] for k in ("wall_s", "samples", "samples_per_s")}
    print(f"  {side:5} N={n} rep={rep} load={load:.2f} {json.dumps(short)}", flush=True)
    return result


def median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def paired(runs: list[dict[str, Any]], n: int, key: str) -> list[float]:
    """Ring / plain of the same repeat (run back to back), one ratio per repeat."""
    plain = {r["repeat"]: r for r in runs if r["clients"] == n and r["side"] == "plain"}
    ring = {r["repeat"]: r for r in runs if r["clients"] == n and r["side"] == "ring"}
    return [ring[k][key] / plain[k]["samples_per_s"] for k in sorted(plain) if k in ring]


def framework_cpu(run: dict[str, Any]) -> float:
    """CPU seconds of this benchmark's Ray processes other than the client actors."""
    skip = ("client actors", "outside")
    return sum(v for k, v in run["cpu_by_kind"].items() if k not in skip)


def report(runs: list[dict[str, Any]], clients: list[int]) -> str:
    header = ["N", "plain samples/s", "ring samples/s (summary)", "ring / plain",
              "paired ratios (per repeat)", "ring samples/s (to last report)",
              "ring / plain"]  # fmt: skip
    throughput = []
    for n in clients:
        plain = [r for r in runs if r["clients"] == n and r["side"] == "plain"]
        ring = [r for r in runs if r["clients"] == n and r["side"] == "ring"]
        p, s = median(plain, "samples_per_s"), median(ring, "samples_per_s")
        q = median(ring, "samples_per_s_to_last_report")
        pairs = paired(runs, n, "samples_per_s")
        ratios = ", ".join(f"{x:.3f}" for x in pairs)
        throughput.append([n, f"{p:.0f}", f"{s:.0f}", f"{s / p:.3f}",
                           f"{ratios} (median {statistics.median(pairs):.3f})", f"{q:.0f}",
                           f"{q / p:.3f}"])  # fmt: skip
    header_cpu = ["N", "plain wall s", "ring wall s", "plain s/round (train_round)",
                  "ring s/round (`train_s`: wait + merge + train)",
                  "ring s between a client's reports", "plain workers CPU s", "ring actors CPU s",
                  "ring other Ray CPU s", "idle CPU s plain / ring", "outside CPU s plain / ring",
                  "loads before"]  # fmt: skip
    cpu = []
    for n in clients:
        plain = [r for r in runs if r["clients"] == n and r["side"] == "plain"]
        ring = [r for r in runs if r["clients"] == n and r["side"] == "ring"]
        for r in ring:
            r["framework_cpu_s"] = framework_cpu(r)
            r["actors_cpu_s"] = r["cpu_by_kind"].get("client actors", 0.0)
        loads = ", ".join(f"{r['load_before']:.2f}" for r in plain + ring)
        cpu.append([
            n, f"{median(plain, 'wall_s'):.1f}", f"{median(ring, 'wall_s'):.1f}",
            f"{median(plain, 'round_s_mean'):.2f}", f"{median(ring, 'train_s_mean'):.2f}",
            f"{median(ring, 'round_gap_s_mean'):.2f}", f"{median(plain, 'cpu_s_workers'):.1f}",
            f"{median(ring, 'actors_cpu_s'):.1f}", f"{median(ring, 'framework_cpu_s'):.1f}",
            f"{median(plain, 'machine_idle_s'):.1f} / {median(ring, 'machine_idle_s'):.1f}",
            f"{median(plain, 'outside_cpu_s'):.1f} / {median(ring, 'outside_cpu_s'):.1f}",
            loads])  # fmt: skip
    return markdown_table(header, throughput) + "\n\n" + markdown_table(header_cpu, cpu)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        saved = json.loads(args.report.read_text())
        print(report(saved["runs"], saved["args"]["clients"]))
        return 0
    if not args.data_root:
        print("set RING_ACTORS_DATA or --data-root to the datasets folder", file=sys.stderr)
        return 2
    print(
        f"cores={args.cores} rounds={args.rounds} train_total={args.train_total} "
        f"batch={args.batch_size} global_eval={args.global_eval} clients={args.clients}",
        flush=True,
    )
    runs: list[dict[str, Any]] = []
    discarded: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ring-overhead-") as tmp:
        for rep in range(args.repeats):
            for n in args.clients:
                # Alternate the order so neither side always runs on a warmer machine.
                sides = ("plain", "ring") if rep % 2 == 0 else ("ring", "plain")
                for attempt in range(args.retries + 1):
                    pair = [measure(args, side, n, Path(tmp), rep) for side in sides]
                    # Another user of the machine took more than --max-outside of it: redo.
                    shares = [r["outside_cpu_s"] / (args.cores * r["wall_s"]) for r in pair]
                    if max(shares) <= args.max_outside or attempt == args.retries:
                        break
                    print(f"  contended (outside CPU share {max(shares):.1%}): again", flush=True)
                    discarded += pair
                for r in pair:
                    r["attempts"] = attempt + 1
                runs += pair
    table = report(runs, args.clients)
    print(table)
    if args.json:
        saved = {"args": vars(args), "runs": runs, "discarded": discarded}
        args.json.write_text(json.dumps(saved, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
