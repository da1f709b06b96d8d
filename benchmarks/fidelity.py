"""Every method against ``local`` and the averaging baselines, in-process and without Ray.

    python -m benchmarks.fidelity --methods local dfedavg fedavg drdfl gene_fl ua_pdfl pfedgm \
        --clients 10 --samples 250 --partition shard:2 --rounds 20 --seeds 0 1 2

The simulator drives the same ``Algorithm`` classes with the runtime's sync semantics, so many
methods and seeds fit on two CPUs: round r merges what the in-neighbours published after round
r - 1 (pushes, or offers, a ``decide`` and pulls), every client trains, each lap of
``laps(r)`` is the exact key-wise sum over all clients (the contributors are those that added
anything), and the evaluation comes after training and laps, as in ``ClientActor``. Every
method sees the same partitions and seeds. ``--exchange none`` or ``noise`` replaces what
crosses the network (nothing merged and no laps, or Gaussian noise with each tensor's mean and
std): the controls that tell whether what travels matters.

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
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import RESULTS
from ring_actors.algorithms import Algorithm, TaskSpec
from ring_actors.client.ring_lap import accumulate
from ring_actors.config import Config, TopologySection, config_from_dict
from ring_actors.data.client_splits import global_test_indices, split_for
from ring_actors.data.images import LabelledImages
from ring_actors.data.partition_file import partition_digest, save_partition
from ring_actors.data.sources import DatasetArrays, load_dataset
from ring_actors.delivery.payloads import Payload
from ring_actors.method_factory import client_seed
from ring_actors.plugins.methods import resolve_algorithm
from ring_actors.report.figures import accuracy_curves
from ring_actors.report.mlflow_io import log_report
from ring_actors.report.runs import EvalRow, Run
from ring_actors.report.tables import build_table
from topologies import build_topology


@dataclass(frozen=True)
class Setting:
    """What every method in one comparison shares."""

    dataset: str = "fashion-mnist"
    root: str | None = None
    clients: int = 10
    partition: str = "shard:2"
    samples: int | None = 250
    rounds: int = 20
    local_epochs: int = 1
    batch_size: int = 64
    topology: str = "ring"
    degree: int = 2  # dynamic topology: peers each client listens to per round
    eval_every: int = 5
    last: int = 5
    global_max: int = 1000
    local_max: int = 300  # a seeded subset of each client's test split, to save time
    exchange: str = "normal"


@dataclass
class Client:
    """One simulated client: its method object and its data."""

    id: int
    algorithm: Algorithm
    train: LabelledImages
    local_test: LabelledImages
    bytes_sent: float = 0.0


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


def build_clients(
    name: str, overrides: dict[str, object], setting: Setting, arrays: DatasetArrays, seed: int
) -> tuple[list[Client], LabelledImages]:
    """Each client's method object and data, seeded exactly as ``ClientActor`` seeds them."""
    splits = split_for(run_config(setting, seed), arrays)

    def images(x: np.ndarray, y: np.ndarray) -> LabelledImages:
        return LabelledImages.from_arrays(x, y, arrays.mean, arrays.std)

    options = resolve_algorithm(name).Options(**overrides)
    clients = []
    for i, split in enumerate(splits):
        task = TaskSpec(
            num_classes=arrays.num_classes,
            input_shape=arrays.input_shape,
            local_epochs=setting.local_epochs,
            batch_size=setting.batch_size,
            device=torch.device("cpu"),
            seed=client_seed(seed, i),
            shared_seed=seed,
        )
        algorithm = resolve_algorithm(name)(options, task)
        train = images(arrays.train_x[split.train], arrays.train_y[split.train])
        rng = np.random.default_rng([seed, i])
        tests = split.test
        if len(tests) > setting.local_max:
            tests = np.sort(rng.choice(tests, size=setting.local_max, replace=False))
        test = images(arrays.test_x[tests], arrays.test_y[tests])
        clients.append(Client(i, algorithm, train, test))
    glob = global_test_indices(splits, setting.global_max, seed)
    return clients, images(arrays.test_x[glob], arrays.test_y[glob])


def _nbytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _snapshot(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in tensors.items()}


def _noise_like(tensors: dict[str, torch.Tensor], gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Gaussian noise with each floating tensor's own mean and std (others kept)."""
    out = {}
    for key, value in tensors.items():
        if value.is_floating_point() and value.numel() > 1:
            noise = torch.randn(value.shape, generator=gen)
            out[key] = value.mean() + value.std() * noise
        else:
            out[key] = value
    return out


def _gather(
    client: Client,
    round_: int,
    members: list[int],
    topology,
    published: dict[int, tuple[dict, dict]],
    clients: list[Client],
) -> list[Payload]:
    """What ``client`` merges in ``round_``: pushes, or offers then the decided pulls."""
    senders = topology.in_neighbours(members, client.id, round_ - 1)
    arrived = []
    for s in senders:
        shared, offer = published[s]
        tensors = offer if offer is not None else shared
        if tensors:
            arrived.append(Payload(s, round_ - 1, 0, round_ - 1, tensors, len(clients[s].train)))
    if not arrived or published[client.id][1] is None:
        return arrived
    plan = client.algorithm.decide(arrived)
    pulled = []
    for sender, keys in plan.items():
        if not keys:
            continue
        shared = published[sender][0]
        part = {k: shared[k] for k in keys}
        clients[sender].bytes_sent += _nbytes(part)
        pulled.append(Payload(sender, round_ - 1, 0, round_ - 1, part, len(clients[sender].train)))
    return pulled


def _lap(clients: list[Client], name: str, round_: int) -> None:
    """One lap: the exact sum over every client, handed to all; bytes as the two ring passes."""
    total: dict[str, torch.Tensor] = {}
    contributors = []
    for client in clients:
        contribution = client.algorithm.contribute(name, round_)
        if contribution:
            accumulate(total, contribution)
            contributors.append(client.id)
        client.bytes_sent += _nbytes(total)  # the token it forwards
    size = _nbytes(total)
    for client in clients:
        client.bytes_sent += size  # the result it forwards on the second pass
        client.algorithm.apply_lap(name, round_, dict(total), list(contributors))


def simulate(
    name: str, overrides: dict[str, object], setting: Setting, arrays: DatasetArrays, seed: int
) -> dict:
    """One run; returns per-evaluated-round client accuracies and bytes."""
    torch.manual_seed(seed)
    clients, global_test = build_clients(name, overrides, setting, arrays, seed)
    members = [c.id for c in clients]
    section = TopologySection(kind=setting.topology, degree=setting.degree)
    topology = build_topology(section, seed)
    noise = torch.Generator().manual_seed(seed)
    published: dict[int, tuple[dict, dict | None]] = {}
    rounds, train_s = [], 0.0
    for round_ in range(setting.rounds):
        started = time.monotonic()
        for c in clients:
            c.bytes_sent = 0.0
        if round_ > 0 and setting.exchange != "none":
            received = [_gather(c, round_, members, topology, published, clients) for c in clients]
        else:
            received = [[] for _ in clients]
        metrics = []
        for client, payloads in zip(clients, received, strict=True):
            if setting.exchange == "noise":
                payloads = [
                    dataclasses.replace(p, tensors=_noise_like(p.tensors, noise)) for p in payloads
                ]
            client.algorithm.merge(payloads)
            metrics.append(client.algorithm.train_round(client.train))
        if setting.exchange != "none":
            for lap in clients[0].algorithm.laps(round_):
                _lap(clients, lap, round_)
        train_s += time.monotonic() - started
        for client in clients:
            shared = _snapshot(client.algorithm.shared_state())
            offer = client.algorithm.offer()
            offer = None if offer is None else _snapshot(offer)
            published[client.id] = (shared, offer)
            out = len(topology.out_neighbours(members, client.id, round_))
            if setting.exchange != "none":
                client.bytes_sent += out * _nbytes(offer if offer is not None else shared)
        evaluated = round_ % setting.eval_every == setting.eval_every - 1
        if evaluated or round_ >= setting.rounds - setting.last:
            local = [c.algorithm.evaluate(c.local_test) for c in clients]
            glob = [c.algorithm.evaluate(global_test) for c in clients]
            rounds.append(
                {
                    "round": round_,
                    "local": [scores["acc"] for scores in local],
                    "global": [scores["acc"] for scores in glob],
                    "mb_sent": [c.bytes_sent / 1e6 for c in clients],
                    "train_metrics": _mean_metrics(metrics),
                    "client_metrics": metrics,
                    # every prediction path a method has (DRDFL: acc, acc_decoder, acc_gmm)
                    "local_paths": _by_key(local),
                    "global_paths": _by_key(glob),
                    "diagnostics": _by_key(
                        [c.algorithm.diagnostics(c.local_test) for c in clients]
                    ),
                    "shared_spread": shared_spread([published[c.id][0] for c in clients]),
                }
            )
    return {
        "method": name,
        "overrides": overrides,
        "seed": seed,
        "train_s": train_s,
        "rounds": rounds,
    }


def _by_key(rows: list[dict[str, float]]) -> dict[str, list[float]]:
    """Per-client values gathered by key: ``{"acc": [c0, c1, ...], ...}``."""
    return {k: [row[k] for row in rows] for k in rows[0]} if rows and rows[0] else {}


def shared_spread(states: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """How far apart the clients' shared tensors are, per group (the key's first dotted part):
    sqrt(mean_i ||s_i - mean||^2) / sqrt(mean_i ||s_i||^2); 0 when every client holds the same."""
    groups: dict[str, list[list[torch.Tensor]]] = {}
    for key in states[0] if states else {}:
        values = [state[key] for state in states]
        if values[0].is_floating_point():
            groups.setdefault(key.split(".")[0], []).append(values)
    out = {}
    for group, tensors in groups.items():
        flat = torch.stack(
            [torch.cat([t[i].flatten() for t in tensors]) for i in range(len(states))]
        )
        spread = (flat - flat.mean(0)).square().sum(1).mean().sqrt()
        out[group] = float(spread / flat.square().sum(1).mean().sqrt().clamp(min=1e-12))
    return out


def _mean_metrics(metrics: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted(set().union(*metrics))
    return {k: statistics.fmean(m[k] for m in metrics if k in m) for k in keys}


def summarise(run: dict, last: int) -> dict[str, float]:
    """Client-mean accuracies averaged over the last ``last`` evaluated rounds."""
    tail = run["rounds"][-last:]
    return {
        "local": statistics.fmean(statistics.fmean(r["local"]) for r in tail),
        "global": statistics.fmean(statistics.fmean(r["global"]) for r in tail),
        "local_min": statistics.fmean(min(r["local"]) for r in tail),
        "mb_sent": statistics.fmean(statistics.fmean(r["mb_sent"]) for r in tail),
    }


def _mean_std(values: list[float]) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.fmean(values):.1f} ± {100 * std:.1f}"


def table(runs: list[dict], last: int) -> str:
    """Markdown: one row per method spec, mean ± std over seeds."""
    lines = [
        "| method | Local-T | Global-T | worst client Local-T | MB sent / client / round |",
        "|---|---|---|---|---|",
    ]
    by_spec: dict[str, list[dict]] = {}
    for run in runs:
        by_spec.setdefault(run["spec"], []).append(summarise(run, last))
    for spec, summaries in by_spec.items():
        mb = statistics.fmean(s["mb_sent"] for s in summaries)
        lines.append(
            f"| {spec} | {_mean_std([s['local'] for s in summaries])} "
            f"| {_mean_std([s['global'] for s in summaries])} "
            f"| {_mean_std([s['local_min'] for s in summaries])} | {mb:.3f} |"
        )
    return "\n".join(lines)


def config_keys(setting: Setting) -> dict[str, object]:
    """The run-config values (dotted keys) a ``jobs.train`` run must have for ``setting``."""
    kind, _, value = setting.partition.partition(":")
    keys: dict[str, object] = {
        "data.dataset": setting.dataset,
        "data.max_train_per_client": setting.samples,
        "data.partition.kind": kind,
        "clients.count": setting.clients,
        "clients.local_epochs": setting.local_epochs,
        "clients.batch_size": setting.batch_size,
        "experiment.rounds": setting.rounds,
        "topology.kind": setting.topology,
        "schedule.mode": "sync",
        "eval.global_max_samples": setting.global_max,
    }
    if kind == "file":
        keys["data.partition.path"] = value
    elif kind == "dirichlet":
        keys["data.partition.beta"] = float(value or 0.5)
    elif kind == "shard":
        keys["data.partition.classes_per_client"] = int(value or 2)
    if setting.topology == "dynamic":
        keys["topology.degree"] = setting.degree
    return keys


def _nested(keys: dict[str, object], tree: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys written into ``tree`` as nested sections."""
    for key, value in keys.items():
        *path, leaf = key.split(".")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def run_config(setting: Setting, seed: int, method: str | None = None) -> Config:
    """The config of a ``jobs.train`` run of ``setting`` (with ``method``'s defaults): the
    same partitions and test sets as the simulation."""
    tree: dict[str, Any] = {} if method is None else {"algorithm": {"name": method}}
    keys = {**config_keys(setting), "experiment.seed": seed, "data.root": setting.root}
    if keys["data.partition.kind"] == "file":  # one file per seed: "file:parts/seed{seed}.json"
        keys["data.partition.path"] = str(keys["data.partition.path"]).format(seed=seed)
    return config_from_dict(_nested(keys, tree))


def as_report_run(run: dict) -> Run:
    """A simulated run as the report's ``Run``, named by its spec (the table's row)."""
    setting = Setting(**run["setting"])
    config = _nested({**config_keys(setting), "experiment.seed": run["seed"]}, {})
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
        "source": "benchmarks/fidelity.py: in-process simulation with the runtime's sync "
        "semantics, the same partitions and test sets as a run of this config",
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
            run = simulate(name, overrides, spec_setting, arrays, seed)
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
