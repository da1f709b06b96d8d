"""Driver side: connect to Ray, place the coordinator and the clients, run, collect the summary."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from tqdm import tqdm

from ring_actors.client import ClientActor
from ring_actors.config import Config
from ring_actors.coordinator import Coordinator
from ring_actors.data.partition import ClientSplit, split_clients
from ring_actors.data.sources import DatasetArrays, load_dataset
from ring_actors.faults import joins_due
from ring_actors.tracking import resolve_tracking_uri


@dataclass
class Experiment:
    """A running experiment: its actors, and what it needs to add clients later.

    The driver API for tests and notebooks: ``join(k)`` splices ``k`` new clients into the
    running ring, each with a data partition of its own.
    """

    config: Config
    output_dir: Path
    coordinator: ray.actor.ActorHandle
    clients: dict[int, ray.actor.ActorHandle]
    placement: dict[int, dict[str, Any]]
    actor_class: Any
    data_ref: ray.ObjectRef
    splits: list[ClientSplit]
    global_test: np.ndarray
    admitted: set[int] = field(default_factory=set)

    def create_clients(self, ids: list[int]) -> None:
        """Start client actors for ``ids`` and record where they landed."""
        missing = [i for i in ids if i >= len(self.splits)]
        if missing:
            raise ValueError(
                f"clients {missing} have no data partition: the data was split for "
                f"{len(self.splits)} clients; declare joins in the config's faults"
            )
        handles = {
            i: self.actor_class.remote(
                i, self.config, self.data_ref, self.splits[i], self.global_test, self.coordinator
            )
            for i in ids
        }
        facts = ray.get([h.describe.remote() for h in handles.values()])
        self.clients.update(handles)
        self.placement.update(zip(handles, facts, strict=True))

    def join(self, count: int) -> list[int]:
        """Add ``count`` clients to the running ring; returns their ids.

        Clients the fault plan announced were started at launch and wait in standby, so they
        join at the planned round instead of after a process start; others are started here.
        """
        ids = [i for i in self.placement if i not in self.admitted][:count]
        fresh = list(range(len(self.placement), len(self.placement) + count - len(ids)))
        self.create_clients(fresh)
        for i in [*ids, *fresh]:
            self.admitted.add(i)
            ray.get(self.coordinator.admit.remote(i, self.clients[i], self.placement[i]["node_id"]))
        return ids


def connect_ray(address: str | None) -> None:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``); start a local Ray otherwise."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    ray.init(address=address, log_to_driver=False, configure_logging=False)


def default_output_dir(config: Config) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{config.experiment.name}-{config.algorithm.name}-{stamp}"


def split_for(config: Config, dataset: DatasetArrays) -> list[ClientSplit]:
    """Every client's train and test indices, late joiners included, as the config says."""
    part = config.data.partition
    return split_clients(
        dataset.train_y,
        dataset.test_y,
        config.total_clients,
        part.kind,
        beta=part.beta,
        classes_per_client=part.classes_per_client,
        min_size=part.min_size,
        max_train_per_client=config.data.max_train_per_client,
        seed=config.experiment.seed,
    )


def global_test_indices(splits: list[ClientSplit], cap: int | None, seed: int) -> np.ndarray:
    """The Global-T set: the union of all clients' test splits, or a seeded subset of it."""
    union = np.sort(np.concatenate([s.test for s in splits]))
    if cap is None or cap >= len(union):
        return union
    return np.sort(np.random.default_rng(seed).choice(union, size=cap, replace=False))


def launch(config: Config, output_dir: Path | None = None) -> Experiment:
    """Load and split the data once, put it in the object store, and start every actor."""
    output_dir = (output_dir or default_output_dir(config)).resolve()
    dataset = load_dataset(config.data.dataset, config.data.root, config.data.download)
    splits = split_for(config, dataset)
    global_test = global_test_indices(
        splits, config.eval.global_max_samples, config.experiment.seed
    )
    connect_ray(config.ray.address)
    data_ref = ray.put(dataset)  # once; every client indexes its own part

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    coordinator = (
        ray.remote(Coordinator)
        .options(num_cpus=0, max_concurrency=32, scheduling_strategy=here)
        .remote(config, str(output_dir), resolve_tracking_uri(config.tracking.uri, Path.cwd()))
    )
    actor_class = ray.remote(ClientActor).options(
        num_cpus=config.clients.num_cpus,
        num_gpus=config.clients.num_gpus,
        max_concurrency=8,
        scheduling_strategy="SPREAD" if config.clients.placement == "spread" else "DEFAULT",
    )
    experiment = Experiment(
        config, output_dir, coordinator, {}, {}, actor_class, data_ref, splits, global_test
    )
    experiment.create_clients(list(range(config.total_clients)))
    for i in range(config.clients.count):
        node = experiment.placement[i]["node_id"]
        ray.get(coordinator.register.remote(i, experiment.clients[i], node))
        experiment.admitted.add(i)
    return experiment


def wait_and_finalize(experiment: Experiment, started: float, progress: bool) -> dict[str, Any]:
    """Follow progress (applying the fault plan's joins) until every live client is done."""
    config = experiment.config
    total = config.clients.count * config.experiment.rounds
    applied: set[int] = set()
    with tqdm(total=total, desc="client-rounds", unit="rd", disable=not progress) as bar:
        while True:
            state = ray.get(experiment.coordinator.progress.remote())
            for index in joins_due(config.faults, state["round"], applied):
                experiment.join(config.faults[index].join)
                applied.add(index)
            bar.total = max(total, state["rounds_done"])
            bar.update(state["rounds_done"] - bar.n)
            if state["finished"]:
                break
            time.sleep(0.5)
    return ray.get(experiment.coordinator.finalize.remote(time.monotonic() - started))


def shutdown(experiment: Experiment) -> None:
    """Stop every actor of the experiment (the Ray instance itself stays up)."""
    for handle in [*experiment.clients.values(), experiment.coordinator]:
        ray.kill(handle)


def run_experiment(
    config: Config, output_dir: Path | None = None, progress: bool = True
) -> dict[str, Any]:
    """Run one experiment end to end and return its summary (also in ``summary.json``)."""
    experiment = launch(config, output_dir)
    try:
        started = time.monotonic()
        ray.get(experiment.coordinator.start_clients.remote())
        summary = wait_and_finalize(experiment, started, progress)
        summary["output_dir"] = str(experiment.output_dir)
        return summary
    finally:
        shutdown(experiment)
