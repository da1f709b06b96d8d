"""Methods side by side on the same partitions and seeds, through the real ring runtime.

    python -m benchmarks.compare --datasets fashion-mnist cifar10 \
        --partitions shard:2 dirichlet:0.3 --methods drdfl local dfedavg --rounds 20

A method may carry its own overrides after a colon, e.g.
``drdfl:topology.kind=dynamic,topology.degree=2``. Prints a Markdown table (Local-T,
Global-T, bytes per round per client and per hop, wall time) and writes every summary to
``--out`` as JSON lines.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.common import markdown_table
from ring_actors.config import load_config
from ring_actors.runtime.driver import run_experiment


def partition_overrides(spec: str) -> list[str]:
    """``shard:2`` or ``dirichlet:0.3`` or ``iid`` as config overrides."""
    kind, _, value = spec.partition(":")
    overrides = [f"data.partition.kind={kind}"]
    if kind == "shard":
        overrides.append(f"data.partition.classes_per_client={value or 2}")
    elif kind == "dirichlet":
        overrides.append(f"data.partition.beta={value or 0.5}")
    return overrides


def method_overrides(spec: str) -> list[str]:
    """``name`` or ``name:key=value,key=value`` as config overrides."""
    name, _, rest = spec.partition(":")
    return [f"algorithm.name={name}", *[o for o in rest.split(",") if o]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["fashion-mnist", "cifar10"])
    parser.add_argument("--partitions", nargs="+", default=["shard:2", "dirichlet:0.3"])
    parser.add_argument("--methods", nargs="+", default=["drdfl", "local", "dfedavg"])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-train", type=int, default=500)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/compare.jsonl"))
    parser.add_argument("overrides", nargs="*", help="extra dotted overrides for every run")
    args = parser.parse_args()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for dataset in args.datasets:
        for partition in args.partitions:
            for method in args.methods:
                config = load_config(
                    None,
                    [
                        f"experiment.name=compare-{dataset}-{partition.replace(':', '')}",
                        f"experiment.seed={args.seed}",
                        f"experiment.rounds={args.rounds}",
                        f"data.dataset={dataset}",
                        f"data.max_train_per_client={args.max_train}",
                        *partition_overrides(partition),
                        f"clients.count={args.clients}",
                        *method_overrides(method),
                        f"eval.every={args.eval_every}",
                        "eval.global_max_samples=2000",
                        *args.overrides,
                    ],
                )
                summary = run_experiment(config, progress=False)
                record = {"partition": partition, "method": method, **summary}
                with args.out.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")
                rows.append(record)
                print(markdown_table(HEADER, [table_row(record)]).splitlines()[-1], flush=True)
    print("\n" + markdown_table(HEADER, map(table_row, rows)))


HEADER = ["dataset", "partition", "method", "Local-T (%)", "Global-T (%)", "MB/round/client",
          "bytes/hop", "wall (s)"]  # fmt: skip


def table_row(s: dict) -> list[str]:
    local, global_ = s["local_acc"], s["global_acc"]
    return [
        s["dataset"],
        s["partition"],
        s.get("method", s["algorithm"]),
        f"{100 * local['mean']:.2f} ± {100 * local['std']:.2f}",
        f"{100 * global_['mean']:.2f} ± {100 * global_['std']:.2f}",
        f"{s.get('mb_per_round_per_client', 0.0):.3f}",
        f"{s['bytes_per_hop']:,.0f}",
        f"{s['wall_s']:.0f}",
    ]


if __name__ == "__main__":
    main()
