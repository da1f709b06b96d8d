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
B measured in the same run (``benchmarks/exchange/lap.py``).

merge: ``DFedAvg.merge`` of k received states (the ``cnn`` and ResNet-18) into the client's own,
on one torch thread as a client on a shared core computes, beside one memcpy of the state per
state merged: the least a merge can touch. Medians over the repeats.

checkpoint: a client's checkpoint in a steady round, per method: CPU, wall time and bytes
written (``benchmarks/exchange/checkpoint.py``).

overhead: ``run_experiment`` of each method with tiny training (``--samples`` per client, one
epoch), Ray started by the run. The CPU seconds of this process and every process below it
(``common.tree_cpu_s_by_kind``: the driver, the clients, the coordinator, the slot pool and Ray's
own processes), less the training the clients report for every round (``train_cpu_s``), per
client-round; with two round counts, also the difference between the two runs per client-round
added, which leaves the launch out, in all and by kind. Beside them, what the client actors
measure themselves: their process's CPU per round less its training (``process_cpu_s`` less
``train_cpu_s``), the mean over rounds after the first: no launch in it, and far less noise
than a difference of two launches, which varies by several core-seconds on two cores; and the
same less the local training alone (``train_cpu_s`` less ``merge_cpu_s``), which counts a
method's average as the framework's whether a lap or a merge of pushes does it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
from pathlib import Path
from typing import Any, get_args

import ray

from benchmarks.common import RESULTS, markdown_table, write_json
from benchmarks.exchange.checkpoint import checkpoint_row
from benchmarks.exchange.hop import PHASES, HopReceiver, hop_row
from benchmarks.exchange.lap import LAP_KINDS, laps_in_process, laps_on_ray
from benchmarks.exchange.merge import merge_row
from benchmarks.exchange.overhead import overhead_row
from ring_actors.config.persistence import CheckpointSection
from ring_actors.config.sections import ChunkedLaps

__all__ = ["PHASES", "main"]

# The parts whose table is their rows' fields: each column's header and field.
COLUMNS = {
    "merge": {"state": "backbone", "MiB": "mb", "states merged": "received",
              "merge ms": "merge_ms", "memcpy ms": "memcpy_ms"},
    "checkpoint": {"method": "method", "rounds": "rounds", "checkpoint CPU ms": "cpu_ms",
                   "wall ms": "wall_ms", "the round's wait ms": "on_path_ms",
                   "MB written": "mb_written"},
}  # fmt: skip


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
                        help="overhead: clients write no checkpoint")  # fmt: skip
    parser.add_argument("--checkpoint-every", type=int, default=CheckpointSection.every_rounds,
                        help="overhead: the runs' checkpoint.every_rounds")  # fmt: skip
    parser.add_argument("--chunked-laps", choices=get_args(ChunkedLaps), default="auto",
                        help="overhead: the runs' schedule.chunked_laps")  # fmt: skip
    parser.add_argument("--idle-s", type=float, default=10.0,
                        help="overhead: seconds idle actors are timed (Ray's floor)")  # fmt: skip
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
        header = ["method", "clients", "checkpoint", "every rounds", "laps in chunks",
                  "s per round",
                  "core-s per client-round",
                  "a client's own, beyond training", "beyond local training",
                  "an idle actor's, a round",
                  "added per client-round",
                  *(f"added: {kind}" for kind in kinds), "client peak RSS MB"]  # fmt: skip
        parts.append(markdown_table(header, [
            [r["method"], r["clients"], r["checkpoint"], r.get("checkpoint_every"),
             r["chunked_laps"],
             _or_none(r["runs"][-1].get("round_s")), f"{r['core_s_per_client_round']:.3f}",
             _or_none(r["clients_own_core_s_beyond_training"]),
             _or_none(r["clients_own_core_s_beyond_local_training"]),
             _or_none(r.get("idle_floor_per_client_round")),
             _or_none(r["added_core_s_per_client_round"]),
             *(_or_none((r["added_by_kind"] or {}).get(kind)) for kind in kinds),
             r["runs"][-1].get("client_peak_rss_mb", {}).get("median")]
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
