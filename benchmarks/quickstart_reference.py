"""The quickstart's reference figures, from real runs of its own config with every fault in it.

    python -m jobs.sweep --no-progress --output-dir /tmp/qs-ref \\
        algorithm.name=local,fedavg experiment.seed=0,1,2
    python -m benchmarks.quickstart_reference /tmp/qs-ref \\
        --out benchmarks/results/quickstart_reference.json \\
        --write-baseline jobs/configs/quickstart.baseline.json

``jobs.train`` ends its table with the run against ``local`` on the same setting; no run
trains ``local`` beside it, so ``local``'s figures come from here: the same config through the
same runtime (asynchronous ring, the crash, the joiner), with seeds that give other splits.
The baseline's ``config`` holds every setting key of the runs (all but the method, the seed,
where outputs go and how the run is placed), so a run that changes any of them is told that
no reference fits it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import markdown_table
from ring_actors.run_setting import METHOD, setting_keys


def read_runs(folder: Path) -> list[dict[str, Any]]:
    """Each finished run under ``folder``: its method, seed, setting and final figures."""
    runs = []
    for summary_file in sorted(folder.glob("*/summary.json")):
        summary = json.loads(summary_file.read_text())
        config = yaml.safe_load((summary_file.parent / "config.yaml").read_text())
        if summary.get("stopped"):
            raise SystemExit(f"{summary_file.parent} stopped: {summary['stopped']}")
        if summary["rounds_completed"] < config["experiment"]["rounds"]:
            raise SystemExit(f"{summary_file.parent} has not finished")
        runs.append(
            {
                "folder": summary_file.parent.name,
                "method": config["algorithm"]["name"],
                "seed": config["experiment"]["seed"],
                "setting": setting_keys(config, METHOD),
                "local_acc": summary["local_acc"]["mean"],
                "global_acc": summary["global_acc"]["mean"],
                "rounds_completed": summary["rounds_completed"],
                "events": summary["events"],
                "recovery": summary["recovery"],
                "wall_s": summary["wall_s"],
            }
        )
    return runs


def stat(values: list[float]) -> dict[str, Any]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "per_seed": values,
    }


def reference(runs: list[dict[str, Any]], command: str) -> dict[str, Any]:
    """The baseline ``jobs.train`` reads: per method, final Local-T and Global-T over seeds."""
    settings = {json.dumps(r["setting"], sort_keys=True) for r in runs}
    if len(settings) != 1:
        raise SystemExit("the runs differ in more than method and seed: one setting only")
    seeds = sorted({r["seed"] for r in runs})
    methods = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = sorted((r for r in runs if r["method"] == method), key=lambda r: r["seed"])
        if [r["seed"] for r in mine] != seeds:
            raise SystemExit(f"{method}: seeds {[r['seed'] for r in mine]}, expected {seeds}")
        methods[method] = {key: stat([r[key] for r in mine]) for key in ("local_acc", "global_acc")}
    return {
        "command": command,
        "source": "benchmarks/quickstart_reference.py: real runs of this config (async ring, "
        "the crash and the joiner), final client means",
        "config": runs[0]["setting"],
        "seeds": seeds,
        "methods": methods,
    }


def table(record: dict[str, Any]) -> str:
    rows = []
    for method, figures in record["methods"].items():
        loc, glo = figures["local_acc"], figures["global_acc"]
        per_seed = ", ".join(f"{100 * v:.2f}" for v in glo["per_seed"])
        rows.append([method, f"{100 * loc['mean']:.2f} ± {100 * loc['std']:.2f}",
                     f"{100 * glo['mean']:.2f} ± {100 * glo['std']:.2f}", per_seed])  # fmt: skip
    return markdown_table(["method (3 seeds)", "Local-T", "Global-T", "Global-T per seed"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a jobs.sweep output folder")
    parser.add_argument("--out", type=Path, required=True, help="every run's figures (JSON)")
    parser.add_argument("--write-baseline", type=Path, default=None)
    args = parser.parse_args(argv)
    runs = read_runs(args.runs)
    if not runs:
        raise SystemExit(f"no finished run under {args.runs}")
    methods = ",".join(dict.fromkeys(r["method"] for r in runs))
    seeds = ",".join(str(s) for s in sorted({r["seed"] for r in runs}))
    command = (
        f"python -m jobs.sweep --no-progress --output-dir {args.runs} algorithm.name={methods} "
        f"experiment.seed={seeds}; python -m benchmarks.quickstart_reference "
        + " ".join(argv if argv is not None else sys.argv[1:])
    )
    record = reference(runs, command)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"reference": record, "runs": runs}, indent=1) + "\n")
    if args.write_baseline:
        args.write_baseline.write_text(json.dumps(record, indent=1) + "\n")
    print(table(record))


if __name__ == "__main__":
    main()
