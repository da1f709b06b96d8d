"""Compare runs in the papers' table shape: ``python -m jobs.report RUN_DIR... [--out DIR]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ring_actors.report.build import write_report
from ring_actors.report.runs import survey
from ring_actors.report.tables import GROUPINGS, parse_by


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.report",
        description="Tabulate and plot finished runs: rows and columns by --by, seeds averaged.",
    )
    parser.add_argument(
        "runs", nargs="*", type=Path, help="run directories, or folders holding run directories"
    )
    parser.add_argument(
        "--by",
        default="method,dataset,partition",
        help=f"grouping keys, the first for rows, the rest for columns ({', '.join(GROUPINGS)})",
    )
    parser.add_argument("--out", type=Path, default=Path("report"), help="where the report goes")
    parser.add_argument(
        "--last", type=int, default=10, help="evaluated rounds averaged for Local-T / Global-T"
    )
    parser.add_argument(
        "--mlflow-uri", help="tracking URI: read --experiment's runs, and log the report there"
    )
    parser.add_argument("--experiment", help="MLflow experiment whose runs are reported on")
    parser.add_argument(
        "--report-experiment", default="reports", help="MLflow experiment the report is logged to"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        by = parse_by(args.by)
        if args.experiment and not args.mlflow_uri:
            raise ValueError("--experiment needs --mlflow-uri")
        if args.last < 1:
            raise ValueError(f"--last: must be >= 1, got {args.last}")
        paths = list(args.runs)
        if args.experiment:
            from ring_actors.report.mlflow_io import download_experiment

            paths += download_experiment(args.mlflow_uri, args.experiment, args.out / "runs")
        runs, skipped = survey(paths)
        for path, why in skipped:
            print(f"report: left out {path}: {why}", file=sys.stderr)
        if not runs:
            raise ValueError("no run directories found (each holds a summary.json)")
        files = write_report(runs, by, args.out, args.last, skipped)
    except (ValueError, FileNotFoundError) as err:
        print(f"report: {err}", file=sys.stderr)
        return 2
    print(f"{len(runs)} run(s) -> {files[0]} and {len(files) - 1} figures")
    if args.mlflow_uri:
        from ring_actors.report.mlflow_io import log_report

        run_id = log_report(args.mlflow_uri, args.report_experiment, files)
        print(f"mlflow: {args.mlflow_uri} experiment {args.report_experiment!r} run {run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
