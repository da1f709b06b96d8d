"""Run a grid of experiments one after another on one Ray:
``python -m jobs.sweep [--config PATH] [--output-dir DIR] key=v1,v2 other.key=a,b ...``.

Each ``key=values`` is split at its top-level commas (``faults=[{...}, {...}]`` stays one
value); the grid is every combination, in the order given. Every point is validated before
Ray starts, runs in its own output directory (named after the values that vary) as its own
MLflow run under one parent run, and is skipped when run again once it has finished; one
that was interrupted is resumed from its checkpoints. A run that was stopped (by the watchdog
or a client error) counts as finished: its summary says why; remove its directory to run it
again.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from jobs.train import DEFAULT_CONFIG, INTERRUPTED, exit_with
from ring_actors.config import Config, ConfigError, load_config
from ring_actors.coordinator.tracking import create_sqlite_store, resolve_tracking_uri
from ring_actors.preflight.output_folder import finished_summary
from ring_actors.storage.durable import write_atomic
from ring_actors.storage.redact import public_config, redact_uri
from ring_actors.storage.run_folder import RunFolder

SWEEP_FILE = "sweep.json"  # in the sweep's directory: its MLflow parent run, kept for re-runs


@dataclass(frozen=True)
class Point:
    """One experiment of the grid: its overrides, its config and where it writes."""

    overrides: tuple[str, ...]
    config: Config
    output_dir: Path


def expand(overrides: list[str]) -> list[tuple[str, ...]]:
    """Every combination of the values of ``key=v1,v2`` overrides, as plain overrides."""
    axes = []
    for text in overrides:
        key, sep, raw = text.partition("=")
        if not sep or not key:
            raise ConfigError(f"sweep axis {text!r}: expected dotted.key=value[,value...]")
        try:
            values = yaml.safe_load(f"[{raw}]")
        except yaml.YAMLError as err:
            raise ConfigError(f"{key}: not valid YAML ({str(err).splitlines()[0]})") from err
        axes.append([f"{key.strip()}={json.dumps(value)}" for value in values or [None]])
    return list(itertools.product(*axes))


def run_name(point: tuple[str, ...], varying: set[str]) -> str:
    """The directory name of a point: the overrides that vary across the grid."""
    parts = [o for o in point if o.partition("=")[0] in varying]
    name = ",".join(p.replace('"', "") for p in parts) or "run"
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)  # no ":": scp and rsync take it for a host


def plan(config_path: Path, overrides: list[str], sweep_dir: Path) -> list[Point]:
    """The grid's points, each config loaded and validated (a bad one raises ConfigError)."""
    grid = expand(overrides)
    keys = [o.partition("=")[0] for o in grid[0]] if grid else []
    varying = {k for i, k in enumerate(keys) if len({point[i] for point in grid}) > 1}
    points = []
    for point in grid:
        try:
            config = load_config(config_path, list(point))
        except ConfigError as err:
            raise ConfigError(f"{' '.join(point)}: {err}") from err
        points.append(Point(point, config, sweep_dir / run_name(point, varying)))
        check_existing(points[-1])
    return points


def check_existing(point: Point) -> None:
    """Refuse a point whose directory holds a run of another config (a key that does not
    vary, and so is not in the name, changed since)."""
    path = RunFolder(point.output_dir).config
    if not path.is_file():
        return
    held = yaml.safe_load(path.read_text())
    held["tracking"]["parent_run_id"] = None
    if held != public_config(point.config.to_dict()):
        raise ConfigError(
            f"{point.output_dir} holds a run of another config: remove it or pass another "
            "--output-dir"
        )


def finished(point: Point) -> bool:
    """True when the point's directory holds a run that ended: all its rounds, its time
    budget, or stopped (by the watchdog or an error); an interrupted run is not finished,
    nor is one whose summary is torn (a kill mid-write by an older version): run again."""
    return finished_summary(point.output_dir, point.config.experiment.rounds) is not None


def parent_run(points: list[Point], sweep_dir: Path) -> str | None:
    """The sweep's MLflow parent run: created once, found again by a re-run; none when
    no point tracks."""
    if not any(point.config.tracking.enabled for point in points):
        return None
    record = sweep_dir / SWEEP_FILE
    if record.is_file():
        return json.loads(record.read_text())["parent_run_id"]
    from mlflow.tracking import MlflowClient

    config = next(point.config for point in points if point.config.tracking.enabled)
    uri = resolve_tracking_uri(config.tracking.uri, Path.cwd())
    create_sqlite_store(uri)
    client = MlflowClient(uri)
    name = config.tracking.experiment or config.experiment.name
    found = client.get_experiment_by_name(name)
    experiment_id = found.experiment_id if found else client.create_experiment(name)
    run_id = client.create_run(experiment_id, run_name=f"sweep-{sweep_dir.name}").info.run_id
    client.set_terminated(run_id)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    public = {"parent_run_id": run_id, "tracking_uri": redact_uri(uri)}
    write_atomic(record, json.dumps(public, indent=1))
    return run_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.sweep", description=__doc__)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="YAML config file")
    parser.add_argument("--output-dir", type=Path, default=None, help="the sweep's directory")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.add_argument("axes", nargs="*", metavar="key=v1,v2", help="the grid")
    args = parser.parse_args(argv)
    sweep_dir = args.output_dir or Path("runs") / f"sweep-{args.config.stem}"
    try:
        points = plan(args.config, args.axes, sweep_dir)
    except (ConfigError, OSError) as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    todo = [p for p in points if not finished(p)]
    print(f"sweep: {len(points)} runs in {sweep_dir}, {len(points) - len(todo)} already finished")
    if not todo:
        return 0
    parent = parent_run(points, sweep_dir)
    from ring_actors.runtime.signals import (  # Ray only once every config is valid
        RunInterrupted,
        ray_session,
    )

    try:
        with ray_session():
            return _run_points(todo, parent, args)
    except (RunInterrupted, KeyboardInterrupt) as err:  # twice, or before a run started
        print(f"sweep interrupted: run it again to go on ({err or 'interrupted'})", file=sys.stderr)
        return INTERRUPTED


def _run_points(todo: list[Point], parent: str | None, args: argparse.Namespace) -> int:
    """Each point in turn; INTERRUPTED at once if one is interrupted, else 1 if any stopped."""
    from ring_actors.runtime.driver import run_experiment

    failed = 0
    for number, point in enumerate(todo, 1):
        resume = RunFolder(point.output_dir).holds_run()
        how = "resuming" if resume else "starting"
        print(f"[{number}/{len(todo)}] {how} {' '.join(point.overrides)}", file=sys.stderr)
        tracked = parent and point.config.tracking.enabled
        nested = [f"tracking.parent_run_id={json.dumps(parent)}"] if tracked else []
        config = load_config(args.config, [*point.overrides, *nested])
        summary = run_experiment(config, point.output_dir, not args.no_progress, resume)
        if summary["stopped"] == "interrupted":
            print("sweep interrupted: run it again to go on", file=sys.stderr)
            return INTERRUPTED
        failed += bool(summary["stopped"])
        print(
            f"{point.output_dir.name}: Local-T {100 * summary['local_acc']['mean']:.2f} "
            f"Global-T {100 * summary['global_acc']['mean']:.2f}"
            + (f" (stopped: {summary['stopped']})" if summary["stopped"] else "")
        )
    return 1 if failed else 0


if __name__ == "__main__":
    exit_with(main())
