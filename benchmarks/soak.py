"""Chaos soak: many seeded random fault plans, each checked against the runtime's invariants.

    python -m benchmarks.soak --plans 50                      # in-process ring, seconds each
    python -m benchmarks.soak --plans 10 --backend ray        # real actors, ~1 min each
    python -m benchmarks.soak --plans 10 --backend ray --nodes 3   # and killed nodes

A plan mixes crashes, hangs, slow clients, joins and method errors (on Ray also a killed
coordinator; on several nodes, about half the plans lose a whole node), in sync or async
mode, on a ring or a dynamic topology, with a push method (``dfedavg``) or a lap method
(``fedavg``). Each run must hold:

- every round completes on the live members, and nothing stops the run;
- no payload is lost;
- every member applied the same total in every ring lap, and that total is the sum of what
  that many of its members reported putting in (the clients' own reports; a lap whose
  contributor crashed before reporting its round cannot be audited and is counted apart);
- every client that lived to the end has results;
- the events account for every injected fault (a crash, a hang, an error, a join).

Results go to ``benchmarks/results/soak-<backend>.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS

HOP_S = {"in-process": 0.5, "ray": 4.0}  # schedule.hop_timeout_s of each backend


def random_plan(seed: int, backend: str, nodes: int = 1) -> dict[str, Any]:
    """One seeded plan: the setting and its faults (at least two clients never faulted, or
    one and a lost node, which takes every client placed on it)."""
    rng = random.Random(seed)
    count, rounds = rng.choice([4, 5]), 6
    plan: dict[str, Any] = {
        "seed": seed,
        "algorithm": rng.choice(["dfedavg", "fedavg"]),
        "mode": rng.choice(["sync", "async"]),
        "topology": rng.choice(["ring", "dynamic"]),
        "count": count,
        "rounds": rounds,
        "nodes": nodes,
        "faults": [],
    }
    victims = rng.sample(range(count), rng.randint(1, count - 2))
    kinds = ["crash", "hang", "slow", "error"]
    for client in victims:
        kind = rng.choice(kinds)
        entry: dict[str, Any] = {"at_round": rng.randint(1, rounds - 2), kind: [client]}
        if kind == "hang":  # longer than the probe timeout, so it is a hang to detect
            entry["for_s"] = rng.choice([3, 5]) * HOP_S[backend]
        if kind == "slow":
            entry["delay_s"] = rng.choice([0.1, 0.3])
        plan["faults"].append(entry)
    if rng.random() < 0.4:
        plan["faults"].append({"at_round": rng.randint(2, rounds - 2), "join": 1})
    if backend == "ray" and rng.random() < 0.3:
        plan["faults"].append({"at_round": rng.randint(1, rounds - 2), "kill_coordinator": True})
    if nodes > 1 and rng.random() < 0.5:  # one client fault at most beside it: someone survives
        first, others = plan["faults"][0], plan["faults"][len(victims) :]  # others: join, kill
        spared = rng.choice([c for c in range(count) if c != victims[0]])
        lost = {"at_round": rng.randint(1, rounds - 2), "kill_node": [spared]}
        plan["faults"] = [first, *others, lost]
    return plan


def plan_config(plan: dict[str, Any], backend: str, workdir: Path) -> dict[str, Any]:
    """The experiment config of a plan (small data; short timeouts in process)."""
    hop = HOP_S[backend]
    topology = {"kind": plan["topology"]}
    if plan["topology"] == "dynamic":
        topology |= {"degree": 2}
    return {
        "experiment": {"name": "soak", "seed": plan["seed"], "rounds": plan["rounds"]},
        "data": {
            "dataset": "fashion-mnist",
            "max_train_per_client": 120,
            "partition": {"kind": "shard", "classes_per_client": 2},
        },
        "clients": {"count": plan["count"], "num_cpus": 0.25, "batch_size": 32},
        "algorithm": {"name": plan["algorithm"]},
        "topology": topology,
        "schedule": {
            "mode": plan["mode"],
            "hop_timeout_s": hop,
            "heartbeat_s": hop / 5,
            "stall_hops": 40,
        },
        "eval": {"every": 1, "global_max_samples": 200},
        "tracking": {"uri": f"sqlite:///{workdir / 'mlflow.db'}"},
        "faults": plan["faults"],
    }


def violations(
    plan: dict[str, Any],
    summary: dict[str, Any],
    rows: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> list[str]:
    """Every invariant the run broke, in words (empty: the plan held)."""
    broken = []
    if summary.get("stopped"):
        broken.append(f"stopped: {summary['stopped']}")
    if summary["rounds_completed"] != plan["rounds"]:
        broken.append(f"rounds completed {summary['rounds_completed']} of {plan['rounds']}")
    if summary["events"]["lost_payloads"]:
        broken.append(f"{summary['events']['lost_payloads']} payloads lost")
    totals: dict[tuple[int, str], set[float]] = defaultdict(set)
    for row in rows:
        for key, value in row.items():
            lap_total = key.startswith("lap_") and key.endswith("_checksum")
            if lap_total and value is not None and value == value:  # None: no lap that round
                totals[(row["round"], key)].add(round(value, 3))
    split = sorted(k for k, v in totals.items() if len(v) > 1)
    if split:
        broken.append(f"members applied different lap totals: {split[:3]}")
    broken.extend(lap_audit(rows)[2])
    missing = {str(c) for c in summary["ring_order"]} - set(summary["local_acc"]["per_client"])
    if missing:
        broken.append(f"no results for surviving clients {sorted(missing)}")
    seen = {(e["kind"], e["client"]) for e in events}
    for entry in plan["faults"]:
        for kind, event in (
            ("crash", "crash"),
            ("hang", "hang"),
            ("error", "client_error"),
            ("kill_node", "crash"),  # at least the named client: its node took it
        ):
            for client in entry.get(kind, []):
                if (event, client) not in seen:
                    broken.append(f"no {event} event for client {client}")
        if entry.get("join") and not any(e["kind"] == "join" for e in events):
            broken.append("no join event")
    return broken


def lap_audit(rows: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
    """Each lap's applied total against its members' reported contributions.

    Returns the laps whose total is the sum of as many reported contributions as the lap
    counted contributors, the laps with fewer reports than contributors (not auditable), and
    a line for each lap whose total is no such sum.
    """
    reported: dict[tuple[int, str], list[float]] = defaultdict(list)
    applied: dict[tuple[int, str], tuple[float, int]] = {}
    for row in rows:
        for key, value in row.items():
            if not key.startswith("lap_") or value is None or value != value:
                continue
            if key.endswith("_contribution"):
                reported[(row["round"], key[4 : -len("_contribution")])].append(value)
            elif key.endswith("_checksum"):
                name = key[4 : -len("_checksum")]
                count = row.get(f"lap_{name}_contributors")
                applied[(row["round"], name)] = (value, -1 if count is None else int(count))
    audited, unauditable, broken = 0, 0, []
    for (round_, name), (total, count) in sorted(applied.items()):
        parts = reported[(round_, name)]
        if count < 0 or len(parts) < count:
            unauditable += 1
        elif any(
            abs(sum(c) - total) <= 1e-4 * max(1.0, abs(total)) for c in combinations(parts, count)
        ):
            audited += 1
        else:
            broken.append(
                f"round {round_} lap {name}: total {total:.6g} is no sum of {count} of {parts}"
            )
    return audited, unauditable, broken


def run_in_process(plan: dict[str, Any], workdir: Path) -> tuple[dict, list, list]:
    import torch

    from ring_actors.config import config_from_dict
    from ring_actors.in_process import InProcessRing

    torch.set_num_threads(1)
    config = config_from_dict(plan_config(plan, "in-process", workdir))
    ring = InProcessRing.from_config(config, workdir)
    summary = ring.run(timeout_s=180)
    return summary, ring.coordinator.rows, ring.coordinator.events


def run_on_ray(plan: dict[str, Any], workdir: Path) -> tuple[dict, list, list]:
    import pyarrow.parquet as pq

    from ring_actors.config import config_from_dict
    from ring_actors.runtime.driver import run_experiment

    config = config_from_dict(plan_config(plan, "ray", workdir))
    out = workdir / "out"
    summary = run_experiment(config, out, progress=False)
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    events = pq.read_table(out / "events.parquet").to_pylist()
    return summary, rows, events


def soak(plans: int, backend: str, first_seed: int = 0, nodes: int = 1) -> dict[str, Any]:
    """Run ``plans`` plans and report which held."""
    runner = run_in_process if backend == "in-process" else run_on_ray
    outcomes = []
    for seed in range(first_seed, first_seed + plans):
        plan = random_plan(seed, backend, nodes)
        with tempfile.TemporaryDirectory() as tmp:
            started = time.monotonic()
            summary, rows, events = runner(plan, Path(tmp))
            broken = violations(plan, summary, rows, events)
        audited, unauditable, _ = lap_audit(rows)
        outcomes.append(
            {
                "plan": plan,
                "held": not broken,
                "broken": broken,
                "laps_audited": audited,
                "laps_unauditable": unauditable,
                "wall_s": time.monotonic() - started,
            }
        )
        print(f"plan {seed}: {broken or 'held'}", flush=True)
    return {
        "backend": backend,
        "plans": plans,
        "held": sum(o["held"] for o in outcomes),
        "median_wall_s": statistics.median(o["wall_s"] for o in outcomes),
        "laps_audited": sum(o["laps_audited"] for o in outcomes),
        "laps_unauditable": sum(o["laps_unauditable"] for o in outcomes),
        "outcomes": outcomes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=50)
    parser.add_argument("--backend", choices=["in-process", "ray"], default="in-process")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--nodes", type=int, default=1, help="ray: worker nodes of a one-machine Ray cluster"
    )
    args = parser.parse_args()
    if args.nodes > 1 and args.backend != "ray":
        parser.error("--nodes needs --backend ray")
    cluster = None
    if args.backend == "ray":
        import ray

        if args.nodes > 1:  # the head hosts the driver and the coordinator, workers the clients
            from ray.cluster_utils import Cluster

            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
            for _ in range(args.nodes):
                cluster.add_node(num_cpus=1)
            ray.init(address=cluster.address, log_to_driver=False)
        else:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    result = soak(args.plans, args.backend, args.first_seed, args.nodes)
    if cluster is not None:
        ray.shutdown()
        cluster.shutdown()
    RESULTS.mkdir(exist_ok=True)
    nodes = f"-{args.nodes}-nodes" if args.nodes > 1 else ""
    path = RESULTS / f"soak-{args.backend}{nodes}.json"
    path.write_text(json.dumps(result, indent=1))
    print(
        f"{result['held']} of {result['plans']} plans held; laps audited against their members' "
        f"contributions: {result['laps_audited']} (not auditable: {result['laps_unauditable']}); "
        f"written to {path}"
    )


if __name__ == "__main__":
    main()
