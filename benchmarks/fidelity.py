"""Every method against ``local`` and the averaging baselines, on the in-process ring.

    python -m benchmarks.fidelity --methods local dfedavg fedavg drdfl gene_fl ua_pdfl pfedgm \
        --clients 10 --samples 250 --partition shard:2 --rounds 20 --seeds 0 1 2

Each run is the real client and coordinator cores over the in-memory transport
(``ring_actors.in_process``) in sync mode, so many methods and seeds fit on two CPUs and
every change to the client core reaches these figures. Every method sees the same
partitions and seeds; each client's Local-T is a seeded ``--local-max`` subset of its test
split. The per-round records come from the coordinator's rows (evaluated every
``--eval-every`` rounds and each of the last ``--last``); the shared-state spread from the
clients after the run. ``--exchange none`` or ``noise`` is the run's ``schedule.exchange``
(nothing merged and no laps, or Gaussian noise with each tensor's mean and std in place of
what arrived): the controls that tell whether what travels matters.

A method may carry option overrides after a colon: ``gene_fl:lambda1=0.05,participation=1``;
keys starting with ``@`` change the setting for that method only: ``drdfl:@exchange=none``,
``ua_pdfl:@topology=dynamic,@degree=5``.
Each run records the partition it used (``runs[i]["partition"]``: path and SHA-256): the
split is written under ``<out>-partitions/`` so another tool or run can load it
(``data.partition.kind=file``); ``--partition file:PATH`` (``{seed}`` in PATH is replaced by
the seed) makes every arm use a split written before.
Prints a Markdown table (Local-T and Global-T: mean over the last ``--last`` evaluated rounds,
mean +- std over seeds; MB sent per client per round) and writes every run to a JSON file;
``--figures DIR`` and ``--mlflow-uri URI`` draw accuracy by round per method (the report's own
figures) and log them to MLflow.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import typing
from pathlib import Path

import torch

from benchmarks.common import RESULTS, markdown_table, mean_std
from benchmarks.fidelity_ring import Setting, config_keys, run_config, run_ring
from ring_actors.data.client_splits import split_for
from ring_actors.data.partition_file import partition_digest, save_partition
from ring_actors.data.sources import DatasetArrays, load_dataset
from ring_actors.plugins.methods import resolve_algorithm
from ring_actors.report.figures import accuracy_curves
from ring_actors.report.mlflow_io import log_report
from ring_actors.report.runs import EvalRow, Run
from ring_actors.report.tables import build_table
from ring_actors.run_setting import unflatten


def parse_method(spec: str, setting: Setting) -> tuple[str, dict[str, object], Setting]:
    """``name`` or ``name:key=value,...``: method options coerced to their declared types;
    keys starting with ``@`` change this spec's ``Setting`` (``@exchange=none``)."""
    name, _, rest = spec.partition(":")
    hints = typing.get_type_hints(resolve_algorithm(name).Options)
    setting_hints = typing.get_type_hints(Setting)
    overrides: dict[str, object] = {}
    changes: dict[str, object] = {}
    for item in filter(None, rest.split(",")):
        key, _, text = item.partition("=")
        if key.startswith("@"):
            changes[key[1:]] = _coerce(text, setting_hints[key[1:]])
        else:
            overrides[key] = _coerce(text, hints[key])
    return name, overrides, dataclasses.replace(setting, **changes)


def _coerce(text: str, hint: object) -> object:
    """A command-line value as the option's type (bool, int, float, str, or None)."""
    args = typing.get_args(hint)
    if text.lower() in ("none", "null") and type(None) in args:
        return None
    kinds = [a for a in args if a is not type(None)] if args else [hint]
    for kind in kinds:
        if kind is bool:
            return text.lower() in ("1", "true", "yes")
        if kind in (int, float):
            return kind(text)
    return text


def summarise(run: dict, last: int) -> dict[str, float]:
    """Client-mean accuracies averaged over the last ``last`` evaluated rounds."""
    tail = run["rounds"][-last:]
    return {
        "local": statistics.fmean(statistics.fmean(r["local"]) for r in tail),
        "global": statistics.fmean(statistics.fmean(r["global"]) for r in tail),
        "local_min": statistics.fmean(min(r["local"]) for r in tail),
        "mb_sent": statistics.fmean(statistics.fmean(r["mb_sent"]) for r in tail),
    }


def table(runs: list[dict], last: int) -> str:
    """Markdown: one row per method spec, mean ± std over seeds."""
    by_spec: dict[str, list[dict]] = {}
    for run in runs:
        by_spec.setdefault(run["spec"], []).append(summarise(run, last))
    header = ["method", "Local-T", "Global-T", "worst client Local-T", "MB sent / client / round"]
    return markdown_table(
        header,
        (
            [
                spec,
                *(mean_std([s[key] for s in summaries], 100) for key in ("local", "global")),
                mean_std([s["local_min"] for s in summaries], 100),
                f"{statistics.fmean(s['mb_sent'] for s in summaries):.3f}",
            ]
            for spec, summaries in by_spec.items()
        ),
    )


def as_report_run(run: dict) -> Run:
    """A benchmark run as the report's ``Run``, named by its spec (the table's row)."""
    setting = Setting(**run["setting"])
    config = unflatten({**config_keys(setting), "experiment.seed": run["seed"]})
    rows = tuple(
        EvalRow(client, r["round"], 0.0, local, glob)
        for r in run["rounds"]
        for client, (local, glob) in enumerate(zip(r["local"], r["global"], strict=True))
    )
    summary = {"algorithm": run["spec"], "rounds_completed": setting.rounds}
    return Run(Path(f"{run['spec']}-seed{run['seed']}"), config, summary, rows, ())


def write_curves(runs: list[dict], out: Path, mlflow_uri: str | None, experiment: str) -> None:
    """Accuracy by round, a line per method spec (mean over seeds, ± std band), a figure per
    dataset and partition, written to ``out`` and logged to MLflow when a URI is given."""
    table = build_table([as_report_run(run) for run in runs], ("method", "dataset", "partition"))
    out.mkdir(parents=True, exist_ok=True)
    figures = accuracy_curves(table, out)
    print("figures:", *figures)
    if mlflow_uri:
        run_id = log_report(mlflow_uri, experiment, figures)
        print(f"mlflow: {mlflow_uri} experiment {experiment!r} run {run_id}")


def record_partition(setting: Setting, arrays: DatasetArrays, seed: int, folder: Path) -> dict:
    """The partition file a run used, and its digest: the one it was given (``file:``), or
    the split written into ``folder`` so that another run or tool can load the very same."""
    config = run_config(setting, seed)
    splits = split_for(config, arrays)
    path = config.data.partition.path
    if path is None:
        name = f"{setting.dataset}-{setting.partition}-{setting.clients}c-{setting.samples}"
        safe = "".join(ch if ch.isalnum() or ch in ".-" else "_" for ch in name)
        path = str(save_partition(folder / f"{safe}-seed{seed}.json", splits, setting.dataset))
    return {"path": path, "sha256": partition_digest(splits)}


def baseline(runs: list[dict], setting: Setting, seeds: list[int], command: str) -> dict:
    """Reference figures for ``jobs.train``'s table: each plain method's final accuracies.

    Only specs without options or setting changes are kept: they ran ``setting`` with the
    method's defaults, which is what a run of the same config does.
    """
    methods: dict[str, dict[str, dict]] = {}
    for spec in dict.fromkeys(run["spec"] for run in runs):
        if ":" in spec:
            continue
        summaries = [summarise(run, setting.last) for run in runs if run["spec"] == spec]
        methods[spec] = {
            f"{key}_acc": {
                "mean": statistics.fmean(s[key] for s in summaries),
                "std": statistics.stdev(s[key] for s in summaries) if len(summaries) > 1 else 0.0,
                "per_seed": [s[key] for s in summaries],
            }
            for key in ("local", "global")
        }
    return {
        "command": command,
        "source": "benchmarks/fidelity.py: the in-process ring in sync mode, the same "
        "partitions and test sets as a run of this config",
        "config": config_keys(setting),
        "setting": dataclasses.asdict(setting),
        "seeds": seeds,
        "last_evaluated_rounds": setting.last,
        "methods": methods,
    }


def main(argv: list[str] | None = None) -> None:
    defaults = Setting()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["local", "dfedavg", "fedavg", "drdfl"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=RESULTS / "fidelity.json")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--write-baseline",
        type=Path,
        default=None,
        metavar="JSON",
        help="also write the plain methods' figures as the reference jobs.train prints",
    )
    parser.add_argument("--figures", type=Path, metavar="DIR", help="draw accuracy by round")
    parser.add_argument("--mlflow-uri", help="log the figures to this tracking store")
    parser.add_argument("--experiment", default="fidelity", help="the figures' MLflow experiment")
    for field in dataclasses.fields(Setting):
        flag = "--" + field.name.replace("_", "-")
        kind = int if str(field.type).startswith("int") else str
        parser.add_argument(flag, type=kind, default=getattr(defaults, field.name))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    setting = Setting(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Setting)})
    arrays = load_dataset(setting.dataset, setting.root, download=False)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partitions = args.out.with_name(args.out.stem + "-partitions")
    runs = []
    for spec in args.methods:
        name, overrides, spec_setting = parse_method(spec, setting)
        for seed in args.seeds:
            run = run_ring(name, overrides, spec_setting, arrays, seed)
            run["spec"], run["setting"] = spec, dataclasses.asdict(spec_setting)
            run["partition"] = record_partition(spec_setting, arrays, seed, partitions)
            runs.append(run)
            s = summarise(run, setting.last)
            print(
                f"{spec} seed {seed}: Local-T {100 * s['local']:.1f} Global-T "
                f"{100 * s['global']:.1f} ({run['train_s']:.0f} s)",
                flush=True,
            )
            record = {"setting": dataclasses.asdict(setting), "seeds": args.seeds, "runs": runs}
            args.out.write_text(json.dumps(record, indent=1))  # after every run: partial is kept
    print(table(runs, setting.last))
    if args.figures is not None or args.mlflow_uri:
        out = args.figures or args.out.with_name(args.out.stem + "-figures")
        write_curves(runs, out, args.mlflow_uri, args.experiment)
    if args.write_baseline is not None:
        words = sys.argv[1:] if argv is None else argv
        command = " ".join(["python -m benchmarks.fidelity", *words])
        record = baseline(runs, setting, args.seeds, command)
        args.write_baseline.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
