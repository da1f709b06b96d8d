"""How the ring scales with clients on one machine: round time, throughput, memory, start-up.

    RING_ACTORS_DATA=../shared/datasets python -m benchmarks.scale --clients 8 16 32 50 \
        --algorithms drdfl fedavg --modes sync async --rounds 4 \
        --json benchmarks/results/scale.json

Each run is one subprocess with a fresh local Ray of ``--cores`` CPUs (or ``--nodes`` simulated
nodes of ``ray.cluster_utils.Cluster``, clients spread over them), the small CNN, Fashion-MNIST
shards of ``--samples`` training samples per client, and ``clients.num_cpus = cores / N``.
Measured from the outside: the whole process tree's peak PSS (driver, Ray's daemons, every
actor) and the largest client USS; from the run: the median time between round completions
after round 0, trained samples per second, and the time from the subprocess's start until every
client reported round 0. A run the launch's admission check refuses is recorded with the
check's numbers; ``killed`` counts the actors lost on the way (client crashes, coordinator
restores), which should be none. ``--tracking true false`` runs each point with an MLflow run
and figures and without (``tracking.enabled``, ``tracking.figures``); the CPU of each process
of the tree is sampled too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, TreeSampler, markdown_table


def overrides(spec: dict[str, Any], tmp: Path) -> list[str]:
    n = spec["clients"]
    return [
        f"algorithm.name={spec['algorithm']}",
        "algorithm.backbone=cnn",
        f"clients.count={n}",
        f"clients.num_cpus={spec['cores'] / n:.6f}",
        "clients.placement=spread",
        f"data.root={spec['data_root']}",
        "data.download=false",
        f"data.max_train_per_client={spec['samples']}",
        f"experiment.rounds={spec['rounds']}",
        f"schedule.mode={spec['mode']}",
        "schedule.hop_timeout_s=300",
        "eval.every=1",
        "eval.global_max_samples=500",
        f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}",
        f"tracking.enabled={spec['tracking']}",
        f"tracking.figures={spec['tracking']}",
    ]


def worker(spec: dict[str, Any], result_path: Path) -> None:
    """One run, timed from this process's start (``spec['spawned']``)."""
    import pyarrow.parquet as pq
    import ray

    from ring_actors.config import load_config
    from ring_actors.delivery.event_kinds import EventKind
    from ring_actors.preflight.admission import AdmissionError
    from ring_actors.runtime.driver import launch, shutdown, wait_and_finalize

    tmp = Path(spec["tmp"])
    config = load_config("jobs/configs/ring8-drdfl.yaml", overrides(spec, tmp))
    cluster = None
    if spec["nodes"] > 1:
        from ray.cluster_utils import Cluster

        per_node = max(1, round(spec["cores"] / spec["nodes"]))
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
        )
        for _ in range(spec["nodes"]):
            cluster.add_node(num_cpus=per_node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    else:
        ray.init(address="local", num_cpus=spec["cores"], include_dashboard=False)
    try:
        experiment = launch(config, tmp / "out")
    except AdmissionError as refused:
        ray.shutdown()
        result_path.write_text(json.dumps({"refused": str(refused)}))
        return
    try:
        started = time.time()
        ray.get(experiment.coordinator.start_clients.remote())
        summary = wait_and_finalize(experiment, time.monotonic(), progress=False)
        nodes = len({facts.node_id for facts in experiment.placement.values()})
    finally:
        shutdown(experiment)
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    rows = pq.read_table(tmp / "out" / "metrics.parquet").to_pylist()
    kinds = pq.read_table(tmp / "out" / "events.parquet").column("kind").to_pylist()
    ends = [max(r["time_s"] for r in rows if r["round"] == k) for k in range(spec["rounds"])]
    result = {
        "to_round0_s": started - spec["spawned"] + ends[0],
        "launch_s": started - spec["spawned"],
        "round_s": statistics.median(b - a for a, b in zip(ends, ends[1:], strict=False)),
        "samples_per_s": summary["samples_per_s"],
        "train_s_median": statistics.median(r["train_s"] for r in rows),
        "slot_wait_s_median": statistics.median(r.get("slot_wait_s") or 0.0 for r in rows),
        "local_acc": summary["local_acc"]["mean"],
        "lost_payloads": summary["events"]["lost_payloads"],
        "reports": len(rows),  # a client's round it finished and reported, of clients x rounds
        "events": {kind: kinds.count(kind) for kind in sorted(set(kinds))},
        "nodes_used": nodes,
        "killed": kinds.count(EventKind.CRASH) + kinds.count(EventKind.COORDINATOR_RESTORED),
    }
    result_path.write_text(json.dumps(result))


def run(spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ring-scale-") as tmp:
        spec = {**spec, "tmp": tmp}
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        load_before = os.getloadavg()[0]
        spawned = time.time()
        spec_path.write_text(json.dumps({**spec, "spawned": spawned}))
        command = [sys.executable, "-m", "benchmarks.scale", "--worker", str(spec_path)]
        with open(Path(tmp) / "log", "w") as log:
            proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log)
            sampler = TreeSampler(proc.pid, worker_of_root=False)
            sampler.start()
            code = proc.wait()
        sampler.stop.set()
        sampler.join()
        if code != 0:
            tail = (Path(tmp) / "log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"run {spec} failed with {code}:\n{tail}")
        result = json.loads(result_path.read_text())
    return {
        "torch": version("torch"),
        **{k: v for k, v in spec.items() if k not in ("tmp", "data_root")},
        **result,
        "command_s": time.time() - spawned,
        "peak_pss_gb": sampler.peak_pss_kb / 2**20,
        "client_uss_mb": sampler.client_uss_mb(),
        "cpu_s_by_process": sampler.cpu_s_by_title(),
        "peak_pss_mb_by_process": {
            k: round(v / 1024) for k, v in sorted(sampler.peak_pss_by_title.items())
        },
        "load_before": load_before,
    }


def table(results: list[dict[str, Any]]) -> str:
    header = ["clients", "nodes", "method", "mode", "tracking", "torch", "s/round", "samples/s",
              "to round 0 s", "command s", "core-s", "coordinator core-s, PSS MB",
              "peak PSS GB", "max client USS MB", "killed", "Local-T"]  # fmt: skip
    return markdown_table(header, (_row(r) for r in results))


def _row(r: dict[str, Any]) -> list[object]:
    """A run's cells; a refused run's reason in one cell after what it was."""
    run = [r["clients"], r["nodes"], r["algorithm"], r["mode"], r.get("tracking", True), r["torch"]]
    if "refused" in r:
        return [*run, f"refused by the admission check: {r['refused']}"]
    cpu = r.get("cpu_s_by_process", {})
    coordinator = f"{cpu.get('ray::Coordinator', 0):.1f}, {_coordinator_pss(r)}"
    return [*run, f"{r['round_s']:.1f}", f"{r['samples_per_s']:.0f}", f"{r['to_round0_s']:.1f}",
            f"{r['command_s']:.1f}", f"{sum(cpu.values()):.1f}", coordinator,
            f"{r['peak_pss_gb']:.2f}", f"{r['client_uss_mb']:.0f}", r["killed"],
            f"{100 * r['local_acc']:.1f}"]  # fmt: skip


def _coordinator_pss(r: dict[str, Any]) -> object:
    return r.get("peak_pss_mb_by_process", {}).get("ray::Coordinator", "-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 16, 32, 50])
    parser.add_argument("--algorithms", nargs="+", default=["drdfl", "fedavg"])
    parser.add_argument("--modes", nargs="+", default=["sync", "async"])
    parser.add_argument("--nodes", type=int, default=1, help="simulated nodes (Cluster)")
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument(
        "--tracking", nargs="+", choices=["true", "false"], default=["true"],
        help="tracking.enabled and tracking.figures: an MLflow run and figures, or neither",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/scale.json"))
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker.read_text())
        worker(spec, args.worker.with_name("result.json"))
        return
    results = []
    previous = json.loads(args.json.read_text()) if args.json.exists() else {"runs": []}
    command = "python -m benchmarks.scale " + " ".join(sys.argv[1:])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    for n in args.clients:
        for algorithm in args.algorithms:
            for mode, tracking in itertools.product(args.modes, args.tracking):
                spec = {
                    "tracking": tracking,
                    "clients": n,
                    "algorithm": algorithm,
                    "mode": mode,
                    "nodes": args.nodes,
                    "cores": args.cores,
                    "rounds": args.rounds,
                    "samples": args.samples,
                    "data_root": os.environ.get("RING_ACTORS_DATA", ""),
                }
                results.append(run(spec))
                print(table(results[-1:]).splitlines()[-1], flush=True)
                previous["runs"].append({**results[-1], "command": command})
                args.json.write_text(json.dumps(previous, indent=2))  # a later failure keeps it
    print(table(results))


if __name__ == "__main__":
    main()
