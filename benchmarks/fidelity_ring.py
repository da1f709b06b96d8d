"""The in-process ring as the fidelity benchmarks run it: what every method in one comparison
shares (``Setting``), the run's config and data, and one run's per-round records read from
the coordinator's rows (``run_ring``: the real client and coordinator cores, sync mode)."""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ring_actors.client.method_factory import client_data
from ring_actors.client.resources import ClientData
from ring_actors.config import Config, config_from_dict
from ring_actors.data.client_splits import global_test_set, split_for
from ring_actors.data.partition import ClientSplit
from ring_actors.data.sources import DatasetArrays
from ring_actors.in_process import InProcessRing
from ring_actors.run_setting import unflatten

RUN_TIMEOUT_S = 3600.0  # one run's bound: a stuck ring fails the benchmark, never hangs it
EVALUATED = ("local_", "global_", "diag_")  # a row's evaluation keys; the rest are metrics
ROW_KEYS = ("client", "round", "time_s")  # where and when, not what was measured


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


def ring_data(setting: Setting, arrays: DatasetArrays, seed: int) -> list[ClientData]:
    """Each client's data as a run of ``setting`` has it, its local test split cut to a
    seeded subset of ``local_max`` samples to save time."""
    config = run_config(setting, seed)
    splits = split_for(config, arrays)
    global_test = global_test_set(config, arrays, splits)
    data = []
    for i, split in enumerate(splits):
        tests = split.test
        if len(tests) > setting.local_max:
            rng = np.random.default_rng([seed, i])
            tests = np.sort(rng.choice(tests, size=setting.local_max, replace=False))
        own = ClientSplit(split.train, tests)
        data.append(client_data(arrays, own, global_test, torch.device("cpu")))
    return data


def run_ring(
    name: str, overrides: dict[str, object], setting: Setting, arrays: DatasetArrays, seed: int
) -> dict:
    """One run on the in-process ring (the real cores, sync mode); per evaluated round,
    each client's accuracies, prediction paths, diagnostics, metrics and MB sent, read
    from the coordinator's rows."""
    torch.manual_seed(seed)
    config = run_config(setting, seed, name, overrides)
    with tempfile.TemporaryDirectory(prefix="fidelity-") as folder:
        ring = InProcessRing(
            config, ring_data(setting, arrays, seed), arrays.num_classes, arrays.input_shape,
            Path(folder),
        )  # fmt: skip
        summary = ring.run(timeout_s=RUN_TIMEOUT_S)
    if summary["rounds_completed"] != setting.rounds:
        raise RuntimeError(f"{name} seed {seed}: the ring stopped early: {summary}")
    rounds = round_records(ring.coordinator.results.rows)
    # the clients' shared state after the last round, as they published it
    rounds[-1]["shared_spread"] = shared_spread(
        [ring.clients[c].core.algorithm.shared_state() for c in sorted(ring.clients)]
    )
    return {
        "method": name,
        "overrides": overrides,
        "seed": seed,
        "train_s": summary["wall_s"],
        "rounds": rounds,
    }


def round_records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The coordinator's rows (one per client per evaluated round) as one record per round:
    per-client lists, in client order."""
    by_round: dict[int, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (r["round"], r["client"])):
        by_round.setdefault(row["round"], []).append(row)
    records = []
    for round_, clients in by_round.items():
        metrics = [
            {k: v for k, v in row.items() if not k.startswith(EVALUATED) and k not in ROW_KEYS}
            for row in clients
        ]
        records.append(
            {
                "round": round_,
                "local": [row["local_acc"] for row in clients],
                "global": [row["global_acc"] for row in clients],
                "mb_sent": [row["bytes_sent"] / 1e6 for row in clients],
                "train_metrics": _mean_metrics(metrics),
                "client_metrics": metrics,
                # every prediction path a method has (DRDFL: acc, acc_decoder, acc_gmm)
                "local_paths": _by_prefix(clients, "local_"),
                "global_paths": _by_prefix(clients, "global_"),
                "diagnostics": _by_prefix(clients, "diag_"),
            }
        )
    return records


def _by_prefix(rows: list[dict[str, Any]], prefix: str) -> dict[str, list[float]]:
    """Per-client values of the keys starting with ``prefix``: ``{"acc": [c0, c1, ...]}``."""
    keys = [k for k in rows[0] if k.startswith(prefix)]
    return {k[len(prefix) :]: [row[k] for row in rows] for k in keys}


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


def run_config(
    setting: Setting, seed: int, method: str | None = None, options: dict[str, object] | None = None
) -> Config:
    """The config of a run of ``setting`` (``method`` with ``options`` over its defaults),
    evaluated where the benchmark reads it: every ``eval_every`` rounds and the last ``last``."""
    tree: dict[str, Any] = (
        {} if method is None else {"algorithm": {"name": method, **(options or {})}}
    )
    keys = {
        **config_keys(setting),
        "experiment.seed": seed,
        "data.root": setting.root,
        "schedule.exchange": setting.exchange,
        "eval.every": setting.eval_every,
        "eval.last_rounds": setting.last,
    }
    if keys["data.partition.kind"] == "file":  # one file per seed: "file:parts/seed{seed}.json"
        keys["data.partition.path"] = str(keys["data.partition.path"]).format(seed=seed)
    return config_from_dict({**unflatten(keys), **tree})
