"""The papers' join experiment at this machine's scale: some clients train, then more join.

    python -m benchmarks.join_curve --veterans 15 --joiners 5 --join-round 6 --rounds 14

Runs through the real ring runtime (a ``join`` entry in the fault plan), then plots the mean
Local-T and Global-T per round of the veterans and of the joiners, logs the figure to the
run's MLflow record and writes the curves to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib
import pyarrow.parquet as pq
from mlflow.tracking import MlflowClient

from ring_actors.config import load_config
from ring_actors.runtime.driver import run_experiment

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402  (the backend must be chosen first)


def curves(rows: list[dict], veterans: int) -> dict[str, dict[str, dict[int, float]]]:
    """Per population and metric: round -> mean over that population's clients."""
    values: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for row in rows:
        group = "veterans" if row["client"] < veterans else "joiners"
        for metric in ("local_acc", "global_acc"):
            if row.get(metric) is not None:
                values[(group, metric, row["round"])].append(row[metric])
    out: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for (group, metric, round_), vals in sorted(values.items()):
        out[group][metric][round_] = statistics.fmean(vals)
    return out


def plot(data: dict, join_round: int, title: str):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    panels = zip(axes, ("local_acc", "global_acc"), ("Local-T", "Global-T"), strict=True)
    for ax, metric, label in panels:
        for group, style in (("veterans", "-o"), ("joiners", "-s")):
            points = sorted(data[group][metric].items())
            ax.plot([r for r, _ in points], [100 * v for _, v in points], style, label=group)
        ax.axvline(join_round, color="grey", linestyle=":", label="join")
        ax.set_xlabel("round")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy (%)")
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="drdfl")
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--veterans", type=int, default=15)
    parser.add_argument("--joiners", type=int, default=5)
    parser.add_argument("--join-round", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=14)
    parser.add_argument("--max-train", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/join_curve.json"))
    parser.add_argument("overrides", nargs="*", help="extra dotted overrides")
    args = parser.parse_args()
    config = load_config(
        None,
        [
            f"experiment.name=join-{args.veterans}+{args.joiners}",
            f"experiment.rounds={args.rounds}",
            f"data.dataset={args.dataset}",
            f"data.max_train_per_client={args.max_train}",
            f"clients.count={args.veterans}",
            "clients.num_cpus=0.1",
            f"algorithm.name={args.method}",
            "eval.every=1",
            "eval.global_max_samples=1000",
            "schedule.hop_timeout_s=120",
            f"faults=[{{at_round: {args.join_round}, join: {args.joiners}}}]",
            *args.overrides,
        ],
    )
    summary = run_experiment(config, progress=True)
    out_dir = Path(summary["output_dir"])
    data = curves(pq.read_table(out_dir / "metrics.parquet").to_pylist(), args.veterans)
    title = (
        f"{args.method} on {args.dataset}: {args.veterans} clients, "
        f"{args.joiners} join at round {args.join_round}"
    )
    figure = plot(data, args.join_round, title)
    mlflow = summary["mlflow"]
    MlflowClient(mlflow["tracking_uri"]).log_figure(mlflow["run_id"], figure, "join_curve.png")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out.with_suffix(".png"), dpi=100)
    settings = {k: str(v) for k, v in vars(args).items()}
    record = {"args": settings, "curves": data, "summary": summary}
    args.out.write_text(json.dumps(record, indent=2, default=float))
    for group in ("veterans", "joiners"):
        print(group, {r: round(100 * v, 2) for r, v in data[group]["local_acc"].items()})


if __name__ == "__main__":
    main()
