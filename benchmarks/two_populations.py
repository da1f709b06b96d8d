"""GENE-FL's two-population setting at this machine's scale: known clients, then agnostic ones.

    python -m benchmarks.two_populations --methods gene_fl fedavg local \
        --known 10 --agnostic 10 --known-rounds 10 --agnostic-rounds 10

The known clients hold half of the classes and train for ``--known-rounds``; then the
agnostic clients join with the other half (``joiner_classes: other_half``), each initialised
by its method's hand-off, and train for ``--agnostic-rounds``. Per method it reports the
papers' metrics: known-phase and agnostic-phase accuracy (each population's Local-T, mean
over its last ``--last`` evaluated rounds of its phase), Comm (every byte the known clients
put on the wire during the known phase, and for GENE-FL also the paper's accounting: the
learnGene layers each participant uploads) and Initia (the bytes of a joiner's hand-off).
Every run's summary and metrics go to ``--out`` as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

import pyarrow.parquet as pq

from benchmarks.common import markdown_table
from ring_actors.config import load_config
from ring_actors.runtime.driver import run_experiment

HAND_OFF = re.compile(r"^(\d+) bytes from")


def phase_accuracy(rows: list[dict], clients: range, rounds: range, last: int) -> float:
    """Mean over ``clients`` of each one's mean Local-T over its last ``last`` rounds in
    ``rounds``."""
    per_client = []
    for client in clients:
        values = sorted(
            (r["round"], r["local_acc"])
            for r in rows
            if r["client"] == client and r["round"] in rounds and r.get("local_acc") is not None
        )
        if values:
            per_client.append(statistics.fmean(v for _, v in values[-last:]))
    return statistics.fmean(per_client) if per_client else float("nan")


def measure(rows: list[dict], events: list[dict], args: argparse.Namespace) -> dict:
    known, agnostic = range(args.known), range(args.known, args.known + args.agnostic)
    known_phase = range(args.known_rounds)
    total_rounds = range(args.known_rounds + args.agnostic_rounds)
    in_known = [r for r in rows if r["client"] in known and r["round"] in known_phase]
    hand_offs = [
        int(m[1])
        for e in events
        if e["kind"] == "join_initialised" and (m := HAND_OFF.match(e["detail"] or ""))
    ]
    return {
        "known_acc": phase_accuracy(rows, known, known_phase, args.last),
        "agnostic_acc": phase_accuracy(rows, agnostic, total_rounds, args.last),
        "comm_wire_mb": sum(r.get("bytes_sent") or 0.0 for r in in_known) / 1e6,
        "comm_upload_mb": sum(r.get("upload_bytes") or 0.0 for r in in_known) / 1e6,
        "initia_handoff_mb": statistics.fmean(hand_offs) / 1e6 if hand_offs else 0.0,
        "initia_gene_mb": statistics.fmean(
            [r["initia_bytes"] for r in rows if r.get("initia_bytes")] or [0.0]
        )
        / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["gene_fl", "fedavg", "local"])
    parser.add_argument("--dataset", default="cifar10")
    parser.add_argument("--shards", type=int, default=4, help="classes per client")
    parser.add_argument("--known", type=int, default=10)
    parser.add_argument("--agnostic", type=int, default=10)
    parser.add_argument("--known-rounds", type=int, default=10)
    parser.add_argument("--agnostic-rounds", type=int, default=10)
    parser.add_argument("--last", type=int, default=5, help="rounds averaged per phase")
    parser.add_argument("--max-train", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/two_populations.jsonl")
    )
    parser.add_argument("overrides", nargs="*", help="extra dotted overrides for every run")
    args = parser.parse_args()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    header = ["method", "known acc (%)", "agnostic acc (%)", "Comm wire (MB)",
              "Comm upload (MB)", "Initia hand-off (MB)", "wall (s)"]  # fmt: skip
    print(markdown_table(header, []))
    for method in args.methods:
        name, _, extra = method.partition(":")
        config = load_config(
            None,
            [
                f"experiment.name=two-populations-{args.dataset}",
                f"experiment.seed={args.seed}",
                f"experiment.rounds={args.known_rounds + args.agnostic_rounds}",
                f"data.dataset={args.dataset}",
                f"data.max_train_per_client={args.max_train}",
                "data.partition.kind=shard",
                f"data.partition.classes_per_client={args.shards}",
                "data.partition.joiner_classes=other_half",
                f"clients.count={args.known}",
                f"clients.num_cpus={2 / (args.known + args.agnostic):.4f}",
                f"algorithm.name={name}",
                *[o for o in extra.split(",") if o],
                "eval.every=1",
                "eval.global_max_samples=500",
                "schedule.hop_timeout_s=120",
                f"faults=[{{at_round: {args.known_rounds}, join: {args.agnostic}}}]",
                *args.overrides,
            ],
        )
        summary = run_experiment(config, progress=False)
        out_dir = Path(summary["output_dir"])
        rows = pq.read_table(out_dir / "metrics.parquet").to_pylist()
        events = pq.read_table(out_dir / "events.parquet").to_pylist()
        result = measure(rows, events, args)
        record = {
            "method": method,
            "args": vars(args) | {"out": str(args.out)},
            **result,
            "summary": summary,
        }
        with args.out.open("a") as handle:
            handle.write(json.dumps(record, default=float) + "\n")
        row = [method, f"{100 * result['known_acc']:.2f}", f"{100 * result['agnostic_acc']:.2f}",
               f"{result['comm_wire_mb']:.1f}", f"{result['comm_upload_mb']:.1f}",
               f"{result['initia_handoff_mb']:.2f}", f"{summary['wall_s']:.0f}"]  # fmt: skip
        print(markdown_table(header, [row]).splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
