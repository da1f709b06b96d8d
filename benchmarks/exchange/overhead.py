"""The framework's CPU per client-round beyond training: ``run_experiment`` of a method with
tiny training, this process and every process below it read before and after."""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import ray

from benchmarks.common import (
    actor_kind,
    descendants,
    process_facts,
    process_table,
    settled_tree_cpu_s_by_kind,
    tree_cpu_s_by_kind,
)
from ring_actors.config import config_from_dict
from ring_actors.coordinator.history import read_history
from ring_actors.storage.run_folder import RunFolder


class ActorCpuWatch(threading.Thread):
    """Each actor process's CPU as last seen. An actor that exits before the run's end is
    read is reaped by its raylet, whose children's time then holds it: the watch moves it
    back to the actor's own kind."""

    def __init__(self, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.every_s, self.stop = every_s, threading.Event()
        self.seen: dict[int, tuple[str, float]] = {}  # pid: (kind, CPU seconds)

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            table = process_table()
            for pid in descendants(os.getpid(), table):
                if (kind := actor_kind(pid)) is not None:
                    self.seen[pid] = (kind, table[pid].cpu_s)

    def gone_since(self, after: dict[str, float]) -> dict[str, float]:
        """``after`` (a tree's CPU by kind) with the actors that exited moved back from
        ``ray``."""
        moved = dict(after)
        for pid, (kind, cpu_s) in self.seen.items():
            if actor_kind(pid) != kind:  # exited (a zombie has no command line): read as Ray's
                moved[kind] = moved.get(kind, 0.0) + cpu_s
                moved["ray"] = moved.get("ray", 0.0) - cpu_s
        return moved


def overhead_run(
    method: str, clients: int, rounds: int, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    from ring_actors.runtime.driver import run_experiment

    config = config_from_dict(
        {
            "experiment": {"name": "exchange", "seed": 0, "rounds": rounds},
            "data": {
                "dataset": args.dataset,
                "max_train_per_client": args.samples,
                "partition": {"kind": "iid"},
            },
            "clients": {
                "count": clients,
                "num_cpus": args.cores / clients,
                "local_epochs": 1,
                "checkpoint": not args.no_checkpoint,
            },
            "algorithm": {"name": method},
            "checkpoint": {"every_rounds": args.checkpoint_every},
            "schedule": {"chunked_laps": args.chunked_laps},
            "eval": {"every": rounds, "global_max_samples": 100},
            "tracking": {"uri": f"sqlite:///{out / 'mlflow.db'}"},
        }
    )
    before = settled_tree_cpu_s_by_kind()  # the last run's Ray gone
    watch = ActorCpuWatch()
    watch.start()
    started = time.monotonic()
    summary = run_experiment(config, out / "run", progress=False)
    wall_s = time.monotonic() - started
    watch.stop.set()
    watch.join()
    after = watch.gone_since(tree_cpu_s_by_kind())  # Ray still up: its processes are read
    ray.shutdown()
    by_kind = {kind: after[kind] - before.get(kind, 0.0) for kind in after}
    history = read_history(RunFolder(out / "run").coordinator_history)
    # Every client-round's report: metrics.parquet holds only the scored rounds.
    reports = [(r, m) for r, by_client in history.by_round.items() for m in by_client.values()]
    train_cpu_s = sum(m.get("train_cpu_s", 0.0) for _, m in reports)
    # Round 0 also counts the client's start, from its construction.
    later = [m for r, m in reports if r > 0]
    beyond = [m["process_cpu_s"] - m["train_cpu_s"] for m in later]
    # A method's average is framework work whether a lap does it or a merge of pushes (which
    # the clients count in ``train_cpu_s``): this leaves the local training alone out.
    beyond_local = [b + m.get("merge_cpu_s", 0.0) for b, m in zip(beyond, later, strict=True)]
    return {
        "rounds": rounds,
        "rounds_completed": summary["rounds_completed"],
        "wall_s": wall_s,
        # The rounds alone (the run's own clock, from the first round to the last report).
        "round_s": summary["wall_s"] / max(1, summary["rounds_completed"]),
        "cpu_s": sum(by_kind.values()),
        "cpu_s_by_kind": by_kind,
        "train_cpu_s": train_cpu_s,
        "trained_client_rounds": sum("train_cpu_s" in m for _, m in reports),
        "core_s_per_client_round": (sum(by_kind.values()) - train_cpu_s) / (clients * rounds),
        "clients_own_core_s_beyond_training": statistics.mean(beyond) if beyond else None,
        "clients_own_core_s_beyond_local_training": (
            statistics.mean(beyond_local) if beyond_local else None
        ),
        # Memory per client process: each one's peak resident set, over the run.
        "client_peak_rss_mb": _peak_rss(history.by_round),
    }


@ray.remote
class IdleActor:
    """A process like a client's (Ray's worker, torch imported) that does nothing."""

    def pid(self) -> int:
        import os

        import torch  # noqa: F401

        return os.getpid()


def idle_actor_core_s_per_s(actors: int, cores: int, seconds: float = 10.0) -> float:
    """The CPU an idle actor process spends each second on Ray's own loops, mean over
    ``actors`` of them: the floor under any per-round figure, whatever the ring does."""
    ray.init(address="local", num_cpus=cores, include_dashboard=False, log_to_driver=False,
             configure_logging=False)  # fmt: skip
    try:
        handles = [IdleActor.options(num_cpus=cores / actors).remote() for _ in range(actors)]
        pids = ray.get([h.pid.remote() for h in handles])
        time.sleep(3.0)  # past the start's own work
        before = [process_facts(p).cpu_s for p in pids]
        started = time.monotonic()
        time.sleep(seconds)
        after = [process_facts(p).cpu_s for p in pids]
        elapsed = time.monotonic() - started
    finally:
        ray.shutdown()
    return statistics.mean(b - a for a, b in zip(before, after, strict=True)) / elapsed


def _peak_rss(by_round: dict[int, dict[int, dict[str, float]]]) -> dict[str, float]:
    """The median and the largest of the client processes' peak resident sets, MB."""
    peaks: dict[int, float] = {}
    for by_client in by_round.values():
        for client, metrics in by_client.items():
            peaks[client] = max(peaks.get(client, 0.0), metrics.get("peak_rss_mb", 0.0))
    values = sorted(peaks.values())
    return {"median": statistics.median(values), "max": values[-1]} if values else {}


def overhead_row(method: str, clients: int, args: argparse.Namespace, tmp: Path) -> dict:
    runs = [
        overhead_run(method, clients, rounds, args, tmp / f"{method}-{clients}-{rounds}")
        for rounds in args.rounds
    ]
    row = {"part": "overhead", "method": method, "clients": clients,
           "checkpoint": not args.no_checkpoint, "checkpoint_every": args.checkpoint_every,
           "chunked_laps": args.chunked_laps,
           "runs": runs}  # fmt: skip
    row["core_s_per_client_round"] = runs[-1]["core_s_per_client_round"]
    # Measured in the same sitting: what an idle actor spends over one of the run's rounds.
    row["idle_actor_core_s_per_s"] = idle_actor_core_s_per_s(clients, args.cores, args.idle_s)
    row["idle_floor_per_client_round"] = (
        row["idle_actor_core_s_per_s"] * runs[-1]["round_s"] if runs[-1]["round_s"] else None
    )
    for key in ("clients_own_core_s_beyond_training", "clients_own_core_s_beyond_local_training"):
        row[key] = runs[-1][key]
    row["added_core_s_per_client_round"] = None
    row["added_by_kind"] = None
    if len(runs) > 1:
        first, last = runs[0], runs[-1]
        added = clients * (last["rounds"] - first["rounds"])
        by_kind = {  # the clients' share is beyond their training
            kind: (last["cpu_s_by_kind"].get(kind, 0.0) - first["cpu_s_by_kind"].get(kind, 0.0))
            / added
            for kind in last["cpu_s_by_kind"]
        }
        by_kind["clients"] = (
            by_kind.get("clients", 0.0) - (last["train_cpu_s"] - first["train_cpu_s"]) / added
        )
        row["added_by_kind"] = by_kind
        row["added_core_s_per_client_round"] = sum(by_kind.values())
    return row
