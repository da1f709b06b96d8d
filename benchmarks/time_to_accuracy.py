"""Does asynchrony pay off on heterogeneous clients? Time to accuracy, mode against mode.

    nice -n 15 python -m benchmarks.time_to_accuracy --clients 12 --budget-s 45 --seeds 0 1 2

The same method (DFedAvg), data (Fashion-MNIST, Dirichlet 0.3, 40 samples per client by
default, so that a run fits a busy machine) and heterogeneity (speeds log-normal with spread
1.4, about 10x between the fastest and slowest tenth; links log-normal around 10 MB/s, a LAN
to a slow home uplink; each client offline for ~Exp(5 s) after ~Exp(25 s) online, about 17%
of the time) run on the in-process ring (the real client and coordinator cores, no Ray) for a
fixed wall budget, in each arm:

- ``sync``: round r merges the in-neighbours' round r - 1;
- ``async-s2`` / ``async-s1000``: at most 2 / 1000 rounds ahead of an in-neighbour;
- ``async-s1000-w0.5``: as above, older states weighted (1 + s) ** -0.5 in the average;
- ``sync-wait0.5s``: sync, but a round waits at most 0.5 s, then merges what arrived;
- ``fedavg-lap``: ring FedAvg by lap, every member's exact average each round (server-style);
- ``async-s1000-offpath``: async-s1000 with persistent stragglers taken off the critical path
  (``schedule.straggler_factor`` 3 over the last 3 rounds): nobody waits for them;
- ``dynamic-similar-speed``: async-s1000 on a dynamic topology (2 in-neighbours, re-drawn
  every 2 rounds) that prefers peers of similar speed (``topology.similarity`` 2).

Each run evaluates every client at wall-clock marks (``eval.every_s``); the client mean of
each client's latest evaluation gives accuracy against time. Recorded per arm, mean and
spread over seeds: wall time to reach the Global-T and Local-T targets, accuracy at the end
of the run (a round begun within the budget is finished, so a run ends a round after it), and
rounds completed per client (mean, fewest, most). ``--mlflow-uri`` logs each run's accuracy
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

import torch

from ring_actors.config import apply_overrides, config_from_dict
from ring_actors.in_process import InProcessRing
from ring_actors.report.mlflow_io import log_report

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
}


def base_config(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    return {
        "experiment": {
            "name": "time-to-accuracy",
            "seed": seed,
            "rounds": 100_000,
            "time_budget_s": args.budget_s,
        },
        "data": {
            "dataset": "fashion-mnist",
            "max_train_per_client": args.max_train,
            "partition": {"kind": "dirichlet", "beta": 0.3},
        },
        "clients": {"count": args.clients, "checkpoint": False},
        "algorithm": {"name": "dfedavg", "lr": 0.001},
        "schedule": {"hop_timeout_s": 30.0},
        "eval": {"every": 100_000, "every_s": args.mark_s, "global_max_samples": args.global_max},
        "heterogeneity": {
            "compute": {"distribution": "lognormal", "spread": 1.4},
            "links": {
                "latency_s": 0.01,
                "bandwidth_bytes_s": 10e6,
                "distribution": "lognormal",
                "spread": 1.0,
            },
            "availability": {"mean_online_s": 25.0, "mean_offline_s": 5.0},
        },
    }


def merged(base: dict[str, Any], arm: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(base))
    for section, keys in arm.items():
        out[section] = {**out.get(section, {}), **keys}
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


def run_arm(args: argparse.Namespace, name: str, seed: int) -> dict[str, Any]:
    base = base_config(args, seed)
    config = config_from_dict(apply_overrides(merged(base, ARMS[name]), args.overrides))
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        ring = InProcessRing.from_config(config, Path(tmp))
        ring.run(timeout_s=args.budget_s + 600)
    wall = time.monotonic() - started
    rows = ring.coordinator.results.rows
    events = ring.coordinator.results.events
    rounds = [c.core.completed + 1 for c in ring.clients.values()]
    result = {"arm": name, "seed": seed, "wall_s": wall, "rounds": rounds}
    for key, target in (("global_acc", args.target_global), ("local_acc", args.target_local)):
        points = curve(rows, key, args.clients)
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
    lines = [
        f"| arm | s to Global-T {100 * args.target_global:.0f}% | s to Local-T "
        f"{100 * args.target_local:.0f}% | Global-T at the end (%) | Local-T at the end (%) "
        "| rounds per client: mean (fewest-most) | offline periods |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in ARMS:
        mine = [r for r in results if r["arm"] == arm]
        if not mine:
            continue
        rounds = [r["rounds"] for r in mine]
        mean_rounds = statistics.fmean(statistics.fmean(r) for r in rounds)
        fewest = statistics.fmean(min(r) for r in rounds)
        most = statistics.fmean(max(r) for r in rounds)
        lines.append(
            f"| {arm} | {cell([r['global_acc_time_to_target'] for r in mine])} "
            f"| {cell([r['local_acc_time_to_target'] for r in mine])} "
            f"| {cell([r['global_acc_final'] for r in mine], scale=100)} "
            f"| {cell([r['local_acc_final'] for r in mine], scale=100)} "
            f"| {mean_rounds:.1f} ({fewest:.1f}-{most:.1f}) "
            f"| {statistics.fmean(r['offline_periods'] for r in mine):.1f} |"
        )
    return "\n".join(lines)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--budget-s", type=float, default=45.0)
    parser.add_argument("--mark-s", type=float, default=3.0)
    parser.add_argument("--max-train", type=int, default=40)
    parser.add_argument("--global-max", type=int, default=150)
    parser.add_argument("--target-global", type=float, default=0.4)
    parser.add_argument("--target-local", type=float, default=0.7)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=RESULTS / "time_to_accuracy.json")
    parser.add_argument("--mlflow-uri", help="log the runs and the report to this MLflow store")
    parser.add_argument("overrides", nargs="*", help="dotted overrides: algorithm.lr=0.01 ...")
    args = parser.parse_args()
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
