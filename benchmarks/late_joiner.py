"""Does a late joiner initialised from its predecessor's hand-off beat a fresh one?

    python -m benchmarks.late_joiner --method drdfl --veterans 4 --joiners 2 --join-round 6 \
        --rounds-after 3 --seeds 0 1 2

A ring of veterans trains in sync mode on the in-process ring (the real client and coordinator
cores); at ``--join-round`` the fault plan splices in the joiners, which the coordinator places
and starts as on a cluster. Each seed runs twice, identical but for ``clients.join_start``:
``hand_off`` (the joiner runs the method's ``init_from`` on its predecessor's state, as the
papers do) and ``fresh``. The table compares the joiners' Local-T and Global-T over their
first rounds in the ring, averaged over joiners, then mean +- std over seeds, and the bytes
a joiner was handed.

GENE-FL's claim (agnostic joiners initialised from the learnGene beat fresh ones) is the same
comparison with joiners holding the classes the veterans never saw:

    python -m benchmarks.late_joiner --method gene_fl --joiner-classes other_half \
        --veterans 5 --joiners 5 --join-round 8 --rounds-after 8 --classes-per-client 4 \
        algorithm.known_rounds=8 algorithm.clusters=2 algorithm.gene_fraction=0.02
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import RESULTS, markdown_table
from ring_actors.config import apply_overrides, config_from_dict
from ring_actors.in_process import InProcessRing

STARTS = ("hand_off", "fresh")
HAND_OFF = re.compile(r"^(\d+) bytes from")


def joiner_curves(args: argparse.Namespace, seed: int, start: str) -> list[dict[str, Any]]:
    """Every joiner's evaluated rounds, numbered from its first round in the ring."""
    base = {
        "experiment": {
            "name": "late-joiner",
            "seed": seed,
            "rounds": args.join_round + args.rounds_after + 2,
        },
        "data": {
            "dataset": args.dataset,
            "max_train_per_client": args.max_train,
            "partition": {
                "kind": "shard",
                "classes_per_client": args.classes_per_client,
                "joiner_classes": args.joiner_classes,
            },
        },
        "clients": {"count": args.veterans, "join_start": start},
        "algorithm": {"name": args.method},
        "schedule": {"mode": "sync"},
        "eval": {"every": 1, "global_max_samples": args.global_max},
        "faults": [{"at_round": args.join_round, "join": args.joiners}],
    }
    config = config_from_dict(apply_overrides(base, args.overrides))
    with tempfile.TemporaryDirectory() as tmp:
        ring = InProcessRing.from_config(config, Path(tmp))
        ring.run(timeout_s=3600)
    joiners = range(args.veterans, args.veterans + args.joiners)
    handed = {
        e["client"]: int(match[1])
        for e in ring.coordinator.events
        if e["kind"] == "join_initialised" and (match := HAND_OFF.match(e["detail"]))
    }
    curves = []
    for joiner in joiners:
        rows = sorted(
            (r for r in ring.coordinator.rows if r["client"] == joiner), key=lambda r: r["round"]
        )
        for after, row in enumerate(rows[: args.rounds_after], start=1):
            curves.append(
                {
                    "seed": seed,
                    "start": start,
                    "joiner": joiner,
                    "round": row["round"],
                    "round_after_join": after,
                    "local_acc": row["local_acc"],
                    "global_acc": row["global_acc"],
                    "handed_mb": handed.get(joiner, 0) / 1e6,
                }
            )
    return curves


def table(rows: list[dict[str, Any]], rounds_after: int) -> str:
    """Markdown: per round after the join and start, the joiners' mean, over seeds."""
    header = ["round after join", "start", "Local-T (%)", "Global-T (%)", "MB handed to a joiner"]
    lines = []
    seeds = sorted({r["seed"] for r in rows})
    for after in range(1, rounds_after + 1):
        for start in STARTS:
            cells = []
            for key in ("local_acc", "global_acc"):
                per_seed = []
                for seed in seeds:
                    mine = [
                        r[key]
                        for r in rows
                        if (r["seed"], r["start"], r["round_after_join"]) == (seed, start, after)
                    ]
                    if mine:
                        per_seed.append(100 * statistics.fmean(mine))
                spread = statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0
                cells.append(f"{statistics.fmean(per_seed):.1f} ± {spread:.1f}")
            handed = [r["handed_mb"] for r in rows if r["start"] == start]
            lines.append([after, start, *cells, f"{statistics.fmean(handed):.2f}"])
    return markdown_table(header, lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="drdfl")
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--veterans", type=int, default=4)
    parser.add_argument("--joiners", type=int, default=2)
    parser.add_argument("--join-round", type=int, default=6)
    parser.add_argument("--rounds-after", type=int, default=3)
    parser.add_argument("--max-train", type=int, default=500)
    parser.add_argument("--classes-per-client", type=int, default=3)
    parser.add_argument("--global-max", type=int, default=2000)
    parser.add_argument(
        "--joiner-classes",
        choices=("all", "other_half"),
        default="all",
        help="other_half: joiners hold only the classes the veterans do not (GENE-FL's setting)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=RESULTS / "late_joiner.json")
    parser.add_argument("overrides", nargs="*", help="dotted overrides: algorithm.lr=0.01 ...")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for seed in args.seeds:
        for start in STARTS:
            rows += joiner_curves(args, seed, start)
            args.out.write_text(
                json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1)
            )
    print(table(rows, args.rounds_after))


if __name__ == "__main__":
    main()
