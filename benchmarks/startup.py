"""Time from ``python -m jobs.train`` to the first trained round, and where that time goes.

    RING_ACTORS_DATA=../shared/datasets python -m benchmarks.startup --repeats 3

Each repeat runs two subprocesses in a fresh temporary folder (MLflow store and outputs there,
``experiment.rounds=2``, everything else from the quickstart config unless overridden after
``--``):

* ``cli``: the real, unmodified ``python -m jobs.train --no-progress --output-dir OUT
  experiment.rounds=2 tracking.uri=sqlite:///TMP/mlflow.db``. Its timeline comes from absolute
  clocks only: the parent's ``time.time()`` just before spawning it (t = 0), the MLflow run's
  ``start_time`` (the coordinator's ``create_run``), the MLflow timestamps of each client's
  round-0 metrics (when the coordinator received the report: the round was trained, evaluated
  and its payload sent), ``start_clients`` (a round-0 metric's timestamp minus that row's
  ``time_s`` in ``metrics.parquet``, which is relative to ``start_clients``), and the exit.
* ``traced``: ``python -m benchmarks.startup --child ...``, which wraps the phases of
  ``jobs.train.main`` / ``run_experiment`` / ``launch`` with wall-clock marks (imports, config,
  dataset load, split, ``ray.init``, actor construction, coordinator registration,
  ``start_clients``) and then calls ``jobs.train.main`` with the same arguments, so the CLI's
  code runs unchanged; it gives the breakdown, the ``cli`` run the headline figure.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, cpu_by_kind, markdown_table, process_cpu

# ---- the traced child: the CLI with wall-clock marks around its phases ------------------------


# What the traced child times: each (module, attribute path, label) is replaced by a wrapper
# that notes when it starts and ends.
TRACED = (
    ("jobs.train", "load_config", "config"),
    ("ring_actors.runtime.driver", "load_dataset", "dataset"),
    ("ring_actors.runtime.driver", "split_for", "split"),
    ("ring_actors.runtime.driver", "connect_ray", "ray_init"),
    # the client actors, started in waves
    ("ring_actors.runtime.experiment", "Experiment.create_clients", "actors"),
    ("ring_actors.runtime.driver", "launch", "launch"),
    ("ring_actors.runtime.driver", "wait_and_finalize", "follow"),
)


def traced_owner(module_name: str, path: str) -> tuple[Any, str]:
    """The object that holds a traced attribute, and the attribute's name."""
    owner = importlib.import_module(module_name)
    *outer, name = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    return owner, name


def child(marks_path: Path, cli_args: list[str]) -> int:
    marks: dict[str, float] = {"child_main": time.time()}

    import jobs.train as cli  # imports ring_actors.config, hence torch

    marks["imported_cli"] = time.time()
    import ray

    import ring_actors.runtime.driver as experiment  # ray, mlflow (main imports it lazily)

    marks["imported_experiment"] = time.time()

    def timed(owner: Any, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*args, **kwargs):
            marks[f"{label}_begin"] = time.time()
            try:
                return inner(*args, **kwargs)
            finally:
                marks[f"{label}_end"] = time.time()

        setattr(owner, name, wrapper)

    class RayProxy:
        """``ray`` as the driver sees it, noting when its first ``ray.put`` returns."""

        def __getattr__(self, name: str):
            return getattr(ray, name)

        def put(self, *args, **kwargs):
            out = ray.put(*args, **kwargs)
            marks["ray_put_end"] = time.time()
            return out

    for module_name, path, label in TRACED:
        timed(*traced_owner(module_name, path), label)
    experiment.ray = RayProxy()
    try:
        return cli.main(cli_args)
    finally:
        marks_path.write_text(json.dumps({"marks": marks}))


# ---- the parent: run, then read the absolute timeline back ------------------------------------


def round0_times(out: Path) -> dict[str, float]:
    """Absolute times of the first round, from MLflow timestamps and metrics.parquet."""
    import pyarrow.parquet as pq
    from mlflow.tracking import MlflowClient

    summary = json.loads((out / "summary.json").read_text())
    client = MlflowClient(summary["mlflow"]["tracking_uri"])
    run = client.get_run(summary["mlflow"]["run_id"])
    histories = {
        c: {m.step: m for m in client.get_metric_history(run.info.run_id, f"client_{c}/train_s")}
        for c in range(summary["clients"])
    }
    # Any evaluated row (time_s is relative to start_clients) and the MLflow timestamp of the
    # same report give start_clients on the absolute clock.
    starts = [
        histories[r["client"]][r["round"]].timestamp / 1000 - r["time_s"]
        for r in pq.read_table(out / "metrics.parquet").to_pylist()
    ]
    reported = [histories[c][0].timestamp / 1000 for c in histories]
    train_s = [histories[c][0].value for c in histories]
    return {
        "mlflow_run_created": run.info.start_time / 1000,
        "start_clients": statistics.median(starts),
        "round0_first_reported": min(reported),
        "round0_all_reported": max(reported),
        "round0_train_s_mean": statistics.fmean(train_s),
        "wall_s": summary["wall_s"],
        "clients": summary["clients"],
    }


def run_once(kind: str, overrides: list[str], cold_cache: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ring-startup-") as tmp:
        tmp_path = Path(tmp)
        out, marks_path = tmp_path / "out", tmp_path / "marks.json"
        cli_args = [
            "--no-progress",
            "--output-dir",
            str(out),
            "experiment.rounds=2",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            *overrides,
        ]
        if kind == "cli":
            command = [sys.executable, "-m", "jobs.train", *cli_args]
        else:
            command = [sys.executable, "-m", "benchmarks.startup", "--child", str(marks_path)]
            command += ["--", *cli_args]
        env = dict(os.environ)
        if cold_cache:  # no decoded .npz: the gzip'd idx files are parsed again
            env["RING_ACTORS_CACHE"] = str(tmp_path / "cache")
        load = os.getloadavg()[0]
        procs0 = process_cpu()
        spawned = time.time()
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        exited = time.time()
        outside = cpu_by_kind(procs0, process_cpu()).get("outside", 0.0)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
        times = round0_times(out)
        result: dict[str, Any] = {"kind": kind, "load_before": load, "command": command}
        result["outside_share"] = outside / ((os.cpu_count() or 2) * (exited - spawned))
        result["clients"] = times.pop("clients")
        result["wall_s"] = times.pop("wall_s")
        result["round0_train_s_mean"] = times.pop("round0_train_s_mean")
        result.update({k: v - spawned for k, v in times.items()})
        result["exited"] = exited - spawned
        if kind == "traced":
            traced = json.loads(marks_path.read_text())
            result.update({k: v - spawned for k, v in traced["marks"].items()})
        return result


PHASES = [  # (label, start mark, end mark)
    ("interpreter start + runpy", None, "child_main"),
    ("import jobs.train (config, torch)", "child_main", "imported_cli"),
    ("import ring_actors.runtime.driver (ray, mlflow)", "imported_cli", "imported_experiment"),
    ("load + validate config", "config_begin", "config_end"),
    ("load_dataset", "dataset_begin", "dataset_end"),
    ("split_for + Global-T indices", "split_begin", "ray_init_begin"),
    ("ray.init (connect_ray)", "ray_init_begin", "ray_init_end"),
    ("ray.put(dataset)", "ray_init_end", "ray_put_end"),
    ("client actors started (every one constructed)", "actors_begin", "actors_end"),
    ("... -> launch returned", "actors_end", "launch_end"),
    ("launch returned -> rounds begin (start_clients)", "launch_end", "start_clients"),
    ("start_clients -> first client's round 0 reported", "start_clients", "round0_first_reported"),
    ("... -> every client's round 0 reported", "round0_first_reported", "round0_all_reported"),
]


def med(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def report(runs: list[dict[str, Any]]) -> str:
    cli = [r for r in runs if r["kind"] == "cli"]
    traced = [r for r in runs if r["kind"] == "traced"]
    lines = []
    if cli:
        lines += [
            f"real CLI, median of {len(cli)} (loads before: "
            + ", ".join(f"{r['load_before']:.2f}" for r in cli)
            + "), seconds after spawn:",
        ]
        events = []
        for key, label in (
            ("mlflow_run_created", "MLflow run created (coordinator constructed)"),
            ("start_clients", "start_clients (rounds begin)"),
            ("round0_first_reported", "first client's round 0 reported"),
            ("round0_all_reported", "every client's round 0 reported"),
            ("exited", "process exit (2 rounds, outputs written)"),
        ):
            events.append([label, f"{med(cli, key):.1f}"])
        train_s = f"{med(cli, 'round0_train_s_mean'):.1f}"
        events.append(["round 0 `train_s` (mean over clients)", train_s])
        lines.append(markdown_table(["event", "s"], events))
    if traced:
        lines += [
            "",
            f"traced breakdown, median of {len(traced)} (loads before: "
            + ", ".join(f"{r['load_before']:.2f}" for r in traced)
            + "):",
        ]
        phases = []
        for label, start, end in PHASES:
            duration = statistics.median(r[end] - (r[start] if start else 0.0) for r in traced)
            phases.append([label, f"{duration:.2f}", f"{med(traced, end):.1f}"])
        phases.append(["(MLflow run created at)", "", f"{med(traced, 'mlflow_run_created'):.1f}"])
        lines.append(markdown_table(["phase", "s", "ends at s"], phases))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        rest = argv[3:] if argv[2:3] == ["--"] else argv[2:]
        return child(Path(argv[1]), rest)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kinds", nargs="+", default=["cli", "traced"])
    parser.add_argument("--cold-cache", action="store_true", help="fresh RING_ACTORS_CACHE")
    parser.add_argument("--max-load", type=float, default=1.0, help="wait for a lower load")
    parser.add_argument("--max-wait", type=float, default=120.0)
    parser.add_argument(
        "--max-outside",
        type=float,
        default=0.05,
        help="redo a run if processes outside it took more than this share of the machine",
    )
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("overrides", nargs="*", help="extra dotted overrides for jobs.train")
    args = parser.parse_args(argv)
    if not os.environ.get("RING_ACTORS_DATA"):
        print("set RING_ACTORS_DATA to the datasets folder", file=sys.stderr)
        return 2
    runs, discarded = [], []
    for rep in range(args.repeats):
        for kind in args.kinds:
            deadline = time.monotonic() + args.max_wait
            while os.getloadavg()[0] >= args.max_load and time.monotonic() < deadline:
                time.sleep(5)
            for attempt in range(args.retries + 1):
                result = run_once(kind, args.overrides, args.cold_cache)
                if result["outside_share"] <= args.max_outside or attempt == args.retries:
                    break
                print(f"  contended ({result['outside_share']:.1%} outside): again", flush=True)
                discarded.append(result)
                deadline = time.monotonic() + args.max_wait
                while os.getloadavg()[0] >= args.max_load and time.monotonic() < deadline:
                    time.sleep(5)
            result["attempts"] = attempt + 1
            print(
                f"  {kind:6} rep={rep} load={result['load_before']:.2f} "
                f"start_clients={result['start_clients']:.1f}s "
                f"round0 first={result['round0_first_reported']:.1f}s "
                f"all={result['round0_all_reported']:.1f}s exit={result['exited']:.1f}s "
                f"outside={result['outside_share']:.1%}",
                flush=True,
            )
            runs.append(result)
    print(report(runs))
    if args.json:
        saved = {"args": vars(args), "runs": runs, "discarded": discarded}
        args.json.write_text(json.dumps(saved, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
