"""What the exchange costs apart from training: one hop by phase, a lap of N members beside
the bound of a bandwidth-optimal ring all-reduce, and the framework's CPU per client-round.

    python -m benchmarks.exchange --parts hop lap merge overhead --sizes-mb 1 8 43 100 \\
        --members 2 4 8 16 32 --clients 8 16 32 --json benchmarks/results/exchange.json

hop: a payload of float32 tensors (4 MiB each at most) goes from this process to a receiver
actor on the node, which takes it as a client does (``PeerAnswers.receive``). Each phase is
timed on the node's monotonic clock, which all its processes share: encode (``to_wire``),
transfer (from the call to the receiver's first line: Ray's serialisation into the object
store and the fetch), rebuild and finiteness (``from_wire``, which checks the values as it
copies them: rebuild is a plain copy of the same bytes, timed after the hop, and finiteness
the rest), validation (``validate``, the bounds, the names, shapes and dtypes), spool
(``Spool.keep``, what a checkpointing receiver writes before it acknowledges), queue
(``Inbox.put``) and ack (the answer back). Beside it: a bare actor call carrying the same
bytes, and a copy of them in memory. Phases are means over the repeats, as is the whole.

lap: the ``cnn`` and ResNet-18 states as every member's contribution to one lap among N client
cores, in process and on Ray actors, beside the bound T = 2(N-1)·a + 2(N-1)/N·M/B with a and
B measured in the same run (``benchmarks/exchange_lap.py``).

merge: ``DFedAvg.merge`` of k received states (the ``cnn`` and ResNet-18) into the client's own,
on one torch thread as a client on a shared core computes, beside one memcpy of the state per
state merged: the least a merge can touch. Medians over the repeats.

checkpoint: a client's checkpoint in a steady round, per method: CPU, wall time and bytes
written (``benchmarks/exchange_checkpoint.py``).

overhead: ``run_experiment`` of each method with tiny training (``--samples`` per client, one
epoch), Ray started by the run. The CPU seconds of this process and every process below it
(``common.tree_cpu_s_by_kind``: the driver, the clients, the coordinator, the slot pool and Ray's
own processes), less the training the clients report for every round (``train_cpu_s``), per
client-round; with two round counts, also the difference between the two runs per client-round
added, which leaves the launch out, in all and by kind. Beside them, what the client actors
measure themselves: their process's CPU per round less its training (``process_cpu_s`` less
``train_cpu_s``), the mean over rounds after the first: no launch in it, and far less noise
than a difference of two launches, which varies by several core-seconds on two cores.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

import numpy as np
import ray
import torch

from benchmarks.common import RESULTS, markdown_table, tree_cpu_s_by_kind, write_json
from benchmarks.exchange_checkpoint import checkpoint_row
from benchmarks.exchange_lap import (
    CLASSES,
    LAP_KINDS,
    MIB,
    SHAPE,
    laps_in_process,
    laps_on_ray,
    state_of,
    timed_ms,
)
from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.dfedavg import DFedAvg, DFedAvgOptions
from ring_actors.config import config_from_dict
from ring_actors.config.sections import ChunkedLaps
from ring_actors.coordinator.history import read_history
from ring_actors.delivery.inbox import Inbox
from ring_actors.delivery.payload_checks import HEADROOM_BYTES, Bounds, check_tensors, specs
from ring_actors.delivery.payloads import Channel, Payload
from ring_actors.delivery.spool import Spool
from ring_actors.delivery.wire import WirePayload, from_wire, to_wire
from ring_actors.storage.run_folder import RunFolder

# The parts whose table is their rows' fields: each column's header and field.
COLUMNS = {
    "merge": {"state": "backbone", "MiB": "mb", "states merged": "received",
              "merge ms": "merge_ms", "memcpy ms": "memcpy_ms"},
    "checkpoint": {"method": "method", "rounds": "rounds", "checkpoint CPU ms": "cpu_ms",
                   "wall ms": "wall_ms", "MB written": "mb_written"},
}  # fmt: skip
PHASES = ("encode", "transfer", "rebuild", "finiteness", "validation", "spool", "queue", "ack")


# ---- hop ------------------------------------------------------------------------------------


def payload_of(mb: float, seq: int = 0) -> Payload:
    """``mb`` MiB of float32 in tensors of 4 MiB at most, like a model's largest layers."""
    tensors, left = {}, int(mb * MIB) // 4
    while left > 0:
        tensors[f"t{len(tensors)}"] = torch.randn(min(left, MIB))
        left -= MIB
    return Payload(0, 0, 0, seq, tensors, num_samples=1)


@ray.remote(num_cpus=0)
class HopReceiver:
    """Takes a payload as a client does, stamping each step on the node's monotonic clock."""

    def __init__(self, spool_dir: str) -> None:
        torch.set_num_threads(1)
        self.spool, self.inbox = Spool(Path(spool_dir)), Inbox()
        self.bounds = Bounds(rounds=1, epoch_lead=0)
        self.expected: dict = {}
        self.limit = 0
        self.last: WirePayload | None = None

    def expect(self, expected: dict, limit: int) -> None:
        self.expected, self.limit = expected, limit

    def bare(self, data: np.ndarray) -> int:
        return int(data.size)

    def receive(self, wire: WirePayload) -> dict[str, float]:
        stamps = {"arrived": time.monotonic()}
        payload = from_wire(wire, self.limit)
        stamps["rebuilt"] = time.monotonic()
        payload.validate(None, self.limit)
        self.bounds.check(payload, 0)
        check_tensors(payload, self.expected)
        stamps["validated"] = time.monotonic()
        self.spool.keep(payload)
        stamps["spooled"] = time.monotonic()
        self.inbox.put(payload)
        stamps["queued"] = time.monotonic()
        self.last = wire
        return stamps

    def copy_ms(self) -> float:
        """A plain copy of the last payload's bytes into new tensors: the rebuild alone."""
        assert self.last is not None
        started = time.monotonic()
        for wired in self.last.tensors.values():
            tensor = torch.empty(wired.shape, dtype=getattr(torch, wired.dtype))
            np.copyto(tensor.view(-1).view(torch.uint8).numpy(), wired.data)
        return (time.monotonic() - started) * 1000

    def reset(self) -> None:
        self.inbox.take(Channel.SHARE)
        self.spool.retain(())
        self.last = None


def hop_row(receiver: Any, mb: float, repeats: int) -> dict[str, Any]:
    payload = payload_of(mb)
    ray.get(receiver.expect.remote(specs(payload.tensors), payload.nbytes + HEADROOM_BYTES))
    runs: list[dict[str, float]] = []
    for rep in range(repeats + 1):  # the first one warms up
        sent_payload = replace(payload, seq=rep)
        started = time.monotonic()
        wire = to_wire(sent_payload)
        sent = time.monotonic()
        stamps = ray.get(receiver.receive.remote(wire))
        acked = time.monotonic()
        copy_ms = ray.get(receiver.copy_ms.remote())
        ray.get(receiver.reset.remote())
        from_wire_ms = (stamps["rebuilt"] - stamps["arrived"]) * 1000
        rebuild_ms = min(copy_ms, from_wire_ms)
        ms = {
            "encode": sent - started,
            "transfer": stamps["arrived"] - sent,
            "validation": stamps["validated"] - stamps["rebuilt"],
            "spool": stamps["spooled"] - stamps["validated"],
            "queue": stamps["queued"] - stamps["spooled"],
            "ack": acked - stamps["queued"],
            "whole": acked - started,
        }
        ms = {k: v * 1000 for k, v in ms.items()}
        ms.update(rebuild=rebuild_ms, finiteness=from_wire_ms - rebuild_ms)
        if rep:
            runs.append(ms)
    data = np.zeros(payload.nbytes, np.uint8)
    bare, copies = [], []
    for _ in range(repeats):
        bare.append(timed_ms(lambda: ray.get(receiver.bare.remote(data))))
        flat = torch.empty(payload.nbytes, dtype=torch.uint8)
        copies.append(timed_ms(lambda flat=flat: torch.empty_like(flat).copy_(flat)))
    return {
        "part": "hop",
        "mb": mb,
        "repeats": repeats,
        "whole_ms": statistics.fmean(r["whole"] for r in runs),
        "whole_median_ms": statistics.median(r["whole"] for r in runs),
        "phases_ms": {p: statistics.fmean(r[p] for r in runs) for p in PHASES},
        "bare_ray_ms": statistics.median(bare),
        "memcpy_ms": statistics.median(copies),
    }


# ---- merge ----------------------------------------------------------------------------------


def merge_row(backbone: str, received: int, repeats: int) -> dict[str, Any]:
    """``DFedAvg.merge`` of ``received`` states into its own, against a memcpy of each."""
    state = state_of(backbone)
    options = DFedAvgOptions(backbone=backbone)
    task = TaskSpec(CLASSES, SHAPE, 1, 32, torch.device("cpu"), seed=0, shared_seed=0)
    method = DFedAvg(options, task)
    payloads = [Payload(1 + k, 0, 0, 0, state, num_samples=1) for k in range(received)]
    own = method.model.state_dict()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        merge_ms = [timed_ms(lambda: method.merge(payloads)) for _ in range(repeats)]

        def copies() -> None:
            for _ in range(received):
                for name, value in own.items():
                    value.copy_(state[name])

        memcpy_ms = [timed_ms(copies) for _ in range(repeats)]
    finally:
        torch.set_num_threads(threads)
    mb = sum(t.numel() * t.element_size() for t in state.values()) / MIB
    return {"part": "merge", "backbone": backbone, "received": received, "mb": round(mb, 1),
            "merge_ms": statistics.median(merge_ms),
            "memcpy_ms": statistics.median(memcpy_ms)}  # fmt: skip


# ---- overhead -------------------------------------------------------------------------------


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
            "schedule": {"chunked_laps": args.chunked_laps},
            "eval": {"every": rounds, "global_max_samples": 100},
            "tracking": {"uri": f"sqlite:///{out / 'mlflow.db'}"},
        }
    )
    before = tree_cpu_s_by_kind()
    started = time.monotonic()
    summary = run_experiment(config, out / "run", progress=False)
    wall_s = time.monotonic() - started
    after = tree_cpu_s_by_kind()  # Ray still up: its processes are read, not lost
    ray.shutdown()
    by_kind = {kind: after[kind] - before.get(kind, 0.0) for kind in after}
    history = read_history(RunFolder(out / "run").coordinator_history)
    # Every client-round's report: metrics.parquet holds only the scored rounds.
    reports = [(r, m) for r, by_client in history.by_round.items() for m in by_client.values()]
    train_cpu_s = sum(m.get("train_cpu_s", 0.0) for _, m in reports)
    # Round 0 also counts the client's start, from its construction.
    beyond = [m["process_cpu_s"] - m["train_cpu_s"] for r, m in reports if r > 0]
    return {
        "rounds": rounds,
        "rounds_completed": summary["rounds_completed"],
        "wall_s": wall_s,
        "cpu_s": sum(by_kind.values()),
        "cpu_s_by_kind": by_kind,
        "train_cpu_s": train_cpu_s,
        "trained_client_rounds": sum("train_cpu_s" in m for _, m in reports),
        "core_s_per_client_round": (sum(by_kind.values()) - train_cpu_s) / (clients * rounds),
        "clients_own_core_s_beyond_training": statistics.mean(beyond) if beyond else None,
    }


def overhead_row(method: str, clients: int, args: argparse.Namespace, tmp: Path) -> dict:
    runs = [
        overhead_run(method, clients, rounds, args, tmp / f"{method}-{clients}-{rounds}")
        for rounds in args.rounds
    ]
    row = {"part": "overhead", "method": method, "clients": clients,
           "checkpoint": not args.no_checkpoint, "chunked_laps": args.chunked_laps,
           "runs": runs}  # fmt: skip
    row["core_s_per_client_round"] = runs[-1]["core_s_per_client_round"]
    row["clients_own_core_s_beyond_training"] = runs[-1]["clients_own_core_s_beyond_training"]
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


# ---- driver ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exchange", description=__doc__)
    parser.add_argument("--parts", nargs="+",
                        choices=("hop", "lap", "merge", "checkpoint", "overhead"),
                        default=["hop", "lap", "merge", "checkpoint", "overhead"])  # fmt: skip
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 8, 43, 100])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--members", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    parser.add_argument("--backbones", nargs="+", default=["cnn", "resnet18"])
    parser.add_argument("--lap-kinds", nargs="+", choices=tuple(LAP_KINDS),
                        default=list(LAP_KINDS))  # fmt: skip
    parser.add_argument("--where", nargs="+", choices=("in process", "ray"),
                        default=["in process", "ray"])  # fmt: skip
    parser.add_argument(
        "--received", type=int, nargs="+", default=[1, 2, 4], help="states merged at once (merge)"
    )
    parser.add_argument(
        "--checkpoint-rounds",
        type=int,
        default=12,
        help="rounds per method (checkpoint); the first few are not timed",
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--methods", nargs="+", default=["dfedavg", "drdfl", "fedavg"])
    parser.add_argument("--rounds", type=int, nargs="+", default=[3, 9],
                        help="one count, or two: their difference leaves launch out")  # fmt: skip
    parser.add_argument("--samples", type=int, default=32, help="training samples per client")
    parser.add_argument("--no-checkpoint", action="store_true",
                        help="overhead: clients write no per-round checkpoint")  # fmt: skip
    parser.add_argument("--chunked-laps", choices=get_args(ChunkedLaps), default="auto",
                        help="overhead: the runs' schedule.chunked_laps")  # fmt: skip
    parser.add_argument("--dataset", default="fashion-mnist-sample")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json", type=Path, default=RESULTS / "exchange.json")
    args = parser.parse_args(argv)
    if len(args.rounds) > 2 or sorted(args.rounds) != args.rounds or min(args.rounds) < 1:
        parser.error(f"--rounds: one count or two ascending counts >= 1, got {args.rounds}")
    return args


def table(rows: list[dict[str, Any]]) -> str:
    parts = []
    hops = [r for r in rows if r["part"] == "hop"]
    if hops:
        header = ["MiB", "whole ms", *PHASES, "bare Ray ms", "memcpy ms"]
        parts.append(markdown_table(header, [
            [r["mb"], r["whole_ms"], *(r["phases_ms"][p] for p in PHASES), r["bare_ray_ms"],
             r["memcpy_ms"]] for r in hops]))  # fmt: skip
    laps = [r for r in rows if r["part"] == "lap"]
    if laps:
        header = ["where", "lap", "state", "N", "MiB", "lap ms", "bound ms", "a ms", "B GB/s",
                  "done"]  # fmt: skip
        parts.append(markdown_table(header, [
            [r["where"], r["kind"], r["backbone"], r["members"], r["mb"], r["lap_ms"],
             r["bound_ms"],
             f"{r['a_ms']:.3f}", r["B_gb_per_s"], r["finished"]] for r in laps]))  # fmt: skip
    for part, columns in COLUMNS.items():
        chosen = [r for r in rows if r["part"] == part]
        if chosen:
            parts.append(markdown_table(list(columns), [[r[k] for k in columns.values()]
                                                        for r in chosen]))  # fmt: skip
    costs = [r for r in rows if r["part"] == "overhead"]
    if costs:
        kinds = ("clients", "coordinator", "slot pool", "driver", "ray")
        header = ["method", "clients", "checkpoint", "laps in chunks", "core-s per client-round",
                  "a client's own, beyond training", "added per client-round",
                  *(f"added: {kind}" for kind in kinds)]  # fmt: skip
        parts.append(markdown_table(header, [
            [r["method"], r["clients"], r["checkpoint"], r["chunked_laps"],
             f"{r['core_s_per_client_round']:.3f}",
             _or_none(r["clients_own_core_s_beyond_training"]),
             _or_none(r["added_core_s_per_client_round"]),
             *(_or_none((r["added_by_kind"] or {}).get(kind)) for kind in kinds)]
            for r in costs]))  # fmt: skip
    return "\n\n".join(parts)


def _or_none(value: float | None) -> str | None:
    return None if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    rows: list[dict[str, Any]] = []

    def keep(row: dict[str, Any]) -> None:
        rows.append(row)
        write_json(args.json, rows)  # after each row: a later failure keeps what finished

    if {"hop", "lap"} & set(args.parts):
        ray.init(address="local", num_cpus=args.cores, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)  # fmt: skip
        try:
            if "hop" in args.parts:
                with tempfile.TemporaryDirectory(prefix="exchange-spool-") as spool:
                    receiver = HopReceiver.remote(spool)
                    for mb in args.sizes_mb:
                        keep(hop_row(receiver, mb, args.repeats))
                    ray.kill(receiver)
            if "lap" in args.parts:
                for backbone, members, kind in itertools.product(
                    args.backbones, args.members, args.lap_kinds
                ):  # each kind beside the other, in the same conditions
                    if "in process" in args.where:
                        keep(laps_in_process(backbone, members, args.repeats, kind))
                    if "ray" in args.where:
                        for row in laps_on_ray(backbone, members, args.repeats, kind):
                            keep(row)
        finally:
            ray.shutdown()
    if "merge" in args.parts:
        for backbone, received in itertools.product(args.backbones, args.received):
            keep(merge_row(backbone, received, args.repeats))
    if "checkpoint" in args.parts:
        with tempfile.TemporaryDirectory(prefix="exchange-checkpoint-") as folder:
            for method in args.methods:
                keep(checkpoint_row(method, args.checkpoint_rounds, Path(folder)))
    if "overhead" in args.parts:
        with tempfile.TemporaryDirectory(prefix="exchange-overhead-") as tmp:
            for method in args.methods:
                for clients in args.clients:
                    keep(overhead_row(method, clients, args, Path(tmp)))
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
