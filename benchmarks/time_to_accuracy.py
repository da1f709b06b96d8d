"""Does asynchrony pay off on heterogeneous clients? Time to accuracy, mode against mode.

    python -m benchmarks.time_to_accuracy --backend ray --regime delay-bound --seeds 0 1 2
    python -m benchmarks.time_to_accuracy --backend ray --regime compute-bound --seeds 0 1 2

Whether asynchrony pays depends on what a round waits for, so every table names its regime:

- ``delay-bound``: simulated device and link slowness dominate (speeds log-normal with spread
  1.4, about 10x between the fastest and slowest tenth; links log-normal around 1 MB/s with
  50 ms latency; 300 samples per client), and the cores are idle much of the time;
- ``compute-bound``: clients outnumber the cores (16 clients, 600 samples each, speeds close
  together, fast links), so the compute slots are the limit and who computes next decides
  (``clients.slot_order``).

Both regimes take clients offline for ~Exp(5 s) after ~Exp(25 s) online, about 17% of the
time, and run the same method (DFedAvg) and data (Fashion-MNIST, Dirichlet 0.3) for a fixed wall
budget, on the Ray runtime (``--backend ray``: client actors, the coordinator actor, the slot
pool, what ``jobs.train`` runs) or on the in-process ring (``--backend in_process``: the same
cores in one process, no Ray), in each arm:

- ``sync``: round r merges the in-neighbours' round r - 1;
- ``async-s2`` / ``async-s1000``: at most 2 / 1000 rounds ahead of an in-neighbour;
- ``async-s1000-w0.5``: as above, older states weighted (1 + s) ** -0.5 in the average;
- ``sync-wait0.5s``: sync, but a round waits at most 0.5 s, then merges what arrived;
- ``fedavg-lap``: ring FedAvg by lap, every member's exact average each round (server-style);
- ``async-s1000-offpath``: async-s1000 with persistent stragglers taken off the critical path
  (``schedule.straggler_factor`` 3 over the last 3 rounds): nobody waits for them;
- ``dynamic-similar-speed``: async-s1000 on a dynamic topology (2 in-neighbours, re-drawn
  every 2 rounds) that prefers peers of similar speed (``topology.similarity`` 2);
- ``async-s1000-first-come`` / ``async-s1000-least-recent``: async-s1000 with the compute
  slots granted first come, or to the client served longest ago, instead of oldest round first.

Each run evaluates every client at wall-clock marks (``eval.every_s``); the client mean of
each client's latest evaluation gives accuracy against time. Recorded per arm, mean and
spread over seeds: wall time to reach the Global-T and Local-T targets, accuracy at the end
of the run (a round begun within the budget is finished, so a run ends a round after it), and
rounds completed per client (mean, fewest, most), and each client's share of its round time
spent waiting for a compute slot and for its in-neighbours (the client mean, and the largest).
``--mlflow-uri`` logs each run's accuracy
against wall time (the step is the second of the run) and the table, figure and raw runs as a
report run, in the experiment ``time_to_accuracy``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import torch

from benchmarks.common import markdown_table
from ring_actors.config import Config, apply_overrides, config_from_dict
from ring_actors.in_process import InProcessRing
from ring_actors.report.mlflow_io import log_report
from ring_actors.storage.run_folder import RunFolder

RESULTS = Path(__file__).parent / "results"
EXPERIMENT = "time_to_accuracy"

ARMS: dict[str, dict[str, Any]] = {
    "sync": {"schedule": {"mode": "sync"}},
    "async-s2": {"schedule": {"mode": "async", "max_staleness": 2}},
    "async-s1000": {"schedule": {"mode": "async", "max_staleness": 1000}},
    "async-s1000-w0.5": {
        "schedule": {"mode": "async", "max_staleness": 1000},
        "algorithm": {"staleness_exponent": 0.5},
    },
    "sync-wait0.5s": {"schedule": {"mode": "sync", "max_wait_s": 0.5}},
    "fedavg-lap": {"schedule": {"mode": "sync"}, "algorithm": {"name": "fedavg"}},
    "async-s1000-offpath": {
        "schedule": {"mode": "async", "max_staleness": 1000, "straggler_factor": 3.0},
    },
    "dynamic-similar-speed": {
        "schedule": {"mode": "async", "max_staleness": 1000},
        "topology": {"kind": "dynamic", "degree": 2, "resample_every": 2, "similarity": 2.0},
    },
    "async-s1000-first-come": {
        "schedule": {"mode": "async", "max_staleness": 1000},
        "clients": {"slot_order": "first_come"},
    },
    "async-s1000-least-recent": {
        "schedule": {"mode": "async", "max_staleness": 1000},
        "clients": {"slot_order": "least_recent"},
    },
}

REGIMES: dict[str, dict[str, Any]] = {
    "delay-bound": {
        "clients": {"count": 12},
        "data": {"max_train_per_client": 300},
        "heterogeneity": {
            "compute": {"distribution": "lognormal", "spread": 1.4},
            "links": {
                "latency_s": 0.05,
                "bandwidth_bytes_s": 1e6,
                "distribution": "lognormal",
                "spread": 1.0,
            },
        },
    },
    "compute-bound": {
        "clients": {"count": 16},
        "data": {"max_train_per_client": 600},
        "heterogeneity": {
            "compute": {"distribution": "lognormal", "spread": 0.3},
            "links": {"latency_s": 0.002, "bandwidth_bytes_s": 100e6},
        },
    },
}


def base_config(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The regime's setting; ``--clients`` and ``--max-train``, when given, override it."""
    config = merged(_common_config(args, seed), REGIMES[args.regime])
    if args.clients is not None:
        config["clients"]["count"] = args.clients
    if args.max_train is not None:
        config["data"]["max_train_per_client"] = args.max_train
    return config


def _common_config(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    return {
        "experiment": {
            "name": "time-to-accuracy",
            "seed": seed,
            "rounds": 100_000,
            "time_budget_s": args.budget_s,
        },
        "data": {"dataset": args.dataset, "partition": {"kind": "dirichlet", "beta": 0.3}},
        "clients": {"checkpoint": False, "num_cpus": 0.1},  # clients outnumber cores
        "algorithm": {"name": "dfedavg", "lr": 0.001},
        "schedule": {"hop_timeout_s": 30.0},
        "eval": {"every": 100_000, "every_s": args.mark_s, "global_max_samples": args.global_max},
        "heterogeneity": {"availability": {"mean_online_s": 25.0, "mean_offline_s": 5.0}},
    }


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra``'s keys set, nested sections merged key by key."""
    out = json.loads(json.dumps(base))
    for key, value in extra.items():
        held = out.get(key)
        out[key] = (
            merged(held, value) if isinstance(held, dict) and isinstance(value, dict) else value
        )
    return out


def curve(rows: list[dict[str, Any]], key: str, clients: int) -> list[tuple[float, float]]:
    """(time, client mean of each client's latest ``key``) after every evaluation, once
    every client has been evaluated at least once."""
    latest: dict[int, float] = {}
    points = []
    for row in sorted(rows, key=lambda r: r["time_s"]):
        latest[row["client"]] = row[key]
        if len(latest) == clients:
            points.append((row["time_s"], statistics.fmean(latest.values())))
    return points


def first_reaching(points: list[tuple[float, float]], target: float) -> float | None:
    return next((t for t, acc in points if acc >= target), None)


def run_in_process(config: Config, tmp: Path, budget_s: float) -> tuple[list, list, list[int]]:
    """The run's rows, events and rounds per client, on the in-process ring."""
    ring = InProcessRing.from_config(config, tmp)
    ring.run(timeout_s=budget_s + 600)
    rounds = [c.core.completed + 1 for c in ring.clients.values()]
    return ring.coordinator.results.rows, ring.coordinator.results.events, rounds


def run_on_ray(config: Config, tmp: Path, budget_s: float) -> tuple[list, list, list[int]]:
    """The same on the Ray runtime, read back from the run folder it writes."""
    from ring_actors.runtime.driver import run_experiment

    run_experiment(config, tmp / "run", progress=False)
    folder = RunFolder(tmp / "run")
    rows = pq.read_table(folder.metrics).to_pylist()
    events = pq.read_table(folder.events).to_pylist()
    last: dict[int, int] = {}
    for row in rows:
        last[row["client"]] = max(last.get(row["client"], -1), row["round"])
    first = {c: min(r["round"] for r in rows if r["client"] == c) for c in last}
    return rows, events, [last[c] - first[c] + 1 for c in sorted(last)]


BACKENDS = {"ray": run_on_ray, "in_process": run_in_process}


def wait_shares(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per client, the share of its round time spent waiting for a slot and for peers; the
    client mean and the largest of each."""
    shares: dict[str, list[float]] = {"slot_wait": [], "gather_wait": []}
    for client in {r["client"] for r in rows}:
        mine = [r for r in rows if r["client"] == client and r.get("round_s")]
        total = sum(r["round_s"] for r in mine)
        for key in shares:
            shares[key].append(sum(r.get(f"{key}_s") or 0.0 for r in mine) / total if total else 0)
    out = {}
    for key, values in shares.items():
        out[f"{key}_share"] = statistics.fmean(values) if values else 0.0
        out[f"{key}_share_max"] = max(values, default=0.0)
    return out


def run_arm(args: argparse.Namespace, name: str, seed: int) -> dict[str, Any]:
    base = base_config(args, seed)
    config = config_from_dict(apply_overrides(merged(base, ARMS[name]), args.overrides))
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        rows, events, rounds = BACKENDS[args.backend](config, Path(tmp), args.budget_s)
    wall = time.monotonic() - started
    result = {"arm": name, "seed": seed, "wall_s": wall, "rounds": rounds, **wait_shares(rows)}
    result |= {"regime": args.regime, "backend": args.backend}
    for key, target in (("global_acc", args.target_global), ("local_acc", args.target_local)):
        points = curve(rows, key, config.total_clients)
        result[f"{key}_curve"] = points
        result[f"{key}_final"] = points[-1][1] if points else None
        result[f"{key}_time_to_target"] = first_reaching(points, target)
    kinds = [e["kind"] for e in events]
    result["offline_periods"] = kinds.count("offline")
    result["wait_timeouts"] = kinds.count("wait_timeout")
    result["straggler_marks"] = kinds.count("straggler")
    return result


def cell(values: list[float | None], fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    got = [v * scale for v in values if v is not None]
    if not got:
        return f"not reached (0/{len(values)})"
    spread = statistics.stdev(got) if len(got) > 1 else 0.0
    text = f"{fmt.format(statistics.fmean(got))} ± {fmt.format(spread)}"
    return text if len(got) == len(values) else f"{text} ({len(got)}/{len(values)})"


def table(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    header = ["arm", f"s to Global-T {100 * args.target_global:.0f}%",
              f"s to Local-T {100 * args.target_local:.0f}%", "Global-T at the end (%)",
              "Local-T at the end (%)", "rounds per client: mean (fewest-most)",
              "offline periods", "slot wait: mean (largest)",
              "gather wait: mean (largest)"]  # fmt: skip
    rows = []
    for arm in ARMS:
        mine = [r for r in results if r["arm"] == arm]
        if not mine:
            continue
        rounds = [r["rounds"] for r in mine]
        mean_rounds = statistics.fmean(statistics.fmean(r) for r in rounds)
        fewest = statistics.fmean(min(r) for r in rounds)
        most = statistics.fmean(max(r) for r in rounds)
        rows.append([
            arm,
            cell([r["global_acc_time_to_target"] for r in mine]),
            cell([r["local_acc_time_to_target"] for r in mine]),
            cell([r["global_acc_final"] for r in mine], scale=100),
            cell([r["local_acc_final"] for r in mine], scale=100),
            f"{mean_rounds:.1f} ({fewest:.1f}-{most:.1f})",
            f"{statistics.fmean(r['offline_periods'] for r in mine):.1f}",
            _share(mine, "slot_wait"),
            _share(mine, "gather_wait"),
        ])  # fmt: skip
    return markdown_table(header, rows)


def _share(runs: list[dict[str, Any]], key: str) -> str:
    mean = statistics.fmean(r[f"{key}_share"] for r in runs)
    largest = statistics.fmean(r[f"{key}_share_max"] for r in runs)
    return f"{100 * mean:.0f}% ({100 * largest:.0f}%)"


def figure(results: list[dict[str, Any]], path: Path) -> None:
    """Global-T against wall time, one curve per arm (each seed's curve on a common grid)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for axis, key in zip(axes, ("global_acc", "local_acc"), strict=True):
        for arm in ARMS:
            mine = [r[f"{key}_curve"] for r in results if r["arm"] == arm]
            if not mine:
                continue
            end = max(t for c in mine for t, _ in c) if any(mine) else 0
            grid = [end * i / 50 for i in range(51)]
            means = []
            for t in grid:
                values = [next((a for s, a in reversed(c) if s <= t), None) for c in mine]
                got = [v for v in values if v is not None]
                means.append(100 * statistics.fmean(got) if len(got) == len(mine) else None)
            axis.plot(grid, [m if m is not None else float("nan") for m in means], label=arm)
        axis.set(xlabel="wall time (s)", ylabel=f"{key} client mean (%)", title=key)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def log_to_mlflow(uri: str, results: list[dict[str, Any]], files: list[Path]) -> None:
    """One MLflow run per arm and seed (accuracy by second of wall time), then the report."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(EXPERIMENT)
    experiment_id = found.experiment_id if found else client.create_experiment(EXPERIMENT)
    for r in results:
        run_id = client.create_run(experiment_id, run_name=f"{r['arm']} seed {r['seed']}").info
        metrics = [
            Metric(key, acc, 0, round(t))
            for key in ("global_acc", "local_acc")
            for t, acc in r[f"{key}_curve"]
        ]
        params = [Param("arm", r["arm"]), Param("seed", str(r["seed"]))]
        client.log_batch(run_id.run_id, metrics=metrics, params=params)
        client.set_terminated(run_id.run_id)
    log_report(uri, EXPERIMENT, files)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=list(BACKENDS), default="ray")
    parser.add_argument("--regime", choices=list(REGIMES), default="delay-bound")
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--clients", type=int, help="default: the regime's")
    parser.add_argument("--budget-s", type=float, default=60.0)
    parser.add_argument("--mark-s", type=float, default=3.0)
    parser.add_argument("--max-train", type=int, help="samples per client; default: the regime's")
    parser.add_argument("--global-max", type=int, default=150)
    parser.add_argument("--target-global", type=float, default=0.4)
    parser.add_argument("--target-local", type=float, default=0.7)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, help="default: results/time_to_accuracy_REGIME.json")
    parser.add_argument("--mlflow-uri", help="log the runs and the report to this MLflow store")
    parser.add_argument("overrides", nargs="*", help="dotted overrides: algorithm.lr=0.01 ...")
    args = parser.parse_args(argv)
    args.out = args.out or RESULTS / f"time_to_accuracy_{args.regime}.json"
    torch.set_num_threads(1)
    results: list[dict[str, Any]] = []
    for seed in args.seeds:
        for arm in args.arms:
            load = os.getloadavg()[0]
            results.append({**run_arm(args, arm, seed), "load_before": load})
            print(f"seed {seed} {arm}: rounds {results[-1]['rounds']} load {load:.1f}", flush=True)
            args.out.write_text(
                json.dumps({"args": vars(args) | {"out": str(args.out)}, "runs": results})
            )
    summary = table(results, args)
    print(summary)
    figure(results, args.out.with_suffix(".png"))
    args.out.with_suffix(".md").write_text(summary + "\n")
    if args.mlflow_uri:
        files = [args.out.with_suffix(suffix) for suffix in (".json", ".png", ".md")]
        log_to_mlflow(args.mlflow_uri, results, files)


if __name__ == "__main__":
    main()
